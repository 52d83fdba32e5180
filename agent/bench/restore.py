"""`sbx bench restore`: what a restore costs, and what releasing idle sandboxes saves.

Two figures, with the scripted model and the real sandbox:

- time to the first answer of a question that uses a conversation's state
  (`cells` executions: a DataFrame, a model fit of about 5 s, a chart, then
  one column each), four ways: in a live session (the sandbox kept), after a
  restore from the snapshot the idle release took, after a full replay (the
  sandbox released without a snapshot), and as a cold start without restore
  (a new conversation whose one program rebuilds the state itself). Medians
  over `rounds`, and two targets as ratios measured in the same run: the
  first answer after a snapshot restore at most `SNAPSHOT_VS_LIVE` times a
  live one and at most `SNAPSHOT_VS_REPLAY` times a full replay's. This
  machine's noise is large: the figures are for the reader, never a test.
  One warm container is kept (a pool of 1), so a new conversation takes a
  started one with the data stack imported, and the snapshot restore takes a
  restore-ready one (`[restore] ready`: scikit-learn and pyplot imported too,
  since the conversation had them loaded), built while the user was away: the
  bench waits for the pool to settle before it asks;
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
from sbx.agent.core.events import StateRestored
from sbx.agent.core.settings import Endpoint
from sbx.agent.core.transcript import read_transcript
from sbx.agent.testing.scripted_model import ScriptedLLM, assistant, tool_call
from sbx.sandbox.bench.felt import RESTORE, Felt, felt_targets
from sbx.sandbox.bench.memory import container_memory_bytes
from sbx.sandbox.pool_config import PoolConfig

KEY = "sk-bench-SCRIPTED0123456789abcdefghijkl"
LOAD = "import pandas as pd\ndf = pd.DataFrame({'x': range(1000)})\nprint(len(df))"
"""The idle conversations' one program (the data stack loaded)."""
DATA = ("import numpy as np\nimport pandas as pd\nrng = np.random.default_rng(0)\n"
        "df = pd.DataFrame(rng.normal(size=(20000, 8)), columns=[f'f{i}' for i in range(8)])\n"
        "df['y'] = df.f0 * 2 + df.f1 ** 2 + rng.normal(size=len(df))\nprint(df.shape)")
FIT = ("from sklearn.ensemble import GradientBoostingRegressor\n"
       "X = df[[f'f{i}' for i in range(8)]]\n"
       "model = GradientBoostingRegressor(n_estimators=120, random_state=0).fit(X, df.y)\n"
       "print(round(model.score(X, df.y), 4))")
"""About 5 s of CPU on this host (the model a restore must not fit again)."""
CHART = ("import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
         "ax.scatter(df.f0[:500], df.y[:500], s=2)\nax.set_title('y by f0')\n"
         "fig.savefig('/output/chart.png')\nprint('chart')")
USE = "print(round(model.score(X, df.y), 4), df.shape)"
SNAPSHOT_VS_LIVE = 5.0
SNAPSHOT_VS_REPLAY = 0.2


def cells(count: int) -> list[str]:
    """The programs that build the state: data, a model fit, a chart, then one column each."""
    made = [DATA, FIT, CHART]
    return (made + [f"df['c{i}'] = df.f0 * {i}\nprint(round(float(df['c{i}'].sum()), 3))"
                    for i in range(3, count)])[:count]


@dataclass(kw_only=True)
class RestoreBench:
    """The figures, in seconds and bytes."""

    cells: int
    """Executions that build the state."""
    live_s: list[float] = field(default_factory=list)
    """First answer with the sandbox kept, per round."""
    snapshot_s: list[float] = field(default_factory=list)
    """First answer after the idle release and a restore from its snapshot, per round."""
    restored_s: list[float] = field(default_factory=list)
    """First answer after the sandbox was released without a snapshot and replayed, per round."""
    from_snapshot: int = 0
    """Cells the last snapshot restore brought back without re-running them."""
    replayed: int = 0
    """Cells the last snapshot restore re-ran."""
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
            f"{len(self.live_s)}): live session {median(self.live_s)}, after a snapshot "
            f"restore {median(self.snapshot_s)} ({self.from_snapshot} cells loaded, "
            f"{self.replayed} re-run), after a full replay {median(self.restored_s)}, cold "
            f"start without restore {median(self.cold_s)}",
            *(f"{t['name']}: {t['measured']} (limit {t['limit']}) "
              f"{'met' if t['met'] else 'NOT met'}" for t in self.targets()),
        ]
        if self.idle:
            lines.append(
                f"{self.idle} idle conversations with the data stack: "
                f"{self.held_bytes / mib:.0f} MiB held with their sandboxes kept, "
                f"{self.released_bytes / mib:.0f} MiB after the idle release "
                f"({self.held_bytes / mib / self.idle:.0f} MiB each before)")
        return "\n".join(lines)

    def targets(self) -> list[dict[str, Any]]:
        """The restore's targets as ratios of this run's medians: name, limit, measured, met."""
        if not (self.live_s and self.snapshot_s and self.restored_s):
            return []
        snapshot = statistics.median(self.snapshot_s)
        pairs = [("restore_first_answer_vs_live", SNAPSHOT_VS_LIVE,
                  snapshot / statistics.median(self.live_s)),
                 ("restore_first_answer_vs_full_replay", SNAPSHOT_VS_REPLAY,
                  snapshot / statistics.median(self.restored_s))]
        return [{"name": name, "limit": limit, "measured": round(ratio, 3),
                 "met": ratio <= limit} for name, limit, ratio in pairs]

    def felt(self) -> list[Felt]:
        """Every target of the speed users feel (`felt.py`), this bench's two measured."""
        return felt_targets({target["name"]: target["measured"] for target in self.targets()},
                            bench=RESTORE)

    def as_json(self) -> dict[str, Any]:
        """The `--json` document."""
        return {**vars(self), "targets": self.targets()}


IDLE_MEMORY = 160 * 2**20
"""The sandboxes' memory limit for the bench (the host ledger reserves it for each of `idle`
sandboxes; pandas loaded holds far less)."""


def run_restore_bench(*, image: str, cells_count: int, rounds: int, idle: int,
                      progress: Callable[[str], None]) -> RestoreBench:
    """Measure both figures (see the module); every container is removed before it returns."""
    report = RestoreBench(cells=cells_count, idle=idle)
    config = load_config(None)
    idle_config = replace(config,
                          limits=config.limits.model_copy(update={"memory": IDLE_MEMORY}))
    with TemporaryDirectory(prefix="sbx-bench-restore-") as scratch, ScriptedLLM() as llm:
        root = Path(scratch)
        app = App.open(config, environ={}, audit_log=root / "audit.jsonl", image=image,
                       pool_config=PoolConfig(size=1))
        with app:
            if app.pool is not None:
                app.pool.warm(app.warm_key)
            endpoint = Endpoint(base_url=llm.base_url, api_key=KEY, model="scripted")
            for index in range(rounds):
                progress(f"round {index + 1} of {rounds}: live, restored, cold")
                _round(app, llm, endpoint, root / f"r{index}", report)
            progress(report.render().splitlines()[0])
        if idle:
            progress(f"{idle} idle conversations")
            with App.open(idle_config, environ={}, audit_log=root / "audit-idle.jsonl",
                          image=image, pool_config=PoolConfig(size=0)) as idle_app:
                _idle(idle_app, llm, endpoint, root / "idle", report)
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
        conversation.workspace.discard_if_idle(0.0, reason="the bench released it")
        _pause(app)
        report.snapshot_s.append(_ask(conversation, llm, USE))
        event = _last_restore(conversation)
        report.from_snapshot, report.replayed = event.from_snapshot, event.replayed
        conversation.workspace.forget_snapshot()  # the same state, restored by replay alone
        conversation.workspace.discard(reason="the bench released it")
        report.restored_s.append(_ask(conversation, llm, USE))
    with _open(app, endpoint, directory / "cold") as conversation:
        report.cold_s.append(_ask(conversation, llm, "\n".join([*cells(report.cells), USE])))


def _pause(app: App) -> None:
    """What a user back from a pause finds: the pool refilled, a restore-ready container built.

    The idle release comes after minutes without a question (`[service] idle_timeout`);
    asking the moment after it would time the container's build instead of the restore.
    """
    if app.pool is None:
        return
    app.pool.settle(app.warm_key)
    if app.restore_ready.waiting:
        app.pool.settle(app.restore_ready.key)


def _last_restore(conversation: Conversation) -> StateRestored:
    """The conversation's last `state_restored` event (from its transcript)."""
    found = [e for e in read_transcript(conversation.transcript.path)
             if isinstance(e, StateRestored)]
    return found[-1] if found else StateRestored(status="not_restored")


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
