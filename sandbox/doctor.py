"""`sbx doctor`: check the engine, the image, the runtimes, and that limits really bite.

Each check returns a `Check` with a fix for when it fails. The limit checks
run tiny probe programs in real sandboxes, so a misconfigured engine (for
example one that ignores memory limits) shows up here, not in production.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandbox.config import DEFAULT_IMAGE
from sandbox.engine import Engine, first_line
from sandbox.errors import SandboxError
from sandbox.limits import Limits
from sandbox.session import run_fresh

PROBE = """
import os, socket
status = dict(line.split(':', 1) for line in open('/proc/self/status'))
print('uid', os.getuid())
print('capeff', status['CapEff'].strip())
try:
    open('/probe', 'w')
    print('rootfs writable')
except OSError:
    print('rootfs read-only')
try:
    socket.create_connection(('1.1.1.1', 53), timeout=2)
    print('network open')
except OSError:
    print('network closed')
print('env', sorted(k for k in os.environ if 'KEY' in k or 'TOKEN' in k or 'SECRET' in k))
"""


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of the doctor's report."""

    name: str
    """What was checked."""
    ok: bool
    """Whether it passed."""
    detail: str
    """What was found."""
    fix: str = ""
    """What to do when it failed."""


def check_image(engine: Engine, image: str) -> Check:
    """The sandbox image exists locally (we never pull)."""
    try:
        attrs = engine.require_image(image)
    except SandboxError as exc:
        return Check(name="image", ok=False, detail=str(exc), fix="sbx image build")
    recipe = (attrs.get("Config", {}).get("Labels") or {}).get("sbx.recipe", "unknown")
    size_mib = attrs.get("Size", 0) // (1024 * 1024)
    return Check(name="image", ok=True, detail=f"{image} ({size_mib} MiB, recipe {recipe[:12]})")


def check_runtimes(engine: Engine, wanted: str) -> Check:
    """The runtime the limits ask for is registered; list the others."""
    runtimes = sorted(engine.runtimes())
    ok = wanted in runtimes
    return Check(
        name="runtimes",
        ok=ok,
        detail=f"available: {', '.join(runtimes)}; configured: {wanted}",
        fix=""
        if ok
        else "install and register it (security.md, 'gVisor'), or use runtime = 'runc'",
    )


def check_runtime_usable(engine: Engine, image: str, runtime: str, scratch: Path) -> Check:
    """A registered runtime really starts a sandbox (gVisor's KVM platform, for one, hangs)."""
    limits = Limits(runtime=runtime, timeout=20.0)
    try:
        result = run_fresh(
            "print('ok')", limits=limits, image=image, engine=engine, output_dir=scratch
        )
    except SandboxError as exc:
        return Check(
            name=f"runtime {runtime}",
            ok=False,
            detail=first_line(exc),
            fix="see security.md, 'gVisor'",
        )
    ok = result.stdout == "ok\n"
    return Check(
        name=f"runtime {runtime}",
        ok=ok,
        detail=f"usable (started and answered in {result.duration_s:.2f} s)"
        if ok
        else f"did not answer: {'; '.join(result.notes)[:120]}",
        fix="see security.md, 'gVisor'",
    )


def check_hardening(engine: Engine, image: str, limits: Limits, scratch: Path) -> list[Check]:
    """Run the probe program and read back what the code inside could do."""
    result = run_fresh(PROBE, limits=limits, image=image, engine=engine, output_dir=scratch)
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    fix = "report this: the engine did not apply the container config (see security.md)"
    return [
        Check(
            name="non-root user",
            ok=lines.get("uid") not in (None, "0"),
            detail=f"uid {lines.get('uid', '?')}",
            fix=fix,
        ),
        Check(
            name="no capabilities",
            ok=lines.get("capeff") == "0000000000000000",
            detail=f"CapEff {lines.get('capeff', '?')}",
            fix=fix,
        ),
        Check(
            name="read-only root",
            ok=lines.get("rootfs") == "read-only",
            detail=f"root filesystem {lines.get('rootfs', '?')}",
            fix=fix,
        ),
        Check(
            name="no network",
            ok=lines.get("network") == "closed" or limits.network != "none",
            detail=f"network {lines.get('network', '?')} (configured: {limits.network})",
            fix=fix,
        ),
        Check(
            name="no host secrets",
            ok=lines.get("env") == "[]",
            detail=f"secret-like variables inside: {lines.get('env', '?')}",
            fix=fix,
        ),
    ]


def check_limits(engine: Engine, image: str, limits: Limits, scratch: Path) -> list[Check]:
    """A memory hog must be OOM-killed and a busy loop must time out."""
    small = limits.model_copy(update={"memory": 96 * 1024 * 1024, "timeout": 2.0})
    hog = run_fresh(
        "b = bytearray(512 * 1024 * 1024)",
        limits=small,
        image=image,
        engine=engine,
        output_dir=scratch,
    )
    spin = run_fresh(
        "while True: pass", limits=small, image=image, engine=engine, output_dir=scratch
    )
    return [
        Check(
            name="memory limit",
            ok=hog.oom_killed,
            detail="512 MiB allocation under a 96 MiB limit was "
            + ("OOM-killed" if hog.oom_killed else f"not killed (exit {hog.exit_code})"),
            fix="the engine must support memory cgroups (cgroup memory controller enabled)",
        ),
        Check(
            name="wall-clock limit",
            ok=spin.timed_out,
            detail="busy loop under a 2 s limit: "
            + (f"killed after {spin.duration_s:.1f} s" if spin.timed_out else "not killed"),
            fix="report this: the runner did not enforce the timeout",
        ),
    ]


def run_checks(
    limits: Limits, image: str = DEFAULT_IMAGE, scratch: Path | None = None
) -> list[Check]:
    """All checks in order; later ones are skipped when an earlier one makes them meaningless."""
    try:
        engine = Engine.connect()
    except SandboxError as exc:
        return [Check(name="engine", ok=False, detail=str(exc), fix="dockerd &")]
    info = engine.api.info()
    checks = [
        Check(
            name="engine",
            ok=True,
            detail=(
                f"Docker {info.get('ServerVersion', '?')}, "
                f"cgroup v{info.get('CgroupVersion', '?')}, "
                f"{info.get('NCPU', '?')} CPUs"
            ),
        )
    ]
    checks += [check_image(engine, image), check_runtimes(engine, limits.runtime)]
    if not all(check.ok for check in checks):
        return checks
    scratch = scratch or Path("sbx-output") / "doctor"
    checks += [
        check_runtime_usable(engine, image, name, scratch)
        for name in ("runc", "runsc")
        if name in engine.runtimes()
    ]
    try:
        checks += check_hardening(engine, image, limits, scratch)
        checks += check_limits(engine, image, limits, scratch)
    except SandboxError as exc:
        checks.append(Check(name="probe", ok=False, detail=first_line(exc), fix="see the message"))
    return checks
