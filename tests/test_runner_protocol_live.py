"""Output frames are as hostile as artifact frames, and bounded the same way.

A hostile runner (a real container from the real create config, only its command
changed, as in test_runner_protocol_stream.py) sends what no honest runner sends: a flood
of output frames, more text than the head the result keeps, a replayed frame, a drip that
would outlast the deadline. The host counts and caps them, keeps its deadline, keeps its
memory small, replaces the container, and keeps what legitimately streamed before.
"""

from __future__ import annotations

import pytest
from test_runner_protocol_stream import Opener, hostile, run_traced  # noqa: F401 (the fixture)

import sbx.sandbox.session as session_module
from sbx.sandbox.limits import Limits

pytestmark = pytest.mark.docker

OUTPUT = r"""
def output(request_id, seq, data, stream="stdout"):
    return {"type": "output", "id": request_id, "seq": seq, "stream": stream, "data": data}
"""

FLOOD = OUTPUT + r"""
def serve(request):
    for start in range(0, 300_000, 1000):
        send(*[output(request["id"], seq, "x") for seq in range(start, start + 1000)])
    send(result(request["id"]))
"""


def test_a_flood_of_output_frames_ends_the_execution_with_bounded_memory(
    hostile: Opener,  # noqa: F811
) -> None:
    """300,000 one-character output frames at once: an honest runner sends at most one per
    stream every 20 ms (plus one per full 64 KiB chunk). The host stops at its count."""
    session = hostile(FLOOD, Limits())
    result, peak = run_traced(session, "print(1)")
    assert not result.ok
    assert any("replaced" in note and "output frames" in note for note in result.notes), result
    assert len(result.stdout) < 1000  # what legitimately streamed before the cut
    assert peak < 32 * 2**20, peak
    assert session.container_id is None


TOO_MUCH = OUTPUT + r"""
def serve(request):
    send(*[output(request["id"], seq, "y" * 60_000) for seq in range(20)])
    send(result(request["id"]))
"""


def test_output_frames_carry_no_more_than_the_head_the_result_keeps(hostile: Opener) -> None:  # noqa: F811
    """The runner streams only the head of a stream (half of `stdout_bytes`); 1.2 MB of
    forged frames end the execution at 512 KiB, and that much is kept, no more."""
    session = hostile(TOO_MUCH, Limits(stdout_bytes="1m"))
    result = session.run("print(1)")
    assert any("more stdout than the 524288 characters" in note for note in result.notes)
    assert len(result.stdout) <= 512 * 1024 and set(result.stdout) == {"y"}
    assert session.container_id is None


REPLAY = OUTPUT + r"""
def serve(request):
    send(output(request["id"], 0, "first\n"), output(request["id"], 0, "again\n"))
    send(result(request["id"]))
"""


def test_a_replayed_output_frame_breaks_the_stream(hostile: Opener) -> None:  # noqa: F811
    session = hostile(REPLAY, Limits())
    result = session.run("print(1)")
    assert any("output frame 0 where 1 was due" in note for note in result.notes), result.notes
    assert result.stdout == "first\n"
    assert session.container_id is None


DRIP = OUTPUT + r"""
def serve(request):
    for seq in range(12):
        send(output(request["id"], seq, f"line {seq}\n"))
        time.sleep(0.5)
    send(result(request["id"], "answered late\n"))
"""


def test_output_frames_do_not_extend_the_deadline(
    hostile: Opener, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """Each frame is on time, but the result would come after 6 s; the deadline (1 s
    timeout + a grace shortened to 2 s) holds, and the lines that came are kept."""
    monkeypatch.setattr(session_module, "EXECUTION_GRACE_S", 2.0, raising=False)
    session = hostile(DRIP, Limits(timeout="1s"))
    result = session.run("print(1)")
    assert result.timed_out and "answered late" not in result.stdout
    assert result.stdout.startswith("line 0\nline 1\n"), result.stdout
    assert session.container_id is None


DIES = OUTPUT + r"""
def serve(request):
    send(output(request["id"], 0, "before the end\n"), output(request["id"], 1, "err\n", "stderr"))
    os._exit(1)
"""


def test_what_streamed_is_kept_when_the_runner_dies(hostile: Opener) -> None:  # noqa: F811
    session = hostile(DIES, Limits())
    result = session.run("print(1)")
    assert result.stdout == "before the end\n" and result.stderr == "err\n"
    assert any("replaced" in note for note in result.notes) and not result.ok
