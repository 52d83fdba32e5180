"""`Session`: one hardened container with a persistent interpreter, for one agent run.

Variables survive between `run()` calls like a notebook. A timeout or an OOM
kill ends the interpreter; the runner starts a new one and the result says
`state_reset`. If the runner itself stops answering, the session replaces the
whole container and says so. `run_fresh` is the one-shot mode: a new
container per execution.

Lifecycle: `Session.open()` creates, attaches and starts; `close()` (or the
`with` block, Ctrl-C included) kills and removes. Should this process die
without cleaning up, the runner sees its input close and exits, and the
engine's auto-remove deletes the container; `sbx gc` removes anything left.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from pathlib import Path

import docker.errors

from sbx.sandbox.accounting import Baseline, CgroupAccounting
from sbx.sandbox.channel import Channel, ChannelClosed, ChannelTimeout
from sbx.sandbox.closing import Closing
from sbx.sandbox.config import container_config
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import InvalidInput, SandboxBroken
from sbx.sandbox.exchange import Exchange, copy_budget
from sbx.sandbox.files import ArtifactSink, check_output_dir, data_mounts
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.limits import Limits
from sbx.sandbox.live_output import LiveOutput, OutputCallback
from sbx.sandbox.outcome import (
    build_result,
    listed_refusals,
    lost_runner_result,
    merge_host_figures,
    resource_notes,
)
from sbx.sandbox.protocol import (
    MAX_RESULTS_BYTES,
    PROTOCOL_VERSION,
    FatalFrame,
    Frame,
    ReadyFrame,
    exec_request,
)
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.spec import DEFAULT_OUTPUT_ROOT, SessionSpec
from sbx.sandbox.spec import new_run_id as new_run_id  # re-exported: callers name runs too

START_TIMEOUT_S = 60.0
"""Seconds to wait for the runner's ready frame (gVisor starts slower than runc)."""
EXECUTION_GRACE_S = 30.0
"""Seconds past `Limits.timeout` the host waits for an execution's result, from the moment the
request is sent: the deadline is absolute and nothing the container sends extends it.

The grace covers what the runner does after the code ends or is killed (kill strays, drain
the pipes, about 0.1 s) and the copy-out of artifacts, which the runner stops starting
`COPY_MARGIN_S` before the deadline. Measured here under load from other engineers' Docker
tests: about 10 MiB/s through the attach stream under both runtimes (128 MiB in 11 s),
so the 20 s of copy time move about 200 MiB, most of a full default `/output` (256 MiB);
what does not fit is refused and listed, never a lost container."""
COPY_MARGIN_S = 10.0
"""Seconds before the host's deadline at which the runner starts no new artifact: room for
the one in flight (a default 32 MiB artifact takes about 3 s here) and the result frame."""
MIN_TIMEOUT_S = 0.5
"""The shortest execution a caller's `timeout` may ask for: time to report, not to run."""


def code_text(code: str | bytes, limits: Limits) -> str:
    """The program as text, or InvalidInput when it is not UTF-8 or is over the size cap."""
    if isinstance(code, bytes):
        try:
            code = code.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"code is not valid UTF-8 (byte {exc.start})") from None
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput("code contains characters that are not valid UTF-8") from None
    if size > limits.max_code_bytes:
        raise InvalidInput(
            f"code is {size} bytes, over the {limits.max_code_bytes}-byte cap (max_code_bytes)"
        )
    return code


class Session(Closing):
    """A sandbox container kept for one run; use `Session.open()` or a `with` block."""

    def __init__(self, *, engine: Engine, spec: SessionSpec) -> None:
        spec = spec.resolved()
        self.engine = engine
        self.spec = spec
        self.limits = spec.limits
        self.image = spec.image
        self.run_id: str = spec.run_id or new_run_id()
        self.mounts = data_mounts(list(spec.data))
        self.output_dir: Path = spec.output_dir or DEFAULT_OUTPUT_ROOT / self.run_id
        check_output_dir(self.output_dir)
        self._sink: ArtifactSink | None = None
        self.mode = spec.mode
        self.container_id: str | None = None
        self._channel: Channel | None = None
        self._meter: CgroupAccounting | None = None
        self._created_at = 0.0
        """When the container was created (wall clock): where its engine events begin."""
        self._baseline: Baseline | None = None
        self._next_id = 1
        self._lock = threading.Lock()
        self.executions = 0
        self.artifact_bytes = 0
        """Artifact bytes written to the host over this session (`max_run_artifact_bytes`)."""
        self.stream_output = True
        """The runner streams output while code runs (protocol 3). False keeps it all for the
        result, as protocol 2 did: only `sbx bench` does, to measure what streaming costs."""

    @classmethod
    def open(cls, spec: SessionSpec | None = None, *, engine: Engine | None = None) -> Session:
        """Validate the inputs, connect to the engine and start the container."""
        session = cls(engine=engine or Engine.connect(), spec=spec or SessionSpec())
        session.start()
        return session

    def start(self) -> None:
        """Create, attach and start the container, then wait for the runner's ready frame."""
        self.engine.require_image(self.image)
        self.engine.require_runtime(self.limits.runtime)
        config = container_config(
            self.limits,
            run_id=self.run_id,
            mode=self.mode,
            image=self.image,
            data=self.mounts,
            owner=owner_tag(),
            preimport=self.spec.preimport,
            also_import=self.spec.also_import,
        )
        self._created_at = time.time()
        self.container_id = self.engine.create(config)
        try:
            sock, wrapper = self.engine.attach(self.container_id)
            self._channel = Channel(
                sock, max_line_bytes=max_frame_bytes(self.limits), owner=wrapper
            )
            self.engine.start(self.container_id)
            frame = self._channel.receive(time.monotonic() + START_TIMEOUT_S)
            check_ready(frame)
            meter = CgroupAccounting(self.container_id)  # the cgroup exists once started
            self._meter = meter if meter.available else None
            if not meter.available:
                meter.close()
            self._baseline = self._arm_meter()
        except BaseException:
            self.close()
            raise

    def run(
        self,
        code: str | bytes,
        *,
        on_output: OutputCallback | None = None,
        timeout: float | None = None,
        show_values: bool | None = None,
        print_values: bool = True,
    ) -> ExecutionResult:
        """Execute a program in this session's interpreter and report what happened.

        `on_output(stream, text)` receives stdout and stderr while the code runs
        (`sbx.sandbox.live_output`); the result holds the same text, as it always did.
        `timeout`, when shorter than the limits' own, cuts this execution sooner (the
        caller's run is running out of time); it never lengthens it. `show_values` prints a
        trailing expression's value as a notebook does (default: except in fresh mode);
        `print_values=False` gives that value as a result only, never on stdout.
        """
        text = code_text(code, self.limits)
        limits = self.limits
        if timeout is not None and timeout < limits.timeout:
            limits = limits.model_copy(update={"timeout": max(timeout, MIN_TIMEOUT_S)})
        with self._lock:
            if self._channel is None:
                self.start()
            self.executions += 1
            request_id, self._next_id = self._next_id, self._next_id + 1
            meter = self._meter
            baseline = self._baseline  # armed at start and at the end of every run
            started = time.monotonic()
            exchange: Exchange | None = None
            lost = False
            try:
                exchange = self._open_exchange(request_id, started, on_output, limits)
                shown = self.mode != "fresh" if show_values is None else show_values
                result = self._converse(exchange, text, started, shown, print_values)
            except SandboxBroken as exc:  # the channel closed, timed out or broke a cap
                lost = True
                result = self._lost(exc, exchange, started)
            if exchange is not None:
                self.artifact_bytes += exchange.bytes_written
            if meter is not None and baseline is not None:
                after = meter.snapshot()
                peak = meter.peak() if baseline.peak_reset else None
                merge_host_figures(result, baseline.before, after, peak)
                # The next run starts from here: the container is idle in between.
                self._baseline = Baseline(before=after, peak_reset=meter.reset_peak())
            # Derived once, from the final figures: the limits hit first, then how it ended.
            result.notes = [*resource_notes(result, limits), *result.notes]
            if lost:
                self.close()  # replaced on the next run: the interpreter's state is gone
            return result

    def show_file(self, source: Path) -> None:
        """A file just added to one of this session's data directories: nothing to do here.

        A created container bind-mounts each data directory, so the file is visible
        already; a pooled one with its own `/data` copy overrides this (`LeasedSession`).
        """

    def _lost(
        self, exc: SandboxBroken, exchange: Exchange | None, started: float
    ) -> ExecutionResult:
        """The result when the runner was lost or broke a cap; what it copied out is kept."""
        result = lost_runner_result(
            exc,
            oom=self._container_oom_killed(),
            duration=time.monotonic() - started,
            timed_out=isinstance(exc, ChannelTimeout),
            persistent=self.mode == "session",
        )
        if exchange is not None:
            result.stdout = exchange.live.text("stdout")  # what was printed survives the loss
            result.stderr = exchange.live.text("stderr")
            result.artifacts = list(exchange.accepted)
            result.refused_artifacts, result.refused_unlisted = listed_refusals(
                [], 0, exchange.refused
            )
        return result

    def _arm_meter(self) -> Baseline | None:
        """Restart the memory high-water mark and read the counters a run starts from.

        Done when the container starts and reused from each run's closing
        reading, so a run does not touch cgroupfs before its request is sent:
        idle between runs, the runner uses no CPU and no new memory.
        """
        meter = self._meter
        if meter is None:
            return None
        peak_reset = meter.reset_peak()
        return Baseline(before=meter.snapshot(), peak_reset=peak_reset)

    def _open_exchange(
        self,
        request_id: int,
        started: float,
        on_output: OutputCallback | None,
        limits: Limits,
    ) -> Exchange:
        """One execution's caps and absolute deadline, fixed before its request goes out."""
        channel = self._channel
        if channel is None:
            raise ChannelClosed("session is closed")
        return Exchange(
            channel=channel,
            request_id=request_id,
            limits=limits,
            sink=self._artifact_sink(),
            deadline=started + limits.timeout + EXECUTION_GRACE_S,
            run_bytes_left=self.limits.max_run_artifact_bytes - self.artifact_bytes,
            live=LiveOutput(  # not streaming: nothing is live, the result holds it all
                limits=self.limits, started=started,
                callback=on_output if self.stream_output else None,
            ),
        )

    def _converse(
        self, exchange: Exchange, code: str, started: float, shown: bool, printed: bool = True
    ) -> ExecutionResult:
        """Send one request and collect its artifact frames and result frame."""
        copy_bytes, copy_refusal = copy_budget(self.limits, exchange.run_bytes_left)
        exchange.channel.send(
            exec_request(
                request_id=exchange.request_id,
                code=code,
                timeout=exchange.limits.timeout,
                stdout_cap=self.limits.stdout_bytes,
                stderr_cap=self.limits.stderr_bytes,
                max_artifact_bytes=self.limits.max_artifact_bytes,
                max_artifacts=self.limits.max_artifacts,
                copy_bytes=copy_bytes,
                copy_refusal=copy_refusal,
                copy_seconds=exchange.limits.timeout + EXECUTION_GRACE_S - COPY_MARGIN_S,
                measure=self._meter is None,
                stream=self.stream_output,
                display=shown,
                print_values=printed,
            )
        )
        frame = exchange.collect()
        return build_result(
            frame,
            artifacts=exchange.accepted,
            refused=exchange.refused,
            duration=time.monotonic() - started,
            persistent=self.mode == "session",
        )

    def _artifact_sink(self) -> ArtifactSink:
        """The sink of the current output directory, kept across executions.

        It remembers what it wrote, so a rewritten artifact replaces this run's
        own copy and nothing else; a pooled session's new run gets a new sink.
        """
        sink = self._sink
        if sink is None or sink.directory != self.output_dir:
            sink = self._sink = ArtifactSink(
                self.output_dir,
                max_bytes=self.limits.max_artifact_bytes,
                max_count=self.limits.max_artifacts,
            )
        return sink

    def _container_oom_killed(self) -> bool:
        """Whether the engine saw the container's memory limit kill something.

        Under gVisor the limit kills the whole sandbox, and the engine's auto-remove
        may delete it before we ask (on a loaded host it often does): then the
        engine's event log still has the `oom` it recorded. It is asked too when the
        container is still there without `OOMKilled`: the state may be read before
        the engine has recorded the kill, and the log's replay waits a second for it
        (a loaded CI run once reported a gVisor memory kill as the runner stopping).
        """
        if self.container_id is None:
            return False
        try:
            if self.engine.inspect(self.container_id)["State"].get("OOMKilled"):
                return True
        except docker.errors.NotFound:
            pass
        except Exception:
            return False
        return self.engine.saw_oom(self.container_id, since=self._created_at)

    def close(self) -> None:
        """Kill and remove the container, then close the stream (idempotent, any thread).

        Removing first makes a reader blocked in another thread see the stream
        end, rather than its descriptor vanish under it.
        """
        channel, self._channel = self._channel, None
        container_id, self.container_id = self.container_id, None
        meter, self._meter = self._meter, None
        self._baseline = None
        if meter is not None:
            meter.close()
        if container_id is not None:
            self.engine.remove(container_id)
        if channel is not None:
            channel.close()


def check_ready(frame: Frame) -> None:
    """Accept the runner's first frame only if it is `ready` in our protocol version.

    An image whose runner speaks another version is refused before any code runs: an
    older runner would run code as the container's user, which is root now.
    """
    if isinstance(frame, FatalFrame):
        raise SandboxBroken(f"the runner could not start: {frame.message[:300]}")
    if not isinstance(frame, ReadyFrame):
        raise SandboxBroken(f"runner sent {frame.type!r} before 'ready'")
    if frame.protocol != PROTOCOL_VERSION:
        raise SandboxBroken(
            f"the image's runner speaks protocol {frame.protocol}, this sbx needs "
            f"{PROTOCOL_VERSION}: rebuild the image (sbx image build)"
        )


def max_frame_bytes(limits: Limits) -> int:
    """Longest line the runner may legitimately send (JSON escaping can grow text 6x)."""
    text = 6 * (limits.stdout_bytes + limits.stderr_bytes) + (1 << 20)
    artifact = (limits.max_artifact_bytes * 4) // 3 + 4096
    return max(text, artifact) + MAX_RESULTS_BYTES + (64 << 10)


def run_fresh(
    code: str | bytes, spec: SessionSpec | None = None, *, engine: Engine | None = None
) -> ExecutionResult:
    """Run one program in a new container that is removed afterwards (one-shot mode)."""
    spec = replace(spec or SessionSpec(), mode="fresh")
    text = code_text(code, spec.limits)
    with Session.open(spec, engine=engine) as session:
        return session.run(text)
