"""The observation ends with one hint line for a removed API or a
missing module; the table is versioned with the image's lock; `--hints` measures it.

The unit tests render real `ExecutionResult`s; the sandbox tests run the failing idioms in
the real image, and `sbx bench ds1000 --hints` on DS-1000-shaped records written here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from test_bench_ds1000 import record

from conftest import TEST_IMAGE
from sbx.agent.cli import bench as cli_bench
from sbx.images.recipe import IMAGES_DIR
from sbx.images.removed_apis import default_table, parse_table
from sbx.sandbox.result import ExecutionError, ExecutionResult
from sbx.sandbox.session import run_fresh
from sbx.sandbox.spec import SessionSpec
from sbx.tools.hints import image_packages, missing_module
from sbx.tools.observation import render_execution


def failed(kind: str, message: str, stdout: str = "", stderr: str = "") -> ExecutionResult:
    error = ExecutionError(type=kind, message=message, traceback=f"Traceback\n{kind}: {message}")
    return ExecutionResult(exit_code=1, error=error, stdout=stdout, stderr=stderr)


def test_the_table_is_versioned_with_the_lock() -> None:
    lock = (IMAGES_DIR / "requirements.lock").read_bytes()
    assert default_table().lock_sha256 == hashlib.sha256(lock).hexdigest(), (
        "requirements.lock changed: measure images/removed_apis.toml again "
        "(sbx bench ds1000 --hints) and update its lock_sha256")


def test_every_entry_is_complete_and_its_rewrite_compiles() -> None:
    table = default_table()
    assert len(table.entries) >= 15
    for entry in table.entries:
        assert entry.hint and "\n" not in entry.hint and entry.error.endswith(("Error", "Warning"))
    assert parse_table('[[api]]\nname = "x"\nerror = "E"\nmessage = "m"\nhint = "h"\n').entries


def test_a_bad_entry_names_itself() -> None:
    with pytest.raises(ValueError, match="entry 1"):
        parse_table('[[api]]\nname = "x"\nerror = "E"\nmessage = "("\nhint = "h"\n')


@pytest.mark.parametrize(("kind", "message", "replacement"), [
    ("AttributeError", "`np.NAN` was removed in the NumPy 2.0 release. Use `np.nan` instead.",
     "np.nan"),
    ("AttributeError", "module 'numpy' has no attribute 'in1d'", "np.isin"),
    ("AttributeError", "'DataFrame' object has no attribute 'append'", "pd.concat"),
    ("TypeError", "read_csv() got an unexpected keyword argument 'delim_whitespace'", "sep="),
    ("AttributeError", "'DataFrame' object has no attribute 'applymap'", "df.map"),
    ("TypeError", "NDFrame.replace() got an unexpected keyword argument 'method'", "ffill"),
    ("NotImplementedError", "`interp2d` has been removed in SciPy 1.14.0.",
     "RegularGridInterpolator"),
])
def test_a_removed_api_ends_the_observation_with_its_replacement(kind, message, replacement):
    text = render_execution(failed(kind, message, stdout="partial\n", stderr="warn\n"))
    last = text.splitlines()[-1]
    assert last.startswith("[hint] ") and replacement in last
    assert "[stdout]\npartial\n[stderr]\nwarn\n[resources]" in text  # the sections unchanged


def test_other_errors_and_successes_get_no_hint() -> None:
    assert "[hint]" not in render_execution(failed("AttributeError", "'int' has no attribute 'x'"))
    assert "[hint]" not in render_execution(ExecutionResult(stdout="ok\n"))


def test_a_missing_module_lists_the_image_and_names_the_operator() -> None:
    result = failed("ModuleNotFoundError", "No module named 'polars.dataframe'")
    last = render_execution(result).splitlines()[-1]
    assert missing_module(result) == "polars"
    assert "'polars' is not in this sandbox's image" in last and "operator can add" in last
    assert "numpy, pandas" in last
    assert {"numpy", "pandas", "scipy", "pyarrow"} <= set(image_packages())
    assert missing_module(failed("ModuleNotFoundError", "No module named '\x1b[2J'")) is None


REMOVED_IN_THE_IMAGE = """
import numpy as np
print("before")
x = np.in1d([1, 2], [2])
"""


@pytest.mark.docker
def test_the_real_stack_fails_with_the_message_the_table_expects(engine: Any, tmp_path: Path):
    result = run_fresh(REMOVED_IN_THE_IMAGE, SessionSpec(image=TEST_IMAGE, output_dir=tmp_path))
    text = render_execution(result)
    assert "[stdout]\nbefore" in text
    assert text.splitlines()[-1].startswith("[hint] np.in1d was removed")


@pytest.mark.docker
def test_bench_hints_measures_the_rewrite_in_fresh_sandboxes(engine: Any, tmp_path: Path):
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join([
        record(20, "result = df['a'].sum() * 2\n"),
        # np.NAN: hinted, rewritten to np.nan, and then it runs.
        record(21, "import numpy as np\nresult = df['a'].sum() * 2 + (0 if np.NAN else 0)\n"),
        # DataFrame.append: hinted, but no mechanical rewrite.
        record(22, "result = df.append(df)['a'].sum()\n"),
        # A wrong answer is no removed API.
        record(23, "result = 0\n"),
    ]) + "\n")
    group = click.Group("sbx")
    cli_bench.register(group)
    done = CliRunner().invoke(group, ["bench", "ds1000", str(path), "--image", TEST_IMAGE,
                                      "--jobs", "2", "--hints", "--json"])
    assert done.exit_code == 0, done.output
    hints = json.loads(done.stdout)["hints"]
    assert (hints["failures"], hints["hinted"], hints["applicable"],
            hints["run_when_applied"]) == (3, 2, 1, 1)
    by_id = {p["problem_id"]: p for p in hints["problems"]}
    assert by_id[21]["runs"] is True and by_id[21]["applied"] == ["np.NAN"]
    assert by_id[22]["hint"] == "DataFrame.append" and by_id[22]["runs"] is None
    assert by_id[23]["hint"] == ""
