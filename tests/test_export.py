"""`sbx export`: a recorded run as a notebook, a script and a report that run next to the data.

Acceptance: the exported notebook validates with nbformat, and
its code, run in the sandbox top to bottom next to the data, prints the same
numbers. Real CLI, real SDK to the scripted server, real sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.agent.replay.compare import Observed, compare
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

LOAD = (
    "import pandas as pd\n"
    "sales = pd.read_csv('/data/sales.csv')\n"
    "print('rows', len(sales))\n"
    "sales.revenue.tolist().mean()\n"  # raises; `sales` is defined and used below
)
PLOT = (
    "import matplotlib.pyplot as plt\n"
    "by_region = sales.groupby('region').revenue.sum()\n"
    "print(by_region.to_string())\n"
    "print('share of West:', round(by_region['West'] / by_region.sum() * 100, 1), '%')\n"
    "by_region.plot.bar()\n"
    "plt.savefig('/output/by_region.png')\n"
    "print('saved /output/by_region.png')\n"
)


def _record(llm, tmp_path) -> Path:
    data = tmp_path / "sales.csv"
    data.write_text("region,revenue\nWest,100\nEast,250\nWest,125.5\n")
    llm.script(
        [
            tool_call("execute_python", code=LOAD),
            tool_call("execute_python", code=PLOT),
            assistant("West has 47.4% of revenue (225.5 of 475.5)... see by_region.png."),
            assistant("West has 47.4% of revenue (225.5 in all)."),  # after the validation turn
        ]
    )
    outcome = CliRunner().invoke(
        cli,
        [
            "ask",
            "What share is West's?",
            "--data",
            str(data),
            "--base-url",
            llm.base_url,
            "--api-key",
            FAKE_KEY,
            "--model",
            "scripted",
            "--image",
            TEST_IMAGE,
            "--audit-log",
            str(tmp_path / "audit.jsonl"),
            "--transcript",
            str(tmp_path / "run.jsonl"),
            "--output",
            str(tmp_path / "out"),
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    return data


def _export(tmp_path, fmt: str) -> str:
    target = tmp_path / f"export.{fmt}"
    outcome = CliRunner().invoke(cli, ["export", str(tmp_path / "run.jsonl"), "-o", str(target)])
    assert outcome.exit_code == 0, outcome.output
    assert f"sbx: wrote {target} ({fmt})" in outcome.stderr
    return target.read_text()



def rerun_sandbox(data: Path, tmp_path: Path, engine: Engine) -> Session:
    """A fresh sandbox with the recorded run's data, for running an export again."""
    spec = SessionSpec(
        limits=Limits(timeout="60s"), image=TEST_IMAGE, data=(data,),
        output_dir=tmp_path / "rerun-out",
    )
    return Session.open(spec, engine=engine)

@pytest.mark.docker
def test_an_exported_notebook_validates_and_prints_the_same_numbers_in_the_sandbox(
    llm, tmp_path, engine
):
    data = _record(llm, tmp_path)

    notebook = nbformat.reads(_export(tmp_path, "ipynb"), as_version=4)

    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert len(code) == 3  # the header, then the two executions
    assert 'DATA_DIR = Path(".")' in code[0].source
    assert "pd.read_csv(str(DATA_DIR / 'sales.csv'))" in code[1].source
    assert "plt.savefig(str(OUTPUT_DIR / 'by_region.png'))" in code[2].source
    assert code[1].metadata["tags"] == ["raises-exception"]
    assert [o.output_type for o in code[1].outputs] == ["stream", "error"]
    assert code[1].outputs[1].ename == "AttributeError"
    images = [o for o in code[2].outputs if o.output_type == "display_data"]
    assert len(images) == 1 and images[0].data["image/png"].startswith("iVBORw0KGgo")  # PNG
    markdown = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "## Question: What share is West's?" in markdown
    assert "**Verified**" in markdown and "| 47.4% | step 2 | 4 |" in markdown

    with rerun_sandbox(data, tmp_path, engine) as sandbox:
        sandbox.run("import shutil; shutil.copy('/data/sales.csv', '.')")  # next to the data
        results = [sandbox.run(cell.source) for cell in code]

    assert results[0].ok and results[0].stdout == ""
    for cell, result in zip(code[1:], results[1:], strict=True):
        recorded = "".join(o.text for o in cell.outputs if o.get("name") == "stdout")
        error = next((o.ename for o in cell.outputs if o.output_type == "error"), None)
        now = Observed(stdout=result.stdout, error_type=result.error and result.error.type)
        verdict = compare(Observed(stdout=recorded, error_type=error), now)
        assert verdict.matches, verdict.detail
    assert [a.name for a in results[2].artifacts] == []  # it wrote ./output/, not /output
    assert "47.4 %" in results[2].stdout


@pytest.mark.docker
def test_the_script_runs_top_to_bottom_past_the_failed_step_and_the_report_reads(
    llm, tmp_path, engine
):
    data = _record(llm, tmp_path)

    script = _export(tmp_path, "py")
    report = _export(tmp_path, "md")

    compile(script, "export.py", "exec")
    assert 'run_cell("import pandas as pd' in script
    with rerun_sandbox(data, tmp_path, engine) as sandbox:
        sandbox.run("import shutil; shutil.copy('/data/sales.csv', '.')")
        result = sandbox.run(script)
    assert result.ok, result.stderr
    assert "AttributeError: 'list' object has no attribute 'mean'" in result.stderr
    transcript = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    printed = "".join(e["execution"]["stdout"] for e in transcript if e["type"] == "tool_result")
    assert compare(Observed(stdout=printed), Observed(stdout=result.stdout)).matches

    assert report.startswith("# sbx report: run.jsonl\n\n## Question\n\nWhat share is West's?")
    assert "### Step 1 (raised AttributeError)" in report and "### Step 2" in report
    assert "```python\nimport pandas as pd\nsales = pd.read_csv('/data/sales.csv')" in report
    assert "![by_region.png](<" in report
    assert "| 47.4% | step 2 | 4 | share of West: 47.4 % |" in report


def test_export_refuses_an_existing_output_file_and_an_unknown_reference(tmp_path):
    existing = tmp_path / "a.ipynb"
    existing.write_text("keep me")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(json.dumps({"type": "run_start", "run_id": "run-1"}) + "\n")

    outcome = CliRunner().invoke(cli, ["export", str(transcript), "-o", str(existing)])
    assert outcome.exit_code == 2 and "exists" in outcome.stderr
    assert existing.read_text() == "keep me"

    outcome = CliRunner().invoke(cli, ["export", "../../etc/passwd-run"])
    assert outcome.exit_code == 2
    assert "neither a transcript file nor a run id" in outcome.stderr
