"""`sbx bench restore`: what restore by replay costs, and what releasing idle sandboxes saves.

Two figures (issue 21), with the scripted model and the real sandbox:

- time to the first answer of a question that uses a conversation's state,
  three ways: in a live session (the sandbox kept), after a restore of
  `cells` executions (the sandbox released, then replayed), and as a cold
  start without restore (a new conversation whose one program rebuilds the
  state itself). Medians over `rounds`; this machine's noise is large, so the
  figures are for the reader, never a pass/fail;
- memory held by `idle` conversations that loaded the data stack, read from
  each container's cgroup on this host: all held (no early release), then
  after every one is released (restore brings their state back on demand).
  The host ledger caps sandboxes (`SBX_MAX_SANDBOXES`, `SBX_MAX_CPUS`): raise
  them for `--idle 100` on a small host.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import Conversation, ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import ScriptedLLM, assistant, tool_call
from sbx.sandbox.bench.felt import RESTORE, Felt, felt_targets
from sbx.sandbox.bench.memory import container_memory_bytes
from sbx.sandbox.bench.stats import ratio
from sbx.sandbox.pool_config import PoolConfig

KEY = "sk-bench-SCRIPTED0123456789abcdefghijkl"
LOAD = "import pandas as pd\ndf = pd.DataFrame({'x': range(1000)})\nprint(len(df))"
USE = "print(int(df.c9.sum()))"


def cells(count: int) -> list[str]:
    """The programs that build the state: a DataFrame, then one column each."""
    return [LOAD] + [f"df['c{i}'] = df.x * {i}\nprint(int(df['c{i}'].sum()))"
                     for i in range(1, count)]


@dataclass(kw_only=True)
class RestoreBench:
    """The figures, in seconds and bytes."""

    cells: int
    """Executions that build the state."""
    live_s: list[float] = field(default_factory=list)
    """First answer with the sandbox kept, per round."""
    restored_s: list[float] = field(default_factory=list)
    """First answer after the sandbox was released and restored, per round."""
    cold_s: list[float] = field(default_factory=list)
    """First answer of a new conversation whose one program rebuilds the state, per round."""
    idle: int = 0
    """Idle conversations measured."""
    held_bytes: int = 0
    """Memory their sandboxes held (cgroup usage), all kept."""
    released_bytes: int = 0
    """The same after every one was released."""

    def render(self) -> str:
        """The report's lines."""
        def median(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} s" if values else "n/a"
        mib = 2**20
        lines = [
            f"first answer using the state of {self.cells} cells (median of "
            f"{len(self.live_s)}): live session {median(self.live_s)}, after a restore of "
            f"{self.cells} cells {median(self.restored_s)}, cold start without restore "
            f"{median(self.cold_s)}",
        ]
        if self.idle:
            lines.append(
                f"{self.idle} idle conversations with the data stack: "
                f"{self.held_bytes / mib:.0f} MiB held with their sandboxes kept, "
                f"{self.released_bytes / mib:.0f} MiB after the idle release "
                f"({self.held_bytes / mib / self.idle:.0f} MiB each before)")
        return "\n".join(lines)

    def felt(self) -> list[Felt]:
        """The restore's share of the speed users feel: after a restore vs live, vs a replay."""
        def median(values: list[float]) -> float | None:
            return statistics.median(values) if values else None
        restored = median(self.restored_s)
        return felt_targets({"restore_vs_live": ratio(restored, median(self.live_s)),
                             "restore_vs_replay": ratio(restored, median(self.cold_s))},
                            bench=RESTORE)

    def as_json(self) -> dict[str, Any]:
        """The `--json` document."""
        return {**vars(self), "targets": [item.as_json() for item in self.felt()]}


IDLE_MEMORY = 160 * 2**20
"""The sandboxes' memory limit for the bench (the host ledger reserves it for each of `idle`
sandboxes; pandas loaded holds far less)."""


def run_restore_bench(*, image: str, cells_count: int, rounds: int, idle: int,
                      progress: Callable[[str], None]) -> RestoreBench:
    """Measure both figures (see the module); every container is removed before it returns."""
    report = RestoreBench(cells=cells_count, idle=idle)
    config = load_config(None)
    config = replace(config, limits=config.limits.model_copy(update={"memory": IDLE_MEMORY}))
    with TemporaryDirectory(prefix="sbx-bench-restore-") as scratch, ScriptedLLM() as llm:
        root = Path(scratch)
        app = App.open(config, environ={}, audit_log=root / "audit.jsonl", image=image,
                       pool_config=PoolConfig(size=0))
        with app:
            endpoint = Endpoint(base_url=llm.base_url, api_key=KEY, model="scripted")
            for index in range(rounds):
                progress(f"round {index + 1} of {rounds}: live, restored, cold")
                _round(app, llm, endpoint, root / f"r{index}", report)
            progress(report.render().splitlines()[0])
            if idle:
                progress(f"{idle} idle conversations")
                _idle(app, llm, endpoint, root / "idle", report)
    return report


def _open(app: App, endpoint: Endpoint, directory: Path) -> Conversation:
    spec = ConversationSpec(principal="bench:restore", output_root=directory / "out")
    return app.conversation(spec, endpoint=endpoint, transcript=directory / "t.jsonl")


def _ask(conversation: Conversation, llm: ScriptedLLM, code: str) -> float:
    llm.script([tool_call("execute_python", code=code), assistant("done")])
    started = time.perf_counter()
    result = conversation.ask("next")
    if result.status != "completed":
        raise RuntimeError(f"bench: a question ended {result.status}: {result.message}")
    return time.perf_counter() - started


def _round(app: App, llm: ScriptedLLM, endpoint: Endpoint, directory: Path,
           report: RestoreBench) -> None:
    with _open(app, endpoint, directory / "live") as conversation:
        for code in cells(report.cells):
            _ask(conversation, llm, code)
        report.live_s.append(_ask(conversation, llm, USE))
        conversation.workspace.discard(reason="the bench released it")
        report.restored_s.append(_ask(conversation, llm, USE))
    with _open(app, endpoint, directory / "cold") as conversation:
        report.cold_s.append(_ask(conversation, llm, "\n".join([*cells(report.cells), USE])))


def _idle(app: App, llm: ScriptedLLM, endpoint: Endpoint, directory: Path,
          report: RestoreBench) -> None:
    opened: list[Conversation] = []
    try:
        for index in range(report.idle):
            conversation = _open(app, endpoint, directory / str(index))
            opened.append(conversation)
            _ask(conversation, llm, LOAD)
        report.held_bytes = sum(_memory(c) for c in opened)
        for conversation in opened:
            conversation.workspace.discard(reason="an idle release")
        report.released_bytes = sum(_memory(c) for c in opened)
    finally:
        for conversation in opened:
            conversation.close()


def _memory(conversation: Conversation) -> int:
    """Bytes the conversation's sandbox holds now (its cgroup's usage; 0 without one)."""
    session = conversation.workspace._session  # the bench is about the sandbox itself
    if session is None or session.container_id is None:
        return 0
    return container_memory_bytes(session.engine, session.container_id)
