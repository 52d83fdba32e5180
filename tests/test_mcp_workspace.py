"""The workspace an MCP session holds: one gate for the whole session, across sandbox resets.

An MCP session opens one gate and keeps it; a cancelled call or a reset
discards the sandbox under it. The next program must run in a new sandbox
that the workspace knows, so closing the session removes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from mcp_support import containers_of
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.workspace import ConversationSpec, Workspace, WorkspaceClosed
from sbx.agent.mcp.tool_session import new_session_id


@contextmanager
def session_workspace(tmp_path: Path) -> Iterator[tuple[App, Workspace, str]]:
    """An app, and a workspace as an MCP session holds one (its id is the run id)."""
    run_id = new_session_id()
    with App.open(
        load_config(None), environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE
    ) as app:
        spec = ConversationSpec(conversation_id=run_id, principal="os:tester",
                                output_root=tmp_path)
        yield app, app.workspace(spec), run_id


@pytest.mark.docker
def test_a_gate_kept_across_discard_runs_in_a_new_sandbox_that_close_removes(tmp_path, engine):
    with session_workspace(tmp_path) as (app, workspace, run_id):
        gate = workspace.open_gate(run_id)
        gate.call(name="execute_python", arguments=json.dumps({"code": "x = 1"}), call_id="c1")
        first = containers_of(engine, run_id)
        workspace.discard()
        again = gate.call(
            name="execute_python", arguments=json.dumps({"code": "print('again')"}), call_id="c2"
        )
        second = containers_of(engine, run_id)
        workspace.close()
        gate.close()
        assert app.pool is not None and app.pool.reaper.wait_idle(timeout=60)
        left = containers_of(engine, run_id)

    assert again.status == "ok" and again.text.startswith("[stdout]\nagain")
    assert len(first) == 1 and len(second) == 1 and first != second
    assert workspace.take_reset()  # the workspace knows its sandbox was replaced
    assert left == []  # closing the workspace removed the sandbox the kept gate opened


@pytest.mark.docker
def test_a_gate_used_after_its_workspace_closed_opens_no_sandbox(tmp_path, engine):
    with session_workspace(tmp_path) as (app, workspace, run_id):
        gate = workspace.open_gate(run_id)
        workspace.close()  # the owner ended (an MCP session closing) while a call came in
        with pytest.raises(WorkspaceClosed):
            gate.call(name="execute_python", arguments=json.dumps({"code": "1"}), call_id="c1")
        gate.close()
        assert app.pool is not None and app.pool.reaper.wait_idle(timeout=60)
        left = containers_of(engine, run_id)

    assert left == []
