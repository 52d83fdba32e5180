"""Run one tool call in a thread of its own, and stop waiting for it at its timeout.

Python cannot kill a thread, so a call past its timeout is *abandoned*: the
gate stops waiting, records the call as `error` with a message naming the
policy key, and never uses what the thread returns or raises later. The
thread is a daemon (it cannot hold the process open at exit) and blocks
SIGINT and SIGTERM (Ctrl-C always lands on the main thread, as in the
agent's dispatcher). A tool holding a shared resource keeps holding it while
it runs: calls of tools with the same sequential key queue behind it, each
within its own timeout. Waiting also ends when the run is cancelled.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

POLL_S = 0.05
"""How often a wait looks whether the run was cancelled."""


class CallTimedOut(Exception):
    """The call did not finish within its timeout; its thread was abandoned."""


class CallCancelled(Exception):
    """The run was cancelled while the call ran; its thread was abandoned."""


def run_bounded(
    fn: Callable[[], object], *, timeout: float, cancelled: Callable[[], bool], name: str
) -> object:
    """`fn()`'s value (or its exception, re-raised here), waiting at most `timeout` seconds.

    Raises `CallTimedOut` past the timeout and `CallCancelled` once `cancelled()`
    turns true; either way the thread runs on, ignored.
    """
    done = threading.Event()
    box: dict[str, object] = {}

    def target() -> None:
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the waiting thread, which decides
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=target, name=f"sbx-call-{name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not done.wait(max(min(POLL_S, deadline - time.monotonic()), 0)):
        if cancelled():
            raise CallCancelled(name)
        if time.monotonic() >= deadline:
            raise CallTimedOut(name)
    error = box.get("error")
    if isinstance(error, BaseException):
        raise error
    return box.get("value")
