"""Run one build step as a child process: output to the build log, failure as one line.

debootstrap and pip print hundreds of lines; the operator needs the few that say
where the build is, and on failure the line that says why. Everything goes to the
build log (its path is in the error), selected lines go to `on_line`.
"""

from __future__ import annotations

import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from images.errors import ImageBuildError


def run_step(
    cmd: Sequence[str],
    *,
    what: str,
    log: TextIO,
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run `cmd` to completion; raise ImageBuildError naming `what` if it fails.

    On any interruption (Ctrl-C included) the child is killed and reaped before
    the exception propagates, so the caller's cleanup never races a live writer.
    """
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    tail: deque[str] = deque(maxlen=20)
    try:
        proc = subprocess.Popen(
            list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", env=None if env is None else dict(env),
        )
    except OSError as exc:
        raise ImageBuildError(f"{what}: cannot run {cmd[0]!r}: {exc.strerror}") from None
    try:
        pipe = proc.stdout
        if pipe is None:  # pragma: no cover - Popen always sets it with PIPE
            raise ImageBuildError(f"{what}: no output pipe")
        for line in pipe:
            log.write(line)
            text = line.rstrip()
            if text:
                tail.append(text)
                if on_line is not None:
                    on_line(text)
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    log.flush()
    if code != 0:
        raise ImageBuildError(
            f"{what} failed (exit {code}): {_reason(tail)}; full log: {log.name}"
        )


def _reason(tail: deque[str]) -> str:
    """The most telling recent line: an explicit error line if there is one."""
    for line in reversed(tail):
        if line.startswith(("E:", "ERROR", "Error", "error:")) or "Error" in line.split(":")[0]:
            return line
    return tail[-1] if tail else "no output"
