"""What the model and people are told after a restore by replay (`sbx.agent.core.restore`).

The model reads `note` before its question; the CLI's progress and the web
page show `summary` (escaped by whoever shows it: the names and details come
from code the model wrote).
"""

from __future__ import annotations

from sbx.agent.core.events import StateRestored


def note(event: StateRestored) -> str:
    """What the model reads before the question, after a restore (or its failure)."""
    if event.status == "not_restored":
        return (f"[sbx] The sandbox was replaced since the previous question ({event.reason}); "
                "state not restored: variables, imports and files from earlier runs are gone. "
                "Re-run what you need.")
    how = (f"restored {event.replayed} cells by re-running the earlier code in order"
           if not event.from_snapshot else
           f"loaded {event.from_snapshot} cells' variables and files from a snapshot and "
           f"re-ran {event.replayed} cells")
    lines = [f"[sbx] The sandbox was replaced since the previous question ({event.reason}); "
             f"sbx restored its state: {how}."]
    for item in event.differed:
        lines.append(f"- cell {item.call_id} differs: {item.detail}")
    for item in event.failed:
        lines.append(f"- cell {item.call_id} could not be restored: {item.detail}")
    if event.variables:
        lines.append("These variables may differ from before (and anything computed from "
                     "them): " + ", ".join(event.variables) + ".")
    return "\n".join(lines)


def summary(event: StateRestored) -> str:
    """One line for people (CLI progress, the web page); the caller escapes it."""
    if event.status == "not_restored":
        return f"state not restored ({event.reason})"
    text = f"restored {event.replayed} cells ({event.reason})"
    if event.from_snapshot:
        text = (f"restored {event.from_snapshot} cells from a snapshot and re-ran "
                f"{event.replayed} ({event.reason})")
    if event.differed or event.failed:
        text += f"; {len(event.differed)} differ, {len(event.failed)} could not be restored"
    if event.variables:
        text += "; may differ: " + ", ".join(event.variables)
    return text
