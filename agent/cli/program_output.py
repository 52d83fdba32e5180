"""`ProgramOutput`: the output of the program `sbx exec` runs, written as it arrives.

Not progress (that is `display.Progress`, sbx's own lines): this is the
program's own stdout and stderr, passed through to the user's streams.
"""

from __future__ import annotations

from typing import TextIO

from sbx.agent import safe_text


class ProgramOutput:
    """A program's own output (`sbx exec`), written as it arrives from the sandbox.

    To a terminal each piece is escaped (`safe_text`), so the program cannot drive it;
    to a pipe or file it goes as written. What was written stays written when the
    user presses Ctrl-C. `remaining` is what the result holds beyond what arrived
    live (the kept tail, the sandbox's cut marker), so nothing is written twice.
    """

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._streams = {"stdout": out, "stderr": err}
        self._written = {"stdout": 0, "stderr": 0}

    def __call__(self, stream: str, text: str) -> None:
        """The sandbox's live output callback: write `text` to its stream now."""
        target = self._streams.get(stream)
        if target is None:
            return
        self.write(target, text)
        self._written[stream] += len(text)

    def relay(self, call_id: str, stream: str, text: str) -> None:
        """The core's output sink (`on_output(call_id, stream, text)`): one program, any call."""
        self(stream, text)

    def remaining(self, stream: str, whole: str) -> str:
        """The part of the result's `whole` stream not written live."""
        done = self._written.get(stream, 0)
        return whole[done:] if done <= len(whole) else ""

    @staticmethod
    def write(target: TextIO, text: str) -> None:
        """Escaped on a terminal, as written elsewhere; a lone surrogate as `\\udXXX`."""
        if target.isatty():
            text = safe_text(text, multiline=True)
        target.write(text.encode("utf-8", "backslashreplace").decode("utf-8"))
        target.flush()
