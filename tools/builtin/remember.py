"""`remember`: the model saves a short note about a dataset, for later conversations.

Meant for facts the user states or confirms ("amounts are in cents", "region
9 is a test region"), never for the model's own findings: a note reaches the
system prompt of every later conversation on that data for its readers, and
people see, edit and delete it (`sbx notes`, `/v1/datasets/{id}/notes`, the
page). Offered only where the face keeps notes (`ToolContext.notes`), and only
when the policy enables it (`[tools.remember]`, off by default). The note is
model-written: it is bounded by the keeper (`max_chars`, `max_notes`), shown
escaped, and passes the data guard with the rest of the prompt.
"""

from __future__ import annotations

from sbx.tools.context import ToolContext
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, build_tool


def make_remember() -> Tool:
    """The `remember` tool; where notes go comes from the run's context."""

    def remember(dataset: str, note: str, ctx: ToolContext) -> ToolReturn:
        """Save a short note about a dataset that the user stated or confirmed, for next time.

        Use it only for a fact the user told you or confirmed about the data (its units,
        meanings, rows to exclude), not for results you computed. Later conversations on
        this data see the note; people can edit or delete it.

        Args:
            dataset: The file's name under /data, e.g. `sales.csv`.
            note: One short sentence, in the user's terms.
            ctx: The run's context, injected by the gate (not part of the schema).
        """
        if ctx.notes is None:
            raise ToolFailure("notes are not kept here; answer without saving one")
        try:
            saved = ctx.notes.remember(dataset, note)
        except ValueError as exc:
            raise ToolFailure(str(exc)) from None
        return ToolReturn(text=saved, audit={"dataset": dataset})

    return build_tool(remember)
