"""An answer in two parts: what was measured, and what was inferred or assumed.

The system prompt asks the model to write its final answer under headings:
`Measured` (numbers the code printed, and what they are), `Interpretation`
(conclusions drawn from them) and `Assumptions` (what it took for granted
about the data). `split_answer` reads them back and tolerates the many ways a
model writes a heading (`## Measured`, `**Interpretation:**`, `Assumptions:`,
`Interpretation and assumptions`). Text before the first heading is the
direct answer, and it is presented as fact, so it counts as measured. An
answer with no heading at all is `unmarked`: nothing in it says which kind
each sentence is.

`check_parts` finds interpretation presented as a measurement: a sentence of
the measured part that states a number no output printed, or that uses
causal or guessing words ("because", "probably", "likely"). Those sentences
are `mislabelled`. The validation turn names them and asks the model to move
them or to back them with code (`parts_request`). Notes about a dataset are
context, never a source: they are not outputs, so a number only a note gives
stays unsupported.

Everything here is pure: text in, text out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sbx.agent.provenance.numbers import find_numbers
from sbx.agent.provenance.trace import Provenance

Part = Literal["measured", "interpretation", "assumptions"]
_HEADING = re.compile(
    r"""^[ \t]*(?:\#{1,6}[ \t]*)?(?:[*_]{1,2})?[ \t]*
    (?P<label>measured|measurements?|what\ was\ measured|interpretations?
      (?:[ \t]+(?:and|&)[ \t]+assumptions?)?|assumptions?)
    [ \t]*(?:[*_]{1,2})?[ \t]*(?::(?P<rest>.*)|$)""",
    re.IGNORECASE | re.VERBOSE,
)
_GUESS = re.compile(
    r"\b(?:because|due\ to|thanks\ to|as\ a\ result\ of|caused\ by|driven\ by|probably|"
    r"likely|possibly|perhaps|maybe|might|presumably|seems?|seemingly|appears?\ to|"
    r"suggests?|suggesting|implies|i\ assume|assuming|i\ think|i\ believe|i\ guess)\b",
    re.IGNORECASE | re.VERBOSE,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_ASSUMPTION_LINE = re.compile(r"^[ \t]*(?:[-*+][ \t]+)?(?:\*\*)?assumption(?:\*\*)?[ \t]*:",
                              re.IGNORECASE)
PART_KEYS = ("measured", "interpretation", "assumptions", "unmarked")
"""The fields of `AnswerParts`, in the order faces show them."""
PART_TITLES = {"measured": "Measured", "interpretation": "Interpretation",
               "assumptions": "Assumptions"}
"""What faces call each marked part."""
UNMARKED_NOTE = "Unmarked: this answer does not separate what was measured from interpretation."
"""What faces say under an answer without parts."""
MAX_NAMED = 5
"""Most mislabelled sentences the validation turn quotes."""


@dataclass(frozen=True, kw_only=True)
class AnswerParts:
    """An answer split into its kinds of statement (each part as the model wrote it)."""

    measured: str = ""
    """The direct answer and the `Measured` part: what the outputs show."""
    interpretation: str = ""
    """Conclusions drawn from the measurements, marked as such."""
    assumptions: str = ""
    """What the model took for granted about the data, marked as such."""
    unmarked: str = ""
    """The whole answer when it has no heading: its kinds cannot be told apart."""

    @property
    def marked(self) -> bool:
        """The model wrote the headings (an empty answer is not unmarked either)."""
        return not self.unmarked

    def titled(self) -> list[tuple[str, str]]:
        """`(title, text)` of each non-empty marked part, in order; empty when unmarked."""
        return [(PART_TITLES[key], getattr(self, key)) for key in PART_TITLES
                if getattr(self, key)]

    def as_dict(self) -> dict[str, str]:
        """For the transcript's `run_end`, the run resource and `--json`."""
        return {
            "measured": self.measured, "interpretation": self.interpretation,
            "assumptions": self.assumptions, "unmarked": self.unmarked,
        }


@dataclass(frozen=True, kw_only=True)
class PartsCheck:
    """An answer's parts and what in them is interpretation presented as a measurement."""

    parts: AnswerParts
    """The answer, split."""
    mislabelled: tuple[str, ...] = ()
    """Sentences presented as measured (or unmarked) that guess, explain, or state a number
    no output printed."""

    def needs_turn(self, *, require_parts: bool) -> bool:
        """Whether the validation turn should ask to fix the answer's parts.

        An unmarked answer is sent back when it mixes in interpretation, or always when
        `require_parts` (the policy's `[agent] answer_parts = "required"`).
        """
        if not self.parts.marked:
            return require_parts or bool(self.mislabelled)
        return bool(self.mislabelled)


def split_answer(answer: str) -> AnswerParts:
    """The answer's parts by its headings; all of it `unmarked` when it has none."""
    found: dict[str, list[str]] = {"measured": [], "interpretation": [], "assumptions": []}
    current: str | None = None
    lead: list[str] = []
    for line in answer.splitlines():
        heading = _HEADING.match(line)
        if heading is not None:
            current = _part(heading.group("label"))
            rest = (heading.group("rest") or "").strip().strip("*_").strip()
            if rest:
                found[current].append(rest)
            continue
        if current is None:
            lead.append(line)
        elif current == "interpretation" and _ASSUMPTION_LINE.match(line):
            found["assumptions"].append(line)
        else:
            found[current].append(line)
    if current is None:
        return AnswerParts(unmarked=answer.strip())
    measured = "\n".join([*lead, *found["measured"]]).strip()
    return AnswerParts(
        measured=measured, interpretation="\n".join(found["interpretation"]).strip(),
        assumptions="\n".join(found["assumptions"]).strip(),
    )


def _part(label: str) -> Part:
    lowered = label.lower()
    if lowered.startswith("interpretation"):
        return "interpretation"
    return "assumptions" if lowered.startswith("assumption") else "measured"


def check_parts(answer: str, provenance: Provenance) -> PartsCheck:
    """Split `answer`; name the sentences that present interpretation as measurement."""
    parts = split_answer(answer)
    checked = parts.measured if parts.marked else parts.unmarked
    untraced = set(provenance.unsupported)
    flagged: list[str] = []
    for sentence in sentences(checked):
        guess = _GUESS.search(sentence) is not None
        number = parts.marked and any(n.text.strip() in untraced for n in find_numbers(sentence))
        if guess or number:
            flagged.append(sentence)
    return PartsCheck(parts=parts, mislabelled=tuple(dict.fromkeys(flagged)))


def sentences(text: str) -> list[str]:
    """The sentences (or lines) of `text`, stripped of list markers and emphasis."""
    found = []
    for piece in _SENTENCE_END.split(text):
        sentence = piece.strip().lstrip("-*+ ").strip()
        if sentence:
            found.append(sentence)
    return found


def parts_request(check: PartsCheck) -> str:
    """The validation turn's words about the answer's parts (empty when nothing is wrong)."""
    if not check.parts.marked and not check.mislabelled:
        return (
            "[sbx] Your answer does not say which statements were measured and which are "
            "interpretation. " + FORMAT_HINT
        )
    if not check.mislabelled:
        return ""
    quoted = "; ".join(f'"{_clip(sentence)}"' for sentence in check.mislabelled[:MAX_NAMED])
    more = len(check.mislabelled) - MAX_NAMED
    if more > 0:
        quoted += f" and {more} more"
    where = "measured part" if check.parts.marked else "answer (it has no parts)"
    return (
        f"[sbx] These sentences of your {where} are interpretation, not measurement (they "
        f"explain, guess or state a number no output printed): {quoted}. Move each to "
        "Interpretation or Assumptions, or back it with a printed number. " + FORMAT_HINT
    )


FORMAT_HINT = (
    "Give your final answer again under the headings Measured, Interpretation and "
    "Assumptions."
)
"""How the validation turn reminds the model of the answer's form."""


def _clip(sentence: str) -> str:
    return sentence if len(sentence) <= 160 else sentence[:159] + "…"

