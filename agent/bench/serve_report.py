"""What `sbx bench serve` found: per level and side, and the checks (see `sbx.agent.bench.serve`).

    LevelFigures       one level (N conversations at once): each side's latencies,
                       CPU (per question, per new conversation) and pool takes
    ServeBenchReport   every level, the events, containers and audit checks; its
                       text (`render`) and its JSON (`as_json`)

The CPU figures, and what each includes:

    process/q          the side's process (the server, or the bench's own for the
                       core) over its phases, per question, without the barrier
                       after the first answers (its pool refilling, and the bench
                       polling both pools: the server's `/metrics`)
    host/q             the whole host (engine, containers, other work on a shared
                       host too) over its phases, per question
    host/conv open     the host from a phase's start until every conversation has
                       been created and has its first answer (the first question
                       takes the sandbox: a warm container or one created on its
                       path), per conversation; an announced burst was created,
                       and its pool warmed, before the phase began
    host/q after       the host while the conversations asked their later questions
                       (each in the sandbox it holds, no container being built: both
                       pools settled first), per later question
    host/conv refill   the host while both pools settled after the first answers and
                       again after the phase's end (the containers the pool built to
                       replace what the phase took, and the removal of the phase's
                       own), per conversation

The busy-cores target is the host's CPU over the later questions' window (after
the refills, so no container is built) over that window's wall time and cores.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from sbx.agent.bench.serve_options import SIDES, ServeBenchOptions
from sbx.sandbox.bench.felt import SERVE, Felt, felt_targets, render_felt
from sbx.sandbox.bench.stats import ratio

QUANTILES = (50, 90, 99)
CPU_PARTS = ("process", "host", "opening", "after", "refill")
"""CPU seconds kept per side: the phases' process and host, and the host's three parts."""
LABELS = {"core": "in-process core", "serve": "sbx serve (HTTP + SSE)", "added": "added by serve"}


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile, linearly interpolated between the closest ranks (0 when empty)."""
    if not samples:
        return 0.0
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _per(total_s: float, count: int) -> float | None:
    """Milliseconds per item, or None when there was none to divide by."""
    return round(1000 * total_s / count, 1) if count else None


@dataclass(kw_only=True)
class LevelFigures:
    """One level: `conversations` at once, each side's samples, CPU and pool takes."""

    conversations: int
    """Conversations at once at this level."""
    seconds: dict[str, list[float]] = field(
        default_factory=lambda: {side: [] for side in SIDES})
    """Each question's latency (asking to its run's end), per side."""
    cpu_s: dict[str, dict[str, float]] = field(
        default_factory=lambda: {side: dict.fromkeys(CPU_PARTS, 0.0) for side in SIDES})
    """CPU seconds per side and part (`CPU_PARTS`; the module docstring says what each is)."""
    takes: dict[str, dict[str, int]] = field(
        default_factory=lambda: {side: {"hit": 0, "miss": 0} for side in SIDES})
    """Sandboxes each side's pool handed out: warm (hit) or created on the spot (miss)."""
    phases: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIDES, 0))
    """Phases run per side (one per round)."""
    wall_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SIDES, 0.0))
    """Wall-clock seconds of each side's phases (asking to the last run's end)."""
    calm_wall_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SIDES, 0.0))
    """Wall-clock seconds of each side's later questions, after both pools settled (the
    window of `cpu_s[side]["after"]`; 0 when opening was not measured apart)."""
    first_answers: dict[str, list[float]] = field(
        default_factory=lambda: {side: [] for side in SIDES})
    """Each conversation's first question (the one that takes its sandbox), per side."""
    first_events: list[float] = field(default_factory=list)
    """Seconds from asking to the first event received over HTTP, every question."""
    separated: bool = True
    """Whether opening the conversations was measured apart from their later questions
    (not when the level is more than the host's caps hold at once: `Opening`)."""

    def latency_ms(self) -> dict[str, dict[str, float]]:
        """p50, p90 and p99 of each side, and what the service adds (serve minus core)."""
        core = {f"p{q}": percentile(self.seconds["core"], q) for q in QUANTILES}
        serve = {f"p{q}": percentile(self.seconds["serve"], q) for q in QUANTILES}
        added = {key: serve[key] - core[key] for key in core}
        return {name: {key: round(value * 1000, 1) for key, value in side.items()}
                for name, side in (("core", core), ("serve", serve), ("added", added))}

    def cpu_ms(self, questions: int) -> dict[str, dict[str, float | None]]:
        """CPU milliseconds per side: per question, per new conversation (see the docstring)."""
        figures: dict[str, dict[str, float | None]] = {}
        for side in SIDES:
            used, asked = self.cpu_s[side], len(self.seconds[side])
            opened = self.phases[side] * self.conversations
            apart = opened if self.separated else 0
            figures[side] = {
                "process_per_question": _per(used["process"], asked),
                "host_per_question": _per(used["host"], asked),
                "host_per_new_conversation": _per(used["opening"], apart),
                "host_per_later_question": _per(used["after"], apart * (questions - 1)),
                "host_refill_per_new_conversation": _per(used["refill"], opened),
            }
        return figures

    def as_json(self, questions: int) -> dict[str, Any]:
        """This level's figures, for `--json`."""
        return {"conversations": self.conversations,
                "questions_per_side": len(self.seconds["serve"]),
                "opening_measured_apart": self.separated,
                "latency_ms": self.latency_ms(), "cpu_ms": self.cpu_ms(questions),
                "first_answer_p99_ms": {side: round(percentile(self.first_answers[side], 99)
                                                    * 1000, 1) for side in SIDES},
                "first_event_p99_ms": round(percentile(self.first_events, 99) * 1000, 1),
                "wall_s": {side: round(self.wall_s[side], 3) for side in SIDES},
                "later_questions_wall_s": {side: round(self.calm_wall_s[side], 3)
                                           for side in SIDES},
                "pool_takes": self.takes}


@dataclass(kw_only=True)
class ServeBenchReport:
    """The figures and the checks (see `sbx.agent.bench.serve`)."""

    options: ServeBenchOptions
    host_room: int = 0
    """Sandboxes of the bench's limits the host's caps hold at once (`SBX_MAX_*`)."""
    levels: list[LevelFigures] = field(default_factory=list)
    unwarmed: int = 0
    """Announced phases whose pool did not hold every conversation's container in time."""
    statuses: Counter[str] = field(default_factory=Counter)
    events_received: int = 0
    events_stored: int = 0
    events_lost: int = 0
    events_unexpected: int = 0
    containers_left: int = 0
    audit: dict[str, str] = field(default_factory=dict)
    server_exit: int | None = None
    problems: list[str] = field(default_factory=list)
    docker_runs_s: list[float] = field(default_factory=list)
    """Hardened `docker run`s of the question, the highest level's count at once, each round."""
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    """The host's cores (the busy-cores target's denominator)."""
    load: list[float] = field(default_factory=list)
    """The host's 1-minute load average before and after the levels (other work shows here)."""

    @property
    def ok(self) -> bool:
        """Every promise held: nothing lost or left, the logs verify, every run completed."""
        return not self.problems

    def check(self) -> None:
        """Record what broke a promise."""
        o = self.options
        expected = 2 * o.rounds * sum(o.levels) * o.questions
        if self.statuses.get("completed", 0) != expected:
            self.problems.append(f"runs that did not complete: {dict(self.statuses)}")
        if self.events_lost or self.events_unexpected:
            self.problems.append(f"{self.events_lost} event(s) lost, "
                                 f"{self.events_unexpected} unexpected")
        if self.containers_left:
            self.problems.append(f"{self.containers_left} container(s) left")
        self.problems += [f"audit log {name}: {verdict}" for name, verdict in self.audit.items()
                          if not verdict.startswith("verifies")]
        if self.server_exit != 0:
            self.problems.append(f"sbx serve exited {self.server_exit} after SIGTERM")
        # Each conversation takes one sandbox, at its first question. With workers, each has
        # its share of the pool and `/metrics` is the one worker's that answered: not counted.
        counted = SIDES if o.workers == 1 else ("core",)
        for level in self.levels:
            for side in counted:
                taken = sum(level.takes[side].values())
                if taken != level.phases[side] * level.conversations:
                    self.problems.append(f"{side} at {level.conversations}: {taken} pool "
                                         f"take(s) for {level.phases[side]} phase(s)")

    def p99_ratio(self) -> dict[str, float | None]:
        """Per side: p99 at the highest level over p99 at the lowest."""
        if len(self.levels) < 2:
            return dict.fromkeys(SIDES)
        low, high = self.levels[0].latency_ms(), self.levels[-1].latency_ms()
        return {side: round(high[side]["p99"] / low[side]["p99"], 2) if low[side]["p99"] else None
                for side in SIDES}

    def felt(self) -> list[Felt]:
        """The speed users feel (`sbx.sandbox.bench.felt`): this bench's figures at its levels."""
        if not self.levels:
            return felt_targets({}, bench=SERVE)
        low, high = self.levels[0], self.levels[-1]
        latency = high.latency_ms()
        process = {side: ratio(high.cpu_s[side]["process"], len(high.seconds[side]))
                   for side in SIDES}
        busy = ratio(high.cpu_s["serve"]["after"], high.calm_wall_s["serve"] * self.cores)
        at = f"at {high.conversations} at once"
        notes = {key: at for key in ("burst", "http_p99", "busy_cores", "service_cpu")
                 if high.conversations != 32}
        if busy is None:
            notes["busy_cores"] = ("needs later questions (--questions 2 or more) and a level "
                                   "the host's caps hold at once")
        elif max(self.load, default=0.0) > self.cores:
            notes["busy_cores"] = (f"the whole host's CPU, other work included: load "
                                   f"{max(self.load):g} on {self.cores} cores")
        first_event = None
        if low.conversations == 1 and len(self.levels) > 1:
            first_event = ratio(percentile(high.first_events, 99),
                                 percentile(low.first_events, 99))
        else:
            notes["first_event"] = "needs the levels 1 and a higher one"
        return felt_targets({
            "burst": ratio(percentile(high.first_answers["serve"], 99),
                            percentile(self.docker_runs_s, 99)),
            "service_cpu": ratio(process["serve"], process["core"]),
            "http_p99": ratio(latency["serve"]["p99"], latency["core"]["p99"]),
            "first_event": first_event,
            "busy_cores": busy,
        }, bench=SERVE, notes=notes)

    def as_json(self) -> dict[str, Any]:
        """Everything, for `--json`."""
        q = self.options.questions
        return {
            "targets": [item.as_json() for item in self.felt()],
            "docker_runs_ms": {f"p{q}": round(percentile(self.docker_runs_s, q) * 1000, 1)
                               for q in QUANTILES},
            "options": asdict(self.options), "host_room": self.host_room, "load": self.load,
            "unwarmed_phases": self.unwarmed,
            "levels": [level.as_json(q) for level in self.levels],
            "p99_ratio_highest_to_lowest": self.p99_ratio(),
            "statuses": dict(self.statuses),
            "events": {"received": self.events_received, "stored": self.events_stored,
                       "lost": self.events_lost, "unexpected": self.events_unexpected},
            "containers_left": self.containers_left, "audit": self.audit,
            "server_exit": self.server_exit, "ok": self.ok, "problems": self.problems,
        }

    def render(self) -> str:
        """The report as text: latency, CPU and pool takes per level, side beside side."""
        o = self.options
        burst = ("announced: opened first, asked once the pools warmed for them"
                 if o.announced else "unannounced: each opened and asked at once")
        lines = [f"{', '.join(map(str, o.levels))} conversation(s) at once x {o.questions} "
                 f"question(s), {o.rounds} round(s) per level, scripted model",
                 f"burst {burst}",
                 *([f"sbx serve --workers {o.workers}: the server's pool figures (takes, "
                    "warming, settling) are one worker's share, the one that answered "
                    "/metrics"] if o.workers > 1 else []),
                 "latency per question, ms      p50       p90       p99"]
        for level in self.levels:
            latency = level.latency_ms()
            lines.append(f"  {level.conversations} at once "
                         f"({len(level.seconds['serve'])} questions per side)")
            lines += [f"    {LABELS[key]:<24}{latency[key]['p50']:>9}{latency[key]['p90']:>10}"
                      f"{latency[key]['p99']:>10}" for key in ("core", "serve", "added")]
        ratio = self.p99_ratio()
        if len(self.levels) > 1:
            lows, highs = self.levels[0].conversations, self.levels[-1].conversations
            lines.append(f"p99 at {highs} / p99 at {lows}: " + ", ".join(
                f"{LABELS[side]} {_x(ratio[side])}" for side in SIDES))
        lines += self._render_cpu()
        lines += render_felt(self.felt())
        if self.unwarmed:
            lines.append(f"  {self.unwarmed} announced phase(s) began before their pool held "
                         "a container per conversation (the host's caps: raise SBX_MAX_*)")
        lines += [
            f"events: {self.events_received} received live over SSE, {self.events_stored} "
            f"stored, {self.events_lost} lost, {self.events_unexpected} unexpected",
            f"containers left: {self.containers_left}",
            *(f"audit log ({name}): {verdict}" for name, verdict in self.audit.items()),
            f"sbx serve exit after SIGTERM: {self.server_exit}",
            "ok" if self.ok else "FAILED: " + "; ".join(self.problems),
        ]
        return "\n".join(lines)

    def _render_cpu(self) -> list[str]:
        """CPU and pool takes per level and side (the module docstring defines the columns)."""
        lines = ["CPU, ms              process/q  host/q  host/conv open  host/q after"
                 "  host/conv refill   pool hit  miss"]
        for level in self.levels:
            cpu = level.cpu_ms(self.options.questions)
            for side in SIDES:
                c, takes = cpu[side], level.takes[side]
                lines.append(
                    f"  {level.conversations:>2} {side:<5}         "
                    f"{_ms(c['process_per_question']):>9}{_ms(c['host_per_question']):>8}"
                    f"{_ms(c['host_per_new_conversation']):>16}"
                    f"{_ms(c['host_per_later_question']):>14}"
                    f"{_ms(c['host_refill_per_new_conversation']):>18}"
                    f"{takes['hit']:>11}{takes['miss']:>6}")
        crowded = [str(level.conversations) for level in self.levels if not level.separated]
        if crowded:
            lines += [f"  -: at {', '.join(crowded)} at once, more than the host's caps hold "
                      f"({self.host_room} sandboxes;", "     SBX_MAX_CPUS, SBX_MAX_SANDBOXES), "
                      "conversations queue for a sandbox: opening is not measured apart"]
        return lines


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value}x"
