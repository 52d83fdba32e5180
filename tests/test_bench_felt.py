"""The speed users feel: every bench reports every target with `name`, `limit`, `measured`, `met`.

Built from measured inputs (no engine, no timing asserts): the list itself,
`sbx bench`'s share from a synthetic report, `sbx bench serve`'s from levels.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from sbx.agent.bench import every
from sbx.agent.bench.restore import SNAPSHOT_VS_LIVE, SNAPSHOT_VS_REPLAY, RestoreBench
from sbx.agent.bench.serve_options import ServeBenchOptions
from sbx.agent.bench.serve_report import LevelFigures, ServeBenchReport
from sbx.sandbox.bench.felt import (
    BENCH,
    GOALS,
    RESTORE,
    SERVE,
    felt_targets,
    merge_felt,
    render_felt,
)
from sbx.sandbox.bench.stats import BenchReport, Summary
from sbx.sandbox.bench.targets import BASELINE, POOLED, evaluate_targets
from sbx.sandbox.bench.workloads import FIRST_QUESTION

FIELDS = {"name", "limit", "measured", "met"}
KEYS = [goal.key for goal in GOALS]


def _every_target(targets: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    """The JSON's targets by key, after checking each has the four fields and the list is whole."""
    assert [target["key"] for target in targets] == KEYS
    for target in targets:
        assert FIELDS <= set(target), target
        assert isinstance(target["name"], str) and isinstance(target["limit"], float)
        assert target["met"] in (True, False, None)
        assert (target["measured"] is None) == (target["met"] is None)
    return {str(target["key"]): target for target in targets}


def test_the_list_holds_every_target_of_the_issue_and_who_measures_it() -> None:
    assert KEYS == ["burst", "service_cpu", "http_p99", "first_event", "busy_cores",
                    "restore_first_answer_vs_live", "restore_first_answer_vs_full_replay",
                    "pooled_cpu", "first_question",
                    "idle_memory"]
    felt = felt_targets({"pooled_cpu": 1.2, "first_question": 0.05}, bench=BENCH)
    found = _every_target([item.as_json() for item in felt])
    assert (found["pooled_cpu"]["measured"], found["pooled_cpu"]["met"]) == (1.2, False)
    assert (found["first_question"]["measured"], found["first_question"]["met"]) == (0.05, True)
    assert found["burst"]["note"] == "measured by `sbx bench serve`"
    assert found["restore_first_answer_vs_live"]["note"] == "measured by `sbx bench restore`"
    served = {item.goal.key: item.note for item in felt_targets({}, bench=SERVE)}
    assert served["restore_first_answer_vs_live"] == (
        "measured by `sbx bench restore` and `sbx bench`")
    assert found["idle_memory"]["note"] == ""  # this bench's own, not measured this time
    with pytest.raises(ValueError, match="not a target"):
        felt_targets({"speed": 1.0}, bench=BENCH)


def test_a_bound_from_below_is_met_at_or_above_it() -> None:
    felt = {item.goal.key: item for item in felt_targets(
        {"busy_cores": 0.9, "http_p99": 1.5, "service_cpu": 1.51}, bench=SERVE)}
    assert felt["busy_cores"].met is True and felt["http_p99"].met is True
    assert felt["service_cpu"].met is False
    assert felt_targets({"busy_cores": 0.64}, bench=SERVE)[4].met is False
    text = "\n".join(render_felt(list(felt.values())))
    assert "  met              0.9  >= 0.9      busy cores during a 32-conversation" in text
    assert "NOT MET" in text and "(measured by `sbx bench restore` and `sbx bench`)" in text


def test_sbx_bench_json_reports_every_target_from_its_own_numbers() -> None:
    report = BenchReport()
    report.latency[FIRST_QUESTION] = {BASELINE: Summary.of([1.5]), POOLED: Summary.of([0.12])}
    report.first_question_cpu = {BASELINE: 0.6, POOLED: 0.9}
    report.idle_memory = {"cgroup_anon_rss": 80.0}
    evaluate_targets(report)
    data = json.loads(json.dumps(report.as_json()))
    found = _every_target(data["targets"])
    assert (found["pooled_cpu"]["measured"], found["pooled_cpu"]["met"]) == (1.5, False)
    assert (found["first_question"]["measured"], found["first_question"]["met"]) == (0.08, True)
    assert (found["idle_memory"]["measured"], found["idle_memory"]["met"]) == (80.0, True)
    assert all(found[key]["measured"] is None for key in KEYS[:7])
    assert data["first_question_host_cpu_ms"] == {BASELINE: 600.0, POOLED: 900.0}
    assert any(t["name"].startswith("session print(1)") for t in data["earlier_targets"])
    assert found["pooled_cpu"]["note"] == ""
    report.environment = {"cores": 2, "load_before": [1.5, 1.0, 1.0], "load_after": [12.75, 9.0]}
    evaluate_targets(report)
    busy = _every_target([item.as_json() for item in report.felt])["pooled_cpu"]
    assert busy["note"] == "host CPU counts other work too: load 12.75 on 2 cores"


def _level(count: int, *, serve: float, core: float, first_event: float) -> LevelFigures:
    level = LevelFigures(conversations=count)
    level.seconds = {"core": [core] * count, "serve": [serve] * count}
    level.first_answers = {"core": [core] * count, "serve": [serve] * count}
    level.first_events = [first_event] * count
    level.phases = {"core": 1, "serve": 1}
    level.cpu_s["core"].update(process=0.011 * count)
    level.cpu_s["serve"].update(process=0.044 * count, host=9.0, after=3.0)
    level.wall_s = {"core": 1.0, "serve": 5.0}
    level.calm_wall_s = {"core": 1.0, "serve": 2.0}  # the later questions, no builds
    return level


def _serve_report() -> ServeBenchReport:
    report = ServeBenchReport(options=ServeBenchOptions(levels=(1, 32), questions=1, rounds=1),
                              cores=2)
    report.levels = [_level(1, serve=0.05, core=0.04, first_event=0.03),
                     _level(32, serve=1.8, core=0.6, first_event=0.9)]
    report.docker_runs_s = [12.0] * 32
    return report


def test_sbx_bench_serve_json_reports_every_target_from_its_levels() -> None:
    report = _serve_report()
    data = json.loads(json.dumps(report.as_json()))
    found = _every_target(data["targets"])
    figures = {key: found[key]["measured"] for key in KEYS[:5]}
    assert figures == {"burst": 0.15, "service_cpu": 4.0, "http_p99": 3.0, "first_event": 30.0,
                       "busy_cores": 0.75}
    assert [found[key]["met"] for key in KEYS[:5]] == [False, False, False, False, False]
    assert found["pooled_cpu"]["note"] == "measured by `sbx bench`"
    assert found["burst"]["note"] == ""  # the CSV's first question, at 32
    assert data["levels"][1]["later_questions_wall_s"] == {"core": 1.0, "serve": 2.0}
    report.load = [1.5, 9.25]  # other work kept the host busy: the figure counts it
    busy = _every_target([item.as_json() for item in report.felt()])["busy_cores"]
    assert busy["note"] == "the whole host's CPU, other work included: load 9.25 on 2 cores"
    assert data["docker_runs_ms"]["p99"] == 12000.0
    assert data["levels"][1]["first_answer_p99_ms"] == {"core": 600.0, "serve": 1800.0}
    assert data["levels"][1]["first_event_p99_ms"] == 900.0
    assert "What users feel" in report.render()


def test_a_serve_run_without_the_level_of_one_cannot_compare_first_events() -> None:
    report = ServeBenchReport(options=ServeBenchOptions(levels=(8,), questions=1, rounds=1))
    report.levels = [_level(8, serve=0.5, core=0.4, first_event=0.2)]
    found = _every_target(json.loads(json.dumps(report.as_json()))["targets"])
    assert found["first_event"]["measured"] is None
    assert found["first_event"]["note"] == "needs the levels 1 and a higher one"
    assert found["http_p99"]["note"] == "at 8 at once"
    assert found["burst"]["note"] == "at 8 at once"
    report.levels[0].calm_wall_s = {"core": 0.0, "serve": 0.0}  # no later questions
    busy = _every_target(json.loads(json.dumps(report.as_json()))["targets"])["busy_cores"]
    assert busy["measured"] is None and str(busy["note"]).startswith("needs later questions")
    assert found["burst"]["measured"] is None  # no docker runs measured
    assert _every_target([t.as_json() for t in ServeBenchReport(
        options=ServeBenchOptions()).felt()])["burst"]["measured"] is None



def test_the_restore_targets_are_the_restore_benchs_own_names_and_limits() -> None:
    measured = RestoreBench(cells=10, live_s=[0.1], snapshot_s=[0.4], restored_s=[4.0])
    own = {t["name"]: t["limit"] for t in measured.targets()}
    listed = {goal.key: goal.limit for goal in GOALS if goal.by == RESTORE}
    assert own == listed == {"restore_first_answer_vs_live": SNAPSHOT_VS_LIVE,
                             "restore_first_answer_vs_full_replay": SNAPSHOT_VS_REPLAY}


def test_sbx_bench_measures_every_target_with_its_serve_and_restore_parts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`sbx bench` runs the other two benches as parts (their harnesses stand in here: the
    test is about the one list, each harness has its own tests) and merges their targets."""
    asked: dict[str, Any] = {}

    def serve(options: ServeBenchOptions, progress: Callable[[str], None]) -> ServeBenchReport:
        asked["serve"] = options
        progress("serving")
        return _serve_report()

    def restore(**kwargs: Any) -> RestoreBench:
        asked["restore"] = kwargs
        return RestoreBench(cells=10, live_s=[0.1], snapshot_s=[0.4], restored_s=[4.0])

    monkeypatch.setattr(every, "run_serve_bench", serve)
    monkeypatch.setattr(every, "run_restore_bench", restore)
    report = BenchReport()
    report.latency[FIRST_QUESTION] = {BASELINE: Summary.of([1.5]), POOLED: Summary.of([0.12])}
    report.first_question_cpu = {BASELINE: 0.6, POOLED: 0.5}
    report.idle_memory = {"cgroup_anon_rss": 60.0}
    evaluate_targets(report)
    said: list[str] = []
    options = ServeBenchOptions(levels=(1, 32), questions=2, rounds=1, image="img")
    texts = every.add_parts(report, every.Parts(serve=options, restore_rounds=1, image="img"),
                            said.append)
    assert asked["serve"] is options and said == ["serve: serving"]
    assert asked["restore"]["rounds"] == 1 and asked["restore"]["idle"] == 0
    data = json.loads(json.dumps(report.as_json()))
    found = _every_target(data["targets"])
    assert all(found[key]["measured"] is not None for key in KEYS), found
    assert (found["restore_first_answer_vs_live"]["measured"], found["burst"]["measured"],
            found["pooled_cpu"]["measured"]) == (4.0, 0.15, 0.833)
    assert set(data["parts"]) == {"serve", "restore"} and every.serve_ok(report)
    assert texts[0].startswith("sbx bench serve (part of this run):")
    assert "What users feel" in texts[0] and "snapshot restore" in texts[1]


def test_a_part_left_out_says_so_in_its_targets() -> None:
    report = BenchReport()
    evaluate_targets(report)
    assert every.add_parts(report, every.Parts(serve=None, restore_rounds=0, image="img"),
                           print) == []
    found = _every_target([item.as_json() for item in report.felt])
    assert found["burst"]["note"] == "skipped (--skip serve)"
    assert found["restore_first_answer_vs_live"]["note"] == "skipped (--skip restore)"
    assert found["pooled_cpu"]["note"] == "" and report.parts == {}
    with pytest.raises(ValueError, match="every goal"):
        merge_felt(report.felt, report.felt[1:])
