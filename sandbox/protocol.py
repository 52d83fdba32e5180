"""Typed frames of the runner protocol (the runner's side is documented in `images/runner.py`).

The host parses every line with a pydantic discriminated union and strict
models, so a malformed or hostile frame is an error, not a silently wrong
result.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

PROTOCOL_VERSION = 1


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ReadyFrame(_Frame):
    """The runner is up and its first kernel is starting."""

    type: Literal["ready"]
    protocol: int


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
    """An entry of `/output` the runner did not send, and why."""

    name: str
    reason: str


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
    refused: list[RefusedFrame]


class FatalFrame(_Frame):
    """The runner could not serve the request."""

    type: Literal["fatal"]
    message: str


Frame = Annotated[
    ReadyFrame | ArtifactFrame | ResultFrame | FatalFrame, Field(discriminator="type")
]
_FRAME = TypeAdapter(Frame)


def parse_frame(line: bytes) -> ReadyFrame | ArtifactFrame | ResultFrame | FatalFrame:
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
    measure: bool = True,
) -> dict[str, object]:
    """The request line the runner expects for one execution.

    `measure=False` when the host reads the container's cgroup itself
    (`sandbox.accounting`): the runner then skips its own, forgeable readings.
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
        "measure": measure,
    }
