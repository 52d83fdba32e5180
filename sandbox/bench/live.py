"""Live output and the preimported stack in `sbx bench`: targets 3 and 5.

* streamed against buffered: the `1 MiB stdout` workload also runs in a
  session whose runner keeps all output for the result (`Session.stream_output
  = False`, protocol 2's behaviour), as the mode `sbx session (buffered)`;
  target 3a is the streamed session's median over the buffered one's.
* the first chunk: a program prints the wall-clock time and keeps running;
  the host notes when that chunk reaches the callback. The difference is the
  chunk's latency (host and container read the same clock under runc, the
  bench's runtime); target 3b compares its median with a session `print(1)`.
* the idle pooled container's memory with the stack imported: target 5, the
  anonymous memory charged to its cgroup (`memory.py`), RSS and PSS beside it.

Sampled once per latency repetition, interleaved with the other cells.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sbx.sandbox.bench.stats import BenchReport, Summary, Target, ratio
from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.session import Session

SESSION_BUFFERED = "sbx session (buffered)"
"""The session mode with live output off: what streaming is compared with (target 3a)."""
FIRST_CHUNK = "first output chunk"
"""The report's name for the latency of a live chunk (target 3b)."""
FIRST_CHUNK_PROGRAM = "import time\nprint(repr(time.time()), flush=True)\ntime.sleep(0.1)"
"""Prints when it prints, then runs on: the chunk must come live, not with the result."""
STREAM_LIMIT = 1.1
CHUNK_LIMIT = 5.0
ANON_LIMIT_MIB = 96.0


class LiveBench:
    """The buffered session and the first-chunk samples of one bench run."""

    def __init__(self, open_session: Callable[[], Session]) -> None:
        self._open = open_session
        self.buffered: Session | None = None
        self.first_chunk: list[float] = []

    def buffered_session(self) -> Session:
        """A session of its own whose runner sends all output with the result."""
        if self.buffered is None:
            self.buffered = self._open()
            self.buffered.stream_output = False
        return self.buffered

    def sample_first_chunk(self, session: Session | None, report: BenchReport | None) -> None:
        """Seconds from the print to its chunk's arrival on the host, into `report` if given.

        `session` is the bench's streamed session (None before its first sample).
        """
        if session is None:
            return
        arrivals: list[tuple[float, str]] = []
        result = session.run(
            FIRST_CHUNK_PROGRAM, on_output=lambda _, text: arrivals.append((time.time(), text))
        )
        if not result.ok or not arrivals:
            raise SandboxBroken(f"bench: no live chunk arrived ({result.notes or result.stdout!r})")
        arrived, text = arrivals[0]
        if report is not None:
            self.first_chunk.append(max(arrived - float(text.split()[0]), 0.0))
            report.live[FIRST_CHUNK] = Summary.of(self.first_chunk)

    def close(self) -> None:
        """Remove the buffered session's container."""
        if self.buffered is not None:
            self.buffered.close()
            self.buffered = None


def live_targets(report: BenchReport, *, stdout_workload: str, session_mode: str,
                 print_one: str) -> list[Target]:
    """Targets 3a, 3b and 5 from this run's numbers."""
    streamed = ratio(report.median(stdout_workload, session_mode),
                     report.median(stdout_workload, SESSION_BUFFERED))
    chunk = report.live.get(FIRST_CHUNK)
    first = ratio(chunk.median_s if chunk else None, report.median(print_one, session_mode))
    memory = report.idle_memory
    anon = memory.get("cgroup_anon_rss")
    beside = ", ".join(f"{key} {memory[key]:.1f}" for key in ("rss_sum", "pss_sum")
                       if key in memory)
    return [
        _ratio_target("1 MiB stdout, streamed vs buffered session", STREAM_LIMIT, streamed),
        _ratio_target("first live chunk vs session print(1), medians", CHUNK_LIMIT, first),
        Target(
            name="idle pooled container, stack imported: anonymous memory of its cgroup",
            limit=f"<= {ANON_LIMIT_MIB:g} MiB",
            measured="n/a" if anon is None else f"{anon:.1f} MiB ({beside})" if beside
            else f"{anon:.1f} MiB",
            met=None if anon is None else anon <= ANON_LIMIT_MIB,
        ),
    ]


def _ratio_target(name: str, bound: float, value: float | None) -> Target:
    return Target(
        name=name,
        limit=f"<= {bound:g}x",
        measured="n/a" if value is None else f"{value:.3g}x",
        met=None if value is None else value <= bound,
    )
