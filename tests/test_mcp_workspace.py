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
        yield app, app._workspace(spec), run_id  # the builder behind tool_session


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


@pytest.mark.docker
def test_the_one_idle_release_never_takes_a_sandbox_in_use(tmp_path, engine):
    """`Workspace.discard_if_idle` is every face's idle release: a run or call
    holding `in_use()` keeps its sandbox; once it ends and the time passes, it goes, noted."""
    with session_workspace(tmp_path) as (app, workspace, run_id):
        gate = workspace.open_gate(run_id)
        with workspace.in_use():
            gate.call(name="execute_python", arguments=json.dumps({"code": "x = 1"}),
                      call_id="c1")
            assert workspace.idle_for() is None
            assert not workspace.discard_if_idle(0.0)  # in use: kept, whatever the clock
            assert containers_of(engine, run_id)
        ended = workspace.last_used
        assert not workspace.discard_if_idle(60.0, now=ended + 59.0)  # not idle long enough
        assert workspace.holds_sandbox
        assert workspace.discard_if_idle(60.0, now=ended + 60.0)
        assert not workspace.holds_sandbox and workspace.take_reset()
        assert workspace.lost_reason() == "an idle release: idle for more than 60 s"
        assert not workspace.discard_if_idle(0.0)  # nothing left to release
        gate.close()
        workspace.close()
        assert app.pool is not None and app.pool.reaper.wait_idle(timeout=60)
        assert containers_of(engine, run_id) == []
