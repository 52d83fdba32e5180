"""What `sbx bench serve` runs: the levels of concurrency, questions, rounds, image.

Kept apart so the CLI face validates `--levels` with the same rule the harness
relies on (`parse_levels`), before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from sbx.agent.core.app import DEFAULT_IMAGE

SIDES = ("core", "serve")
"""The two ways the same conversations run: through the in-process core, and over HTTP."""
MAX_LEVEL = 64
"""Most conversations at once in one level (each holds a sandbox under the host's caps)."""
MAX_LEVELS = 5
"""Most levels in one run (each level runs every round of both sides)."""
DEFAULT_LEVELS = (1, 8, 32)


class ServeBenchError(RuntimeError):
    """The bench could not finish (the server did not start, a request or a run failed)."""


def parse_levels(text: str) -> tuple[int, ...]:
    """`1,8,32` as ascending distinct levels; `ValueError` saying what is wrong otherwise."""
    parts = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not part.isdigit() for part in parts):
        raise ValueError(f"{text[:40]!r}: give whole numbers separated by commas, e.g. 1,8,32")
    levels = [int(part) for part in parts]
    if any(level < 1 or level > MAX_LEVEL for level in levels):
        raise ValueError(f"each level is 1 to {MAX_LEVEL} conversations at once")
    if len(set(levels)) != len(levels):
        raise ValueError("each level may be given once")
    if len(levels) > MAX_LEVELS:
        raise ValueError(f"at most {MAX_LEVELS} levels in one run")
    return tuple(sorted(levels))


@dataclass(frozen=True, kw_only=True)
class ServeBenchOptions:
    """What to run."""

    levels: tuple[int, ...] = DEFAULT_LEVELS
    """Conversations at once, one level after another in ascending order (`parse_levels`)."""
    questions: int = 3
    """Questions per conversation, asked in turn."""
    rounds: int = 2
    """Each round runs both sides once per level; the order alternates between rounds (ABBA)."""
    image: str = DEFAULT_IMAGE
    """The sandbox image both sides use."""
    announced: bool = True
    """Open every conversation of a phase and let both pools warm for them before anyone
    asks (analysts who opened the page before 9 a.m.: `sbx serve` counts open conversations
    without a sandbox as coming demand; the core side is told the same with
    `App.expect_sessions`). False: each conversation is opened and asked at once, a burst
    the pool only sees as it arrives."""

    workers: int = 1
    """`sbx serve --workers N` (worker processes over the same store; 1: the single process
    every `sbx serve` has). Their CPU counts as the server's."""

    @property
    def most(self) -> int:
        """The highest level: what the service's queue and the pool's `max_size` allow."""
        return max(self.levels)
