"""One execution's frames from the runner: an absolute deadline, and a cap on everything taken.

Everything the runner sends is untrusted (security.md, C16): if code ever
reached the stream, or the runner broke, the host must still stop on time and
write no more than the limits allow. So the deadline is fixed when the request
is sent and no frame moves it; artifact frames are counted (an honest runner
sends at most `max_artifacts`); the bytes written to the host are capped per
execution (`output_size`, what `/output` holds) and per run
(`max_run_artifact_bytes`); and the refusals shown are a short list with a
count of the rest. Output frames (live stdout and stderr) are checked by
`sandbox.live_output` under the same deadline: their sequence, their bytes
(no more than the head the result keeps) and their count (the runner's rate).
Refusing an artifact is an ordinary outcome; a stream an honest runner could
not have sent raises `StreamOverrun`, and the session replaces the container.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sbx.sandbox.channel import Channel
from sbx.sandbox.errors import SandboxBroken
from sbx.sandbox.files import ArtifactSink
from sbx.sandbox.limits import Limits
from sbx.sandbox.live_output import LiveOutput, StreamOverrun
from sbx.sandbox.protocol import ArtifactFrame, FatalFrame, OutputFrame, ReadyFrame, ResultFrame
from sbx.sandbox.result import Artifact, RefusedArtifact
from sbx.sandbox.units import format_size

ARTIFACT_FRAME_MARGIN = 4
"""Artifact frames one execution may send beyond `max_artifacts` before the stream counts as
broken. The runner sends at most `max_artifacts`; the margin only keeps a future runner
that reports one or two more things this way from tripping an older host."""


__all__ = ["ARTIFACT_FRAME_MARGIN", "Exchange", "StreamOverrun", "copy_budget"]


def execution_refusal(limits: Limits) -> str:
    """Why an artifact past the per-execution byte cap was not copied."""
    return (
        f"over the {format_size(limits.output_size)} of artifacts one execution may copy out "
        "(output_size)"
    )


def run_refusal(limits: Limits) -> str:
    """Why an artifact past the per-run byte cap was not copied."""
    return (
        f"over the {format_size(limits.max_run_artifact_bytes)} of artifacts one run may "
        "copy out (max_run_artifact_bytes)"
    )


def copy_budget(limits: Limits, run_bytes_left: int) -> tuple[int, str]:
    """The bytes the runner may send in one execution, and the reason it gives past them."""
    if run_bytes_left < limits.output_size:
        return max(run_bytes_left, 0), run_refusal(limits)
    return limits.output_size, execution_refusal(limits)


@dataclass(kw_only=True)
class Exchange:
    """Collect one execution's artifact frames and its result frame, within every cap."""

    channel: Channel
    request_id: int
    limits: Limits
    sink: ArtifactSink
    deadline: float
    """Monotonic time past which the runner counts as lost; set once, never moved."""
    run_bytes_left: int
    """Artifact bytes the run may still write to the host (`max_run_artifact_bytes`)."""
    live: LiveOutput
    """The execution's live output: what streamed before the result (or the runner's loss)."""
    accepted: list[Artifact] = field(default_factory=list)
    refused: list[RefusedArtifact] = field(default_factory=list)
    frames: int = 0
    """Artifact frames received so far."""
    bytes_written: int = 0
    """Artifact bytes written to the host so far."""

    @property
    def max_frames(self) -> int:
        """Artifact frames past which the stream is broken."""
        return self.limits.max_artifacts + ARTIFACT_FRAME_MARGIN

    def collect(self) -> ResultFrame:
        """Take output and artifact frames until the result frame; SandboxBroken on anything else.

        The result's text is what the output frames did not carry: it is returned
        joined to them, so `stdout` and `stderr` read as they always did, and its
        head's share goes to the live callback too, so the live lines end whole.
        """
        while True:
            frame = self.channel.receive(self.deadline)
            if isinstance(frame, FatalFrame):
                raise SandboxBroken(f"runner failed: {frame.message[:200]}")
            if isinstance(frame, ReadyFrame) or frame.id != self.request_id:
                raise SandboxBroken("runner answered out of turn")
            if isinstance(frame, ResultFrame):
                self.live.finish(frame)
                return frame.model_copy(
                    update={
                        "stdout": self.live.text("stdout") + frame.stdout,
                        "stderr": self.live.text("stderr") + frame.stderr,
                    }
                )
            if isinstance(frame, OutputFrame):
                self.live.take(frame, time.monotonic())
            else:
                self.take(frame)

    def take(self, frame: ArtifactFrame) -> None:
        """Count one artifact frame, then write it or record why not."""
        self.frames += 1
        if self.frames > self.max_frames:
            raise StreamOverrun(
                f"runner sent more than {self.max_frames} artifact frames in one execution "
                f"(max_artifacts {self.limits.max_artifacts} + {ARTIFACT_FRAME_MARGIN})"
            )
        reason = self.over_budget(frame)
        if reason is not None:
            self.refused.append(RefusedArtifact(name=frame.name[:300], reason=reason))
            return
        taken = len(self.accepted)
        self.sink.accept(frame, self.accepted, self.refused)
        self.bytes_written += sum(artifact.size for artifact in self.accepted[taken:])

    def over_budget(self, frame: ArtifactFrame) -> str | None:
        """Why writing this frame would pass a byte cap, judged before decoding it."""
        decoded = len(frame.data) * 3 // 4 - frame.data[-2:].count("=")  # exact for base64
        size = max(frame.size, decoded)
        if self.bytes_written + size > self.limits.output_size:
            return execution_refusal(self.limits)
        if self.bytes_written + size > self.run_bytes_left:
            return run_refusal(self.limits)
        return None
