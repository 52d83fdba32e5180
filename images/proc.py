"""Run one build step as a child process: output to the build log, failure as one line.

debootstrap and pip print hundreds of lines; the operator needs the few that say
where the build is, and on failure the line that says why. Everything goes to the
build log (its path is in the error), selected lines go to `on_line`.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from sbx.images.errors import ImageBuildError


def run_step(
    cmd: Sequence[str],
    *,
    what: str,
    log: TextIO,
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> None:
    """Run `cmd` to completion; raise ImageBuildError naming `what` if it fails.

    The child runs in its own process group. On any interruption (Ctrl-C included)
    the whole group is stopped and the child reaped before the exception
    propagates, so the caller's cleanup never races a live writer (debootstrap's
    dpkg and wget children included).
    """
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    tail: deque[str] = deque(maxlen=20)
    try:
        proc = subprocess.Popen(
            list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", env=None if env is None else dict(env),
            start_new_session=True,
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
        _stop_group(proc)
        raise
    log.flush()
    if code != 0:
        raise ImageBuildError(
            f"{what} failed (exit {code}): {_reason(tail)}; full log: {log.name}"
        )


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the child's group (debootstrap unmounts on TERM), SIGKILL what is left after 5 s."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if sig == signal.SIGKILL or _group_gone(proc.pid):
            return


def _group_gone(pgid: int) -> bool:
    """Whether no process is left in the group (the leader exiting does not end its children)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _reason(tail: deque[str]) -> str:
    """The most telling recent line: an explicit error line if there is one."""
    for line in reversed(tail):
        if line.startswith(("E:", "ERROR", "Error", "error:")) or "Error" in line.split(":")[0]:
            return line
    return tail[-1] if tail else "no output"
