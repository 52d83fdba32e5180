"""`ConversationSpec`: who works in a workspace, with which data, and where its files go."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sbx.agent.core.spend import SpendLimit
from sbx.tools.context import Operator


@dataclass(frozen=True, kw_only=True)
class ConversationSpec:
    """Who works, with which data, where files go: a conversation's or a tool session's.

    The face fills it from its own inputs; the core (`App`) opens the conversation
    or the workspace with it.
    """

    principal: str
    """Who asks, as the face authenticated them; it reaches every audit record."""
    team: str | None = None
    """The principal's team (the service's key or sign-in says which); audited beside it."""
    spend: SpendLimit | None = None
    """The budgets above each run (the key's, the team's), from the face's store; None: the
    per-run `max_cost` alone (the CLI)."""
    withheld_tools: tuple[str, ...] = ()
    """Tools the policy enables that this principal's team is not offered (off at its gate)."""
    data: tuple[Path, ...] = ()
    """Files and directories mounted read-only at `/data/<name>`."""
    output: Path | None = None
    """One directory for every run's artifacts; default `<output_root>/<run_id>` per run."""
    output_root: Path = Path("sbx-output")
    """Where per-run artifact directories go when `output` is not given."""
    label: str | None = None
    """Shown first in the progress and kept in the transcript (the demo's "scripted model")."""
    conversation_id: str | None = None
    """The owner's id (a conversation's, an MCP session's, one program's run id); the core
    makes a new conversation id when None."""
    operator: Operator | None = None
    """Who answers the model's `ask_user` at once (the CLI's terminal prompt); None: no one."""
    defer_questions: bool = False
    """Without an operator, `ask_user` ends the run `needs_input` and `answer()` continues it;
    with neither, the model is not offered `ask_user`."""
    one_shot: bool = False
    """One program, as a script runs (`execute_program`): its stdout is exactly what it wrote,
    no trailing expression's value is printed as a notebook would."""
