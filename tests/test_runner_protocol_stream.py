"""The host holds its deadline and its caps whatever the container sends.

The host treats the runner's stream as hostile input, so these tests replace the runner
with a hostile one (a real container from the real create config, only its command
changed) and check what the host accepts: the deadline is absolute, artifact frames
are counted, refusals listed are bounded, and bytes written to the host are capped per
execution and per run. On the landed code each of these ran away.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sbx.sandbox.session as session_module
from conftest import TEST_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker

PRELUDE = r"""
import base64, json, os, sys, time
def send(*frames):
    data = "".join(json.dumps(frame) + "\n" for frame in frames).encode()
    while data:
        data = data[os.write(1, data):]
def result(request_id, stdout=""):
    return {"type": "result", "id": request_id, "exit_code": 0, "error": None,
            "stdout": stdout, "stdout_total": len(stdout), "stdout_dropped": 0, "stderr": "",
            "stderr_total": 0, "stderr_dropped": 0, "timed_out": False,
            "killed_signal": None, "oom_killed": False, "state_reset": False,
            "cpu_seconds": 0.0, "peak_memory_bytes": 1, "refused": []}
def refused_frame(request_id, index):
    return {"type": "artifact", "id": request_id, "name": f"../escape-{index}", "size": 0,
            "data": ""}
def artifact(request_id, name, size):
    return {"type": "artifact", "id": request_id, "name": name, "size": size,
            "data": base64.b64encode(b"x" * size).decode()}
send({"type": "ready", "protocol": 3})
"""
LOOP = r"""
for line in sys.stdin:
    serve(json.loads(line))
"""

Opener = Callable[[str, Limits], Session]


@pytest.fixture
def hostile(
    monkeypatch: pytest.MonkeyPatch, engine: Engine, runtime: str, tmp_path: Path
) -> Iterator[Opener]:
    """Open a session whose runner is `serve(request)` defined by the test."""
    opened: list[Session] = []
    original = session_module.container_config

    def open_session(serve: str, limits: Limits) -> Session:
        def config(*args: Any, **kwargs: Any) -> dict[str, Any]:
            created = original(*args, **kwargs)
            created["command"] = ["python3", "-I", "-u", "-c", PRELUDE + serve + LOOP]
            return created

        monkeypatch.setattr(session_module, "container_config", config)
        session = Session.open(
            SessionSpec(
                limits=limits.model_copy(update={"runtime": runtime}),
                image=TEST_IMAGE,
                output_dir=tmp_path / "out",
            ),
            engine=engine,
        )
        opened.append(session)
        return session

    yield open_session
    for session in opened:
        session.close()


def run_traced(session: Session, code: str) -> tuple[ExecutionResult, int]:
    """Run `code` while tracing the host's allocations: the result and the peak in bytes."""
    tracemalloc.start()
    try:
        result = session.run(code)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak


def host_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


SLOW_DRIP = r"""
def serve(request):
    for index in range(12):
        time.sleep(0.5)
        send(refused_frame(request["id"], index))
    send(result(request["id"], "answered late\n"))
"""


def test_artifact_frames_do_not_extend_the_deadline(
    hostile: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused artifact frame every 0.5 s kept the landed host waiting for ever (each
    frame reset a 15 s gap). The result here comes only after 6 s of sleeping, twice the
    absolute deadline (1 s timeout + a grace shortened to 2 s for the test)."""
    monkeypatch.setattr(session_module, "EXECUTION_GRACE_S", 2.0, raising=False)
    session = hostile(SLOW_DRIP, Limits(timeout="1s"))
    result = session.run("print(1)")
    assert result.timed_out and "answered late" not in result.stdout
    assert any("replaced" in note for note in result.notes), result.notes
    assert session.container_id is None  # the stream is gone with its container


FLOOD = r"""
def serve(request):
    batch = [refused_frame(request["id"], index) for index in range(1000)]
    for _ in range(300):
        send(*batch)
    send(result(request["id"]))
"""


def test_a_flood_of_refused_frames_ends_the_execution_with_bounded_memory(
    hostile: Opener,
) -> None:
    """300,000 refused artifact frames grew the landed host to 730 MB and a 100 MB note.
    Now the execution ends at the frame cap, the container is replaced, and what reaches
    the result (and so the model, transcript and audit log) is a short bounded list."""
    session = hostile(FLOOD, Limits(max_artifacts=8))
    result, peak = run_traced(session, "print(1)")
    assert not result.ok
    assert any("replaced" in note and "artifact frames" in note for note in result.notes)
    assert len(result.refused_artifacts) <= 20
    assert sum(len(note) for note in result.notes) < 4000
    assert peak < 64 * 2**20, peak
    assert session.container_id is None


FORGED_BYTES = r"""
def serve(request):
    send(*[artifact(request["id"], f"part-{request['id']}-{index}.bin", 400 << 10)
           for index in range(10)])
    send(result(request["id"]))
"""


def test_artifact_bytes_per_execution_stop_at_the_output_size(
    hostile: Opener, tmp_path: Path
) -> None:
    """Frames announcing 4 MB of artifacts wrote them all on the landed host although
    `/output` holds 1 MiB: the host writes no more per execution than `output_size`."""
    session = hostile(FORGED_BYTES, Limits(output_size="1m", max_artifact_bytes="512k"))
    result = session.run("print(1)")
    assert host_bytes(tmp_path / "out") <= 2**20
    assert len(result.artifacts) == 2 and sum(a.size for a in result.artifacts) <= 2**20
    reasons = {item.reason for item in result.refused_artifacts}
    assert reasons and all("output_size" in reason for reason in reasons), reasons


def test_artifact_bytes_per_run_stop_at_the_run_cap(hostile: Opener, tmp_path: Path) -> None:
    """Each execution may fill `/output` again; the run as a whole stops at
    `max_run_artifact_bytes`, and later artifacts are refused, not written."""
    limits = Limits(output_size="4m", max_artifact_bytes="512k", max_run_artifact_bytes="6m")
    session = hostile(FORGED_BYTES, limits)
    first, second = session.run("print(1)"), session.run("print(2)")
    assert len(first.artifacts) == 10 and not first.refused_artifacts
    assert len(second.artifacts) == 5
    assert {item.reason for item in second.refused_artifacts} == {
        "over the 6 MiB of artifacts one run may copy out (max_run_artifact_bytes)"
    }
    assert host_bytes(tmp_path / "out") <= 6 * 2**20
    assert session.container_id is not None  # refusing is not a protocol break
