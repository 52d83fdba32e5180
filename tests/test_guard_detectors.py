"""The data guard's detectors and column rules: what is replaced, and what must be left alone."""

from __future__ import annotations

import pytest

from sbx.agent.core.prompt import build_system_prompt
from sbx.tools.builtin.data_preview import preview_text
from sbx.tools.builtin.data_summary import summarize_data
from sbx.tools.builtin.tables import read_table
from sbx.tools.guard import DataGuard, iban_valid, luhn_valid
from sbx.tools.guard_policy import GuardOverride, GuardPolicy, GuardRules

ALL = DataGuard(GuardRules(emails=True, phones=True, ibans=True))
DEFAULT = DataGuard(GuardRules())


@pytest.mark.parametrize("card", [
    "4111111111111111", "4111 1111 1111 1111", "4111-1111-1111-1111", "5555555555554444",
    "378282246310005", "3782 822463 10005", "6011111111111117", "2223003122003222",
])
def test_checksum_valid_card_numbers_are_replaced_by_default(card):
    guarded = DEFAULT.text(f"paid with {card}, thanks")
    assert guarded.text == "paid with [card], thanks"
    assert guarded.counts == {"card": 1}


@pytest.mark.parametrize("number", [
    "4111111111111112",  # the Luhn check fails
    "1733059200000",  # a millisecond timestamp: no card network starts with 1
    "0.4111111111111111",  # digits after a decimal point
    "12345678.90", "2024-01-15", "1000000",
])
def test_numbers_that_are_not_cards_are_kept(number):
    assert DEFAULT.text(f"value {number} end").text == f"value {number} end"


def test_luhn_and_iban_checksums():
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")
    assert iban_valid("GB82 WEST 1234 5698 7654 32")
    assert not iban_valid("GB82 WEST 1234 5698 7654 33")


def test_secret_shapes_are_replaced_by_default():
    text = ("key sk-abcdefghijklmnopqrstuvwxyz123456 aws AKIAIOSFODNN7EXAMPLE "
            "gh ghp_abcdefghijklmnopqrstuvwxyz0123456789\n"
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n")
    guarded = DEFAULT.text(text)
    assert guarded.text == "key [secret] aws [secret] gh [secret]\n[secret]\n"
    assert guarded.counts == {"secret": 4}


def test_emails_phones_and_ibans_only_when_the_policy_enables_them():
    text = "ada@example.com +44 20 7946 0958 (555) 010-0199 DE89370400440532013000"
    assert DEFAULT.text(text).text == text
    guarded = ALL.text(text)
    assert guarded.text == "[email] [phone] [phone] [iban]"
    assert guarded.counts == {"email": 1, "phone": 2, "iban": 1}


def test_dates_tables_and_small_numbers_are_not_phones():
    text = "2024-01-15 10:30 values 10 20 30 40 50 total 1234567.89 id 42"
    assert ALL.text(text).text == text


def test_hostile_output_is_scanned_whole():
    """Long runs that would make a backtracking pattern quadratic are scanned in one pass."""
    for hostile in ("4" * 120_000, "a" * 200_000 + "@", "+1 " * 50_000,
                    "-----BEGIN PRIVATE KEY-----" * 5_000):
        assert ALL.text(hostile).text == hostile


def test_overrides_apply_by_principal_pattern_in_order():
    policy = GuardPolicy(
        emails=True,
        principals={"key:team-a-*": GuardOverride(emails=False, mask_columns=["email"]),
                    "key:team-a-admin": GuardOverride(schema_only=True)},
    )
    assert policy.for_principal("os:alice").emails is True
    rules = policy.for_principal("key:team-a-admin")
    assert (rules.emails, rules.mask_columns, rules.schema_only) == (False, ["email"], True)
    assert policy.weakened() == []
    assert GuardPolicy(cards=False).weakened() == ["cards"]


CSV = b"name,email,card_number,spend\nAda,ada@example.com,4111111111111111,12.5\n" \
      b"Bob,bob@example.com,5555555555554444,7.25\n"


def test_preview_masks_and_drops_columns_by_name():
    guard = DataGuard(GuardRules(mask_columns=["e*ail"], drop_columns=["card_*"]))
    text = preview_text("c.csv", CSV, rows=5, size=len(CSV), guard=guard)
    assert "ada@example.com" not in text and "4111" not in text and "card_number" not in text
    assert "[masked]" in text and "12.5" in text
    assert "1 column(s) withheld by policy; 1 column(s) masked by policy" in text


def test_schema_only_shows_columns_never_rows(tmp_path):
    data = tmp_path / "customers.csv"
    data.write_bytes(CSV)
    guard = DataGuard(GuardRules(schema_only=True))
    preview = preview_text("c.csv", CSV, rows=5, size=len(CSV), guard=guard)
    assert "Ada" not in preview and "name" in preview and "rows withheld by policy" in preview
    prompt = build_system_prompt(data=[data], tools=["execute_python"], timeout_s=30,
                                 memory="512 MiB", guard=guard)
    assert "Ada" not in prompt.text and "Bob" not in prompt.text
    assert "email (text)" in prompt.text and "2 rows" in prompt.text


def test_the_prompt_summary_passes_the_detectors_and_counts_them(tmp_path):
    data = tmp_path / "customers.csv"
    data.write_bytes(CSV)
    prompt = build_system_prompt(data=[data], tools=["execute_python"], timeout_s=30,
                                 memory="512 MiB", guard=ALL)
    assert "ada@example.com" not in prompt.text and "4111111111111111" not in prompt.text
    assert prompt.redactions == {"card": 2, "email": 2}


@pytest.mark.parametrize(("spelled", "expected"), [
    ("４１１１１１１１１１１１１１１１", "[card]"),  # full-width digits
    ("٤١١١١١١١١١١١١١١١", "[card]"),  # Arabic-Indic digits
    ("4111\u00a01111\u00a01111\u00a01111", "[card]"),  # no-break spaces
    ("4111\u202f1111\u202f1111\u202f1111", "[card]"),  # narrow no-break spaces
    ("4111.1111.1111.1111", "[card]"),  # dot grouping
    ("acct_4111111111111111", "acct_[card]"),  # joined to a word by `_`
    ("4111111111111111_statement.pdf", "[card]_statement.pdf"),
    ("key_sk-abcdefghijklmnopqrstuvwxyz123456", "key_[secret]"),
    ("ＡＫＩＡIOSFODNN7EXAMPLE", "[secret]"),  # full-width letters
    ("jörg.müller@example.com", "[email]"),  # a non-ASCII local part
    ("de89 3704 0044 0532 0130 00", "[iban]"),  # lower case
])
def test_spellings_real_data_uses_are_folded_before_matching(spelled, expected):
    guarded = ALL.text(f"seen: {spelled} (end)")
    assert guarded.text == f"seen: {expected} (end)"


@pytest.mark.parametrize("kept", ["x4111111111111111", "0.4111111111111111", "12345678.90",
                                  "٤١١١١١١١١١١١١١١٢", "release ٢٠٢٤-٠١-١٥"])
def test_folding_does_not_make_numbers_inside_words_or_bad_checksums_match(kept):
    assert ALL.text(kept).text == kept


def test_hostile_unicode_output_is_scanned_in_linear_time():
    for hostile in ("٤" * 120_000, "４\u00a0" * 60_000, "ö" * 100_000 + "@", "_4" * 60_000):
        assert ALL.text(hostile).text == hostile


MASKED_VALUE = "Zebulon Quux"
TABLES = {
    "semicolon.csv": "name;card;spend\nZebulon Quux;4111111111111111;12,5\n",
    "pipes.csv": "name|card|spend\nZebulon Quux|4111111111111111|12.5\n",
    "tabs.tsv": "name\tcard\tspend\nZebulon Quux\t4111111111111111\t12.5\n",
    "rows.jsonl": '{"name": "Zebulon Quux", "card": "4111111111111111", "spend": 12.5}\n',
    "records.json": '[{"name": "Zebulon Quux", "card": "4111111111111111", "spend": 12.5}]',
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_column_rules_apply_to_every_table_format_in_the_summary_and_the_preview(name, tmp_path):
    path = tmp_path / name
    path.write_text(TABLES[name])
    guard = DataGuard(GuardRules(cards=False, mask_columns=["name"], drop_columns=["card"]))

    summary = summarize_data([path], guard=guard)
    preview = preview_text(name, path.read_bytes(), rows=5, size=path.stat().st_size,
                           guard=guard)

    for shown in (summary, preview):
        assert MASKED_VALUE not in shown and "4111111111111111" not in shown, shown
        assert "[masked]" in shown and "12" in shown and "withheld by policy" in shown, shown


def test_a_cut_json_array_shows_its_whole_records_only():
    text = '[{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "z'
    table = read_table("t.json", text, complete=False)
    assert table is not None and table.kind == "JSON records"
    assert (table.header, table.rows) == (["a", "b"], [["1", "x"], ["2", "y"]])
    assert read_table("t.json", '{"not": "records"}', complete=True) is None


def test_a_head_of_ever_new_keys_is_held_bounded_and_still_counted():
    text = "".join(f'{{"k{i}": {i}}}\n' for i in range(8000))
    table = read_table("t.jsonl", text, complete=True)
    assert table is not None and table.count == 8000
    assert (len(table.rows), len(table.header)) == (1000, 200)
