"""`Limits`: every resource and isolation knob of one sandbox, closed by default.

`Limits()` with no arguments is the hardened configuration: no network, 1 CPU,
512 MiB without swap, a pids limit, a 30 s wall clock per execution, capped
output. Opening anything (network, another runtime) is an explicit field that
the policy file and the audit log show. Unknown keys are an error, so a typo
in a policy file never silently becomes a default.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictInt,
    model_validator,
)

from sbx.sandbox.units import (
    at_most_bytes,
    at_most_seconds,
    format_size,
    parse_cpus,
    parse_duration,
    parse_size,
)

Bytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0), PlainSerializer(int)]
"""A byte count written `512m`, `2g` or `4096`; at most 1 TiB (`units.MAX_SIZE`) anywhere."""
Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
"""Seconds written `30s`, `2m`, `500ms`; at most a week (`units.MAX_DURATION_S`) anywhere."""
Wait = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]
"""Seconds written like `Seconds` that may also be `0s`: a wait the operator can turn off."""
Cpus = Annotated[float, BeforeValidator(parse_cpus), Field(gt=0, le=64)]

MIN_MEMORY = 24 * 1024**2
"""The least memory a sandbox of this image starts in and shows a cell's value, under runc.

The engine itself takes 6 MiB. The runner starts and runs `print(1)` at 13 MiB, but a
cell whose trailing value is shown imports IPython's display protocol: OOM-killed at 21
MiB, shown at 22 (measured with runc, the data stack not imported); 24 MiB keeps a margin."""
MIN_MEMORY_BY_RUNTIME = {"runsc": 48 * 1024**2}
"""Runtimes whose own processes count against the container's memory: gVisor's sentry
needs more (40 MiB measured, 36 MiB did not start)."""
MIN_CPUS = 0.01
"""The engine refuses a CPU quota below a hundredth of a CPU ("Range of CPUs is from 0.01")."""
MIN_PIDS = 16
"""Fewer cannot start the runner; the engine would take it, the sandbox would not work."""


def memory_floor(runtime: str) -> int:
    """The least memory a sandbox starts in under `runtime` (`MIN_MEMORY_BY_RUNTIME`)."""
    return MIN_MEMORY_BY_RUNTIME.get(runtime, MIN_MEMORY)


def at_least_memory(value: int) -> int:
    """Refuse memory below `MIN_MEMORY` here, so no face shows a sandbox dying at its start."""
    if value < MIN_MEMORY:
        raise ValueError(f"memory must be at least {format_size(MIN_MEMORY)} (the least a "
                         "sandbox starts in)")
    return value


def at_least_cpus(value: float) -> float:
    """Refuse a CPU quota below `MIN_CPUS` (the engine's minimum), with a message that says so."""
    if value < MIN_CPUS:
        raise ValueError(f"cpus must be at least {MIN_CPUS:g} (the engine's minimum)")
    return value


Memory = Annotated[Bytes, AfterValidator(at_least_memory)]
"""A memory limit: a byte count no lower than the engine accepts (`MIN_MEMORY`)."""
CpuQuota = Annotated[Cpus, AfterValidator(at_least_cpus)]
"""A CPU quota: no lower than the engine accepts (`MIN_CPUS`)."""

MAX_TIMEOUT_S = 86400.0
"""The longest execution: a day (also keeps deadlines far from timer overflow)."""
MAX_STREAM_BYTES = 64 * 1024**2
"""The most stdout or stderr kept per execution: the host holds it in memory."""
MAX_CODE_BYTES = 64 * 1024**2
"""The largest program accepted: it travels in one frame."""


class Limits(BaseModel):
    """Resource and isolation limits for one sandbox container (and each execution in it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: CpuQuota = 1.0
    """CPU quota in CPUs (`"1.5"` = one and a half cores), enforced by the CFS quota."""
    memory: Memory = parse_size("512m")
    """Memory limit in bytes (`"512m"`); swap is set equal, so the sandbox never swaps."""
    pids: StrictInt = Field(default=256, ge=MIN_PIDS, le=65536)
    """Most processes plus threads alive at once in the container (runc counts threads)."""
    timeout: Annotated[Seconds, AfterValidator(at_most_seconds(MAX_TIMEOUT_S))] = 30.0
    """Wall-clock seconds one execution may run before its interpreter is killed (`"30s"`)."""
    stdout_bytes: Annotated[Bytes, AfterValidator(at_most_bytes(MAX_STREAM_BYTES))] = parse_size(
        "1m"
    )
    """Bytes of stdout kept per execution (head and tail); the rest is counted and dropped."""
    stderr_bytes: Annotated[Bytes, AfterValidator(at_most_bytes(MAX_STREAM_BYTES))] = parse_size(
        "256k"
    )
    """Bytes of stderr kept per execution (head and tail); the rest is counted and dropped."""
    tmp_size: Bytes = parse_size("256m")
    """Size of the `/tmp`, `/work` and `/home/user` scratch tmpfs mounts (each); counts
    against memory."""
    output_size: Bytes = parse_size("256m")
    """Size of the `/output` tmpfs where the code leaves artifacts."""
    max_artifact_bytes: Bytes = parse_size("32m")
    """Largest single artifact copied out of `/output`; bigger ones are refused and reported."""
    max_artifacts: StrictInt = Field(default=64, ge=0, le=10_000)
    """Most artifacts copied out per execution; the rest are refused and reported."""
    max_run_artifact_bytes: Bytes = parse_size("1g")
    """Most artifact bytes copied to the host over one session, all executions together.

    One execution copies out at most `output_size` (what `/output` holds); past
    this run-wide cap later artifacts are refused and reported, not written."""
    max_code_bytes: Annotated[Bytes, AfterValidator(at_most_bytes(MAX_CODE_BYTES))] = parse_size(
        "1m"
    )
    """Largest program accepted for one execution."""
    network: Literal["none", "bridge"] = "none"
    """`none` (default): no network device but loopback. `bridge` opens egress: audited."""
    runtime: str = Field(default="runc", pattern=r"^[a-z][a-z0-9._-]{0,63}$")
    """OCI runtime registered with the engine: `runc` (default) or `runsc` (gVisor)."""
    seccomp: str = Field(default="sbx", min_length=1)
    """Seccomp profile: `sbx` (the shipped allowlist, sandbox/seccomp.json) or a JSON file."""
    nofile: StrictInt = Field(default=1024, ge=64, le=1_048_576)
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    fsize: Bytes = parse_size("256m")
    """Largest file a process may write (RLIMIT_FSIZE), a second bound beside the tmpfs sizes."""

    @model_validator(mode="after")
    def _memory_for_the_runtime(self) -> Limits:
        """A runtime whose own processes share the container's memory needs more of it."""
        floor = memory_floor(self.runtime)
        if self.memory < floor:
            raise ValueError(f"memory must be at least {format_size(floor)} with runtime "
                             f"{self.runtime} (the least a sandbox starts in)")
        return self
