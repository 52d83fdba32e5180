"""`sbx bench`: a new conversation's first question with data, the way users start.

The program imports pandas, reads a 10 MB CSV given as data and prints its
row count. It is measured, interleaved (the order of the modes rotates every
repetition) and after the pool has refilled, in four modes:

    docker run          a hardened `docker run --rm` with the CSV bind-mounted: the baseline
    sbx fresh           a new conversation served by a created container (bind mounts)
    sbx fresh (pool)    a new conversation served by a warm container, the CSV delivered
                        into its `/data` directory (linked, or copied across filesystems)
    sbx session         the same program again in an already-warm session holding the CSV

Each sample times everything a caller waits for: taking or creating the
container, delivering the data, the execution; the removal afterwards is off
the caller's path (except for `docker run`, which waits for it like `--rm`).
The pooled figure is compared with the baseline and with the warm session
(`sandbox/bench/targets.py`). Each sample also notes the CPU used from its start
until refills and removals finished: a pooled new conversation pays for the
warm container that replaces it, `docker run` for its own container (`felt.py`:
the pooled new conversation against a `docker run` of the same program). Two
readings: the host's busy CPU, and the CPU of the bench's own containers, the
engine's daemons and the bench's process (`counted.py`), which other work on
a shared host does not reach (the target uses it when it could be read).
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from sbx.sandbox.bench.floor import docker_run
from sbx.sandbox.bench.host import host_busy_seconds
from sbx.sandbox.bench.stats import BenchReport, Summary
from sbx.sandbox.bench.targets import BASELINE, FRESH, POOLED, SESSION
from sbx.sandbox.bench.workloads import FIRST_QUESTION
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.files import data_mounts
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

WORKLOAD = FIRST_QUESTION
CSV_NAME = "sales.csv"
CSV_ROWS = 490_000
"""Rows of the generated CSV: about 10 MB."""
PROGRAM = (
    f"import pandas as pd\nframe = pd.read_csv('/data/{CSV_NAME}')\nprint('rows', len(frame))\n"
)
EXPECT = f"rows {CSV_ROWS}"
MODES = (BASELINE, FRESH, POOLED, SESSION)


class _Options(Protocol):
    @property
    def limits(self) -> Limits: ...

    @property
    def image(self) -> str: ...


class _Bench(Protocol):
    """What this measurement needs of the bench run (`sandbox.bench.run._Bench`)."""

    engine: Engine
    pool: Pool
    cold: Pool
    scratch: Path
    progress: Callable[[str], None]

    @property
    def options(self) -> _Options: ...

    def quiesce(self) -> None: ...

    def counted_cpu(self) -> dict[str, float] | None: ...


def write_csv(directory: Path, rows: int = CSV_ROWS) -> Path:
    """A CSV of `rows` sales rows (about 25 bytes each), readable by the sandbox's uid."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CSV_NAME
    regions = ("north", "south", "east", "west")
    with path.open("w") as handle:
        handle.write("id,region,amount,units\n")
        handle.writelines(
            f"{i},{regions[i % 4]},{(i * 7919) % 100_000 / 100:.2f},{i % 13}\n" for i in range(rows)
        )
    path.chmod(0o644)
    directory.chmod(0o755)
    return path


def measure_first_question(bench: _Bench, report: BenchReport, reps: int) -> None:
    """Every mode `reps` times after one untimed round; into `report.latency[WORKLOAD]`."""
    csv = write_csv(bench.scratch / "data")
    samples: dict[str, list[float]] = {mode: [] for mode in MODES}
    cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
    counted: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    limits, image = bench.options.limits, bench.options.image
    session = bench.pool.session(
        SessionSpec(limits=limits, image=image, data=(csv,), output_dir=bench.scratch / "warm")
    )
    try:
        _checked(session.run(PROGRAM))  # the warm session has run it once already
        for rep in range(reps + 1):
            bench.progress(f"first question with data: repetition {rep}/{reps}")
            shift = rep % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                busy, own = host_busy_seconds(), bench.counted_cpu()
                elapsed = _sample(bench, mode, csv, session)
                bench.quiesce()
                after, own_after = host_busy_seconds(), bench.counted_cpu()
                if rep:
                    samples[mode].append(elapsed)
                    if busy is not None and after is not None:
                        cpu[mode].append(after - busy)
                    if own is not None and own_after is not None:
                        counted[mode].append({part: own_after[part] - own[part] for part in own})
    finally:
        session.close()
    report.latency[WORKLOAD] = {mode: Summary.of(values) for mode, values in samples.items()}
    report.first_question_cpu = {mode: statistics.median(v) for mode, v in cpu.items() if v}
    report.first_question_counted_cpu = {
        mode: statistics.median(sum(sample.values()) for sample in v)
        for mode, v in counted.items() if v}
    report.first_question_cpu_parts = {
        mode: {part: statistics.median(sample[part] for sample in v) for part in v[0]}
        for mode, v in counted.items() if v}
    report.notes.append(_delivery_note(bench, csv))


def _sample(bench: _Bench, mode: str, csv: Path, session: Session) -> float:
    """Seconds for one first question in one mode; a wrong answer raises."""
    started = time.perf_counter()
    if mode == SESSION:
        text = _checked(session.run(PROGRAM))
    elif mode == BASELINE:
        text, container_id = docker_run(
            bench.engine,
            PROGRAM,
            image=bench.options.image,
            limits=bench.options.limits,
            data=data_mounts([csv]),
        )
    else:
        pool = bench.pool if mode == POOLED else bench.cold
        result = pool.run_fresh(
            PROGRAM,
            SessionSpec(
                limits=bench.options.limits,
                image=bench.options.image,
                data=(csv,),
                output_dir=bench.scratch / "fresh",
            ),
        )
        text = _checked(result)
    elapsed = time.perf_counter() - started
    if mode == BASELINE:
        bench.engine.remove(container_id)  # untimed: the engine removed it already
    if EXPECT not in text:
        raise SandboxBroken(f"bench: {mode} gave a wrong answer for {WORKLOAD!r}: {text[:200]!r}")
    return elapsed


def _checked(result: ExecutionResult) -> str:
    if not result.ok:
        raise SandboxBroken(f"bench: {WORKLOAD!r} failed in sbx: {result.notes or result}")
    return result.stdout


def _delivery_note(bench: _Bench, csv: Path) -> str:
    """How the CSV reached the warm containers: linked (same filesystem) or copied."""
    stats = bench.pool.snapshot()
    root = bench.pool.data_root
    try:
        linked = os.stat(root).st_dev == os.stat(csv).st_dev
    except OSError:
        linked = False
    how = "hard-linked (same filesystem)" if linked else "copied (another filesystem)"
    return (
        f"first question: the CSV was {how} into warm containers' /data ({root}); "
        f"{stats.data_delivered} runs with data served warm, {stats.data_cold} past the bounds"
    )
