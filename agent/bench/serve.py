"""`sbx bench serve`: what `sbx serve` adds over the in-process core, at several levels.

At each level of concurrency (`--levels`, 1, 8 and 32 conversations at once by
default, in ascending order), N conversations of Q questions each, all at
once, with the scripted model, run on both sides. Every conversation holds a
10 MB CSV (`sales.csv`): its first question reads it with pandas, a new
conversation's first pandas question; the later ones use the DataFrame and the
variable the previous one left (each question: one `execute_python` call,
then an answer; a program that did not print the CSV's row count fails the
bench).

    serve    against a real `sbx serve` on 127.0.0.1 (one API key per conversation,
             the CSV uploaded once as each key's dataset, each conversation opened
             over it): POST the question, read its Server-Sent Events until the run ends
    core     the same conversations through `App` / `Conversation` in this process,
             the CSV mounted as the conversation's data

Rounds alternate the order (serve, core, core, serve, ...) so that drift on a
shared host falls on both sides. Both sides run the same demand-sized pool (the
policy's `[pool]`, `policy_text`), and both pools settle after every phase
before the next begins. A question's latency is from asking to the run's end
(over HTTP: the `run_end` event received). Reported per level and side
(`sbx.agent.bench.serve_report`): p50, p90 and p99 and what the service adds;
the p99 at the highest level over the p99 at the lowest; CPU per question and
per new conversation (what each includes: that module's docstring); the pool's
hits and misses. Checked once for the run: events lost (each run's stored
events that its live stream did not deliver: must be 0); containers left (of
the server and of this process, after both closed: must be 0); the audit logs'
verification; the server's clean exit; one pool take per conversation and side.
After each round at the highest level, as many hardened `docker run`s of the
question as that level has conversations run at once (`serve_burst`): the
burst's baseline. The targets users feel (`sbx.sandbox.bench.felt`) are
ratios of these figures: the report's `targets`.
Nothing leaves the machine: the model and the server listen on 127.0.0.1.
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory

import httpx2
from sqlalchemy import select

from sbx.agent.bench.serve_burst import docker_burst
from sbx.agent.bench.serve_options import ServeBenchError, ServeBenchOptions
from sbx.agent.bench.serve_phases import (
    FAKE_KEY,
    MODEL,
    Opening,
    Responder,
    Sample,
    ServerProcess,
    clients_of,
    core_phase,
    host_busy_s,
    http_phase,
    open_over_http,
    process_cpu_s,
    upload_over_http,
)
from sbx.agent.bench.serve_pool import PoolFigures, core_pool, server_pool, settle, warmed
from sbx.agent.bench.serve_report import LevelFigures, ServeBenchReport
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.keys import Role, create_key
from sbx.agent.core.hosting.store.models import EventRow
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import ScriptedLLM
from sbx.sandbox.bench.first_question import write_csv
from sbx.sandbox.engine import Engine
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.host_caps import HostCaps, Need
from sbx.sandbox.limits import Limits
from sbx.tools.audit_verify import verify_log

__all__ = [
    "ServeBenchError", "ServeBenchOptions", "ServeBenchReport", "host_room", "policy_text",
    "run_serve_bench",
]


def policy_text(options: ServeBenchOptions) -> str:
    """The bench's policy: every conversation may run at once, quotas out of the way.

    Both sides run its `[pool]`: sized by demand up to the highest level
    (the host's caps bound it too), with a memory budget that lets it get
    there (the default sandbox memory, 512 MiB, per container).
    """
    n = options.most
    return (f"[tools.execute_python]\nenabled = true\n[sandbox]\ntimeout = \"60s\"\n"
            f"[pool]\nsize = 0\nmax_size = {n}\nwindow = \"60s\"\n"
            f"memory_budget = \"{n * 512}m\"\n"
            f"[service]\nmax_running = {n}\nmax_queued = {n}\n"
            f"[service.quotas]\nruns_per_hour = 100000\ncpu_seconds_per_day = 1000000\n")


def run_serve_bench(options: ServeBenchOptions, progress: Callable[[str], None]
                    ) -> ServeBenchReport:
    """Run the bench in a temporary directory (see the module docstring)."""
    report = ServeBenchReport(options=options, load=[round(os.getloadavg()[0], 2)])
    with TemporaryDirectory(prefix="sbx-bench-serve-") as scratch:
        root = Path(scratch)
        (root / "policy.toml").write_text(policy_text(options))
        with ScriptedLLM() as llm:
            server = ServerProcess(root=root, policy=root / "policy.toml", image=options.image,
                                   llm_url=llm.base_url, workers=options.workers)
            try:
                served = _rounds(report, root, server, llm, progress)
            finally:
                report.server_exit = server.stop()
        llm.assert_complete()
        progress("checking events, containers and audit logs")
        _count_events(report, server.database, served)
        left = {*server.owners, owner_tag()}
        report.containers_left = sum(
            1 for c in Engine.connect().managed_containers() if c["Labels"].get("sbx.owner") in left
        )
        for name, path in (("server", server.audit_log), ("core", root / "core-audit.jsonl")):
            verdict = verify_log(path, key=None)
            report.audit[name] = (f"verifies ({verdict.records} records, {verdict.runs} runs)"
                                  if verdict.ok else f"FAILS: {verdict}")
    report.load.append(round(os.getloadavg()[0], 2))
    report.check()
    return report


@dataclass(frozen=True, kw_only=True)
class _Sides:
    """What a phase needs of both sides: the core, the server, the model, the pools."""

    app: App
    server: ServerProcess
    llm: ScriptedLLM
    keys: list[str]
    datasets: list[str]
    """Each key's upload of `csv` (the service's ids), in the order of `keys`."""
    csv: Path
    """The 10 MB CSV every conversation asks about (the core mounts it as data)."""
    model: Responder
    """The scripted model's turns (it keeps the results that lack the expected output)."""
    endpoint: Endpoint
    root: Path
    reads: dict[str, Callable[[], PoolFigures]]


def _rounds(report: ServeBenchReport, root: Path, server: ServerProcess, llm: ScriptedLLM,
            progress: Callable[[str], None]) -> list[Sample]:
    """Every level, both sides `rounds` times in alternating order; the HTTP side's samples."""
    o = report.options
    config = load_config(root / "policy.toml")
    report.host_room = host_room(config.limits)
    keys = _keys(server.database, o.most)
    csv = write_csv(root / "csv")
    progress(f"uploading the CSV as a dataset of each of {len(keys)} keys")
    datasets = upload_over_http(server, keys, csv)
    admin = _keys(server.database, 1, prefix="bench-ops", role="admin")[0]
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model=MODEL)
    served: list[Sample] = []
    with App.open(config, environ={},
                  audit_log=root / "core-audit.jsonl", image=o.image) as app, \
            httpx2.Client(base_url=server.url, timeout=httpx2.Timeout(30.0, connect=10.0),
                          headers={"Authorization": f"Bearer {admin}"}) as ops:
        sides = _Sides(app=app, server=server, llm=llm, keys=keys, datasets=datasets, csv=csv,
                       model=Responder(), endpoint=endpoint, root=root,
                       reads={"core": lambda: core_pool(app), "serve": lambda: server_pool(ops)})
        settle(*sides.reads.values())  # the pools' first fill is no phase's cost
        for count in o.levels:
            level = LevelFigures(conversations=count, separated=count <= report.host_room)
            report.levels.append(level)
            for index in range(o.rounds):
                for side in ("serve", "core") if index % 2 == 0 else ("core", "serve"):
                    progress(f"{count} at once, round {index + 1}/{o.rounds}: {side}")
                    samples = _phase(report, level, side, sides)
                    if side == "serve":
                        served += samples
                if count == o.most:
                    progress(f"{count} hardened docker runs of the question at once")
                    report.docker_runs_s += docker_burst(count, config.limits, o.image, csv)
    return served


def _phase(report: ServeBenchReport, level: LevelFigures, side: str, sides: _Sides
           ) -> list[Sample]:
    """One side's phase at one level: its samples, CPU parts and pool takes added to `level`."""
    count, questions = level.conversations, report.options.questions
    sides.llm.script([sides.model] * count * questions * 2)
    read_cpu = sides.server.cpu_s if side == "serve" else process_cpu_s
    opening = Opening(count, wait=level.separated, calm=lambda: settle(*sides.reads.values()),
                      process=read_cpu)
    ahead = _announce(report, side, sides, count) if report.options.announced else None
    clients = clients_of(sides.server, sides.keys[:count]) if side == "serve" else []
    try:
        took = sides.reads[side]()
        before = read_cpu(), host_busy_s()
        started = time.perf_counter()
        if side == "serve":
            batches = http_phase(clients, sides.datasets[:count], questions, opening, ahead)
        else:
            batches = core_phase(sides.app, sides.endpoint, sides.root, sides.csv, count,
                                 questions, opening)
            sides.app.expect_sessions(0)
        after = read_cpu(), host_busy_s()
        ended = time.perf_counter()
    finally:
        for client in clients:
            client.close()
    level.wall_s[side] += ended - started
    settle(*sides.reads.values())
    settled = host_busy_s()
    taken = sides.reads[side]()
    opened = after[1] if opening.at is None else opening.at
    calm = after[1] if opening.calm_at is None else opening.calm_at
    used = level.cpu_s[side]
    used["process"] += after[0] - before[0] - opening.calm_process_s
    used["host"] += after[1] - before[1]
    used["opening"] += opened - before[1]
    used["after"] += after[1] - calm
    used["refill"] += (calm - opened) + (settled - after[1])
    if opening.calm_t is not None:
        level.calm_wall_s[side] += ended - opening.calm_t
    level.takes[side]["hit"] += taken.hits - took.hits
    level.takes[side]["miss"] += taken.misses - took.misses
    level.phases[side] += 1
    samples = [sample for batch in batches for sample in batch]
    level.first_answers[side].extend(batch[0].seconds for batch in batches if batch)
    level.first_events.extend(s.first_event_s for s in samples if s.first_event_s is not None)
    level.seconds[side].extend(sample.seconds for sample in samples)
    report.statuses.update(sample.status for sample in samples)
    if sides.model.wrong:
        raise ServeBenchError(f"{side} at {count} at once: {len(sides.model.wrong)} question(s) "
                              f"did not read the CSV: {sides.model.wrong[0]!r}")
    if sides.llm.remaining:
        statuses = dict(Counter(sample.status for sample in samples))
        raise ServeBenchError(f"{side} at {count} at once: {sides.llm.remaining} scripted turns "
                           f"were not used, a run ended early (runs: {statuses})")
    return samples


def _announce(report: ServeBenchReport, side: str, sides: _Sides, count: int
              ) -> list[str] | None:
    """Let `side`'s pool see the phase coming, then wait for its warm containers.

    The server is shown open conversations (it counts those without a sandbox as
    coming demand on its heartbeat); the core is told with `App.expect_sessions`,
    as a program embedding it would be. Returns the server's conversation ids.
    """
    opened = None
    if side == "serve":
        opened = open_over_http(sides.server, sides.keys[:count], sides.datasets[:count])
    else:
        sides.app.expect_sessions(count)
    if not warmed(sides.reads[side], count):
        report.unwarmed += 1
    return opened


def host_room(limits: Limits) -> int:
    """Sandboxes with `limits` the host's caps (`SBX_MAX_*`, shared by both sides) hold at once."""
    caps, need = HostCaps.from_env(os.environ), Need.of(limits)
    by_cpus = math.floor(caps.cpus / need.cpus + 1e-9) if need.cpus > 0 else caps.sandboxes
    return max(0, min(caps.sandboxes, by_cpus, caps.memory // max(1, need.memory)))


def _keys(database: str, count: int, *, prefix: str = "bench", role: Role = "user"
          ) -> list[str]:
    """One API key per conversation (the default quota allows 4 conversations per key)."""
    db = Database.open(database)
    try:
        return [create_key(db, f"{prefix}-{index}", role=role) for index in range(count)]
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

