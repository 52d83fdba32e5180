"""Observations sized for a model: head and tail of each output, and a marker for the cut.

A program that prints a whole DataFrame or a 1 MiB log would otherwise send
it all to the model (about 270k tokens for 1 MiB), ending the run on its
token budget and, kept in the conversation, every later question too. The
gate bounds what the model reads to `ToolContext.observation_chars`
(`AgentSettings.observation_tokens` times four); the execution's own output
(`ToolOutcome.execution`), which the user, the transcript and provenance
read, stays whole.

`fit_sections` shares the room among an observation's `[stdout]` and
`[stderr]` sections (stderr gets at most a quarter) and cuts each to its
head and tail at line ends; the section headers stay as they are, so the
sections can still be parsed. `fit_text` does the same for any other
tool's text.
"""

from __future__ import annotations

CHARS_PER_TOKEN = 4
"""The estimate used everywhere in sbx (see `sbx.agent.core.compaction`)."""
MIN_SECTION_CHARS = 400
"""A section is never cut below this (a marker alone would tell the model nothing)."""
HEAD_SHARE = 0.6
"""Of a cut section's room, the head's share; the tail (where a log ends) gets the rest."""
LINE_SLACK = 200
"""A cut moves to a line end when one is this close, so rows are not split."""


def cut_marker(cut_chars: int, cut_lines: int, what: str) -> str:
    """The line the model reads where text was left out: how much, and how to see it."""
    return (
        f"[... {cut_chars} characters ({cut_lines} lines) of {what} cut to fit the model's "
        "observation size (observation_tokens); the user and the transcript keep all of it. "
        "To see more, print a slice or a summary (df.head(), df.describe(), len(x)) ...]"
    )


def head_and_tail(text: str, room: int, what: str) -> str:
    """`text` itself when it fits in `room` characters, else its head, a marker, its tail."""
    if len(text) <= room:
        return text
    room = max(room, MIN_SECTION_CHARS) - len(cut_marker(len(text), len(text), what)) - 2
    head_end = _line_end(text, int(room * HEAD_SHARE), backwards=True)
    tail_start = _line_end(text, len(text) - (room - head_end), backwards=False)
    tail_start = max(tail_start, head_end)
    left_out = text[head_end:tail_start]
    marker = cut_marker(len(left_out), left_out.count("\n"), what)
    return f"{text[:head_end].rstrip(chr(10))}\n{marker}\n{text[tail_start:].lstrip(chr(10))}"


def _line_end(text: str, at: int, *, backwards: bool) -> int:
    """`at` moved to just after a newline within `LINE_SLACK`, when there is one."""
    at = min(max(at, 0), len(text))
    if backwards:
        found = text.rfind("\n", max(0, at - LINE_SLACK), at)
    else:
        found = text.find("\n", at, at + LINE_SLACK)
    return found + 1 if found >= 0 else at


def fit_sections(
    fixed_chars: int, stdout: str, stderr: str, max_chars: int | None
) -> tuple[str, str]:
    """Stdout and stderr cut so that they and `fixed_chars` of other text fit in `max_chars`."""
    if max_chars is None or fixed_chars + len(stdout) + len(stderr) <= max_chars:
        return stdout, stderr
    room = max(max_chars - fixed_chars, 2 * MIN_SECTION_CHARS)
    err_room = min(len(stderr), max(room // 4, room - len(stdout)))
    out_room = room - err_room
    return head_and_tail(stdout, out_room, "stdout"), head_and_tail(stderr, err_room, "stderr")


def fit_text(text: str, max_chars: int | None, what: str = "this tool's result") -> str:
    """Any tool's text bounded to `max_chars` (None: unbounded)."""
    if max_chars is None:
        return text
    return head_and_tail(text, max_chars, what)
