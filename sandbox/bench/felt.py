"""The speed users feel: one list of targets, each a ratio from one run, for every bench.

`sbx bench` measures all of them (it runs the service's and the restore's
benches as parts of its run, `sbx.agent.bench.every`); `sbx bench serve` and
`sbx bench restore` measure their own and report the whole list too, so a
reader sees in one place what was met, what was not, and which command
measures what a run left out (`measured` is null there, and the note says
why). Every figure is a ratio of two things measured in the same run on the
same host, so a slow or shared host moves both sides.

    burst              32 new conversations over HTTP, each a first pandas question
                       of a 10 MB CSV, pool sized from demand: p99 to `run_end` over
                       the p99 of 32 simultaneous hardened `docker run`s of it
    service_cpu        the server's CPU per question over the in-process core's
    http_p99           p99 per question over HTTP at the highest level over the
                       core's p99 in the same run
    first_event        first event's p99 over HTTP at the highest level over at 1
    busy_cores         the host's busy CPU during the burst, as a share of its cores
    restore_first_answer_vs_live
                       first answer after restoring a 10-cell conversation from its
                       snapshot over a live question's
    restore_first_answer_vs_full_replay
                       the same over the first answer after a full replay
    pooled_cpu         a pooled new conversation (take, first pandas question,
                       teardown, the refill it causes) in host CPU over a hardened
                       `docker run` of the same program
    first_question     kept: first question with a 10 MB CSV, pooled over `docker run`
    idle_memory        kept: an idle warm container's anonymous memory, MiB
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BENCH = "sbx bench"
SERVE = "sbx bench serve"
RESTORE = "sbx bench restore"


@dataclass(frozen=True, kw_only=True)
class Goal:
    """One target: what is compared, its bound, and which bench measures it."""

    key: str
    name: str
    limit: float
    at_least: bool = False
    """True: the figure must reach `limit`; False: it must stay at or below it."""
    unit: str = "x"
    by: str = BENCH


GOALS = (
    Goal(key="burst", by=SERVE, limit=0.1,
         name="burst of 32 new conversations over HTTP, first pandas question of a 10 MB CSV: "
              "p99 to run_end vs p99 of 32 simultaneous hardened docker runs"),
    Goal(key="service_cpu", by=SERVE, limit=1.5,
         name="service CPU per question vs the in-process core's"),
    Goal(key="http_p99", by=SERVE, limit=1.5,
         name="p99 per question over HTTP at 32 vs through the core"),
    Goal(key="first_event", by=SERVE, limit=5.0,
         name="first event p99 over HTTP at 32 vs at 1"),
    Goal(key="busy_cores", by=SERVE, limit=0.9, at_least=True, unit="share",
         name="busy cores during a 32-conversation burst with no container builds, "
             "share of the host's"),
    Goal(key="restore_first_answer_vs_live", by=RESTORE, limit=5.0,
         name="first answer after restoring a 10-cell conversation vs a live question"),
    Goal(key="restore_first_answer_vs_full_replay", by=RESTORE, limit=0.2,
         name="first answer after restoring a 10-cell conversation vs after a full replay"),
    Goal(key="pooled_cpu", limit=1.0,
         name="pooled new conversation (take, first pandas question, teardown): host CPU vs "
              "a hardened docker run of the same program"),
    Goal(key="first_question", limit=0.1,
         name="first question with a 10 MB CSV: pooled vs docker run (latency, kept)"),
    Goal(key="idle_memory", limit=96.0, unit="MiB",
         name="idle warm container: anonymous memory (kept)"),
)
"""The targets of the issue on speed users feel, in its order, and the two it keeps."""


@dataclass(frozen=True, kw_only=True)
class Felt:
    """One target as a run measured it (`measured` None: not in this bench or not measurable)."""

    goal: Goal
    measured: float | None
    note: str = ""

    @property
    def met(self) -> bool | None:
        """Whether the figure is within the bound; None when it was not measured."""
        if self.measured is None:
            return None
        return self.measured >= self.goal.limit if self.goal.at_least \
            else self.measured <= self.goal.limit

    def as_json(self) -> dict[str, Any]:
        """`name`, `limit`, `measured` and `met`, then what a reader needs to judge them."""
        return {
            "name": self.goal.name,
            "limit": self.goal.limit,
            "measured": None if self.measured is None else round(self.measured, 3),
            "met": self.met,
            "key": self.goal.key,
            "bound": "at least" if self.goal.at_least else "at most",
            "unit": self.goal.unit,
            "measured_by": self.goal.by,
            "note": self.note,
        }


def felt_targets(measured: Mapping[str, float | None], *, bench: str,
                 notes: Mapping[str, str] | None = None) -> list[Felt]:
    """Every goal with this run's figure (keys of `measured`); the others say who measures them.

    A goal this bench measures but could not (None) gets the bench's note, if any.
    """
    notes = notes or {}
    unknown = set(measured) - {goal.key for goal in GOALS}
    if unknown:
        raise ValueError(f"not a target: {sorted(unknown)}")
    felt = []
    for goal in GOALS:
        value = measured.get(goal.key)
        note = notes.get(goal.key, "")
        if value is None and not note and goal.by != bench:
            also = "" if goal.by == BENCH or bench == BENCH else f" and `{BENCH}`"
            note = f"measured by `{goal.by}`{also}"
        felt.append(Felt(goal=goal, measured=value, note=note))
    return felt


def merge_felt(*lists: list[Felt]) -> list[Felt]:
    """One list from several benches' (each `felt_targets` of one run): every goal's figure.

    A goal takes the first measured figure among the lists, else the entry of the
    bench that measures it (its note says why it is missing), else the first.
    """
    merged = []
    for index, goal in enumerate(GOALS):
        entries = [items[index] for items in lists if len(items) > index]
        if any(item.goal.key != goal.key for item in entries):
            raise ValueError("each list must hold every goal, in the order of GOALS")
        measured = [item for item in entries if item.measured is not None]
        own = [item for item in entries if item.note and not item.note.startswith("measured by")]
        merged.append((measured or own or entries)[0])
    return merged


def render_felt(felt: list[Felt]) -> list[str]:
    """The targets as text lines: met or not, the figure and its bound."""
    lines = ["What users feel (ratios in this run):"]
    for item in felt:
        goal = item.goal
        bound = ">=" if goal.at_least else "<="
        unit = {"x": "x", "share": ""}.get(goal.unit, f" {goal.unit}")
        verdict = {True: "met", False: "NOT MET", None: "-"}[item.met]
        figure = "n/a" if item.measured is None else f"{item.measured:.3g}{unit}"
        tail = f" ({item.note})" if item.note else ""
        limit = f"{bound} {goal.limit:g}{unit}"
        lines.append(f"  {verdict:<8}{figure:>12}  {limit:<10}  {goal.name}{tail}")
    return lines
