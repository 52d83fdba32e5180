"""Restore from a snapshot: the state taken by value in the sandbox at an idle release, loaded.

Real Docker, the real SDK over HTTP to the scripted server, the real gate and
audit log; only the model is scripted. The idle release is the core's own
(`Workspace.discard_if_idle`, what every face's housekeeping calls).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import AppConfig, RestoreSettings, load_config
from sbx.agent.core.conversation import Conversation, ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.core.snapshot import loaded_of
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY
from tools_support import records

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

BUILD = [
    "import pandas as pd\nimport numpy as np\ndf = pd.DataFrame({'x': np.arange(50.0)})\n"
    "df['y'] = 3 * df.x + 1\nprint(len(df))",
    "from sklearn.linear_model import LinearRegression\n"
    "model = LinearRegression().fit(df[['x']], df.y)\nprint(round(model.coef_[0], 6))",
    "def scaled(k):\n    return float(df.y.sum()) * k\nprint(scaled(1))",
    "df.to_csv('table.csv', index=False)\nopen('/tmp/note.txt', 'w').write('kept')\n"
    "df.head(3).to_csv('/output/head.csv', index=False)\nprint('saved')",
    "import threading\nlock = threading.Lock()\nprint('locked', lock.locked())",
]
USE = ("import os\nprint(df.shape, round(model.predict(df[['x']].head(2))[1], 6), scaled(2), "
       "len(pd.read_csv('table.csv')), open('/tmp/note.txt').read(), lock.locked(), "
       "len(pd.read_csv('/output/head.csv')))")
USED = "[stdout]\n(50, 2) 4.0 7450.0 50 kept False 3\n"


def _config(**restore: Any) -> AppConfig:
    config = load_config(None)
    limits = config.limits.model_copy(update={"timeout": 15.0, "memory": 512 * 1024**2})
    return replace(config, limits=limits, restore=RestoreSettings(**restore))


def _open(app: App, llm, tmp_path: Path, principal: str = "os:analyst") -> Conversation:
    spec = ConversationSpec(principal=principal, output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    return app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "conv.jsonl")


def _ask(conversation: Conversation, llm, code: str) -> str:
    llm.script([tool_call("execute_python", code=code), assistant("done")])
    result = conversation.ask("next step")
    assert result.status == "completed", result
    return str(llm.requests[-1].last_tool_message)


def _restored(tmp_path: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in (tmp_path / "conv.jsonl").read_text().splitlines()]
    return [e for e in events if e["type"] == "state_restored"]


def _built(conversation: Conversation, llm) -> None:
    for code in BUILD:
        _ask(conversation, llm, code)
    assert conversation.workspace.discard_if_idle(0.0)  # the idle release snapshots first


@pytest.mark.docker
def test_a_snapshot_restores_variables_dataframes_models_and_files(llm, tmp_path, engine):
    with App.open(_config(), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, _open(app, llm, tmp_path) as conversation:
        _built(conversation, llm)
        snapshot = conversation.workspace.snapshot
        assert snapshot is not None and snapshot.path.read_bytes().startswith(b"SBXSNAP1")
        assert snapshot.unheld == ("lock",) and len(snapshot.cells) == len(BUILD)
        answer = _ask(conversation, llm, USE)
        run_id = conversation.runs[-1].run_id
        usage = conversation.runs[-1].sandbox

    assert answer.startswith(USED), answer
    [event] = _restored(tmp_path)
    # the snapshot held every cell but the one that made the lock, which alone is re-run
    assert (event["status"], event["from_snapshot"], event["cells"], event["replayed"]) == (
        "restored", len(BUILD) - 1, 1, 1)
    assert "from a snapshot" in _sent(llm)
    audit = records(tmp_path / "audit.jsonl")
    replayed = [r for r in audit if r["run_id"] == f"{run_id}-restore"]
    codes = [r["data"]["arguments"]["code"] for r in replayed if r["event"] == "request"]
    assert len(codes) == 2 and "'action': 'load'" in codes[0]  # the load is audited too
    assert usage.executions == 4  # the dump, the load, the replayed cell, the question's cell
    # the /output file the load wrote back equals the recorded one: no second copy is kept
    assert [p.name for p in (tmp_path / "out").rglob("head.csv")] == ["head.csv"]
    assert not snapshot.path.exists()  # gone with the conversation


@pytest.mark.docker
def test_only_the_cells_after_the_snapshot_are_replayed(llm, tmp_path, engine):
    with App.open(_config(), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, _open(app, llm, tmp_path) as conversation:
        _built(conversation, llm)
        _ask(conversation, llm, "df['z'] = df.x * 2\nprint(int(df.z.sum()))")
        _ask(conversation, llm, "while True:\n    pass")  # a timeout kill: no snapshot now
        answer = _ask(conversation, llm, "print(int(df.z.sum()), df.shape)")

    assert answer.startswith("[stdout]\n2450 (50, 3)\n"), answer
    first, second = _restored(tmp_path)
    assert (first["from_snapshot"], first["replayed"]) == (len(BUILD) - 1, 1)
    # the same snapshot again, then the lock's cell and the one cell after the snapshot
    assert (second["status"], second["from_snapshot"], second["replayed"]) == (
        "restored", len(BUILD) - 1, 2)


def _sent(llm) -> str:
    users = [m for m in llm.requests[-2].body["messages"] if m["role"] == "user"]
    return str(users[-1]["content"])


def _tamper(path: Path) -> None:
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.docker
@pytest.mark.parametrize("spoil", ["missing", "tampered", "too_large", "other_principal"])
def test_a_snapshot_that_cannot_be_used_falls_back_to_replay(llm, tmp_path, engine, spoil):
    restore = {"snapshot_bytes": 1000} if spoil == "too_large" else {}
    with App.open(_config(**restore), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, _open(app, llm, tmp_path) as conversation:
        _built(conversation, llm)
        workspace = conversation.workspace
        snapshot = workspace.snapshot
        if spoil == "too_large":
            assert snapshot is None  # over the bound: none was kept
        else:
            assert snapshot is not None
        if spoil == "missing":
            snapshot.path.unlink()
        elif spoil == "tampered":
            _tamper(snapshot.path)
        elif spoil == "other_principal":
            workspace.snapshot = replace(snapshot, principal="os:mallory")
        answer = _ask(conversation, llm, USE)

    assert answer.startswith(USED), answer
    [event] = _restored(tmp_path)
    assert (event["status"], event["from_snapshot"], event["replayed"]) == (
        "restored", 0, len(BUILD))
    why = {"missing": "it is missing", "tampered": "it does not match its digest",
           "too_large": "", "other_principal": "it was taken for another principal"}[spoil]
    assert event["snapshot"] == why
    assert "restored 5 cells by re-running" in _sent(llm)


@pytest.mark.docker
def test_a_snapshot_is_unpickled_only_inside_the_sandbox(llm, tmp_path, engine):
    marker = f"/tmp/sbx-snapshot-loaded-{secrets.token_hex(6)}"
    boom = (f"class Boom:\n    def __reduce__(self):\n        return (open, ({marker!r}, 'w'))\n"
            "boom = Boom()\ndel Boom\nprint('armed')")  # plain pickle: any unpickler runs it
    with App.open(_config(), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, _open(app, llm, tmp_path) as conversation:
        _ask(conversation, llm, boom)
        assert conversation.workspace.discard_if_idle(0.0)
        assert conversation.workspace.snapshot is not None
        answer = _ask(conversation, llm, f"import os\nprint(os.path.exists({marker!r}))")

    assert answer.startswith("[stdout]\nTrue\n"), answer  # it was loaded, in the sandbox
    assert not Path(marker).exists()  # and never on the host
    [event] = _restored(tmp_path)
    assert (event["from_snapshot"], event["replayed"]) == (1, 0)


@pytest.mark.docker
def test_a_reset_forgets_the_snapshot(llm, tmp_path, engine):
    with App.open(_config(), environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, _open(app, llm, tmp_path) as conversation:
        _ask(conversation, llm, "kept = 1\nprint(kept)")
        assert conversation.workspace.discard_if_idle(0.0)
        snapshot = conversation.workspace.snapshot
        assert snapshot is not None and snapshot.path.exists()
        conversation.reset()
        assert conversation.workspace.snapshot is None and not snapshot.path.exists()


def _named(app: App, llm, tmp_path: Path, name: str) -> Conversation:
    spec = ConversationSpec(principal="os:analyst", output_root=tmp_path / name)
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    return app.conversation(spec, endpoint=endpoint, transcript=tmp_path / f"{name}.jsonl")


LOADS = "import colorsys\ndel colorsys\nvalue = 7\nprint(value)"
"""A library of `[restore] preimport` imported, yet no value of it held: only a restore-ready
container can have it loaded after the restore (the load imports nothing of it)."""
LOADED = "import sys\nprint('colorsys' in sys.modules, value)"


@pytest.mark.docker
def test_a_restore_takes_a_container_with_the_libraries_its_conversation_had_loaded(
        llm, tmp_path, engine):
    config = _config(preimport=("colorsys",), ready=1)
    with App.open(config, environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, _named(app, llm, tmp_path, "a") as a, \
            _named(app, llm, tmp_path, "b") as b, _named(app, llm, tmp_path, "c") as c:
        pool, ready = app.pool, app.restore_ready
        assert pool is not None
        _ask(b, llm, LOADS.replace("import colorsys\ndel colorsys\n", ""))
        assert b.workspace.discard_if_idle(0.0)
        assert b.workspace.snapshot is not None and b.workspace.snapshot.loaded == ()
        assert ready.waiting == 0 and pool.idle(ready.key) == 0  # nothing kept for b

        for conversation in (a, c):
            _ask(conversation, llm, LOADS)
            assert conversation.workspace.discard_if_idle(0.0)
        assert a.workspace.snapshot is not None and a.workspace.snapshot.loaded == ("colorsys",)
        assert ready.waiting == 2
        assert pool.wait_warm(ready.key, 1) and pool.settle(ready.key)
        assert pool.idle(ready.key) == 1  # two wait, `ready` caps what is kept at one

        answer = _ask(a, llm, LOADED)
        assert ready.waiting == 1 and pool.wait_warm(ready.key, 1)  # refilled for c
        plain = _ask(b, llm, LOADED)
        c.reset()  # forgets its snapshot: nobody waits, nothing is kept
        assert ready.waiting == 0 and pool.wait_shrunk(ready.key, 0)

    assert answer.startswith("[stdout]\nTrue 7\n"), answer
    assert plain.startswith("[stdout]\nFalse 7\n"), plain
    for name in ("a", "b"):
        [event] = _restored_in(tmp_path / f"{name}.jsonl")
        assert (event["from_snapshot"], event["replayed"]) == (1, 0)


def _restored_in(transcript: Path) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    return [e for e in events if e["type"] == "state_restored"]


def test_a_dump_report_names_only_modules_the_host_asked_about() -> None:
    """The report comes from the sandbox: what it claims loaded never adds a module."""
    report = {"loaded": ["os", "colorsys", 3, "sklearn.ensemble"]}
    assert loaded_of(report, ("colorsys", "wave")) == ("colorsys",)
    assert loaded_of({"loaded": "colorsys"}, ("colorsys",)) == ()
