"""An answer on the terminal in its parts: measured, interpretation, assumptions.

The core splits the answer (`sbx.agent.provenance.parts`); the run's end
carries the parts as plain data, read here defensively (a replayed
transcript may be old or hand-edited) and escaped where shown.
"""

from __future__ import annotations

from typing import Any

from sbx.agent import ANSWER_PART_KEYS as PART_KEYS
from sbx.agent import ANSWER_PART_TITLES as PART_TITLES
from sbx.agent import safe_text

MAX_QUOTED = 5
"""Most mislabelled sentences one line quotes."""
MAX_SENTENCE = 160


def answer_text(event: dict[str, Any]) -> str:
    """The answer under its parts' titles; an answer without parts as the model wrote it.

    (`--json` says `parts.unmarked`; stdout stays the answer alone, for scripts.)
    """
    parts = event.get("parts")
    answer = str(event.get("answer") or "")
    if not isinstance(parts, dict) or parts.get("unmarked"):
        return answer
    shown = [f"{PART_TITLES[key]}:\n{parts[key]}" for key in PART_KEYS
             if key in PART_TITLES and isinstance(parts.get(key), str) and parts[key]]
    return "\n\n".join(shown) or answer


def mislabelled_line(event: dict[str, Any]) -> str | None:
    """`INTERPRETATION PRESENTED AS MEASURED: "..."`, escaped to one line, or None."""
    found = event.get("mislabelled")
    if not isinstance(found, list) or not found:
        return None
    quoted = [_clip(str(sentence)) for sentence in found[:MAX_QUOTED]]
    return "INTERPRETATION PRESENTED AS MEASURED: " + "; ".join(f'"{s}"' for s in quoted)


def _clip(text: str) -> str:
    text = safe_text(text.replace("\n", " "))
    return text if len(text) <= MAX_SENTENCE else text[: MAX_SENTENCE - 3] + "..."
