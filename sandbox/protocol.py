"""Typed frames of the runner protocol (the runner's side is documented in `images/runner.py`).

The host parses every line with a pydantic discriminated union and strict
models, so a malformed or hostile frame is an error, not a silently wrong
result.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter

PROTOCOL_VERSION = 3
"""3: the runner streams the head of stdout and stderr while code runs (`output` frames), and
the result's text is what those frames did not carry; kernels are forked with the data stack
imported. 2: the runner runs code under its own uid (images/runner.py), with a copy budget.

The host refuses any other version before code runs: an image whose runner predates 3 would
neither stream nor preimport (its output lost with its container, as before), and one before 2
would run code as root."""
MAX_REFUSED_LISTED = 20
"""Refusals one result frame may list (the runner counts the rest in `refused_more`)."""
MAX_RESULTS = 32
"""Rich results one result frame may carry (the runner counts the rest in `results_dropped`)."""
MAX_RESULTS_BYTES = 4 << 20
"""JSON bytes of one frame's results (the runner's own bound: a frame line may grow by this)."""
OUTPUT_CHUNK_BYTES = 64 * 1024
"""Most bytes of stdout or stderr one output frame carries (the runner's own constant)."""
OUTPUT_INTERVAL_S = 0.02
"""Least time between two output frames of one stream unless a whole chunk waits (the
runner's own constant): what bounds the frame count of an honest runner."""


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ReadyFrame(_Frame):
    """The runner is up and its first kernel is starting."""

    type: Literal["ready"]
    protocol: int


class OutputFrame(_Frame):
    """Part of the head of stdout or stderr, sent while the code runs."""

    type: Literal["output"]
    id: int
    seq: int = Field(ge=0)
    """The execution's output frames, counted from 0 across both streams."""
    stream: Literal["stdout", "stderr"]
    data: str = Field(max_length=OUTPUT_CHUNK_BYTES)
    """Whole characters only: a decoded chunk has no more characters than bytes."""


class ArtifactFrame(_Frame):
    """One file from `/output`, base64-encoded."""

    type: Literal["artifact"]
    id: int
    name: str
    size: int = Field(ge=0)
    data: str


class ErrorFrame(_Frame):
    """An uncaught exception in the executed code."""

    type: str
    message: str
    traceback: str


class RefusedFrame(_Frame):
    """An entry of `/output` the runner did not send, and why (both shortened by the runner)."""

    name: str = Field(max_length=1024)
    reason: str = Field(max_length=1024)


class DisplayFrame(BaseModel):
    """One rich result as the runner sends it: a MIME bundle, a DataFrame's data, a chart.

    Lenient on formats (an unknown one is ignored when the result is built), strict on
    types: the kernel that made it runs the code, so it may have been forged.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    bundle: dict[str, JsonValue]
    main: bool = False
    data: dict[str, list[JsonValue]] | None = None
    chart: dict[str, JsonValue] | None = None


class ResultFrame(_Frame):
    """The end of one execution."""

    type: Literal["result"]
    id: int
    exit_code: int
    error: ErrorFrame | None
    stdout: str
    stdout_total: int
    stdout_dropped: int
    stderr: str
    stderr_total: int
    stderr_dropped: int
    timed_out: bool
    killed_signal: int | None
    oom_killed: bool
    state_reset: bool
    cpu_seconds: float | None
    peak_memory_bytes: int | None
    refused: list[RefusedFrame] = Field(max_length=MAX_REFUSED_LISTED)
    refused_more: int = Field(default=0, ge=0)
    results: list[DisplayFrame] = Field(default_factory=list, max_length=MAX_RESULTS)
    """The cell's rich results (absent from a runner that predates them)."""
    results_dropped: int = Field(default=0, ge=0)
    execution_count: int | None = Field(default=None, ge=0)

    def unstreamed_head(self, stream: str) -> str:
        """The head's text of `stream` that no output frame carried.

        That is what precedes the runner's cut marker (`[... N bytes cut ...]` on a
        line of its own), or all of the text when nothing was cut. A character the
        head's end split (one U+FFFD before the marker) is left to the result.
        """
        text, dropped = (
            (self.stdout, self.stdout_dropped) if stream == "stdout"
            else (self.stderr, self.stderr_dropped)
        )
        if dropped <= 0:
            return text
        cut = text.find(f"\n[... {dropped} bytes cut ...]\n")
        return text[:cut].removesuffix("\ufffd") if cut >= 0 else ""


class FatalFrame(_Frame):
    """The runner could not serve the request."""

    type: Literal["fatal"]
    message: str


Frame = Annotated[
    ReadyFrame | OutputFrame | ArtifactFrame | ResultFrame | FatalFrame,
    Field(discriminator="type"),
]
_FRAME = TypeAdapter(Frame)


def parse_frame(line: bytes) -> ReadyFrame | OutputFrame | ArtifactFrame | ResultFrame | FatalFrame:
    """Parse one JSON line from the runner; raises ValueError/ValidationError when malformed."""
    return _FRAME.validate_json(line)


def exec_request(
    *,
    request_id: int,
    code: str,
    timeout: float,
    stdout_cap: int,
    stderr_cap: int,
    max_artifact_bytes: int,
    max_artifacts: int,
    copy_bytes: int,
    copy_refusal: str,
    copy_seconds: float,
    measure: bool = True,
    stream: bool = True,
    display: bool = True,
    print_values: bool = True,
) -> dict[str, object]:
    """The request line the runner expects for one execution.

    `copy_bytes` and `copy_seconds` are the artifact budget: bytes the runner
    may send, and seconds after the request arrives past which it starts no
    new artifact, so copy-out ends inside the host's absolute deadline;
    `copy_refusal` is the reason it gives for files past the byte budget.
    `measure=False` when the host reads the container's cgroup itself
    (`sandbox.accounting`): the runner then skips its own, forgeable readings.
    `stream=False` keeps all output for the result frame (no `output` frames).
    `display=False` (one-shot programs) prints no trailing expression's value;
    `print_values=False` keeps it a result only (sent only then: older runners ignore it).
    """
    return {
        "type": "exec",
        "id": request_id,
        "code": code,
        "timeout": timeout,
        "stdout_cap": stdout_cap,
        "stderr_cap": stderr_cap,
        "max_artifact_bytes": max_artifact_bytes,
        "max_artifacts": max_artifacts,
        "copy_bytes": copy_bytes,
        "copy_refusal": copy_refusal,
        "copy_seconds": copy_seconds,
        "measure": measure,
        "stream": stream,
        "display": display,
        **({} if print_values else {"print_values": False}),
    }
