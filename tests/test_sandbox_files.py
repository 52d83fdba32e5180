"""The door's file operations in a tool session's sandbox (`sbx.agent.file_op`), in a real sandbox.

Each is a program through the session's gate: audited, in a namespace of its
own (the caller's variables are untouched), and journaled, so a file comes
back with the variables after the sandbox is released and restored.
"""

from __future__ import annotations

import json

import pytest

from conftest import TEST_IMAGE
from sbx.agent import (
    App,
    ConversationSpec,
    FileOpError,
    NoRecorder,
    ToolSession,
    file_op,
    load_config,
    read_file,
    verify_audit_log,
    write_file,
)


@pytest.mark.docker
def test_file_operations_pass_the_gate_spare_the_variables_and_come_back_after_a_release(
    tmp_path, engine
):
    audit = tmp_path / "audit.jsonl"
    with App.open(load_config(None), environ={}, audit_log=audit, image=TEST_IMAGE) as app:
        spec = ConversationSpec(conversation_id="files-1", principal="os:tester",
                                output_root=tmp_path)
        session = app.tool_session(spec, build=lambda workspace: ToolSession(
            session_id="files-1", workspace=workspace, recorder=NoRecorder(), run_kind="mcp"))
        try:
            session.call("execute_python", {"code": "OP, entry = 'mine', 'also mine'"})
            written = write_file(session, "/work/a/b.bin", b"\x00\xff")
            assert written["path"] == "/work/a/b.bin" and written["size"] == 2
            assert read_file(session, "/work/a/b.bin") == b"\x00\xff"
            assert file_op(session, "stat", "/work/a")["type"] == "dir"
            listed = {e["name"] for e in file_op(session, "list", "/work", depth=2)}
            assert {"a", "b.bin"} <= listed
            assert file_op(session, "mkdir", "/work/a") is None
            with pytest.raises(FileOpError) as missing:
                read_file(session, "/work/nope.txt")
            assert missing.value.failure == "not_found"
            with pytest.raises(FileOpError) as refused:
                write_file(session, "/etc/sbx-was-here", b"no")  # the read-only root
            assert refused.value.failure == "invalid"
            kept = session.call("execute_python", {"code": "print(OP, '/', entry)"})
            assert kept.outcome.execution is not None
            assert kept.outcome.execution.stdout == "mine / also mine\n"
            assert session.discard_if_idle(0.0)  # the sandbox goes, as after an idle timeout
            assert read_file(session, "/work/a/b.bin") == b"\x00\xff"  # replayed
        finally:
            session.close()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    programs = [r for r in records if r["event"] == "outcome" and r["run_id"] == "files-1"
                and r["data"]["tool"] == "execute_python"]
    assert len(programs) >= 9
    assert verify_audit_log(audit, key=None).ok
