"""Tracing an answer's numbers to the outputs that printed them: matches, misses and skips."""

from __future__ import annotations

import pytest

from sbx.agent.provenance.trace import (
    MAX_NAMED,
    Output,
    trace_numbers,
    validation_request,
)


def run_output(text: str, execution: int = 1) -> Output:
    return Output(tool="execute_python", call_id=f"call_{execution}", audit_id=f"r-c{execution}",
                  execution=execution, text=text)


def traced(answer: str, *printed: str, question: str = ""):
    outputs = [run_output(text, index) for index, text in enumerate(printed, start=1)]
    return trace_numbers(answer, outputs, question=question)


@pytest.mark.parametrize(
    ("answer", "printed"),
    [
        ("The mean is 41.3", "mean 41.27"),  # rounded to the answer's precision
        ("The mean is 41.27", "mean 41.27"),
        ("About 41", "41.4999"),
        ("41.0% of rows", "share 0.41"),  # percentage of a printed fraction
        ("41.0% of rows", "share 0.4104"),
        ("a share of 0.41", "share: 41%"),  # fraction of a printed percentage
        ("41%", "41.2 %"),
        ("Revenue 1,234,567", "1234567.0"),  # thousands separators
        ("Revenue 1,234,567", "1.234567e+06"),  # pandas' scientific notation
        ("Revenue $1.2M", "1234567.89"),  # units of scale
        ("Revenue 1.2 million", "1,150,000"),
        ("3.4 billion", "3412345678"),
        ("12k rows", "12345"),
        ("1,200 stores", "1234"),  # a grouped integer may be rounded to its zeros
        ("fell 5.2%", "delta -0.052"),  # signs are ignored
        ("-5.2%", "delta 0.052"),
        ("−3", "-3"),
        ("It is 42.", "42"),
        ("between 10.5 and 20.5", "10.5 20.5"),
    ],
)
def test_a_printed_number_is_traced(answer, printed):
    result = traced(answer, printed)
    assert result.unsupported == ()
    assert result.sources and all(s.execution == 1 for s in result.sources)
    assert result.verified


@pytest.mark.parametrize(
    ("answer", "printed"),
    [
        ("The mean is 41.2", "mean 41.27"),  # more than half a step away
        ("The mean is 41.275", "mean 41.27"),  # more precision than was printed
        ("41.0%", "0.42"),
        ("1,200 stores", "1251"),
        ("1200 stores", "1234"),  # a bare integer is exact
        ("100,000 rows", "140000"),  # one significant digit: exact
        ("$1.3M", "1234567"),
        ("12k rows", "12600"),
        ("41%", "41.6"),
        ("It is 43.", "42"),
    ],
)
def test_a_number_not_printed_is_unsupported(answer, printed):
    result = traced(answer, printed)
    assert len(result.unsupported) == 1
    assert result.sources == ()
    assert not result.verified


def test_a_source_names_the_execution_and_the_line_that_printed_it():
    result = traced("Growth was 12.3%.", "rows 96", "by region\nWest 0.1234\nEast 0.05")
    (source,) = result.sources
    assert (source.number, source.tool, source.execution, source.line, source.text) == (
        "12.3%", "execute_python", 2, 2, "West 0.1234"
    )
    assert (source.call_id, source.audit_id) == ("call_2", "r-c2")
    assert source.as_dict()["execution"] == 2


def test_the_newest_output_wins_a_tie():
    result = traced("It is 7.5", "7.5 first", "7.5 again")
    assert result.sources[0].execution == 2


def test_the_closest_printed_value_wins():
    result = traced("It is 7.5", "7.46", "7.5")
    assert result.sources[0].text == "7.5"


def test_calculate_results_are_sources():
    calc = Output(tool="calculate", call_id="c9", audit_id="r-c9", text="0.3333333333333333")
    result = trace_numbers("A third: 0.333", [calc])
    assert [(s.tool, s.execution, s.line) for s in result.sources] == [("calculate", None, 1)]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("West grew fastest in 2024.", "year"),
        ("1. West grew fastest", "ordinal"),
        ("The 3rd region", "ordinal"),
        ("#2 overall", "ordinal"),
        ("I ran 2 programs.", "small count"),
        ("the top 10", "small count"),
        ("On 2024-03-15 it peaked", "date"),
        ("at 10:30", "time"),
        ("see http://host.test:8080/x", "url"),
        ("```python\nsales.head(500)\n```", "code"),
    ],
)
def test_numbers_that_are_rarely_claims_are_skipped_not_flagged(answer, reason):
    result = traced(answer, "nothing relevant")
    assert result.unsupported == ()
    assert reason in {s.reason for s in result.skipped}
    assert result.verified


def test_numbers_the_question_gave_are_not_the_answers_claims():
    result = traced("Yes: above 250 in every region.", "no numbers",
                    question="Is revenue above 250 everywhere?")
    assert result.unsupported == ()
    assert [(s.number, s.reason) for s in result.skipped] == [("250", "in the question")]


def test_skips_do_not_hide_claims_written_with_precision_or_units():
    # A year-like value with decimals, a small count as a percentage, a grouped year: claims.
    result = traced("It was 2024.5, 7%, 2,024 and 11 items", "nothing")
    assert result.unsupported == ("2024.5", "7%", "2,024", "11")


def test_a_printed_year_or_count_is_skipped_not_counted_as_traced():
    """A year found in a table's header once made the traced count: not a checked claim."""
    result = traced("In 2024 revenue was 609,667, 3 regions.",
                    "year 2023 2024 growth_pct\nSouth 609667 3 regions")
    assert [s.number for s in result.sources] == ["609,667"]
    assert [(s.number, s.reason) for s in result.skipped] == [
        ("2024", "year"), ("3", "small count"),
    ]


def test_only_python_fences_are_code_other_fences_are_claims():
    result = traced("```\nWest 12.5\n```", "nothing")
    assert result.unsupported == ("12.5",)


def test_dates_in_the_output_are_not_sources():
    result = traced("It was 15 units", "2024-03-15 sold out")
    assert result.unsupported == ("15",)


def test_each_distinct_number_is_reported_once_in_order():
    result = traced("42 and 43, then 42 and 43 and 44", "42")
    assert [s.number for s in result.sources] == ["42"]
    assert result.unsupported == ("43", "44")


def test_no_outputs_means_every_claim_is_unsupported():
    result = trace_numbers("Paris has 2.1 million people.", [])
    assert result.unsupported == ("2.1 million",)


def test_an_answer_without_numbers_is_verified():
    result = traced("Paris.", "nothing")
    assert result.verified and result.sources == () and result.unsupported == ()


def test_the_validation_request_names_the_numbers_and_is_bounded():
    text = validation_request(["42", "3.7%"])
    assert "42, 3.7%" in text and "Print each one from code" in text and "correct" in text
    many = validation_request([str(n) for n in range(100, 150)])
    assert f"and {50 - MAX_NAMED} more" in many
    assert "149" not in many


def test_terminal_escapes_neither_hide_a_printed_number_nor_add_claims():
    printed = "mean \x1b[32m41.2\x1b[0m"
    answer = "\x1b]52;c;cm0gLXJmIH4vKg==\x07The mean is \x1b[1m41.2\x1b[0m\x9b31m\x9d0;t\x9c"
    result = traced(answer, printed)
    assert [s.number for s in result.sources] == ["41.2"] and result.unsupported == ()


def test_within_one_output_a_tie_goes_to_the_later_line():
    result = traced("Growth +12.0%", "South 12.0\nANSWER: South +12.0%")
    assert result.sources[0].line == 2


def test_sbx_cut_markers_are_neither_claims_nor_sources():
    cut = "It is 41.\n[sbx: the answer was cut here: the model wrote 123456 characters, over " \
          "max_answer_chars of 100000]"
    assert traced(cut, "41").unsupported == ()  # the answer's marker is sbx's, not the model's
    result = traced("There were 777 rows", "41\n[... 777 bytes cut ...]\n")
    assert result.unsupported == ("777",)  # the sandbox's marker printed no 777


def test_a_fiscal_year_range_is_not_a_number_to_check():
    result = traced("In 2024-25 sales were 41", "41")
    assert result.unsupported == ()


def test_earlier_runs_notes_are_not_output():
    from sbx.agent.core.verification import earlier_outputs

    observation = "[stdout]\n41\n[notes]\n- killed: memory limit 512 MiB reached\n[resources] 1.2 s"
    outputs = earlier_outputs([{"role": "tool", "tool_call_id": "c", "content": observation}])
    assert outputs[0].text == "[stdout]\n41"


def test_an_answer_without_numbers_has_no_verdict():
    assert traced("The data looks clean.", "41").verdict is None
    assert traced("It is 41.", "41").verdict is True
    assert traced("It is 43.", "41").verdict is False
