"""The guide's sample answer is what `sbx demo` prints, run as a new user would: from a clone
(`examples/sales.csv` beside it), the real sandbox, the scripted model.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TEST_IMAGE

ROOT = Path(__file__).resolve().parents[1]
SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
SAMPLE = re.compile(r"verdict and the sources under the answer; `sbx demo`, from a clone:\n\n"
                    r"```text\n(.*?)```", re.S)
COUNT = re.compile(r"\(\d+ traced\)")


def _sample() -> list[str]:
    found = SAMPLE.search((ROOT / "docs" / "agent.md").read_text())
    assert found, "docs/agent.md has no sample of sbx demo's answer"
    return found.group(1).splitlines()


@pytest.mark.docker
def test_the_guides_sample_answer_is_what_the_demo_prints(tmp_path, engine):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    done = subprocess.run([*SBX, "demo", "--image", TEST_IMAGE], cwd=tmp_path, timeout=300,
                          capture_output=True, text=True, env=os.environ)
    assert done.returncode == 0, done.stderr
    printed = done.stdout.splitlines()
    for line in _sample():
        shown = line.removesuffix("...")
        # the count is the provenance's to pin (the demo's own test); here, the words around it
        matches = [out for out in printed if COUNT.sub("", out).startswith(COUNT.sub("", shown))]
        assert matches, f"the guide shows {line!r}; the demo printed:\n{done.stdout}"
