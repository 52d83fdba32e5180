"""`sbx bench`: measure sandboxed execution against its floors and `docker run`, in one run.

The sandbox figures come from `sbx.sandbox.bench`, the gate's from
`sbx.agent.bench.gate`, the service's and the restore's from the other
harnesses of `sbx.agent.bench`; this module only parses options and renders.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from sbx.agent.bench.every import PARTS, Parts, add_parts, serve_ok
from sbx.agent.bench.gate import GateRefused, add_gate, add_gate_concurrency
from sbx.agent.bench.restore import run_restore_bench
from sbx.agent.bench.serve import run_serve_bench
from sbx.agent.bench.serve_options import (
    DEFAULT_LEVELS,
    MAX_LEVEL,
    ServeBenchError,
    ServeBenchOptions,
    parse_levels,
)
from sbx.agent.cli.errors import fail, operator_errors
from sbx.sandbox.bench import ds1000
from sbx.sandbox.bench.ds1000_hints import measure_hints
from sbx.sandbox.bench.render import render
from sbx.sandbox.bench.run import BenchOptions, run_bench
from sbx.sandbox.config import DEFAULT_IMAGE


class LevelsType(click.ParamType[tuple[int, ...]]):
    """`--levels 1,8,32`: the harness's own rule (`parse_levels`), refused as a usage error."""

    name = "levels"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[int, ...]:
        """The ascending distinct levels, or a one-line usage error."""
        if isinstance(value, tuple):
            return value
        try:
            return parse_levels(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.group("bench", invoke_without_command=True)
@click.option("--quick", is_flag=True, help="A short run: 3 repetitions, 8 runs per throughput.")
@click.option("--reps", type=click.IntRange(1, 1000), help="Timed repetitions per latency cell.")
@click.option("--runs", type=click.IntRange(1, 10_000), help="Executions per throughput figure.")
@click.option(
    "--pool-size",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Warm containers kept during the bench.",
)
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--serve-levels", type=LevelsType(), default="1,32", show_default=True,
              help="The service part's levels (conversations at once), as `sbx bench serve`.")
@click.option("--skip", type=click.Choice(PARTS), multiple=True,
              help="Leave out a part (its targets then say so): serve, restore.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
@operator_errors
def bench_command(
    ctx: click.Context, quick: bool, reps: int | None, runs: int | None, pool_size: int,
    image: str, serve_levels: tuple[int, ...], skip: tuple[str, ...], as_json: bool,
) -> None:
    """Measure sbx against its floors and a hardened `docker run`, interleaved in one run.

    \b
    Prints medians and p90 per workload and mode, the ratios to the floor and
    to the baseline, throughput at concurrency 1/4/8, an idle pooled
    container's memory, the gate's overhead, and which targets are met.
    Then, as parts of the same run, the service's bench (`sbx bench serve` at
    --serve-levels) and the restore's (`sbx bench restore` without its idle
    memory), so the report carries every target of the speed users feel
    with its figure; --skip leaves a part out. Respects the host caps
    (SBX_MAX_SANDBOXES, SBX_MAX_MEMORY, SBX_MAX_CPUS; raise them for 32 at
    once, see `sbx bench serve --help`). `sbx bench ds1000 PROBLEMS.jsonl`
    measures the image's data stack instead.
    """
    if ctx.invoked_subcommand is not None:
        return
    overrides: dict[str, Any] = {"pool_size": pool_size, "image": image}
    if reps is not None:
        overrides["reps"] = reps
    if runs is not None:
        overrides["throughput_runs"] = runs
    options = BenchOptions.quick(**overrides) if quick else BenchOptions(**overrides)

    def progress(message: str) -> None:
        click.echo(f"sbx bench: {message}", err=True)

    report = run_bench(options, progress=progress)
    try:
        progress("gate and audit overhead")
        add_gate(report, samples=max(50, options.reps * 20))
        progress("gate and audit at 1, 4 and 16 callers")
        add_gate_concurrency(report, calls=max(20, options.reps * 4))
    except GateRefused as refused:
        fail(str(refused))
    parts = Parts(
        serve=None if "serve" in skip else ServeBenchOptions(
            levels=serve_levels, questions=2 if quick else 3, rounds=1 if quick else 2,
            image=image),
        restore_rounds=0 if "restore" in skip else 1 if quick else 3, image=image)
    try:
        texts = add_parts(report, parts, progress)
    except ServeBenchError as exc:
        fail(f"bench serve part: {exc}")
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        click.echo("\n\n".join([*texts, render(report)]))
    sys.stdout.flush()
    if not serve_ok(report):
        sys.exit(1)


@bench_command.command("ds1000")
@click.argument("problems", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--limit", type=click.IntRange(1), help="Run only the first N problems.")
@click.option("--id", "ids", type=click.IntRange(0), multiple=True, help="Run this problem id.")
@click.option("--jobs", type=click.IntRange(1, 8), default=1, show_default=True,
              help="Programs run at once (each in its own container).")
@click.option("--hints", is_flag=True,
              help="Also match each failure to a removed-API hint and re-run it with the "
                   "hint applied (images/removed_apis.toml).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@operator_errors
def ds1000_command(
    problems: Path, image: str, limit: int | None, ids: tuple[int, ...], jobs: int,
    hints: bool, as_json: bool,
) -> None:
    """Run DS-1000's reference solutions in fresh sandboxes: what the image's stack still runs.

    \b
    PROBLEMS is a DS-1000 JSONL file (code_context, reference_code, metadata);
    nothing is downloaded. Prints passed per library, failures by exception
    type, and the failing problem ids. Default limits, as `sbx exec`.
    """
    chosen = ds1000.load_problems(problems, limit=limit, only=frozenset(ids))
    if not chosen:
        raise click.ClickException(f"no problems to run in {problems}")
    report = ds1000.run_ds1000(
        chosen, image=image, jobs=jobs,
        progress=lambda message: click.echo(f"sbx bench ds1000: {message}", err=True),
    )
    hinted = measure_hints(report, chosen, image=image, jobs=jobs) if hints else None
    if as_json:
        data = report.as_json()
        if hinted is not None:
            data["hints"] = hinted.as_json()
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(ds1000.render(report))
    if hinted is not None:
        click.echo("\n" + hinted.render())


def ds1000_with_hints(problems: Path, *, image: str, jobs: int,
                      progress: Callable[[str], None]) -> str:
    """`sbx bench ds1000 PROBLEMS --hints` on `image`, rendered (`sbx packages add` runs it)."""
    chosen = ds1000.load_problems(problems)
    report = ds1000.run_ds1000(chosen, image=image, jobs=jobs, progress=progress)
    hinted = measure_hints(report, chosen, image=image, jobs=jobs)
    return ds1000.render(report) + "\n\n" + hinted.render()


@bench_command.command("serve")
@click.option("--levels", type=LevelsType(), default=None,
              help="Conversations at once, one level after another: up to 5 levels of "
                   "1-64, comma-separated.  [default: 1,8,32]")
@click.option("--conversations", type=click.IntRange(1, MAX_LEVEL),
              help="Shorthand for a single level (--levels N).")
@click.option("--questions", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Questions per conversation, asked in turn.")
@click.option("--rounds", type=click.IntRange(1, 10), default=2, show_default=True,
              help="Each round runs the service and the in-process core per level; "
                   "the order alternates.")
@click.option("--unannounced", is_flag=True,
              help="Open each conversation and ask at once, so the pools see the burst only "
                   "as it arrives (default: conversations are opened first and asked once "
                   "the pools warmed for them).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Run the server as `sbx serve --workers N` (its workers' CPU counted).")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@operator_errors
def serve_bench_command(levels: tuple[int, ...] | None, conversations: int | None,
                        questions: int, rounds: int, unannounced: bool, workers: int, image: str,
                        as_json: bool) -> None:
    """Measure what `sbx serve` adds over the in-process core, at 1, 8 and 32 at once.

    \b
    Runs the same concurrent conversations with the scripted model against a
    real `sbx serve` on 127.0.0.1 and through the core in this process,
    interleaved, both with the same demand-sized warm pool. Each phase's
    conversations are opened first and asked once the pools warmed for them
    (open conversations are the service's sign of demand coming);
    --unannounced asks as each opens. Prints per level
    p50/p90/p99 latency per question of each and the difference, the p99 at
    the highest level over the lowest, CPU per question and per new
    conversation, the pool's hits and misses; then events lost (0),
    containers left (0), and whether the audit logs verify; exits 1 when one
    of those fails.

    The host caps bound what "at once" means: on 2 cores the default
    SBX_MAX_CPUS holds eight 1-CPU sandboxes, so the rest queue. To measure 32
    at once:

    \b
      SBX_MAX_CPUS=120 SBX_MAX_SANDBOXES=120 SBX_MAX_MEMORY=64g sbx bench serve
    """
    if levels is not None and conversations is not None:
        raise click.UsageError("give --levels or --conversations, not both")
    chosen = (conversations,) if conversations is not None else levels or DEFAULT_LEVELS
    options = ServeBenchOptions(levels=chosen, questions=questions, rounds=rounds, image=image,
                                announced=not unannounced, workers=workers)
    try:
        report = run_serve_bench(
            options, progress=lambda message: click.echo(f"sbx bench serve: {message}", err=True))
    except ServeBenchError as exc:
        fail(f"bench serve: {exc}")
    click.echo(json.dumps(report.as_json(), indent=2) if as_json else report.render())
    if not report.ok:
        sys.exit(1)


@bench_command.command("restore")
@click.option("--cells", type=click.IntRange(1, 100), default=10, show_default=True,
              help="Executions that build the state a restore replays.")
@click.option("--rounds", type=click.IntRange(1, 20), default=3, show_default=True,
              help="Times each of live, snapshot, replay and cold is measured (medians shown).")
@click.option("--idle", type=click.IntRange(0, 500), default=100, show_default=True,
              help="Idle conversations whose memory is measured held, then released (0: skip).")
@click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@operator_errors
def restore_bench_command(cells: int, rounds: int, idle: int, image: str, as_json: bool) -> None:
    """Measure restore: first answer live, from a snapshot, by replay, cold; idle memory.

    \b
    With the scripted model and the real sandbox: the time to the first answer
    of a question that uses `--cells` executions' state (a DataFrame, a model
    fit, a chart) in a live session, after an idle release and a restore from
    its snapshot, after a full replay, and as a cold start without restore, with
    the snapshot restore's two targets (name, limit, measured, met); then the
    memory `--idle` conversations with the data stack hold with their
    sandboxes kept, and after the idle release.
    """
    report = run_restore_bench(
        image=image, cells_count=cells, rounds=rounds, idle=idle,
        progress=lambda message: click.echo(f"sbx bench restore: {message}", err=True))
    click.echo(json.dumps(report.as_json(), indent=2) if as_json else report.render())


def register(cli: click.Group) -> None:
    """Add `sbx bench` to the `sbx` group."""
    cli.add_command(bench_command)
