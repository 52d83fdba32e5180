"""Make text that a model, a program or a file controls safe to show on a terminal or a page.

Terminals obey characters, not intentions: an ESC or an 8-bit CSI starts a
command (move the cursor up and overwrite `== completed`, set the window
title, write the clipboard with OSC 52), a carriage return overwrites the
line, and the bidi controls reorder what is shown (`invoice_\\u202efdp.exe`
reads as `invoice_exe.pdf`). Zero-width and other format characters hide text
in plain sight, and a lone surrogate cannot even be encoded, so printing it
crashes.

`safe_text` turns every such character into a visible escape (`\\x1b`,
`\\u202e`, `\\ud800`) and leaves everything else alone: one rule for every
renderer (the CLI's progress and replay, `sbx ask`'s answer, `sbx exec`'s
`sbx:` lines, `sbx audit show`, doctor and selftest), on a terminal or not.
Backslashes are not doubled, so code and Windows paths stay readable; a
literal `\\x1b` typed as four characters can imitate an escape but never act
as one. `safe_json` does the same inside a JSON document, where the escapes
are `\\uXXXX` and every JSON reader still decodes the same values.

The standard library only (`unicodedata`), so tools, agent and the faces can
all import it.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["is_unsafe", "safe_json", "safe_text"]

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Controls (C0, DEL, C1), format characters (bidi embeddings, overrides and isolates,
zero-width marks, tag characters, BOM, soft hyphen), surrogates, and the line and
paragraph separators that some terminals and editors break lines on."""
_INVISIBLE_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
"""Hangul fillers: letters by category, blank on screen, a known way to hide text."""
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_LAYOUT = frozenset({"\n", "\t", "\r\n"})
"""What a multi-line block keeps: line ends and tabs. A lone CR is escaped (it overwrites)."""
_CANDIDATES = re.compile(r"\r\n|[^\x20-\x7e]")
"""Everything but printable ASCII; each match is then judged by `is_unsafe`."""
_JSON_WHITESPACE = frozenset({"\n", "\t", "\r"})


def is_unsafe(char: str) -> bool:
    """True for a character `safe_text` escapes (in a one-line value: newline and tab too)."""
    return unicodedata.category(char) in _UNSAFE_CATEGORIES or char in _INVISIBLE_LETTERS


def escape_char(char: str) -> str:
    """The visible form of one character: `\\n`, `\\x1b`, `\\u202e`, `\\U000e0041`."""
    named = _NAMED.get(char)
    if named is not None:
        return named
    point = ord(char)
    if point <= 0xFF:
        return f"\\x{point:02x}"
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def safe_text(text: str, *, multiline: bool = False) -> str:
    """`text` with every control, format and bidi character shown as a visible escape.

    With `multiline`, newlines, tabs and CRLF line ends are kept (an answer, a
    program's output); otherwise they are escaped too, so one value can never
    start a line that looks like sbx's own.
    """

    def replace(match: re.Match[str]) -> str:
        found = match.group()
        if multiline and found in _LAYOUT:
            return found
        if found == "\r\n":
            return "\\r\\n"
        return escape_char(found) if is_unsafe(found) else found

    return _CANDIDATES.sub(replace, text)


def safe_json(document: str) -> str:
    """A JSON text with every unsafe character inside its strings written as `\\uXXXX`.

    Any JSON reader decodes the same values (the escapes are standard JSON,
    astral characters as surrogate pairs); only what a terminal would obey is
    gone. Raw newlines and tabs in a JSON text are indentation, never string
    content (JSON forbids that), so they stay.
    """

    def replace(match: re.Match[str]) -> str:
        found = match.group()
        if found == "\r\n" or found in _JSON_WHITESPACE or not is_unsafe(found):
            return found
        point = ord(found)
        if point <= 0xFFFF:
            return f"\\u{point:04x}"
        high, low = divmod(point - 0x10000, 0x400)
        return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"

    return _CANDIDATES.sub(replace, document)
