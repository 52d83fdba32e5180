"""`sbx bench ds1000`: program assembly, record parsing, classification, and one real run.

The records here are DS-1000-shaped but written for these tests (the benchmark's
data stays outside the repository): a harness with `exec_context`, `[insert]`,
`test_execution` and, for one, `test_string`, as the real ones are built.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from conftest import TEST_IMAGE
from sbx.agent.cli import bench as cli_bench
from sbx.images.wheels import parse_lock
from sbx.sandbox.bench import ds1000
from sbx.sandbox.bench.ds1000 import (
    MEMORY,
    SANDBOX,
    TIMEOUT,
    Ds1000Report,
    Outcome,
    Problem,
    build_program,
    classify,
    load_problems,
    printable,
)
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.result import ExecutionError, ExecutionResult
from sbx.sandbox.session import run_fresh
from sbx.sandbox.spec import SessionSpec

HARNESS = '''
import pandas as pd
import numpy as np


def generate_test_case(test_case_id):
    df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    return df, df["a"].sum() * 2


exec_context = r"""
import pandas as pd
import numpy as np
df = test_input
[insert]
"""


def test_execution(solution: str):
    code = exec_context.replace("[insert]", solution)
    for i in range(1):
        test_input, expected_result = generate_test_case(i + 1)
        test_env = {"test_input": test_input}
        exec(code, test_env)
        assert test_env["result"] == expected_result
'''

STRING_CHECK = """

def test_string(solution: str):
    assert "while" not in solution
"""

PURE_HARNESS = '''
exec_context = r"""
x = test_input
[insert]
"""


def test_execution(solution: str):
    env = {"test_input": 21}
    exec(exec_context.replace("[insert]", solution), env)
    assert env["result"] == 42


def test_string(solution: str):
    calls.append(solution)
'''
"""A harness the host can run without pandas: proves how the program is put together."""


def record(pid: int, reference: str, *, library: str = "Pandas", harness: str = HARNESS) -> str:
    """One JSONL line shaped like a DS-1000 record."""
    return json.dumps(
        {
            "prompt": "ignored",
            "reference_code": reference,
            "metadata": {"problem_id": pid, "library": library, "test_case_cnt": 1},
            "code_context": harness,
        }
    )


def problem(reference: str, harness: str = PURE_HARNESS) -> Problem:
    return Problem(problem_id=0, library="Numpy", code_context=harness, reference_code=reference)


def test_the_program_carries_the_solution_as_a_literal_and_runs_both_checks() -> None:
    # Quotes, a triple quote, a backslash and a newline: pasted as code they would break the
    # harness's r-string; as DS-1000 does it (repr), the harness splices the exact text.
    tricky = 'label = """it\'s \\n ok"""\nresult = x * 2\n'
    program = build_program(problem(tricky))
    assert f"code = {tricky!r}\n" in program
    assert program.endswith("test_execution(code)\ntest_string(code)\n")
    namespace: dict[str, Any] = {"calls": []}
    exec(compile(program, "<ds1000>", "exec"), namespace)
    assert namespace["calls"] == [tricky]


def test_test_string_is_called_only_when_the_harness_defines_it() -> None:
    without = problem("result = x * 2\n", harness=HARNESS)
    assert "test_string(code)" not in build_program(without)
    assert build_program(problem("result = 1\n", harness=HARNESS + STRING_CHECK)).endswith(
        "test_execution(code)\ntest_string(code)\n"
    )


def test_a_wrong_solution_fails_the_assembled_program() -> None:
    namespace: dict[str, Any] = {"calls": []}
    with pytest.raises(AssertionError) as info:
        exec(compile(build_program(problem("result = x\n")), "<ds1000>", "exec"), namespace)
    # The harness's own check refused it (the bare `assert` carries no message, so the frame
    # is what names it), and the program stopped there: test_string never ran.
    assert info.traceback[-1].name == "test_execution"
    assert namespace["calls"] == []


def test_records_load_sorted_and_filtered(tmp_path: Path) -> None:
    path = tmp_path / "problems.jsonl"
    lines = [record(7, "a"), "", record(2, "b", library="Scipy"), record(5, "c")]
    path.write_text("\n".join(lines) + "\n")
    assert [p.problem_id for p in load_problems(path)] == [2, 5, 7]
    assert [p.problem_id for p in load_problems(path, limit=2)] == [2, 5]
    assert [p.problem_id for p in load_problems(path, only=frozenset({7, 2}))] == [2, 7]
    assert load_problems(path)[0].library == "Scipy"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not a JSON record"),
        ("[1, 2]", "metadata"),
        (record(1, "a").replace('"problem_id": 1', '"problem_id": true'), "problem_id"),
        (record(1, "a").replace('"problem_id": 1', '"problem_id": -3'), "problem_id"),
        (record(1, "a", library="\\u001b]52;c;x\\u0007"), "library"),
        (record(1, "a", harness="print(1)"), "test_execution"),
        (record(1, "a").replace('"reference_code": "a"', '"reference_code": 5'), "reference_code"),
        (b"\xff\xfe".decode("latin-1"), "not a JSON record"),
    ],
)
def test_malformed_records_are_refused_with_their_line(
    tmp_path: Path, line: str, message: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(record(0, "ok") + "\n" + line + "\n", encoding="latin-1")
    with pytest.raises(InvalidInput, match=rf"bad\.jsonl:2: .*{message}"):
        load_problems(path)


def test_repeated_ids_oversized_records_and_missing_files_are_refused(tmp_path: Path) -> None:
    twice = tmp_path / "twice.jsonl"
    twice.write_text(record(3, "a") + "\n" + record(3, "b") + "\n")
    with pytest.raises(InvalidInput, match="problem id 3 appears more than once"):
        load_problems(twice)
    huge = tmp_path / "huge.jsonl"
    huge.write_text(record(1, "x" * ds1000.MAX_RECORD_BYTES) + "\n")
    with pytest.raises(InvalidInput, match="huge.jsonl:1: record over"):
        load_problems(huge)
    with pytest.raises(InvalidInput, match="cannot read"):
        load_problems(tmp_path / "absent.jsonl")


def test_results_are_classified_by_what_stopped_them() -> None:
    error = ExecutionError(
        type="AttributeError",
        traceback="...",
        message="'DataFrame' object has no attribute 'applymap'\nmore",
    )
    assert classify(ExecutionResult(stdout="fine")) == ("", "")
    assert classify(ExecutionResult(timed_out=True, exit_code=137)) == (TIMEOUT, "")
    assert classify(ExecutionResult(oom_killed=True, exit_code=137)) == (MEMORY, "")
    assert classify(ExecutionResult(exit_code=1, error=error)) == (
        "AttributeError",
        "'DataFrame' object has no attribute 'applymap'",
    )
    assert classify(ExecutionResult(exit_code=3, stderr="warn\nbye\n")) == ("exit 3", "bye")


def test_failure_text_from_the_program_is_bounded_and_escaped() -> None:
    hostile = "\x1b]52;c;cGF3bmVk\x07invoice_\u202efdp.exe\x9b2J" + "z" * 500
    shown = printable(hostile)
    assert all(char.isprintable() for char in shown)
    assert "\\x1b" in shown and "\\u202e" in shown and "\\x9b" in shown
    assert len(shown) <= 4 * ds1000.DETAIL_CHARS
    error = ExecutionError(type="Evil\x1b[2J", message=hostile, traceback="")
    cause, detail = classify(ExecutionResult(exit_code=1, error=error))
    assert cause == "Evil\\x1b[2J" and detail == shown


def test_the_report_counts_per_library_and_cause_and_lists_the_failures() -> None:
    report = Ds1000Report(
        image="img",
        outcomes=[
            Outcome(problem_id=0, library="Numpy", cause=""),
            Outcome(problem_id=1, library="Pandas", cause="AttributeError", detail="no applymap"),
            Outcome(problem_id=2, library="Pandas", cause=""),
            Outcome(problem_id=3, library="Pandas", cause="AttributeError", detail="no append"),
            Outcome(problem_id=4, library="Scipy", cause=SANDBOX, detail="SandboxBroken: lost"),
        ],
    )
    data = report.as_json()
    assert (data["passed"], data["total"]) == (2, 5)
    assert data["libraries"]["Pandas"] == {"passed": 1, "total": 3, "causes": {"AttributeError": 2}}
    assert data["causes"] == {"AttributeError": 2, SANDBOX: 1}
    assert [item["id"] for item in data["failing"]] == [1, 3, 4]
    text = ds1000.render(report)
    assert "Pandas           1     3   AttributeError 2" in text
    assert "all              2     5   AttributeError 2, sandbox broke 1" in text
    assert "  Pandas 3: AttributeError no append" in text


def test_bench_keeps_its_options_and_gains_the_ds1000_subcommand() -> None:
    group = click.Group("sbx")
    cli_bench.register(group)
    done = CliRunner().invoke(group, ["bench", "--help"])
    assert done.exit_code == 0 and "--quick" in done.output and "ds1000" in done.output
    sub = CliRunner().invoke(group, ["bench", "ds1000", "--help"])
    assert sub.exit_code == 0
    for option in ("--image", "--limit", "--id", "--jobs", "--json"):
        assert option in sub.output


def test_a_malformed_file_is_one_line_and_exit_125(tmp_path: Path) -> None:
    group = click.Group("sbx")
    cli_bench.register(group)
    path = tmp_path / "bad.jsonl"
    path.write_text("{oops\n")
    done = CliRunner().invoke(group, ["bench", "ds1000", str(path)])
    assert done.exit_code == 125
    expected = f"sbx: {path}:1: not a JSON record (JSONDecodeError)"
    assert done.output.strip().splitlines() == [expected]


@pytest.mark.docker
def test_three_records_run_end_to_end_in_fresh_sandboxes(engine: Any, tmp_path: Path) -> None:
    path = tmp_path / "problems.jsonl"
    path.write_text(
        "\n".join(
            [
                record(10, "result = df['a'].sum() * 2\n"),
                # DataFrame.append was removed in pandas 2.0: the failure names the API.
                record(11, "result = df.append(df)['a'].sum()\n"),
                # Right answer, but test_string refuses a `while` loop.
                record(
                    12,
                    "result = df['a'].sum() * 2\nwhile False:\n    pass\n",
                    library="Numpy",
                    harness=HARNESS + STRING_CHECK,
                ),
            ]
        )
        + "\n"
    )
    group = click.Group("sbx")
    cli_bench.register(group)
    done = CliRunner().invoke(
        group, ["bench", "ds1000", str(path), "--image", TEST_IMAGE, "--jobs", "2", "--json"]
    )
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert (data["passed"], data["total"]) == (1, 3)
    assert data["libraries"] == {
        "Numpy": {"passed": 0, "total": 1, "causes": {"AssertionError": 1}},
        "Pandas": {"passed": 1, "total": 2, "causes": {"AttributeError": 1}},
    }
    failing = {item["id"]: item for item in data["failing"]}
    assert "append" in failing[11]["detail"]
    assert failing[12]["cause"] == "AssertionError"


PANDAS_2_TEXT_IDIOMS = """
import pandas as pd
df = pd.DataFrame({"name": ["a", "b", "a"], "v": [1.0, 2.0, 3.0]})
assert df["name"].dtype == "object", df["name"].dtype
df.loc[0, "name"] = 1
print(df.groupby("name", sort=False)["v"].sum().to_dict())
"""
"""Text columns as models use them (DS-1000 33, 61): pandas 3's `str` dtype refuses both."""


def test_the_recipe_keeps_object_text_columns_on_a_pandas_that_honours_it() -> None:
    images = Path(__file__).resolve().parent.parent / "images"
    for dockerfile in ("Dockerfile", "Dockerfile.slim"):
        assert "PANDAS_FUTURE_INFER_STRING=0" in (images / dockerfile).read_text(), dockerfile
    wheels = {
        w.name.lower(): w.version for w in parse_lock((images / "requirements.lock").read_text())
    }
    assert wheels["pandas"].split(".")[0] == "3", "pandas 4 drops PANDAS_FUTURE_INFER_STRING"
    assert "pandas>=3.1,<4" in (images / "requirements.in").read_text().split()


@pytest.mark.docker
def test_the_image_runs_pandas_2_text_idioms(engine: Any) -> None:
    result = run_fresh(PANDAS_2_TEXT_IDIOMS, SessionSpec(image=TEST_IMAGE), engine=engine)
    assert result.ok, (result.error, result.stderr)
    assert result.stdout.strip() == "{1: 1.0, 'b': 2.0, 'a': 3.0}"
