"""`sbx bench serve`: a tiny real run (its invariants, never its timings), and its options.

The real run starts `sbx serve` on 127.0.0.1 with the scripted model, runs the
conversations over HTTP and through the core, and must report no event lost,
no container left, both audit logs verifying and a clean drain.
"""

from __future__ import annotations

import json
import subprocess

import click
import pytest
from click.testing import CliRunner

from conftest import TEST_IMAGE
from sbx.agent.bench.serve import ServeBenchOptions, ServeBenchReport, percentile
from sbx.agent.cli import bench as cli_bench
from service_support import SBX


def test_percentiles_interpolate_between_ranks():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([float(n) for n in range(1, 101)], 99) == pytest.approx(99.01)


def test_a_broken_promise_is_named_and_fails_the_report():
    report = ServeBenchReport(options=ServeBenchOptions(conversations=1, questions=1, rounds=1))
    report.statuses.update(["completed", "completed"])
    report.events_lost, report.containers_left, report.server_exit = 1, 2, 0
    report.audit = {"server": "verifies (4 records, 1 runs)", "core": "FAILS: torn tail"}
    report.check()
    assert not report.ok
    assert report.problems == ["1 event(s) lost, 0 unexpected", "2 container(s) left",
                               "audit log core: FAILS: torn tail"]
    assert report.render().endswith("FAILED: " + "; ".join(report.problems))


def test_serve_bench_refuses_out_of_range_options_before_running_anything():
    group = click.Group("sbx")
    cli_bench.register(group)
    for args, flag in ((["--conversations", "0"], "--conversations"),
                       (["--conversations", "65"], "--conversations"),
                       (["--questions", "0"], "--questions"), (["--rounds", "0"], "--rounds")):
        done = CliRunner().invoke(group, ["bench", "serve", *args])
        assert done.exit_code == 2, done.output
        assert f"Invalid value for '{flag}'" in done.output


@pytest.mark.docker
def test_a_tiny_real_run_loses_no_event_and_leaves_no_container(engine):
    done = subprocess.run(
        [*SBX, "bench", "serve", "--conversations", "3", "--questions", "2", "--rounds", "1",
         "--image", TEST_IMAGE, "--json"],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True and report["problems"] == []
    assert report["questions_per_side"] == 6
    assert report["statuses"] == {"completed": 12}
    events = report["events"]
    assert events["lost"] == 0 and events["unexpected"] == 0
    assert events["received"] == events["stored"] > 6 * 4  # start, replies, tool result, end
    assert report["containers_left"] == 0 and report["server_exit"] == 0
    assert report["audit"]["server"].startswith("verifies (")
    assert report["audit"]["core"].startswith("verifies (")
    assert set(report["latency_ms"]) == {"core", "serve", "added"}
