"""Summaries for `sbx bench`: medians and p90 over samples, ratios, and the report's shape.

Kept apart from the measuring code so the arithmetic and the rendering can be
read (and tested) without an engine.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from sbx.sandbox.bench.felt import Felt


@dataclass(frozen=True, kw_only=True)
class Summary:
    """One measured figure: latency samples in seconds, summarised."""

    samples: int
    """How many repetitions were measured."""
    median_s: float
    """Median of the samples, seconds."""
    p90_s: float
    """90th percentile (nearest rank), seconds."""

    @classmethod
    def of(cls, samples: list[float]) -> Summary:
        """Summarise samples; raises ValueError when there are none."""
        if not samples:
            raise ValueError("no samples")
        ordered = sorted(samples)
        rank = max(0, math.ceil(0.9 * len(ordered)) - 1)
        return cls(samples=len(ordered), median_s=statistics.median(ordered), p90_s=ordered[rank])

    def as_json(self) -> dict[str, Any]:
        """Milliseconds, rounded for reading."""
        return {
            "samples": self.samples,
            "median_ms": round(self.median_s * 1000, 3),
            "p90_ms": round(self.p90_s * 1000, 3),
        }


def ratio(value: float | None, reference: float | None) -> float | None:
    """Value / reference, or None when either is missing or the reference is zero."""
    if value is None or reference is None or reference <= 0:
        return None
    return value / reference


@dataclass(kw_only=True)
class Target:
    """One of the issue's targets, checked against this run's numbers."""

    name: str
    """What is compared, in words."""
    limit: str
    """The target, e.g. `<= 1.3x floor`."""
    measured: str
    """The measured figure, e.g. `1.21x`."""
    met: bool | None
    """True/False, or None when it could not be measured in this run."""


@dataclass(kw_only=True)
class BenchReport:
    """Everything one `sbx bench` run measured, ready to print as a table or JSON."""

    environment: dict[str, Any] = field(default_factory=dict)
    """Host, engine, image, limits, caps, load: what the numbers depend on."""
    latency: dict[str, dict[str, Summary | None]] = field(default_factory=dict)
    """workload -> mode -> summary (None: not measurable here, e.g. no pandas on the host)."""
    throughput: dict[str, dict[int, float]] = field(default_factory=dict)
    """mode -> concurrency -> executions per second."""
    cpu_per_execution: dict[str, dict[int, float]] = field(default_factory=dict)
    """mode -> concurrency -> host CPU seconds (all processes) per execution."""
    idle_memory: dict[str, float] = field(default_factory=dict)
    """Resident memory of one idle pooled container, MiB, by measure."""
    live: dict[str, Summary] = field(default_factory=dict)
    """Live output figures: the latency of a first chunk (`live.py`)."""
    gate: dict[str, Any] = field(default_factory=dict)
    """Gate + audit overhead per tool call (filled by the CLI: `sandbox` never imports `tools`)."""
    first_question_cpu: dict[str, float] = field(default_factory=dict)
    """mode -> median host CPU seconds of one first question with the CSV, refill included."""
    first_question_counted_cpu: dict[str, float] = field(default_factory=dict)
    """The same counting only the bench's containers, the engine and the bench (`counted.py`)."""
    first_question_cpu_parts: dict[str, dict[str, float]] = field(default_factory=dict)
    """mode -> part (`containers`, `engine`, `bench`) -> median CPU seconds of that part."""
    targets: list[Target] = field(default_factory=list)
    """Earlier issues' targets as ratios, met or not (`earlier_targets` in the JSON)."""
    felt: list[Felt] = field(default_factory=list)
    """The speed users feel: every target with this run's figure (`targets` in the JSON)."""
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The other benches this run included (`serve`, `restore`): each one's own JSON."""
    notes: list[str] = field(default_factory=list)
    """Caveats worth reading next to the numbers."""

    def median(self, workload: str, mode: str) -> float | None:
        """The median of one cell, seconds, or None."""
        cell = self.latency.get(workload, {}).get(mode)
        return cell.median_s if cell is not None else None

    def as_json(self) -> dict[str, Any]:
        """The report as plain JSON types (milliseconds for latencies)."""
        return {
            "environment": self.environment,
            "latency": {
                workload: {mode: (s.as_json() if s else None) for mode, s in modes.items()}
                for workload, modes in self.latency.items()
            },
            "throughput_per_s": {
                mode: {str(c): round(v, 2) for c, v in levels.items()}
                for mode, levels in self.throughput.items()
            },
            "host_cpu_ms_per_execution": {
                mode: {str(c): round(v * 1000, 1) for c, v in levels.items()}
                for mode, levels in self.cpu_per_execution.items()
            },
            "idle_pooled_container_mib": {k: round(v, 1) for k, v in self.idle_memory.items()},
            "live": {name: summary.as_json() for name, summary in self.live.items()},
            "gate": self.gate,
            "first_question_host_cpu_ms": {
                mode: round(seconds * 1000, 1) for mode, seconds in self.first_question_cpu.items()
            },
            "first_question_counted_cpu_ms": {
                mode: round(seconds * 1000, 1)
                for mode, seconds in self.first_question_counted_cpu.items()
            },
            "first_question_counted_cpu_parts_ms": {
                mode: {part: round(seconds * 1000, 1) for part, seconds in parts.items()}
                for mode, parts in self.first_question_cpu_parts.items()
            },
            "targets": [item.as_json() for item in self.felt],
            "earlier_targets": [vars(t) for t in self.targets],
            "parts": self.parts,
            "notes": self.notes,
        }
