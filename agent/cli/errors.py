"""The CLI's error boundary: operator errors become one line on stderr and an exit code.

Exit codes (documented in the README):
    2    usage error (bad flag or value)
    124  the program hit its wall-clock timeout
    125  sbx could not run it (no engine, no image, bad input, broken sandbox)
    130  interrupted (Ctrl-C or SIGTERM); the sandboxes were removed
    137  the program was killed for reaching its memory limit
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from pydantic import ValidationError

from sbx.agent import SandboxError, describe_validation_error, safe_text

EXIT_TIMEOUT = 124
EXIT_SBX_ERROR = 125
EXIT_INTERRUPTED = 130
EXIT_OOM = 137

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_SBX_ERROR) -> NoReturn:
    """Print `sbx: message` on stderr and exit; the message is escaped (it may quote input)."""
    click.echo(f"sbx: {safe_text(message)}", err=True)
    sys.exit(code)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def operator_errors(command: F) -> F:
    """Wrap a command: SandboxError and Ctrl-C/SIGTERM end in one line, never a stack trace."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        previous = signal.signal(signal.SIGTERM, _terminate)
        try:
            return command(*args, **kwargs)
        except SandboxError as exc:
            fail(str(exc))
        except ValidationError as exc:
            fail(f"invalid value for {describe_validation_error(exc, prefix='--')}", 2)
        except KeyboardInterrupt:
            fail("interrupted; sandboxes removed", EXIT_INTERRUPTED)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return wrapper  # type: ignore[return-value]
