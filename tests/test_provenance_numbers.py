"""The number scanner under provenance: what counts as one number, its value and its precision."""

from __future__ import annotations

import pytest

from sbx.agent.provenance.numbers import find_numbers, without_controls


def one(text: str):
    found = [n for n in find_numbers(text) if n.masked is None]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize(
    ("text", "value", "resolution", "percent"),
    [
        ("41", 41.0, 1.0, False),
        ("41.0", 41.0, 0.1, False),
        ("0.50", 0.5, 0.01, False),
        (".5", 0.5, 0.1, False),
        ("1,234,567", 1_234_567.0, 1.0, False),
        ("1,234,567.89", 1_234_567.89, 0.01, False),
        ("1\u202f234\u202f567", 1_234_567.0, 1.0, False),  # narrow no-break space (SI style)
        ("1_234", 1234.0, 1.0, False),  # Python's own separator
        ("1,200", 1200.0, 100.0, False),  # a grouped integer's zeros may be rounding
        ("45,000", 45_000.0, 1000.0, False),
        ("1200", 1200.0, 1.0, False),  # a bare integer is exact
        ("100,000", 100_000.0, 1.0, False),  # one significant digit: exact
        ("41.0%", 41.0, 0.1, True),
        ("41 %", 41.0, 1.0, True),
        ("7 percent", 7.0, 1.0, True),
        ("3.5 percentage points", 3.5, 0.1, True),
        ("2.1pp", 2.1, 0.1, True),
        ("12k", 12_000.0, 1000.0, False),
        ("120k", 120_000.0, 10_000.0, False),
        ("1.2M", 1_200_000.0, 100_000.0, False),
        ("$1.2M", 1_200_000.0, 100_000.0, False),
        ("3.4 billion", 3.4e9, 1e8, False),
        ("2 thousand", 2000.0, 1000.0, False),
        ("4.5bn", 4.5e9, 1e8, False),
        ("1.2e6", 1.2e6, 1e5, False),
        ("1.25E-03", 0.00125, 1e-5, False),
        ("€3.50", 3.5, 0.01, False),
    ],
)
def test_values_and_the_precision_they_were_written_with(text, value, resolution, percent):
    number = one(f"it was {text} then")
    assert number.text == text
    assert number.value == pytest.approx(value)
    assert number.resolution == pytest.approx(resolution)
    assert number.percent is percent


@pytest.mark.parametrize(
    ("text", "value"),
    [("-5.2", -5.2), ("\u22125.2", -5.2), ("+12.3%", 12.3), ("-$4", -4.0), ("(-3)", -3.0)],
)
def test_signs_are_read_when_they_lead_a_number(text, value):
    assert one(text).value == pytest.approx(value)


def test_a_dash_between_digits_or_after_a_word_is_not_a_minus_sign():
    values = [n.value for n in find_numbers("2023-2024, x-5, 10–20")]
    assert values == [2023.0, 2024.0, 5.0, 10.0, 20.0]


@pytest.mark.parametrize(
    "text", ["Q4", "FY2024", "x2", "sales_2024.csv", "H2O", "v1.2", "abc123", "growth_by_2"]
)
def test_digits_glued_to_a_word_are_labels_not_numbers(text):
    assert find_numbers(text) == []


def test_numbers_after_a_unit_glue_keep_their_value_but_no_scale():
    assert [(n.text, n.value) for n in find_numbers("5GB, 512MiB, 3s, 10x")] == [
        ("5", 5.0), ("512", 512.0), ("3", 3.0), ("10", 10.0)
    ]


def test_ordinals_and_list_markers_are_marked():
    text = "1. West\n  2) East\n- 3. North\n#4 pick\nthe 5th region, 2nd, 3rd\n6.5 is a value"
    marked = {n.text: n.ordinal for n in find_numbers(text)}
    assert marked == {"1": True, "2": True, "3": True, "4": True, "5th": True, "2nd": True,
                      "3rd": True, "6.5": False}


def test_a_number_inside_a_sentence_followed_by_a_period_is_no_list_marker():
    (number,) = find_numbers("The total is 6.")
    assert (number.text, number.ordinal, number.bare_integer) == ("6", False, True)


@pytest.mark.parametrize(
    ("text", "kind"),
    [("2024-03-15", "date"), ("2024-03-15T10:30:00", "date"), ("2024-03", "date"),
     ("3/4/2024", "date"), ("10:30", "time"), ("10:30:05.5", "time"),
     ("http://example.test:8080/a1/b2", "url")],
)
def test_dates_times_and_urls_are_masked(text, kind):
    found = find_numbers(f"see {text} now")
    assert found and {n.masked for n in found} == {kind}


def test_a_version_string_yields_its_first_part_only():
    assert [n.text for n in find_numbers("python 3.11.2")] == ["3.11"]


def test_the_european_decimal_comma_is_two_numbers():
    assert [n.value for n in find_numbers("41,5")] == [41.0, 5.0]


def test_bare_integer_flags_only_plain_digits():
    flags = {n.text: n.bare_integer for n in find_numbers("7 and 7.0 and -7 and 7% and 1,007")}
    assert flags == {"7": True, "7.0": False, "-7": False, "7%": False, "1,007": False}


def test_overflowing_numbers_are_dropped_not_raised():
    assert find_numbers("1e999 and 9" + "9" * 400) == []
    assert [n.value for n in find_numbers("1.5e300")] == [1.5e300]


def test_hostile_runs_of_separators_and_signs_are_scanned():
    # No nested ambiguous quantifiers: this finishes (catastrophic backtracking would not).
    hostile = ("1," * 200_000) + ("9." * 200_000) + ("-" * 100_000) + "e" * 100_000
    found = find_numbers(hostile)
    assert len(found) == 200_001 and found[-1].text == "9.9"


def test_without_controls_drops_escape_sequences_and_keeps_layout():
    text = "\x1b]0;title\x07a\x1b[1A\x1b[2Kb\x9b31mc\x9d0;t\x9cd\x00e\tf\ng"
    assert without_controls(text) == "abcde\tf\ng"
