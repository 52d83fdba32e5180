"""The operator at a terminal answers the model's `ask_user`: the faces' `Operator`.

`sbx ask` and `sbx chat` use it when both stdin and stderr are terminals;
elsewhere they let the run end `needs_input` instead. The question is the
model's text: it is shown with every control and bidi character escaped. The
answer is read from stdin in a loop that also watches the run's stop event
and the deadline (`[tools.ask_user] timeout`), so a cancelled or abandoned
question never keeps reading: the next line typed belongs to whoever asks next.
"""

from __future__ import annotations

import select
import sys
import threading
import time
from typing import TextIO

from sbx.agent import safe_text

POLL_S = 0.1
"""How often the wait for a line looks at the stop event and the deadline."""


class TerminalOperator:
    """Asks on `out` (stderr), reads the answer from `stdin`; one question at a time."""

    def __init__(self, stdin: TextIO, out: TextIO) -> None:
        self._stdin = stdin
        self._out = out
        self._lock = threading.Lock()

    def ask(self, question: str, *, stop: threading.Event, timeout: float) -> str | None:
        """The operator's line; None at end of input, when `stop` is set, or past `timeout`."""
        with self._lock:
            shown = safe_text(question, multiline=True)
            self._out.write(f"\nsbx: the model asks you: {shown}\nyour answer> ")
            self._out.flush()
            deadline = time.monotonic() + timeout
            while not stop.is_set() and time.monotonic() < deadline:
                ready, _, _ = select.select([self._stdin], [], [], POLL_S)
                if ready:
                    line = self._stdin.readline()
                    return line.rstrip("\n") if line else None
            if not stop.is_set():  # a cancel says so itself, after the ^C, and the prompt is over
                self._out.write(f"\nsbx: no answer within {timeout:g} s\n")
                self._out.flush()
            return None


def terminal_operator() -> TerminalOperator | None:
    """An operator when a person is at this terminal (stdin and stderr are TTYs), else None."""
    try:
        if sys.stdin.isatty() and sys.stderr.isatty():
            return TerminalOperator(sys.stdin, sys.stderr)
    except (AttributeError, ValueError):  # a closed or replaced stream
        return None
    return None
