"""`[restore]`: whether a conversation whose sandbox is gone gets its state back, and the bounds.

Read once by `sbx.agent.core.config` and handed to `sbx.agent.core.restore`. A replay
only re-runs code the conversation already ran, under its principal, limits
and audit; these bounds stop a replay that would take too long or too much,
and past any of them the conversation is told "state not restored" (a fresh
sandbox, as without restore).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sbx.tools.policy import Seconds


class RestoreSettings(BaseModel):
    """The operator's switch and bounds for restore by replay (`[restore]`); no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    """Rebuild a lost sandbox's state by replaying the conversation's successful executions;
    false: the next question starts empty and the model is told so."""
    max_cells: int = Field(default=100, ge=0, le=10_000)
    """Most executions one replay re-runs; a conversation with more is not restored."""
    cpu_seconds: float = Field(default=120.0, ge=0)
    """Sandbox CPU seconds a replay may use in all; checked after each cell."""
    snapshot_bytes: int = Field(default=32 * 2**20, ge=0)
    """Largest snapshot of a conversation's state (its variables and files, taken inside its
    sandbox when it is released for idleness) the host keeps; 0: no snapshots, replay alone.
    A state larger than this, or than `max_artifact_bytes`, is restored by replay."""
    wall_time: Seconds = 300.0
    """Wall-clock seconds a replay may take in all; checked after each cell (one cell is also
    bounded by the sandbox's own `timeout`)."""
