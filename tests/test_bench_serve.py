"""`sbx bench serve`: a tiny real run (its invariants, never its timings), and its options.

The real run starts `sbx serve` on 127.0.0.1 with the scripted model, runs the
conversations over HTTP and through the core at two levels, and must report no
event lost, no container left, both audit logs verifying and a clean drain, and
per level and side: latencies, CPU parts and the pool's takes (one per
conversation: each takes one sandbox at its first question).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from conftest import TEST_IMAGE
from sbx.agent.bench.serve import (
    ServeBenchError,
    ServeBenchOptions,
    ServeBenchReport,
    host_room,
)
from sbx.agent.bench.serve_phases import process_cpu_s, process_tree
from sbx.agent.bench.serve_report import LevelFigures, percentile
from sbx.agent.cli import bench as cli_bench
from sbx.sandbox.limits import Limits
from service_support import SBX


def test_percentiles_interpolate_between_ranks():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([float(n) for n in range(1, 101)], 99) == pytest.approx(99.01)


def test_a_broken_promise_is_named_and_fails_the_report():
    report = ServeBenchReport(options=ServeBenchOptions(levels=(1,), questions=1, rounds=1))
    report.statuses.update(["completed", "completed"])
    report.events_lost, report.containers_left, report.server_exit = 1, 2, 0
    report.audit = {"server": "verifies (4 records, 1 runs)", "core": "FAILS: torn tail"}
    level = LevelFigures(conversations=1)
    level.phases = {"core": 1, "serve": 1}
    level.takes = {"core": {"hit": 0, "miss": 1}, "serve": {"hit": 1, "miss": 1}}
    report.levels.append(level)
    report.check()
    assert not report.ok
    assert report.problems == ["1 event(s) lost, 0 unexpected", "2 container(s) left",
                               "audit log core: FAILS: torn tail",
                               "serve at 1: 2 pool take(s) for 1 phase(s)"]
    assert report.render().endswith("FAILED: " + "; ".join(report.problems))
    workers = ServeBenchReport(options=ServeBenchOptions(levels=(1,), questions=1, rounds=1,
                                                        workers=2))
    workers.statuses, workers.server_exit = report.statuses, 0
    workers.audit = {"server": "verifies (4 records, 1 runs)"}
    workers.levels = report.levels  # the serve side's takes are one worker's share: not counted
    workers.check()
    assert workers.ok, workers.problems
    assert "sbx serve --workers 2: the server's pool figures" in workers.render()


def test_the_report_says_whether_the_burst_was_announced():
    for announced, words in ((True, "burst announced: opened first"),
                             (False, "burst unannounced: each opened and asked at once")):
        options = ServeBenchOptions(levels=(1,), questions=1, rounds=1, announced=announced)
        assert words in ServeBenchReport(options=options).render()
    unwarmed = ServeBenchReport(options=ServeBenchOptions(levels=(1,)), unwarmed=1)
    assert "1 announced phase(s) began before their pool held" in unwarmed.render()


def test_figures_per_level_say_what_they_divide_and_the_p99_ratio_is_highest_over_lowest():
    report = ServeBenchReport(options=ServeBenchOptions(levels=(1, 4), questions=1, rounds=1))
    for count, p99 in ((1, 0.2), (4, 0.8)):
        level = LevelFigures(conversations=count)
        level.seconds = {"core": [p99] * count, "serve": [p99 * 2] * count}
        level.phases = {"core": 1, "serve": 1}
        level.cpu_s["core"].update(process=0.1 * count, host=0.4 * count, opening=0.3 * count,
                                   after=0.0, refill=0.2 * count)
        level.takes["core"] = {"hit": count - 1, "miss": 1}
        report.levels.append(level)
    assert report.p99_ratio() == {"core": 4.0, "serve": 4.0}
    cpu = report.levels[1].cpu_ms(questions=1)["core"]
    assert cpu["process_per_question"] == 100.0 and cpu["host_per_question"] == 400.0
    assert cpu["host_per_new_conversation"] == 300.0
    assert cpu["host_refill_per_new_conversation"] == 200.0
    assert cpu["host_per_later_question"] is None  # one question each: none came later
    text = report.render()
    assert "p99 at 4 / p99 at 1: in-process core 4.0x, sbx serve (HTTP + SSE) 4.0x" in text
    assert json.loads(json.dumps(report.as_json()))["levels"][1]["pool_takes"]["core"] == {
        "hit": 3, "miss": 1}
    report.host_room, report.levels[1].separated = 2, False  # 4 at once: 2 would wait in vain
    crowded = report.levels[1].cpu_ms(questions=1)["core"]
    assert crowded["host_per_new_conversation"] is None
    assert crowded["host_per_question"] == 400.0  # the whole phase is still measured
    assert "-: at 4 at once, more than the host's caps hold (2 sandboxes;" in report.render()


def test_serve_bench_refuses_out_of_range_options_before_running_anything():
    group = click.Group("sbx")
    cli_bench.register(group)
    for args, flag, why in (
        (["--conversations", "0"], "--conversations", "0 is not in the range"),
        (["--conversations", "65"], "--conversations", "65 is not in the range"),
        (["--levels", "0"], "--levels", "each level is 1 to 64"),
        (["--levels", "1,65"], "--levels", "each level is 1 to 64"),
        (["--levels", "x"], "--levels", "give whole numbers separated by commas"),
        (["--levels", "1,,8"], "--levels", "give whole numbers separated by commas"),
        (["--levels", "8,8"], "--levels", "each level may be given once"),
        (["--levels", "1,2,3,4,5,6"], "--levels", "at most 5 levels"),
        (["--questions", "0"], "--questions", "0 is not in the range"),
        (["--rounds", "0"], "--rounds", "0 is not in the range"),
    ):
        done = CliRunner().invoke(group, ["bench", "serve", *args])
        assert done.exit_code == 2, done.output
        assert f"Invalid value for '{flag}'" in done.output and why in done.output, done.output
        assert "Traceback" not in done.output
    both = CliRunner().invoke(group, ["bench", "serve", "--levels", "1,8", "--conversations", "2"])
    assert both.exit_code == 2 and "give --levels or --conversations, not both" in both.output


@pytest.mark.docker
@pytest.mark.parametrize("announced", [True, False], ids=["announced", "unannounced"])
def test_a_tiny_real_run_loses_no_event_and_leaves_no_container(engine, announced):
    done = subprocess.run(
        [*SBX, "bench", "serve", "--levels", "2,1", "--questions", "2", "--rounds", "1",
         "--image", TEST_IMAGE, "--json", *([] if announced else ["--unannounced"])],
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["options"]["levels"] == [1, 2]  # ascending
    assert report["options"]["announced"] is announced and report["unwarmed_phases"] == 0
    assert report["statuses"] == {"completed": 12}  # (1 + 2) x 2 questions x 2 sides
    events = report["events"]
    assert events["lost"] == 0 and events["unexpected"] == 0
    assert events["received"] == events["stored"] > 6 * 4  # start, replies, tool result, end
    assert report["containers_left"] == 0 and report["server_exit"] == 0
    assert report["audit"]["server"].startswith("verifies (")
    assert report["audit"]["core"].startswith("verifies (")
    assert [level["conversations"] for level in report["levels"]] == [1, 2]
    for level in report["levels"]:
        count = level["conversations"]
        assert level["questions_per_side"] == count * 2
        assert set(level["latency_ms"]) == {"core", "serve", "added"}
        for side in ("core", "serve"):
            assert set(level["latency_ms"][side]) == {"p50", "p90", "p99"}
            takes = level["pool_takes"][side]
            assert takes["hit"] + takes["miss"] == count  # one sandbox per conversation
            if announced:  # both pools warmed for the open conversations before any asked
                assert takes["miss"] == 0, (side, takes)
            cpu = level["cpu_ms"][side]
            assert cpu["process_per_question"] > 0  # both sides measured
            assert cpu["host_per_new_conversation"] > 0  # a sandbox was taken each time
            for figure in ("host_per_question", "host_per_later_question",
                           "host_refill_per_new_conversation"):
                assert cpu[figure] is not None and cpu[figure] >= 0
    ratio = report["p99_ratio_highest_to_lowest"]
    assert set(ratio) == {"core", "serve"} and all(value > 0 for value in ratio.values())
    targets = {target["key"]: target for target in report["targets"]}
    for key in ("burst", "service_cpu", "http_p99", "first_event", "busy_cores"):
        assert targets[key]["measured"] > 0, targets[key]  # each a figure of this run
    assert targets["burst"]["note"] == "at 2 at once"  # the CSV's first question, vs docker run
    assert report["docker_runs_ms"]["p99"] > 0
    assert report["levels"][1]["later_questions_wall_s"]["serve"] > 0  # busy cores' window
    assert targets["pooled_cpu"]["measured"] is None
    assert targets["pooled_cpu"]["note"] == "measured by `sbx bench`"


def test_host_room_is_what_the_tightest_cap_holds(monkeypatch):
    monkeypatch.setenv("SBX_MAX_SANDBOXES", "32")
    monkeypatch.setenv("SBX_MAX_CPUS", "8")
    monkeypatch.setenv("SBX_MAX_MEMORY", "64g")
    assert host_room(Limits()) == 8  # 1 CPU each
    assert host_room(Limits(cpus=0.5)) == 16
    assert host_room(Limits(cpus=0.1)) == 32  # then the sandbox cap binds
    monkeypatch.setenv("SBX_MAX_MEMORY", "2g")
    assert host_room(Limits(cpus=0.1, memory=512 << 20)) == 4


def test_a_bench_that_cannot_finish_says_why_in_one_line(monkeypatch):
    def broken(options, progress):
        raise ServeBenchError("serve at 2 at once: POST /v1/conversations: 503 (expected 201)")

    monkeypatch.setattr(cli_bench, "run_serve_bench", broken)
    group = click.Group("sbx")
    cli_bench.register(group)
    done = CliRunner().invoke(group, ["bench", "serve", "--levels", "2"])
    assert done.exit_code != 0 and "Traceback" not in done.output
    assert done.output.strip().splitlines()[-1] == (
        "sbx: bench serve: serve at 2 at once: POST /v1/conversations: 503 (expected 201)")


def test_a_servers_cpu_includes_the_worker_processes_under_it():
    """`sbx serve --workers N` runs its workers as child processes: their CPU is the server's."""
    spin = ("import sys, time\nend = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\nprint('spun', flush=True)\ntime.sleep(60)")
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
                               f"{spin!r}])"], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "spun\n"
        tree = process_tree(parent.pid)
        assert tree[0] == parent.pid and len(tree) == 2
        assert process_cpu_s(parent.pid) >= 0.3  # the worker's, not the idle parent's
    finally:
        for pid in reversed(process_tree(parent.pid)):
            os.kill(pid, signal.SIGKILL)
        parent.wait(30)
        parent.stdout.close()
