"""The one escaping rule: every control, format and bidi character becomes a visible escape."""

from __future__ import annotations

import json
import unicodedata

import pytest

from sbx.tools.text_safety import safe_json, safe_text

UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def inert(text: str, *, layout: str = "") -> bool:
    """True when no character a terminal would obey (or hide) is left, but those in `layout`."""
    return not any(
        unicodedata.category(char) in UNSAFE_CATEGORIES and char not in layout for char in text
    )


@pytest.mark.parametrize(
    ("hostile", "shown"),
    [
        ("\x1b]52;c;cm0gLXJmIH4=\x07", "\\x1b]52;c;cm0gLXJmIH4=\\x07"),  # OSC 52: clipboard
        ("\x1b]0;pwned\x1b\\", "\\x1b]0;pwned\\x1b\\"),  # window title
        ("\x1b[2A\x1b[2K== completed", "\\x1b[2A\\x1b[2K== completed"),  # hide lines
        ("\x9b2A\x9d0;t\x9c", "\\x9b2A\\x9d0;t\\x9c"),  # 8-bit C1 CSI, OSC, ST
        ("invoice_\u202efdp.exe", "invoice_\\u202efdp.exe"),  # right-to-left override
        ("a\u2066b\u2069c\u200fd", "a\\u2066b\\u2069c\\u200fd"),  # isolates, RLM
        ("zero\u200bwidth\u2060join\ufeff", "zero\\u200bwidth\\u2060join\\ufeff"),
        ("tag\U000e0041\U000e007f", "tag\\U000e0041\\U000e007f"),  # invisible tag characters
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),
        ("nul\x00del\x7fbell\x07", "nul\\x00del\\x7fbell\\x07"),
        ("ok\rfake", "ok\\rfake"),
        ("line\u2028sep\u2029", "line\\u2028sep\\u2029"),
        ("hangul\u3164filler", "hangul\\u3164filler"),
    ],
)
def test_every_terminal_control_becomes_a_visible_escape(hostile, shown) -> None:
    assert safe_text(hostile) == shown
    assert safe_text(hostile, multiline=True) == shown
    shown.encode("utf-8")  # printable: a lone surrogate no longer crashes the print


def test_ordinary_text_is_untouched() -> None:
    text = "Umsatz in München: 12 % ↑, 東京 ✓ — print(f'{x!r}\\n') C:\\data\\x1b.csv"
    assert safe_text(text) == text


def test_one_line_values_cannot_start_a_line_but_blocks_keep_their_layout() -> None:
    block = "a\tb\nc\r\nd\re"
    assert safe_text(block) == "a\\tb\\nc\\r\\nd\\re"
    assert safe_text(block, multiline=True) == "a\tb\nc\r\nd\\re"


def test_no_code_point_survives_unescaped() -> None:
    every = "".join(chr(point) for point in range(0x110000))
    assert inert(safe_text(every))
    assert inert(safe_text(every, multiline=True), layout="\n\t\r")


def test_escaping_twice_changes_nothing() -> None:
    once = safe_text("\x1b[31m\u202e\ud800\n")
    assert safe_text(once) == once


def test_json_keeps_its_values_and_loses_its_controls() -> None:
    value = {"answer": "x\x1b]0;t\x07\u202e\x9b\U000e0041", "n": [1, "a\nb"], "k\u200b": None}
    for text in (json.dumps(value, ensure_ascii=False, indent=2), json.dumps(value)):
        safe = safe_json(text)
        assert json.loads(safe) == value
        assert inert(safe, layout="\n")
    lone = safe_json(json.dumps({"a": "\ud800"}, ensure_ascii=False))
    assert json.loads(lone) == {"a": "\ud800"} and inert(lone)
