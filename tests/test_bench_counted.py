"""The CPU a bench sample costs, counted from its own containers and the engine, not the host."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.bench.counted import CountedEngine, daemon_cpu_seconds
from sbx.sandbox.bench.floor import docker_run
from sbx.sandbox.bench.render import render
from sbx.sandbox.bench.stats import BenchReport, Summary
from sbx.sandbox.bench.targets import BASELINE, POOLED, evaluate_targets
from sbx.sandbox.bench.workloads import FIRST_QUESTION
from sbx.sandbox.limits import Limits

SPIN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"
"""About 0.3 s of CPU in the container."""


@pytest.mark.docker
def test_a_removed_containers_cpu_stays_counted_under_the_benchs_parent() -> None:
    engine = CountedEngine.open()
    engine.parent = f"{engine.parent}-test"
    engine.require_image(TEST_IMAGE)
    try:
        before = engine.containers_cpu_seconds() or 0.0
        whole_before = engine.cpu_seconds() or 0.0
        text, container_id = docker_run(engine, SPIN + "print('spun')", image=TEST_IMAGE,
                                        limits=Limits())
        engine.remove(container_id)
        assert text.strip() == "spun"
        used = engine.containers_cpu_seconds()
        assert used is not None and used - before >= 0.3  # after the engine removed it
        whole, parts = engine.cpu_seconds(), engine.cpu_parts()
        assert whole is not None and whole - whole_before >= used - before
        assert parts is not None and set(parts) == {"containers", "engine", "bench"}
    finally:
        engine.forget_parent()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{engine.parent.lstrip('/')}"))


def test_the_parents_counter_is_read_under_cgroup_v1_or_v2(tmp_path: Path) -> None:
    engine = CountedEngine.__new__(CountedEngine)  # no engine needed to read a counter
    engine.parent, engine.cgroups = "/sbx-bench-1", tmp_path
    assert engine.containers_cpu_seconds() is None and engine.cpu_seconds() is None
    (tmp_path / "sbx-bench-1").mkdir()
    (tmp_path / "sbx-bench-1" / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 1\n")
    assert engine.containers_cpu_seconds() == pytest.approx(2.5)
    (tmp_path / "cpuacct" / "sbx-bench-1").mkdir(parents=True)
    (tmp_path / "cpuacct" / "sbx-bench-1" / "cpuacct.usage").write_text("1500000000\n")
    assert engine.containers_cpu_seconds() == pytest.approx(1.5)
    engine.forget_parent()  # only empty directories go: these hold files
    assert (tmp_path / "cpuacct" / "sbx-bench-1").exists()


def test_the_engines_daemons_are_found_by_their_command_name_and_read_to_the_nanosecond(
    tmp_path: Path,
) -> None:
    for pid, comm, ticks in (("10", "dockerd", (300, 100)), ("11", "containerd", (50, 50)),
                             ("12", "python3", (999, 999)), ("self", "dockerd", (7, 7))):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "comm").write_text(comm + "\n")
        fields = ["S"] + ["0"] * 10 + [str(ticks[0]), str(ticks[1])] + ["0"] * 5
        (tmp_path / pid / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields))
    assert daemon_cpu_seconds(tmp_path) == pytest.approx(500 / os.sysconf("SC_CLK_TCK"))
    for tid, nanoseconds in (("10", 1_250_000), ("20", 3_000_001)):  # dockerd's threads
        (tmp_path / "10" / "task" / tid).mkdir(parents=True)
        (tmp_path / "10" / "task" / tid / "schedstat").write_text(f"{nanoseconds} 7 9\n")
    assert daemon_cpu_seconds(tmp_path) == pytest.approx(  # its threads, to the nanosecond
        0.004250001 + 100 / os.sysconf("SC_CLK_TCK"))


def test_the_cpu_target_prefers_the_benchs_own_figure_and_says_which_it_used() -> None:
    report = BenchReport()
    report.latency[FIRST_QUESTION] = {BASELINE: Summary.of([1.5]), POOLED: Summary.of([0.12])}
    report.first_question_cpu = {BASELINE: 2.0, POOLED: 4.0}  # the host, others' work in it
    report.first_question_counted_cpu = {BASELINE: 0.6, POOLED: 0.45}
    report.first_question_cpu_parts = {POOLED: {"containers": 0.3, "engine": 0.1, "bench": 0.05}}
    report.environment = {"cores": 2, "load_before": [9.0], "load_after": [9.0]}
    evaluate_targets(report)
    (cpu,) = [item.as_json() for item in report.felt if item.goal.key == "pooled_cpu"]
    assert (cpu["measured"], cpu["met"]) == (0.75, True)
    assert cpu["note"] == "CPU of the bench's containers, the engine's daemons and the bench"
    assert report.as_json()["first_question_counted_cpu_ms"] == {BASELINE: 600.0, POOLED: 450.0}
    assert report.as_json()["first_question_counted_cpu_parts_ms"][POOLED] == {
        "containers": 300.0, "engine": 100.0, "bench": 50.0}
    assert "sbx fresh (pool) 300 + 100 + 50" in render(report)
