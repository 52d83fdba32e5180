"""`sbx bench`: what sandboxed execution costs here, next to its floors and `docker run`.

Latencies are measured interleaved: each repetition runs every workload in
every mode, in an order that rotates, so a slow minute of the host (these
machines are shared) spreads over all modes instead of skewing one. Between
samples the bench waits for the pool to refill and for removals to finish,
so each sample sees the background work of its own mode only; throughput
runs include all background work. The modes:

    host python3 -c     a process on the host, no container
    persistent floor    a bare Python loop in a running hardened container (floor.py)
    docker run          hardened `docker run --rm` through the SDK: the baseline
    sbx fresh           a container created for the execution (no warm pool), removed off-path
    sbx fresh (pool)    a warm pooled container handed over, used once, removed off-path
    sbx session         one more execution in an open session
    sbx session (buffered)  the same with live output off (live.py: streaming's cost)

Gate and audit overhead is measured by the CLI (`sandbox` does not import
`tools`) and added to the same report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory, mkdtemp

from sbx.sandbox.bench.counted import CountedEngine
from sbx.sandbox.bench.first_question import measure_first_question
from sbx.sandbox.bench.floor import PersistentFloor, docker_run, host_floor
from sbx.sandbox.bench.host import host_busy_seconds
from sbx.sandbox.bench.live import SESSION_BUFFERED, LiveBench
from sbx.sandbox.bench.memory import idle_memory_mib
from sbx.sandbox.bench.stats import BenchReport, Summary
from sbx.sandbox.bench.targets import (
    BARE,
    BASELINE,
    BURST,
    FLOOR,
    FRESH,
    HOST,
    MODES,
    POOLED,
    SESSION,
    THROUGHPUT_MODES,
    evaluate_targets,
)
from sbx.sandbox.bench.workloads import PRINT_ONE, WORKLOADS, Workload
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

SESSION_THROUGHPUT_FACTOR = 25
"""Session executions are ~1000x cheaper: run this many more of them for a stable figure."""

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """How much to measure; `quick()` for a short run."""

    reps: int = 15
    """Timed repetitions of every latency cell (after one untimed warm-up round)."""
    throughput_runs: int = 24
    """Executions per throughput figure (sessions run 25x as many)."""
    concurrency: tuple[int, ...] = (1, 4, 8)
    """Concurrency levels of the throughput runs."""
    pool_size: int = 4
    """Warm containers kept for the bench's key (each holds a lease on the host cap)."""
    image: str = DEFAULT_IMAGE
    """Sandbox image."""
    limits: Limits = field(default_factory=Limits)
    """Limits of every container, the baseline's included."""
    workloads: tuple[Workload, ...] = WORKLOADS
    """What to run."""

    @classmethod
    def quick(cls, **overrides: object) -> BenchOptions:
        """A short run: 3 repetitions, 8 executions per throughput figure."""
        values: dict[str, object] = {"reps": 3, "throughput_runs": 8}
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


class _Bench:
    """The state of one bench run: engine, pools, the open session and the floor."""

    def __init__(
        self,
        options: BenchOptions,
        engine: Engine,
        capacity: HostCapacity,
        scratch: Path,
        progress: Progress,
    ) -> None:
        self.options = options
        self.engine = engine
        self.scratch = scratch
        self.progress = progress
        self.key = PoolKey(image=options.image, limits=options.limits)
        self.python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
        self.pool = Pool.start(
            engine=engine,
            capacity=capacity,
            config=PoolConfig(size=options.pool_size),
            warm=[self.key],
        )
        self.cold = Pool(engine=engine, capacity=capacity, config=PoolConfig(size=0))
        self.floor = PersistentFloor(engine, image=options.image, limits=options.limits)
        self.session: Session | None = None
        self.live = LiveBench(lambda: self.open_session("buffered"))
        self.host_missing = _missing_host_modules(self.python)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        self.live.close()
        self.floor.close()
        self.pool.close()
        self.cold.close()

    def spec(self, output_dir: Path) -> SessionSpec:
        """The bench's sandbox configuration, artifacts to `output_dir`."""
        return SessionSpec(
            limits=self.options.limits, image=self.options.image, output_dir=output_dir
        )

    def open_session(self, name: str = "session") -> Session:
        self.pool.wait_warm(self.key, count=1)
        return self.pool.session(self.spec(self.scratch / name))

    def quiesce(self) -> None:
        """Let refills and removals finish, so the next sample runs on a quiet host."""
        self.pool.settle(self.key, timeout=60)
        deadline = time.monotonic() + 60
        while (self.pool.reaper.pending() or self.cold.reaper.pending()) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.01)

    def counted_cpu(self) -> dict[str, float] | None:
        """CPU seconds of the bench's containers, the engine and this process (`counted.py`)."""
        return self.engine.cpu_parts() if isinstance(self.engine, CountedEngine) else None

    def supported(self, mode: str, workload: Workload) -> bool:
        missing = set(workload.modules) & self.host_missing
        return not (mode == HOST and (workload.artifact or missing))

    def sample(self, mode: str, workload: Workload) -> float:
        """Seconds for the whole workload in one mode; a wrong answer raises."""
        started = time.perf_counter()
        outputs, leftovers = self._execute(mode, workload)
        elapsed = time.perf_counter() - started
        for container_id in leftovers:
            self.engine.remove(container_id)  # untimed: the engine removed it already
        if workload.expect not in outputs[-1]:
            raise SandboxBroken(f"bench: {mode} gave a wrong answer for {workload.name!r}")
        if workload.artifact and mode in (FLOOR, BASELINE) and "plot.png" not in outputs[-1]:
            raise SandboxBroken(f"bench: {mode} returned no artifact for {workload.name!r}")
        return elapsed

    def bare_container(self) -> float:
        """Seconds for one hardened `docker run --rm` of `true` (no Python at all)."""
        started = time.perf_counter()
        _, container_id = docker_run(
            self.engine,
            "",
            image=self.options.image,
            limits=self.options.limits,
            command=["true"],
        )
        elapsed = time.perf_counter() - started
        self.engine.remove(container_id)  # untimed: the engine removed it already
        return elapsed

    def _execute(self, mode: str, workload: Workload) -> tuple[list[str], list[str]]:
        """Run the workload; return the outputs and containers to forget afterwards."""
        if mode in (SESSION, SESSION_BUFFERED):
            self.session = self.session or self.open_session()
            session = self.session if mode == SESSION else self.live.buffered_session()
            return [_checked(session.run(step), workload) for step in workload.steps], []
        if mode == FLOOR:
            replies = [self.floor.run(step) for step in workload.steps]
            return [r["stdout"] + " ".join(r["files"]) for r in replies], []
        programs = workload.fresh_programs()
        if mode in (FRESH, POOLED):
            pool = self.pool if mode == POOLED else self.cold
            out = Path(mkdtemp(dir=self.scratch))  # each container's sink writes files anew
            return [_checked(pool.run_fresh(p, self.spec(out)), workload) for p in programs], []
        if mode == BASELINE:
            ran = [
                docker_run(self.engine, p, image=self.options.image, limits=self.options.limits)
                for p in programs
            ]
            return [text for text, _ in ran], [container_id for _, container_id in ran]
        return [host_floor(self.python, p) for p in programs], []


def _checked(result: ExecutionResult, workload: Workload) -> str:
    """The execution's stdout, refusing failed runs and missing artifacts."""
    if not result.ok:
        raise SandboxBroken(f"bench: {workload.name!r} failed in sbx: {result.notes or result}")
    if workload.artifact and not result.artifacts:
        raise SandboxBroken(f"bench: {workload.name!r} sent no artifact")
    return result.stdout


def _missing_host_modules(python: str) -> set[str]:
    """Which workload modules the host's python3 lacks (their host floor is n/a)."""
    wanted = sorted({m for w in WORKLOADS for m in w.modules})
    missing = set()
    for module in wanted:
        try:
            host_floor(python, f"import {module}")
        except Exception:
            missing.add(module)
    return missing


def measure_latency(bench: _Bench, report: BenchReport) -> None:
    """Every workload in every mode, interleaved, rotating the order each repetition."""
    options = bench.options
    samples: dict[str, dict[str, list[float]]] = {
        w.name: {m: [] for m in MODES} for w in options.workloads
    }
    for rep in range(options.reps + 1):
        bench.progress(f"latency: repetition {rep}/{options.reps}" if rep else "latency: warm-up")
        for index, workload in enumerate(options.workloads):
            shift = (rep + index) % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                if not bench.supported(mode, workload):
                    continue
                elapsed = bench.sample(mode, workload)
                bench.quiesce()
                if rep:
                    samples[workload.name][mode].append(elapsed)
        bench.live.sample_first_chunk(bench.session, report if rep else None)
    for workload_name, modes in samples.items():
        report.latency[workload_name] = {
            mode: (Summary.of(values) if values else None) for mode, values in modes.items()
        }


def measure_throughput(bench: _Bench, report: BenchReport) -> None:
    """Executions per second of `print(1)` at each concurrency level, modes interleaved.

    Each figure also gets the host's CPU time per execution: every process
    (engine, containers, this one), from just before the runs until the pool
    has refilled and removals have finished, so a pooled execution pays for
    the container that replaces it.
    """
    options = bench.options
    if bench.session is not None:  # its lease would count against the host cap at c=8
        bench.session.close()
        bench.session = None
    bench.live.close()
    for mode in THROUGHPUT_MODES:
        report.throughput[mode] = {}
        report.cpu_per_execution[mode] = {}
    for level in options.concurrency:
        for mode in THROUGHPUT_MODES:
            bench.progress(f"throughput: {mode} at concurrency {level}")
            bench.quiesce()
            busy_before = host_busy_seconds()
            runs, elapsed = _throughput(bench, mode, level)
            bench.quiesce()
            busy_after = host_busy_seconds()
            report.throughput[mode][level] = runs / elapsed
            if busy_before is not None and busy_after is not None:
                report.cpu_per_execution[mode][level] = (busy_after - busy_before) / runs


def _throughput(bench: _Bench, mode: str, level: int) -> tuple[int, float]:
    """Run the figure's executions; return how many ran and the seconds they took."""
    runs = bench.options.throughput_runs
    if mode == SESSION:
        sessions = [bench.open_session() for _ in range(level)]
        runs *= SESSION_THROUGHPUT_FACTOR
        try:
            started = time.perf_counter()
            with ThreadPoolExecutor(level) as workers:
                list(
                    workers.map(
                        lambda i: _checked(sessions[i % level].run("print(1)"), PRINT_ONE),
                        range(runs),
                    )
                )
            elapsed = time.perf_counter() - started
        finally:
            for session in sessions:
                session.close()
        return runs, elapsed
    if mode == BURST:  # as many executions as there are warm containers, from a full pool
        runs, mode = bench.options.pool_size, POOLED
    one = bench.bare_container if mode == BARE else lambda: bench.sample(mode, PRINT_ONE)
    started = time.perf_counter()
    with ThreadPoolExecutor(level) as workers:
        list(workers.map(lambda _: one(), range(runs)))
    return runs, time.perf_counter() - started


def run_bench(
    options: BenchOptions,
    *,
    engine: Engine | None = None,
    capacity: HostCapacity | None = None,
    progress: Progress = lambda _: None,
) -> BenchReport:
    """Measure everything in one run and return the report."""
    engine = engine or CountedEngine.open()
    engine.require_image(options.image)
    capacity = capacity or HostCapacity.from_env()
    report = BenchReport()
    report.environment = _environment(engine, options, capacity, "load_before")
    with TemporaryDirectory(prefix="sbx-bench-") as scratch:
        bench = _Bench(options, engine, capacity, Path(scratch), progress)
        try:
            progress("warming the pool")
            bench.pool.wait_warm(bench.key, timeout=120)
            time.sleep(1.0)
            report.idle_memory = idle_memory_mib(engine, bench.pool.idle_container_ids(bench.key))
            measure_latency(bench, report)
            measure_first_question(bench, report, options.reps)
            measure_throughput(bench, report)
        finally:
            bench.close()
            if isinstance(engine, CountedEngine):
                engine.forget_parent()
    report.environment["load_after"] = _load()
    report.notes += _notes(options, capacity) + _engine_ceiling(report)
    report.environment["host_floor_missing"] = sorted(bench.host_missing)
    evaluate_targets(report)
    return report


def _notes(options: BenchOptions, capacity: HostCapacity) -> list[str]:
    """Caveats printed under the tables."""
    notes = [
        "latency samples are single executions, each after refills and removals finished "
        "(caches cold, as between an agent's model calls); a tight loop is faster",
        f"throughput: {options.throughput_runs} runs per figure with {options.pool_size} warm "
        "containers, so pooled figures are sustained (bounded by the engine's create rate); "
        f"'burst' runs {options.pool_size} from a full pool",
    ]
    per_cpu = capacity.caps.cpus / options.limits.cpus
    if per_cpu < max(options.concurrency) + options.pool_size:
        notes.append(
            f"the host cap allows {per_cpu:g} sandboxes of {options.limits.cpus:g} CPU "
            f"({capacity.caps.cpus:g} CPUs, SBX_MAX_CPUS): at the highest concurrency plus "
            "the pool, sbx waits in the host queue while docker run does not"
        )
    return notes


def _engine_ceiling(report: BenchReport) -> list[str]:
    """What the engine's own cost per container allows a never-reused pool, at c=4."""
    cpu = report.cpu_per_execution
    bare, baseline = cpu.get(BARE, {}).get(4), cpu.get(BASELINE, {}).get(4)
    if not bare or not baseline:
        return []
    return [
        f"engine floor: a bare hardened container (`true`) costs the host {bare * 1000:.0f} ms "
        f"of CPU, docker run of print(1) {baseline * 1000:.0f} ms; every pooled execution "
        "consumes a container, so on a CPU-bound host sustained pooled throughput is at most "
        f"{baseline / bare:.2g}x docker run's"
    ]


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _environment(
    engine: Engine, options: BenchOptions, capacity: HostCapacity, load_key: str
) -> dict[str, object]:
    version = engine.api.version()
    image = engine.require_image(options.image)
    return {
        "cores": os.cpu_count(),
        "engine": version.get("Version"),
        "image": options.image,
        "image_id": str(image.get("Id", ""))[7:19],
        "limits": options.limits.model_dump(mode="json"),
        "host_caps": capacity.caps.describe(),
        "pool_size": options.pool_size,
        "reps": options.reps,
        "throughput_runs": options.throughput_runs,
        load_key: _load(),
    }
