"""`sbx bench serve`: what `sbx serve` adds over the in-process core, and that it loses nothing.

N conversations of Q questions each (32 x 3 by default), all at once, with the
scripted model (each question: one `execute_python` call that uses the
previous question's variable, then an answer), run twice per round:

    serve    against a real `sbx serve` on 127.0.0.1 (one API key per conversation):
             POST the question, read its Server-Sent Events until the run ends
    core     the same conversations through `App` / `Conversation` in this process

Rounds alternate the order (serve, core, core, serve, ...) so that drift on a
shared host falls on both sides. A question's latency is from asking to the
run's end (over HTTP: the `run_end` event received). Reported: p50 and p99 of
each side and the difference (what the service adds: HTTP, the store, the
event stream, the run queue); events lost (each run's stored events that its
live stream did not deliver: must be 0); containers left (of the server and
of this process, after both closed: must be 0); the audit logs' verification.
Nothing leaves the machine: the model and the server listen on 127.0.0.1.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from sqlalchemy import select

from sbx.agent.bench.serve_phases import (
    FAKE_KEY,
    MODEL,
    Sample,
    ServerProcess,
    core_phase,
    http_phase,
    respond,
)
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.settings import Endpoint
from sbx.agent.store.db import Database
from sbx.agent.store.keys import create_key
from sbx.agent.store.models import EventRow
from sbx.agent.testing.scripted_model import ScriptedLLM
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.pool_config import PoolConfig
from sbx.tools.audit_verify import verify_log


@dataclass(frozen=True, kw_only=True)
class ServeBenchOptions:
    """What to run."""

    conversations: int = 32
    questions: int = 3
    rounds: int = 2
    """Each round runs both sides once; the order alternates between rounds (ABBA)."""
    image: str = DEFAULT_IMAGE


@dataclass(kw_only=True)
class ServeBenchReport:
    """The figures and the checks (see the module docstring)."""

    options: ServeBenchOptions
    core_s: list[float] = field(default_factory=list)
    serve_s: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    events_received: int = 0
    events_stored: int = 0
    events_lost: int = 0
    events_unexpected: int = 0
    containers_left: int = 0
    audit: dict[str, str] = field(default_factory=dict)
    server_exit: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every promise held: nothing lost or left, the logs verify, every run completed."""
        return not self.problems

    def check(self) -> None:
        """Record what broke a promise."""
        expected = 2 * self.options.rounds * self.options.conversations * self.options.questions
        if self.statuses.get("completed", 0) != expected:
            self.problems.append(f"runs that did not complete: {dict(self.statuses)}")
        if self.events_lost or self.events_unexpected:
            self.problems.append(f"{self.events_lost} event(s) lost, "
                                 f"{self.events_unexpected} unexpected")
        if self.containers_left:
            self.problems.append(f"{self.containers_left} container(s) left")
        self.problems += [f"audit log {name}: {verdict}" for name, verdict in self.audit.items()
                          if not verdict.startswith("verifies")]
        if self.server_exit != 0:
            self.problems.append(f"sbx serve exited {self.server_exit} after SIGTERM")

    def latency_ms(self) -> dict[str, dict[str, float]]:
        """p50 and p99 of each side, and the service's difference."""
        core = {"p50": percentile(self.core_s, 50), "p99": percentile(self.core_s, 99)}
        serve = {"p50": percentile(self.serve_s, 50), "p99": percentile(self.serve_s, 99)}
        added = {key: serve[key] - core[key] for key in core}
        return {name: {key: round(value * 1000, 1) for key, value in side.items()}
                for name, side in (("core", core), ("serve", serve), ("added", added))}

    def as_json(self) -> dict[str, Any]:
        """Everything, for `--json`."""
        return {
            "options": asdict(self.options), "questions_per_side": len(self.core_s),
            "latency_ms": self.latency_ms(), "statuses": dict(self.statuses),
            "events": {"received": self.events_received, "stored": self.events_stored,
                       "lost": self.events_lost, "unexpected": self.events_unexpected},
            "containers_left": self.containers_left, "audit": self.audit,
            "server_exit": self.server_exit, "ok": self.ok, "problems": self.problems,
        }

    def render(self) -> str:
        """The report as text."""
        o, latency = self.options, self.latency_ms()
        lines = [
            f"{o.conversations} conversations x {o.questions} questions at once, {o.rounds} "
            f"round(s), scripted model; {len(self.serve_s)} questions per side",
            "latency per question, ms    p50        p99",
        ]
        for label, key in (("in-process core", "core"), ("sbx serve (HTTP + SSE)", "serve"),
                           ("added by the service", "added")):
            lines.append(f"  {label:<24}  {latency[key]['p50']:>8}  {latency[key]['p99']:>9}")
        lines += [
            f"events: {self.events_received} received live over SSE, {self.events_stored} "
            f"stored, {self.events_lost} lost, {self.events_unexpected} unexpected",
            f"containers left: {self.containers_left}",
            *(f"audit log ({name}): {verdict}" for name, verdict in self.audit.items()),
            f"sbx serve exit after SIGTERM: {self.server_exit}",
            "ok" if self.ok else "FAILED: " + "; ".join(self.problems),
        ]
        return "\n".join(lines)


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile, linearly interpolated between the closest ranks (0 when empty)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def policy_text(options: ServeBenchOptions) -> str:
    """The bench's policy: every conversation may run at once, quotas out of the way."""
    n = options.conversations
    return (f"[tools.execute_python]\nenabled = true\n[sandbox]\ntimeout = \"60s\"\n"
            f"[service]\nmax_running = {n}\nmax_queued = {n}\n"
            f"[service.quotas]\nruns_per_hour = 100000\ncpu_seconds_per_day = 1000000\n")


def run_serve_bench(options: ServeBenchOptions, progress: Callable[[str], None]
                    ) -> ServeBenchReport:
    """Run the bench in a temporary directory (see the module docstring)."""
    report = ServeBenchReport(options=options)
    with TemporaryDirectory(prefix="sbx-bench-serve-") as scratch:
        root = Path(scratch)
        (root / "policy.toml").write_text(policy_text(options))
        with ScriptedLLM() as llm:
            server = ServerProcess(root=root, policy=root / "policy.toml", image=options.image,
                                   llm_url=llm.base_url)
            try:
                served = _rounds(report, root, server, llm, progress)
            finally:
                report.server_exit = server.stop()
        llm.assert_complete()
        progress("checking events, containers and audit logs")
        _count_events(report, server.database, served)
        left = {server.owner, owner_tag()}
        report.containers_left = sum(
            1 for c in Engine.connect().managed_containers() if c["Labels"].get("sbx.owner") in left
        )
        for name, path in (("server", server.audit_log), ("core", root / "core-audit.jsonl")):
            verdict = verify_log(path, key=None)
            report.audit[name] = (f"verifies ({verdict.records} records, {verdict.runs} runs)"
                                  if verdict.ok else f"FAILS: {verdict}")
    report.check()
    return report


def _rounds(report: ServeBenchReport, root: Path, server: ServerProcess, llm: ScriptedLLM,
            progress: Callable[[str], None]) -> list[Sample]:
    """Both sides, `rounds` times, in alternating order; the HTTP side's samples."""
    o = report.options
    keys = _keys(server.database, o.conversations)
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model=MODEL)
    served: list[Sample] = []
    turns = o.conversations * o.questions * 2
    with App.open(load_config(root / "policy.toml"), environ={},
                  audit_log=root / "core-audit.jsonl", image=o.image,
                  pool_config=PoolConfig(size=0)) as app:
        for index in range(o.rounds):
            order = ("serve", "core") if index % 2 == 0 else ("core", "serve")
            for side in order:
                progress(f"round {index + 1}/{o.rounds}: {side}")
                llm.script([respond] * turns)
                if side == "serve":
                    batches = http_phase(server, keys, o.questions)
                else:
                    batches = core_phase(app, endpoint, root, o.conversations, o.questions)
                samples = [sample for batch in batches for sample in batch]
                (report.serve_s if side == "serve" else report.core_s).extend(
                    sample.seconds for sample in samples)
                report.statuses.update(sample.status for sample in samples)
                if side == "serve":
                    served += samples
                if llm.remaining:
                    raise RuntimeError(f"{llm.remaining} scripted turns were not used: a run "
                                       "ended early")
    return served


def _keys(database: str, count: int) -> list[str]:
    """One API key per conversation (the default quota allows 4 conversations per key)."""
    db = Database.open(database)
    try:
        return [create_key(db, f"bench-{index}") for index in range(count)]
    finally:
        db.close()


def _count_events(report: ServeBenchReport, database: str, served: list[Sample]) -> None:
    """Compare each run's live SSE ids with its events in the store (after the server stopped)."""
    db = Database.open(database)
    try:
        with db.read() as session:
            rows = session.execute(select(EventRow.run_id, EventRow.seq)).all()
    finally:
        db.close()
    stored: dict[str, set[int]] = {}
    for run_id, seq in rows:
        stored.setdefault(run_id, set()).add(int(seq))
    for sample in served:
        kept = stored.get(sample.run_id, set())
        report.events_received += len(sample.received)
        report.events_stored += len(kept)
        report.events_lost += len(kept - set(sample.received))
        duplicates = len(sample.received) - len(set(sample.received))
        report.events_unexpected += len(set(sample.received) - kept) + duplicates

