"""How the progress display shows a `state_restored` event (restore by replay).

Kept beside `display.py` (which is at its size budget) and bound there as
`Progress._on_state_restored`. Every name and detail comes from code the model
wrote: the display's `_echo` escapes it, and each line is clipped here.
"""

from __future__ import annotations

from typing import Any

from sbx.agent import StateRestored
from sbx.agent import restore_summary as summary

MAX_LINE = 300
"""Longest line shown (a cell may name many variables)."""


def render_restored(progress: Any, event: dict[str, Any]) -> None:
    """One line for the restore, then one per cell that differs or could not be restored."""
    restored = StateRestored.model_validate(event)  # a transcript line was validated as one
    colour = "red" if restored.status == "not_restored" else "cyan"
    progress._echo(_clip(f"~  {summary(restored)}"), fg=colour)
    for item in (*restored.differed, *restored.failed):
        progress._echo(_clip(f"   {item.call_id}: {item.detail}"), dim=True)


def _clip(text: str) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."
