"""`ExecutionResult`: what one execution did, as data the caller (and the model) can act on.

Errors in model-written code (a traceback, a timeout, an OOM kill) are fields
here, never exceptions: the agent feeds them back so the model corrects
itself. Errors an operator must fix (no engine, no image) are exceptions in
`sandbox.errors`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class ExecutionError(BaseModel):
    """An exception raised by the executed code."""

    model_config = ConfigDict(extra="forbid")

    type: str
    """The exception's class name, e.g. `ZeroDivisionError`."""
    message: str
    """`str()` of the exception."""
    traceback: str
    """The traceback trimmed to the user's own frames (our runner's frames removed)."""


class Artifact(BaseModel):
    """A file the code left in `/output`, copied to the host."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Path relative to `/output`, with `/` separators."""
    path: str
    """Where the copy lives on the host."""
    size: int
    """Size in bytes."""
    sha256: str
    """Hex SHA-256 of the content, as copied."""


class RefusedArtifact(BaseModel):
    """Something in `/output` that was not copied out, and why."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """The name as found in `/output` (it may be hostile; never used as a host path)."""
    reason: str
    """Why it was refused: symlink, special file, unsafe name, too large, too many."""


class DisplayResult(BaseModel):
    """One rich result of a cell, as a notebook shows it.

    The formats IPython's display protocol made of a value: the cell's trailing
    expression, a `display()` call, a figure shown. The field names are E2B's, so
    every face reads the same thing. Everything here came from the code and is
    hostile: sizes are bounded by the runner and again by the host, images are
    checked base64, and HTML, SVG and Markdown must never be rendered unescaped
    (the page shows a table from `data`, not from `html`).
    """

    text: str | None = None
    """text/plain (for the trailing value: what the cell printed for it)."""
    html: str | None = None
    markdown: str | None = None
    svg: str | None = None
    png: str | None = None
    """Base64 of a PNG (a figure shown by `plt.show()`, or an image displayed)."""
    jpeg: str | None = None
    pdf: str | None = None
    latex: str | None = None
    json_data: JsonValue = Field(default=None, alias="json")
    """application/json (named `json` on the wire and in E2B)."""
    data: dict[str, list[JsonValue]] | None = None
    """A DataFrame's first rows as `{column: [values]}` (E2B's `data`), bounded."""
    chart: dict[str, Any] | None = None
    """A matplotlib figure's structured chart (E2B's): type, title, labels, units, elements."""
    is_main_result: bool = False
    """The cell's trailing value (True) or a display()/figure output (False)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StreamCapture(BaseModel):
    """One output stream as kept: head and tail up to the cap, and how much was dropped."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    """The kept text; when truncated, head and tail joined by a marker line."""
    total_bytes: int = 0
    """Bytes the code wrote to this stream in all."""
    dropped_bytes: int = 0
    """Bytes not kept (between head and tail)."""


class ExecutionResult(BaseModel):
    """The outcome of running one program in a sandbox."""

    model_config = ConfigDict(extra="forbid")

    stdout: str = ""
    """Captured standard output (head and tail if truncated)."""
    stderr: str = ""
    """Captured standard error (head and tail if truncated)."""
    exit_code: int = 0
    """0 on success, 1 for an uncaught exception, the code of `sys.exit(n)`, 137 when killed."""
    error: ExecutionError | None = None
    """The uncaught exception, if any."""
    timed_out: bool = False
    """The execution hit `Limits.timeout` and its interpreter was killed."""
    oom_killed: bool = False
    """The interpreter was killed for reaching `Limits.memory`."""
    truncated: bool = False
    """stdout or stderr exceeded its cap; see `stdout_dropped_bytes` / `stderr_dropped_bytes`."""
    stdout_dropped_bytes: int = 0
    """stdout bytes dropped between the kept head and tail."""
    stderr_dropped_bytes: int = 0
    """stderr bytes dropped between the kept head and tail."""
    state_reset: bool = False
    """The session's interpreter was restarted after this execution: variables are gone."""
    duration_s: float = 0.0
    """Wall-clock seconds of the execution as measured on the host."""
    cpu_seconds: float | None = None
    """CPU seconds the container used during the execution, where the cgroup reports it."""
    peak_memory_bytes: int | None = None
    """Highest container memory use seen during the execution, where the cgroup reports it."""
    artifacts: list[Artifact] = Field(default_factory=list)
    """Files copied out of `/output` after this execution (new or changed ones)."""
    refused_artifacts: list[RefusedArtifact] = Field(default_factory=list)
    """Files in `/output` that were not copied, each with the reason (at most 20 listed)."""
    refused_unlisted: int = 0
    """Further refusals counted but not listed: code controls `/output`, so the list is bounded."""
    notes: list[str] = Field(default_factory=list)
    """Plain-language resource notes, e.g. 'killed: memory limit 512 MiB reached'."""
    results: list[DisplayResult] = Field(default_factory=list)
    """Rich results: display() outputs, shown figures and the trailing value, in order."""
    results_dropped: int = 0
    """Further results the cell made past the runner's count or size bound."""
    execution_count: int | None = None
    """The cell's number in its namespace (a notebook's In [n]); None from an older runner."""

    @property
    def ok(self) -> bool:
        """True when the code ran to completion without an error, timeout or kill."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed
