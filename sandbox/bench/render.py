"""The `sbx bench` report as plain-text tables (the JSON form is `BenchReport.as_json`)."""

from __future__ import annotations

from sbx.sandbox.bench.felt import render_felt
from sbx.sandbox.bench.stats import BenchReport, ratio

SBX_MODES = ("sbx fresh", "sbx fresh (pool)", "sbx session", "sbx session (buffered)")
FLOOR = "persistent floor"
BASELINE = "docker run"


def _cell(report: BenchReport, workload: str, mode: str) -> str:
    summary = report.latency.get(workload, {}).get(mode)
    if summary is None:
        return "n/a"
    return f"{_ms(summary.median_s)} / {_ms(summary.p90_s)}"


def _ms(seconds: float) -> str:
    value = seconds * 1000
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(text.ljust(widths[i]) for i, text in enumerate(header)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    lines.extend("  ".join(t.ljust(widths[i]) for i, t in enumerate(row)).rstrip() for row in rows)
    return lines


def latency_table(report: BenchReport) -> list[str]:
    """Median / p90 in ms for every workload and mode."""
    workloads = list(report.latency)
    modes = list(next(iter(report.latency.values()), {}))
    rows = [[mode, *(_cell(report, w, mode) for w in workloads)] for mode in modes]
    return ["Latency per workload, ms (median / p90):", *_grid(["mode", *workloads], rows)]


def ratio_table(report: BenchReport) -> list[str]:
    """Each sbx median as a multiple of the persistent floor and of `docker run`."""
    workloads = list(report.latency)
    rows = []
    for mode in SBX_MODES:
        cells = []
        for workload in workloads:
            value = report.median(workload, mode)
            floor = ratio(value, report.median(workload, FLOOR))
            base = ratio(value, report.median(workload, BASELINE))
            cells.append(f"{_x(floor)} / {_x(base)}")
        rows.append([mode, *cells])
    title = "Ratios of medians (x persistent floor / x docker run):"
    return [title, *_grid(["mode", *workloads], rows)]


def _x(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}x"


def throughput_table(report: BenchReport) -> list[str]:
    """Executions per second of `print(1)` at each concurrency, and host CPU per execution."""
    levels = sorted({level for values in report.throughput.values() for level in values})
    header = ["mode", *(f"c={level}" for level in levels)]
    lines = ["Throughput of print(1), executions/s:"]
    lines += _grid(header, _level_rows(report.throughput, levels, ".1f"))
    if any(report.cpu_per_execution.values()):
        ms = {
            mode: {level: seconds * 1000 for level, seconds in values.items()}
            for mode, values in report.cpu_per_execution.items()
        }
        lines += ["", "Host CPU per execution, ms (every process: engine, containers, sbx):"]
        lines += _grid(header, _level_rows(ms, levels, ".3g"))
    return lines


def _level_rows(
    table: dict[str, dict[int, float]], levels: list[int], spec: str
) -> list[list[str]]:
    return [
        [mode, *(format(values[level], spec) if level in values else "n/a" for level in levels)]
        for mode, values in table.items()
    ]


def render(report: BenchReport) -> str:
    """The whole report as text."""
    env = report.environment
    lines = [
        f"sbx bench: {env.get('cores')} cores, engine {env.get('engine')}, image "
        f"{env.get('image')} ({env.get('image_id')}), {env.get('reps')} reps, "
        f"load {env.get('load_before')} -> {env.get('load_after')}",
        f"host caps: {env.get('host_caps')}; pool size {env.get('pool_size')}",
        "",
        *latency_table(report),
        "",
        *ratio_table(report),
        "",
        *throughput_table(report),
        "",
        "Idle pooled container, MiB: "
        + (", ".join(f"{k} {v:.1f}" for k, v in report.idle_memory.items()) or "n/a"),
    ]
    for name, summary in report.live.items():
        lines.append(f"Live output, {name}: {_ms(summary.median_s)} ms median "
                     f"(p90 {_ms(summary.p90_s)}), from the print to the host's callback")
    if report.gate:
        lines.append(f"Gate + audit per tool call: {report.gate.get('summary', 'n/a')}")
    if "concurrency_summary" in report.gate:
        lines.append(f"Gate + audit, concurrent callers: {report.gate['concurrency_summary']}")
    lines += ["", "Targets:"]
    lines += _grid(
        ["target", "limit", "measured", "met"],
        [
            [t.name, t.limit, t.measured, {True: "yes", False: "NO", None: "n/a"}[t.met]]
            for t in report.targets
        ],
    )
    if report.first_question_cpu:
        lines.append("Host CPU per first question with the CSV, ms (refill included): " + ", ".join(
            f"{mode} {seconds * 1000:.0f}" for mode, seconds in report.first_question_cpu.items()))
    if report.first_question_cpu_parts:
        lines.append("The same, the bench's containers + the engine's daemons + the bench, ms: "
                     + ", ".join(f"{mode} " + " + ".join(f"{v * 1000:.0f}" for v in parts.values())
                                 for mode, parts in report.first_question_cpu_parts.items()))
    lines += ["", *render_felt(report.felt)]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)
