"""A restore's replay is work of the run that caused it: metered, priced, budgeted, recorded.

Real Docker, the real SDK over HTTP to the scripted server, the real gate;
only the model is scripted. Cells burn a known amount of CPU time
(`process_time`, so a loaded host does not change it), the sandbox is lost,
and the next question's replay must show in that run's usage and cost, stop
at a budget only the replay crosses, and leave no file on disk that no run
records (nor a second copy of one that is).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import AppConfig, load_config
from sbx.agent.core.conversation import Conversation, ConversationSpec
from sbx.agent.core.cost import Prices, SandboxPrice
from sbx.agent.core.settings import Endpoint
from sbx.agent.core.state import RunResult
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

CPU_S = 0.5
"""CPU seconds each burning cell uses, at least (measured by the interpreter itself)."""


def burn(name: str) -> str:
    """A cell that uses `CPU_S` CPU seconds and binds `name`."""
    return (f"import time\nend = time.process_time() + {CPU_S}\n"
            f"while time.process_time() < end:\n    pass\n{name} = 1\nprint('{name} set')")


def _config(*, max_cost: float | None = None) -> AppConfig:
    config = load_config(None)
    limits = config.limits.model_copy(update={"timeout": 15.0, "memory": 256 * 1024**2})
    settings = config.settings.model_copy(update={
        "prices": Prices(currency="EUR", sandbox=SandboxPrice(cpu_second=1.0, gb_second=1.0)),
        "budget": config.settings.budget.model_copy(update={"max_cost": max_cost}),
    })
    return replace(config, limits=limits, settings=settings)


def _conversation(app: App, llm, tmp_path: Path) -> Conversation:
    spec = ConversationSpec(principal="os:analyst", output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    return app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "conv.jsonl")


def _app(tmp_path: Path, config: AppConfig) -> App:
    return App.open(config, environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE)


def _ask_code(conversation: Conversation, llm, code: str) -> RunResult:
    llm.script([tool_call("execute_python", code=code), assistant("Done.")])
    result = conversation.ask("next step")
    assert result.status == "completed", result
    return result


def _events(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    lines = (tmp_path / "conv.jsonl").read_text().splitlines()
    return [event for event in map(json.loads, lines) if event["type"] == kind]


@pytest.mark.docker
def test_a_replays_cpu_and_memory_time_are_the_runs_usage_and_cost(llm, tmp_path, engine):
    with _app(tmp_path, _config()) as app, _conversation(app, llm, tmp_path) as conversation:
        first = _ask_code(conversation, llm, burn("a"))
        conversation.workspace.discard(reason="an idle release")
        second = _ask_code(conversation, llm, "print(a)")

    [restored] = _events(tmp_path, "state_restored")
    assert (restored["status"], restored["replayed"]) == ("restored", 1)
    assert first.sandbox.cpu_seconds >= CPU_S
    used = second.sandbox
    assert used.executions == 2  # the replayed cell and the run's own
    assert used.cpu_seconds >= CPU_S
    assert used.cpu_seconds >= restored["cpu_seconds"] - 5e-4  # the event's is to the millisecond
    assert used.gb_seconds > 0 and used.peak_memory_bytes > 0
    assert second.cost is not None
    assert second.cost["sandbox"] == pytest.approx(used.cpu_seconds + used.gb_seconds, abs=1e-5)
    [end] = [e for e in _events(tmp_path, "run_end") if e["run_id"] == second.run_id]
    assert end["sandbox"]["cpu_seconds"] == pytest.approx(used.cpu_seconds, abs=1e-3)
    assert end["cost"]["total"] == pytest.approx(second.cost["total"])


@pytest.mark.docker
def test_a_budget_only_the_replay_crosses_stops_the_replay_and_the_run(llm, tmp_path, engine):
    # Each run alone costs about 0.5 EUR of CPU, under max_cost 1.0; a replay of all
    # three cells would cost 1.5: it stops before the third, and the run with cost_limit.
    with (_app(tmp_path, _config(max_cost=1.0)) as app,
          _conversation(app, llm, tmp_path) as conversation):
        built = [_ask_code(conversation, llm, burn(name)) for name in ("a", "b", "c")]
        conversation.workspace.discard(reason="an idle release")
        asked = len(llm.requests)
        stopped = conversation.ask("and now?")

    assert all(run.cost is not None and run.cost["total"] < 1.0 for run in built)
    assert stopped.status == "cost_limit", stopped
    assert "max_cost of 1 EUR" in stopped.message
    assert len(llm.requests) == asked  # the model was never asked: the replay spent the budget
    [restored] = _events(tmp_path, "state_restored")
    assert restored["status"] == "not_restored" and restored["replayed"] == 2
    assert "the replay stopped at a budget" in restored["reason"]
    assert "max_cost" in restored["reason"]
    assert stopped.sandbox.executions == 2 and stopped.sandbox.cpu_seconds >= 2 * CPU_S
    assert stopped.cost is not None and stopped.cost["total"] >= 1.0


WRITE = ("import os\nopen('/output/table.csv', 'w').write('x,y\\n1,2\\n')\n"
         "open('/output/noise.bin', 'wb').write(os.urandom(64))\nprint('written')")


def _files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


@pytest.mark.docker
def test_three_resumes_keep_one_copy_and_every_file_on_disk_is_recorded(llm, tmp_path, engine):
    with _app(tmp_path, _config()) as app, _conversation(app, llm, tmp_path) as conversation:
        runs = [_ask_code(conversation, llm, WRITE)]
        for _ in range(3):
            conversation.workspace.discard(reason="an idle release")
            llm.script([assistant("Nothing to run.")])
            runs.append(conversation.ask("anything new?"))

    restored = _events(tmp_path, "state_restored")
    assert [event["replayed"] for event in restored] == [1, 1, 1]
    files = _files(tmp_path / "out")
    tables = [path for path in files if path.name == "table.csv"]
    assert tables == [tmp_path / "out" / runs[0].run_id / "table.csv"]  # one copy, not four
    noise = [path for path in files if path.name == "noise.bin"]
    assert len(noise) == 4  # different bytes each time: each copy kept, and recorded
    recorded = {Path(path) for run in runs for path in run.artifacts}
    assert set(files) <= recorded, set(files) - recorded
    for run in runs[1:]:
        [copy] = run.artifacts
        assert Path(copy).name == "noise.bin" and Path(copy).parent.name.startswith("restored-")
        assert Path(copy).is_relative_to(tmp_path / "out" / run.run_id)
