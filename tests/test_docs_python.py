"""The Python examples of the README and docs/ import sbx only through `sbx.agent`, and run.

The README's "Your own Python" block is run as written, in a fresh interpreter
in a scratch directory holding the examples' data, against the scripted model
(the model endpoint comes from the environment, as the block says) and a real
sandbox: its two questions complete in one conversation.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import scripted_llm
from sbx.agent.testing.scripted_model import ScriptedLLM, assistant, tool_call

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
BELOW_THE_DOOR = {("docs/development.md", "Using the sandbox layer from Python")}
"""The one example that shows the layer below the door, to whoever works on sbx itself."""


def _blocks(path: Path) -> list[tuple[str, str]]:
    """(the heading above it, the code) of each ```python block of a Markdown file."""
    text = path.read_text()
    found = []
    for match in BLOCK.finditer(text):
        headings = re.findall(r"^#+ (.+)$", text[:match.start()], re.M)
        found.append((headings[-1] if headings else "", match.group(1)))
    return found


def _sbx_imports(code: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return {name for name in modules if name == "sbx" or name.startswith("sbx.")}


def test_examples_import_sbx_only_through_the_door() -> None:
    offenders = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rel = str(path.relative_to(ROOT))
        for heading, code in _blocks(path):
            if (rel, heading) in BELOW_THE_DOOR:
                continue
            try:
                imports = _sbx_imports(code)
            except SyntaxError:  # a top-level `await` (an async client's snippet)
                imports = {line.split()[1] for line in code.splitlines()
                           if line.startswith(("from sbx", "import sbx"))}
            offenders += [f"{rel} ({heading}): {name}" for name in imports if name != "sbx.agent"]
    assert offenders == []


@pytest.mark.docker
def test_the_readmes_python_runs(llm: ScriptedLLM, engine: object, tmp_path: Path) -> None:
    [code] = [code for heading, code in _blocks(ROOT / "README.md") if heading == "Your own Python"]
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    llm.script([
        tool_call("execute_python", code="print(6 * 7)"),
        assistant("The West grew fastest."),
        assistant("Here is its monthly revenue."),
    ])
    env = {**os.environ, "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": scripted_llm.FAKE_KEY,
           "SBX_MODEL": "scripted"}
    env.pop("SBX_AUDIT_LOG", None)  # the block's own default: ./sbx-audit.jsonl, in tmp_path
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.rstrip().endswith("completed Here is its monthly revenue. ()"), done.stdout
    assert "42" in done.stdout  # the first question's code ran in the sandbox
    llm.assert_complete()
