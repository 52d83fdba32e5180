"""`sbx bench`: the arithmetic, the report's shape, and one tiny real run (no timing asserts)."""

from __future__ import annotations

import json
import os

import click
import pytest
from click.testing import CliRunner

from conftest import TEST_IMAGE
from sbx.agent.bench import gate as bench_gate
from sbx.agent.cli import bench as cli_bench
from sbx.sandbox.bench.live import FIRST_CHUNK, SESSION_BUFFERED
from sbx.sandbox.bench.render import render
from sbx.sandbox.bench.run import BenchOptions, _engine_ceiling, host_busy_seconds, run_bench
from sbx.sandbox.bench.stats import BenchReport, Summary, ratio
from sbx.sandbox.bench.targets import (
    BARE,
    BASELINE,
    BURST,
    FLOOR,
    HOST,
    MODES,
    POOLED,
    SESSION,
    THROUGHPUT_MODES,
    evaluate_targets,
)
from sbx.sandbox.bench.workloads import (
    FIRST_QUESTION,
    PNG_ARTIFACT,
    PRINT_ONE,
    STATEFUL_PAIR,
    STDOUT_1MIB,
)
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.host_caps import HostCaps


def test_summary_uses_the_median_and_the_nearest_rank_p90() -> None:
    summary = Summary.of([float(x) for x in range(1, 11)])
    assert (summary.samples, summary.median_s, summary.p90_s) == (10, 5.5, 9.0)
    assert Summary.of([2.0]).p90_s == 2.0
    with pytest.raises(ValueError, match="^no samples$"):
        Summary.of([])
    assert ratio(1.0, 4.0) == 0.25 and ratio(None, 1.0) is None and ratio(1.0, 0.0) is None


def test_stateless_modes_resend_the_earlier_steps() -> None:
    assert STATEFUL_PAIR.fresh_programs() == ["x = 41", "x = 41\nprint(x + 1)"]
    assert PRINT_ONE.fresh_programs() == ["print(1)"]


def synthetic_report() -> BenchReport:
    report = BenchReport(environment={"cores": 2, "reps": 3})
    cells = {HOST: 0.02, FLOOR: 0.001, BASELINE: 0.3, "sbx fresh": 0.3, POOLED: 0.003}
    report.latency[PRINT_ONE.name] = {mode: Summary.of([value]) for mode, value in cells.items()}
    report.latency[PRINT_ONE.name][SESSION] = Summary.of([0.0012])
    report.latency[STATEFUL_PAIR.name] = dict.fromkeys(MODES)
    report.latency[STDOUT_1MIB.name] = {
        SESSION: Summary.of([0.024]), SESSION_BUFFERED: Summary.of([0.02])
    }
    report.live = {FIRST_CHUNK: Summary.of([0.004])}
    report.throughput = {BASELINE: {4: 5.0}, POOLED: {4: 11.0}, BURST: {4: 40.0}}
    report.cpu_per_execution = {BARE: {4: 0.25}, BASELINE: {4: 0.3125}, POOLED: {4: 0.375}}
    report.idle_memory = {
        "cgroup_usage": 90.0, "cgroup_anon_rss": 83.0, "rss_sum": 225.0, "pss_sum": 140.0
    }
    return report


def test_targets_are_ratios_of_this_runs_numbers() -> None:
    report = synthetic_report()
    evaluate_targets(report)
    met = {target.name.strip(): target.met for target in report.targets}
    assert met["session print(1) vs persistent floor"] is True  # 1.2x
    assert met["pooled fresh print(1) vs docker run"] is True  # 0.01x
    assert met["pooled fresh throughput at c=4 vs docker run"] is True  # 2.2x
    assert met["1 MiB stdout, streamed vs buffered session"] is False  # 1.2x
    assert met["first live chunk vs session print(1), medians"] is True  # 3.33x
    memory = next(t for t in report.targets if "anonymous memory" in t.name)
    assert memory.met is True and memory.measured == "83.0 MiB (rss_sum 225.0, pss_sum 140.0)"
    assert met["first question, 10 MB CSV: pooled vs docker run"] is None  # not measured


def test_first_question_targets_compare_the_pool_with_docker_run_and_a_warm_session() -> None:
    report = synthetic_report()
    cells = {BASELINE: 1.5, "sbx fresh": 1.4, POOLED: 0.6, SESSION: 0.2}
    report.latency[FIRST_QUESTION] = {mode: Summary.of([value]) for mode, value in cells.items()}
    evaluate_targets(report)
    found = {target.name.strip(): target for target in report.targets}
    versus_run = found["first question, 10 MB CSV: pooled vs docker run"]
    assert (versus_run.measured, versus_run.met) == ("0.4x", False)
    versus_session = found["same, vs an already-warm session"]
    assert (versus_session.measured, versus_session.met) == ("3x", False)


def test_the_report_renders_as_tables_and_as_json() -> None:
    report = synthetic_report()
    evaluate_targets(report)
    text = render(report)
    assert "Latency per workload" in text and "Throughput of print(1)" in text
    assert "1.00 / 1.00" in text  # the floor's print(1) in ms
    assert "n/a" in text and "Targets:" in text
    data = json.loads(json.dumps(report.as_json()))
    assert data["latency"][PRINT_ONE.name][SESSION]["median_ms"] == 1.2
    assert data["throughput_per_s"][POOLED]["4"] == 11.0
    assert "Host CPU per execution" in text and "312" in text
    assert "Live output, first output chunk: 4.00 ms median" in text
    assert data["live"][FIRST_CHUNK]["median_ms"] == 4.0
    assert data["host_cpu_ms_per_execution"][POOLED]["4"] == 375.0


def test_the_engine_floor_bounds_what_a_single_use_pool_can_sustain() -> None:
    (note,) = _engine_ceiling(synthetic_report())
    assert "250 ms" in note and "312 ms" in note and "at most 1.2x" in note
    assert _engine_ceiling(BenchReport()) == []


def test_host_busy_seconds_counts_every_state_but_idle_and_steal(tmp_path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks
    stat.write_text("cpu  100 20 30 5000 400 5 5 700 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    ticks = os.sysconf("SC_CLK_TCK")
    assert host_busy_seconds(stat) == pytest.approx(160 / ticks)
    assert host_busy_seconds(tmp_path / "missing") is None


def test_gate_overhead_is_measured_through_the_real_gate(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SBX_AUDIT_LOG", raising=False)
    figures = bench_gate.measure_gate(samples=5)
    assert figures["gate_call"].samples == 5 and figures["audit_append"].median_s > 0
    assert list(tmp_path.iterdir()) == []  # the scratch audit log is gone


def test_gate_concurrency_runs_callers_at_once_through_the_real_gate(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SBX_AUDIT_LOG", raising=False)
    report = BenchReport()
    bench_gate.add_gate_concurrency(report, calls=3)
    assert set(report.gate["concurrency"]) == {"1", "4", "16"}
    assert report.gate["concurrency"]["16"]["samples"] == 16 * 3 * 3  # callers x calls x rounds
    assert report.gate["concurrency"]["1"]["appends_per_fsync"] == 1.0  # nobody to share with
    (target,) = report.targets
    assert target.name == "gate + audit per call at 16 callers vs 1" and target.met is not None
    assert "c=16" in render(report)
    assert list(tmp_path.iterdir()) == []  # the scratch audit log is gone


def test_bench_refuses_out_of_range_options_before_measuring_anything() -> None:
    group = click.Group("sbx")
    cli_bench.register(group)
    for args, flag in ((["--reps", "0"], "--reps"), (["--runs", "0"], "--runs"),
                       (["--pool-size", "65"], "--pool-size")):
        done = CliRunner().invoke(group, ["bench", *args])
        assert done.exit_code == 2, done.output  # a usage error, not a run
        assert f"Invalid value for '{flag}'" in done.output


@pytest.mark.docker
def test_a_tiny_real_run_fills_every_cell_and_leaves_nothing(engine, tmp_path) -> None:
    caps = HostCaps(sandboxes=16, memory=16 << 30, cpus=32.0)
    capacity = HostCapacity(directory=tmp_path / "ledger", caps=caps)
    options = BenchOptions(
        reps=1,
        throughput_runs=2,
        concurrency=(2,),
        pool_size=1,
        image=TEST_IMAGE,
        workloads=(PRINT_ONE, STATEFUL_PAIR, PNG_ARTIFACT),  # artifacts: each run a new dir (C22)
    )
    report = run_bench(options, engine=engine, capacity=capacity)
    for mode in MODES:
        assert report.latency[PRINT_ONE.name][mode] is not None, mode
    assert report.live[FIRST_CHUNK].samples == 1
    assert set(report.throughput) == set(THROUGHPUT_MODES)
    assert all(value > 0 for levels in report.throughput.values() for value in levels.values())
    cpu = report.cpu_per_execution
    assert set(cpu) == set(THROUGHPUT_MODES) and all(2 in levels for levels in cpu.values())
    # A fresh container costs the engine far more CPU than a session execution does.
    assert cpu[BASELINE][2] > cpu[SESSION][2] > 0
    assert report.idle_memory["cgroup_usage"] > 0
    assert len(report.targets) == 9
    first = report.latency[FIRST_QUESTION]
    assert all(first[mode] is not None for mode in (BASELINE, "sbx fresh", POOLED, SESSION))
    assert any("hard-linked" in note or "copied" in note for note in report.notes)
    assert report.idle_memory["cgroup_anon_rss"] > 0
    assert capacity.usage().sandboxes == 0
    ours = [c for c in engine.managed_containers() if c["Labels"].get("sbx.owner") == owner_tag()]
    assert ours == []
