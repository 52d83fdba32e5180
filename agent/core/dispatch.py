"""Run one reply's tool calls through the gate: concurrently where allowed, in order where not.

Calls whose tools share a sequential key (every `execute_python` call shares
the run's sandbox session) form one group that runs in the model's order,
because the second program may use the first one's variables. Each other
call is a group of its own. Groups run at once on a small thread pool, and
the outcomes come back in the order of the reply's `tool_calls`, so each
`tool` message follows its call with the matching `tool_call_id`.

Calls always run on the pool, even alone, and the pool's threads block
SIGINT and SIGTERM, so Ctrl-C always lands on the main thread while it waits;
`close(wait=False)` then leaves a running execution to the session's close
instead of blocking on it. (Were the signal delivered to a worker blocked in
`select()` on the sandbox's socket, CPython would retry the `select()` after
EINTR on the same descriptor number, which the main thread may meanwhile
have closed and the engine client reused: the worker would then wait on an
unrelated connection until the execution's deadline.)
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context

from sbx.agent.model.client import ToolCallRequest
from sbx.tools.gate import ToolGate
from sbx.tools.outcome import ToolOutcome

logger = logging.getLogger(__name__)


class ToolDispatcher:
    """Runs tool calls for one run; `close()` it when the run ends."""

    def __init__(self, gate: ToolGate, *, workers: int) -> None:
        self._gate = gate
        self._pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="sbx-tool", initializer=block_interrupts
        )

    def run(self, calls: Sequence[ToolCallRequest]) -> list[ToolOutcome]:
        """Outcomes in the order of `calls`; operator errors from the gate propagate."""
        groups: dict[str, list[int]] = {}
        for index, call in enumerate(calls):
            key = self._gate.sequential_key(call.name)
            groups.setdefault(f"key:{key}" if key else f"call:{index}", []).append(index)
        futures = [
            # each group in a copy of this context: its spans are children of the run's
            (indexes, self._pool.submit(copy_context().run, self._run_group,
                                        [calls[i] for i in indexes]))
            for indexes in groups.values()
        ]
        outcomes: dict[int, ToolOutcome] = {}
        for indexes, future in futures:
            outcomes.update(zip(indexes, future.result(), strict=True))
        return [outcomes[index] for index in range(len(calls))]

    def _run_group(self, calls: list[ToolCallRequest]) -> list[ToolOutcome]:
        return [
            self._gate.call(
                name=call.name, arguments=call.arguments, call_id=call.id,
                model_call_id=call.model_id,
            )
            for call in calls
        ]

    def close(self, *, wait: bool) -> None:
        """Stop the pool; `wait=False` (cancellation) does not block on a running call."""
        logger.debug("Closing the tool pool (wait=%s)", wait)
        self._pool.shutdown(wait=wait, cancel_futures=True)


def block_interrupts() -> None:
    """In a worker thread: leave SIGINT and SIGTERM to the main thread, which cancels the run."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
