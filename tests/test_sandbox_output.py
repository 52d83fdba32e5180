"""Acceptance 4: an output flood is truncated in the sandbox and the host's memory stays flat."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import TEST_IMAGE

pytestmark = pytest.mark.docker

DRIVER = """
import json, sys
from pathlib import Path
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import run_fresh
from sbx.sandbox.spec import SessionSpec
flood = "import sys\\nchunk = 'x' * (1 << 20)\\nfor _ in range(1024):\\n    sys.stdout.write(chunk)"
limits = Limits(timeout="60s", runtime=sys.argv[3])
spec = SessionSpec(limits=limits, image=sys.argv[1], output_dir=Path(sys.argv[2]))
result = run_fresh(flood, spec)
print(json.dumps({"truncated": result.truncated, "kept": len(result.stdout),
                  "dropped": result.stdout_dropped_bytes, "timed_out": result.timed_out,
                  "exit": result.exit_code, "notes": result.notes,
                  "peak_kib": int(next(line.split()[1] for line in open("/proc/self/status")
                                       if line.startswith("VmHWM:")))}))
"""


def test_one_gigabyte_of_stdout_is_truncated_with_flat_host_memory(
    engine, runtime, tmp_path
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, TEST_IMAGE, str(tmp_path), runtime],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # The driver's own peak, VmHWM (ru_maxrss survives exec from the forking test process;
    # RUSAGE_CHILDREN would be the largest of every child this test
    # process ever waited for, servers of other tests included).
    child_peak_mib = report["peak_kib"] // 1024
    assert report["truncated"] and report["exit"] == 0 and not report["timed_out"]
    assert report["dropped"] >= (1 << 30) - (1 << 20)
    assert report["kept"] <= (1 << 20) + 200
    assert any("bytes of stdout cut" in note for note in report["notes"])
    assert child_peak_mib < 200, f"the host process peaked at {child_peak_mib} MiB"


def test_stderr_is_capped_too(session) -> None:
    result = session.run("import sys\nsys.stderr.write('e' * (2 << 20))")
    assert result.truncated and result.stderr_dropped_bytes > 0
    assert "bytes cut" in result.stderr
