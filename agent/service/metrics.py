"""`/metrics`: what one replica of `sbx serve` did, in the Prometheus text format.

`Metrics` is an `Observer`: it counts what the service reports at the points
where outcomes are known (`sbx.agent.core.hosting.observer`), into a registry of its
own (never prometheus-client's global one, so several services in one process,
the tests' among them, do not collide). Base units (seconds, bytes), counters
end in `_total`. The figures are this replica's since it started; sum them
across replicas in the query.

    sbx_executions_total{outcome,runtime}            ok, error, timeout, oom_killed,
                                                     cancelled, failed (no result came back)
    sbx_execution_duration_seconds{runtime}          histograms, per execution
    sbx_execution_cpu_seconds{runtime}
    sbx_execution_peak_memory_bytes{runtime}
    sbx_tool_calls_total{tool,decision}              allowed, denied, invalid, unknown, halted
    sbx_model_tokens_total{type}                     input, output
    sbx_model_request_duration_seconds               histogram, retries included
    sbx_runs_total{status}, sbx_run_duration_seconds
    sbx_http_requests_total{method,route,status}     route: the template, never the path
    sbx_http_request_duration_seconds{method,route}
    sbx_quota_rejections_total{quota}
    sbx_spend_total{team,currency}                   money the runs that ended here cost, by
                                                     team (the policy's team names, else none)
    sbx_package_requests_total{package}              executions that imported a module the
                                                     image lacks (at most 100 names, then other)
    sbx_pool_containers{state}                       idle, building, removing, in_use
    sbx_pool_target                                  warm containers the pool aims at now
    sbx_pool_takes_total{result}                     hit (a warm container), miss (created)
    sbx_runs_in_progress                             queued or running here

Every label value is bounded: the model names tools, so a tool that is not
registered is `-`; methods outside the standard ones are `OTHER`; anything
else not a short plain word becomes `other`. Principals are never labels.

Who may read it: a request with an admin key (`sbx keys create NAME --role
admin`); anyone else gets 403. Loopback-only would not do: behind a reverse
proxy every request comes from loopback.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from starlette.responses import Response

from sbx.agent import UNMATCHED_ROUTE, Observer, module_from_error
from sbx.agent.service.api import Call, api
from sbx.agent.service.problems import Problem

if TYPE_CHECKING:
    from sbx.agent.service.host import Service

_WORD = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_TOOL = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
REGISTERED = frozenset({"ok", "error", "cancelled", "denied", "invalid"})
"""Gate statuses that prove the tool exists (unknown and halted may name anything)."""
REFUSED = frozenset({"denied", "invalid", "unknown", "halted"})
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
MEMORY = tuple(float(2**n) for n in range(22, 35))  # 4 MiB .. 16 GiB
MAX_PACKAGE_LABELS = 100
"""Distinct module names counted by name; the model chooses them, so the rest are `other`."""
POOL_STATES = ("idle", "building", "removing", "in_use")


def word(value: object) -> str:
    """A label value from a closed vocabulary: itself if a short plain word, else `other`."""
    text = str(value)
    return text if _WORD.match(text) else "other"


class LiveGauges(Collector):
    """Gauges read when scraped (the pool's containers by state, runs in progress)."""

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, Any]] | None = None

    def collect(self) -> Iterable[Metric]:
        """The current figures; none when no source is set or it fails."""
        if self.source is None:
            return []
        try:
            figures = self.source()
        except Exception:  # a scrape must not fail because the pool is closing
            return []
        pool = GaugeMetricFamily("sbx_pool_containers", "Sandbox containers of this replica "
                                 "by state", labels=["state"])
        for state in POOL_STATES:
            pool.add_metric([state], float(figures.get(state, 0)))
        runs = GaugeMetricFamily("sbx_runs_in_progress", "Runs (and /v1/execute calls) queued "
                                 "or running on this replica",
                                 value=float(figures.get("runs", 0)))
        target = GaugeMetricFamily("sbx_pool_target", "Warm containers (idle and building) "
                                   "the pool aims at now ([pool])",
                                   value=float(figures.get("target", 0)))
        takes = CounterMetricFamily("sbx_pool_takes", "Sandboxes taken from the pool: a warm "
                                    "container (hit) or one created on the spot (miss)",
                                    labels=["result"])
        takes.add_metric(["hit"], float(figures.get("hits", 0)))
        takes.add_metric(["miss"], float(figures.get("misses", 0)))
        return [pool, runs, target, takes]


class Metrics(Observer):
    """The Prometheus metrics of one service (see the module docstring)."""

    def __init__(self, *, runtime: str) -> None:
        self.runtime = word(runtime)
        self.registry = CollectorRegistry()
        self.live = LiveGauges()
        self.registry.register(self.live)
        r = self.registry
        self.executions = Counter("sbx_executions", "Code executions by outcome and runtime",
                                  ["outcome", "runtime"], registry=r)
        self.execution_duration = Histogram(
            "sbx_execution_duration_seconds", "Wall-clock seconds of each execution",
            ["runtime"], buckets=SECONDS, registry=r)
        self.execution_cpu = Histogram(
            "sbx_execution_cpu_seconds", "CPU seconds each execution used (cgroup)",
            ["runtime"], buckets=SECONDS, registry=r)
        self.execution_memory = Histogram(
            "sbx_execution_peak_memory_bytes", "Peak memory of each execution (cgroup)",
            ["runtime"], buckets=MEMORY, registry=r)
        self.tool_calls = Counter("sbx_tool_calls", "Tool calls through the gate by tool and "
                                  "decision", ["tool", "decision"], registry=r)
        self.tokens = Counter("sbx_model_tokens", "Model tokens by type (input, output)",
                              ["type"], registry=r)
        self.model_duration = Histogram(
            "sbx_model_request_duration_seconds", "Seconds of each model request, retries "
            "included", buckets=SECONDS, registry=r)
        self.runs = Counter("sbx_runs", "Conversation runs by how they ended", ["status"],
                            registry=r)
        self.run_duration = Histogram("sbx_run_duration_seconds", "Seconds of each run",
                                      buckets=SECONDS, registry=r)
        self.requests = Counter("sbx_http_requests", "HTTP requests by method, route template "
                                "and status", ["method", "route", "status"], registry=r)
        self.request_duration = Histogram(
            "sbx_http_request_duration_seconds", "Seconds to answer each HTTP request (a stream: "
            "until it ends)", ["method", "route"], buckets=SECONDS, registry=r)
        self.quota_rejections = Counter("sbx_quota_rejections", "Requests refused by a "
                                        "per-principal quota", ["quota"], registry=r)
        self.package_requests = Counter("sbx_package_requests", "Executions that imported a "
                                        "module the image lacks", ["package"], registry=r)
        self.spend = Counter("sbx_spend", "Money runs cost (the price table's currency), by "
                             "team", ["team", "currency"], registry=r)
        self._packages: set[str] = set()

    def watch(self, source: Callable[[], Mapping[str, Any]]) -> None:
        """Read the live gauges from `source` at each scrape (see `live_figures`)."""
        self.live.source = source

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)

    # ------------------------------------------------------------ observer hooks

    def request_finished(self, *, method: str, path: str, status: int, duration_s: float,
                         request_id: str, route: str = UNMATCHED_ROUTE,
                         principal: str | None = None, bytes_in: int = 0,
                         bytes_out: int = 0) -> None:
        """Count the request under its route's template."""
        shown = method if method in METHODS else "OTHER"
        self.requests.labels(shown, route, str(status)).inc()
        self.request_duration.labels(shown, route).observe(duration_s)

    def quota_rejected(self, *, principal: str, quota: str) -> None:
        """Count the quota, never the principal."""
        self.quota_rejections.labels(word(quota)).inc()

    def event(self, *, principal: str, run_id: str, event: Mapping[str, Any]) -> None:
        """Model replies count tokens; tool results count calls and executions."""
        kind = event.get("type")
        if kind == "model_reply":
            usage = event.get("usage") or {}
            self.tokens.labels("input").inc(_count(usage.get("prompt_tokens")))
            self.tokens.labels("output").inc(_count(usage.get("completion_tokens")))
            self.model_duration.observe(_count(event.get("duration_s")))
        elif kind == "tool_result":
            name, status = str(event.get("name", "")), str(event.get("status", ""))
            self.count_call(name, status, event.get("execution"))

    def run_finished(self, *, principal: str, run_id: str, status: str,
                     result: Mapping[str, Any] | None) -> None:
        """Count the run by status; its duration when it has a result."""
        self.runs.labels(word(status)).inc()
        if result is not None:
            self.run_duration.observe(_count(result.get("duration_s")))

    def execution_finished(self, *, principal: str, run_id: str, status: str,
                           execution: Mapping[str, Any] | None) -> None:
        """A `/v1/execute` call: one gate call of `execute_python`."""
        record = None
        if execution is not None:
            error = execution.get("error") or {}
            record = {**execution, "error_type": error.get("type") if error else None,
                      "error_message": error.get("message") if error else None}
        self.count_call("execute_python", status, record)

    def spent(self, *, team: str, currency: str, amount: float) -> None:
        """Add a run's cost to its team's (the recorder bounds the label to the policy's)."""
        self.spend.labels(team, currency).inc(max(amount, 0.0))

    def count_call(self, name: str, status: str, execution: Mapping[str, Any] | None) -> None:
        """One call through the gate, and the execution it ran (if it ran code)."""
        tool = name if status in REGISTERED and _TOOL.match(name) else "-"
        decision = status if status in REFUSED else "allowed"
        self.tool_calls.labels(tool, decision).inc()
        outcome = execution_outcome(status, execution) if name == "execute_python" else None
        if outcome is None:
            return
        self.executions.labels(outcome, self.runtime).inc()
        if execution is None:
            return
        package = module_from_error(execution.get("error_type"), execution.get("error_message"))
        if package is not None:
            self.package_requests.labels(self._package_label(package)).inc()
        self.execution_duration.labels(self.runtime).observe(
            _count(execution.get("duration_s")))
        if execution.get("cpu_seconds") is not None:
            self.execution_cpu.labels(self.runtime).observe(
                _count(execution.get("cpu_seconds")))
        if execution.get("peak_memory_bytes") is not None:
            self.execution_memory.labels(self.runtime).observe(
                _count(execution.get("peak_memory_bytes")))

    def _package_label(self, name: str) -> str:
        """The module's name as a label: at most `MAX_PACKAGE_LABELS` names, then `other`."""
        label = word(name.lower())
        if label not in self._packages and len(self._packages) >= MAX_PACKAGE_LABELS:
            return "other"
        self._packages.add(label)
        return label


def execution_outcome(status: str, execution: Mapping[str, Any] | None) -> str | None:
    """How an execution ended; None when the call was refused (no code ran)."""
    if status == "cancelled":
        return "cancelled"
    if status not in ("ok", "error"):
        return None
    if execution is None:
        return "failed"  # the call ended without a result (abandoned at its timeout)
    if execution.get("timed_out"):
        return "timeout"
    if execution.get("oom_killed"):
        return "oom_killed"
    if execution.get("exit_code") or execution.get("error_type"):
        return "error"
    return "ok"


def live_figures(service: Service) -> dict[str, int]:
    """The pool's containers by state and the runs in progress, now."""
    figures = {"in_use": service.runs.sandboxes_held(), "runs": service.runs.busy}
    figures.update(service.app.sandbox_figures())
    return figures


def _count(value: object) -> float:
    """A non-negative number from an event (anything else counts as 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    return float(max(value, 0))


@api("GET", "/metrics")
def metrics(call: Call) -> Response:
    """This replica's metrics in the Prometheus text format (admin keys only)."""
    if call.key.role != "admin":
        raise Problem(403, "forbidden", "/metrics needs an admin key "
                      "(sbx keys create NAME --role admin)")
    return Response(call.service.metrics.render(), media_type=CONTENT_TYPE_LATEST)
