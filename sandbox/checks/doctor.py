"""`sbx doctor`: check the engine, the image, the runtimes, and that the limits really bite.

Each check comes with a fix for when it fails. The hardening and limit checks
reuse a quick subset of `sbx.sandbox.checks.selftest` (privileges, interfaces, memory,
time) in real probe containers, so a misconfigured engine (one that ignores
memory limits, say) shows up here, not in production. `sbx selftest` runs the
whole battery.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

from sbx.sandbox.checks.common import Check
from sbx.sandbox.checks.selftest import (
    Probe,
    check_memory,
    check_network,
    check_privileges,
    check_time,
)
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import SandboxError, first_line
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import run_fresh
from sbx.sandbox.spec import SessionSpec

GVISOR_FIX = "see security.md, 'Operator's hardening guide', item 2 (gVisor)"
ENGINE_FIX = "the engine did not apply the container config; run `sbx selftest` and see security.md"


def check_image(engine: Engine, image: str) -> Check:
    """The sandbox image exists locally (we never pull)."""
    try:
        attrs = engine.require_image(image)
    except SandboxError as exc:
        return Check(name="image", passed=False, happened=str(exc), fix="sbx image build")
    recipe = (attrs.get("Config", {}).get("Labels") or {}).get("sbx.recipe", "unknown")
    size_mib = attrs.get("Size", 0) // (1024 * 1024)
    return Check(
        name="image", passed=True, happened=f"{image} ({size_mib} MiB, recipe {recipe[:12]})"
    )


def check_runtimes(engine: Engine, wanted: str) -> Check:
    """The runtime the limits ask for is registered; list the others."""
    runtimes = sorted(engine.runtimes())
    ok = wanted in runtimes
    return Check(
        name="runtimes",
        passed=ok,
        happened=f"available: {', '.join(runtimes)}; configured: {wanted}",
        fix="" if ok else f"install and register it ({GVISOR_FIX}), or use runtime = 'runc'",
    )


def check_runtime_usable(engine: Engine, image: str, runtime: str, scratch: Path) -> Check:
    """A registered runtime really starts a sandbox (gVisor's KVM platform, for one, hangs)."""
    limits = Limits(runtime=runtime, timeout=20.0)
    try:
        result = run_fresh(
            "print('ok')",
            SessionSpec(limits=limits, image=image, output_dir=scratch),
            engine=engine,
        )
    except SandboxError as exc:
        return Check(
            name=f"runtime {runtime}", passed=False, happened=first_line(exc), fix=GVISOR_FIX
        )
    ok = result.stdout == "ok\n"
    detail = (
        f"usable (started and answered in {result.duration_s:.2f} s)"
        if ok
        else f"did not answer: {'; '.join(result.notes)[:120]}"
    )
    return Check(name=f"runtime {runtime}", passed=ok, happened=detail, fix=GVISOR_FIX)


def check_enforcement(engine: Engine, image: str, limits: Limits, scratch: Path) -> list[Check]:
    """Privileges, interfaces, memory and time, probed in real sandboxes (no traffic sent)."""
    probe = Probe(engine=engine, limits=limits, image=image, scratch=scratch, egress=False)
    results = [
        *check_privileges(probe),
        *check_network(probe),
        check_memory(probe),
        check_time(probe),
    ]
    return [replace(result, fix=ENGINE_FIX) for result in results]


def run_checks(limits: Limits, image: str = DEFAULT_IMAGE) -> list[Check]:
    """All checks in order; probes are skipped when the engine, image or runtime is missing."""
    try:
        engine = Engine.connect()
    except SandboxError as exc:
        return [Check(name="engine", passed=False, happened=str(exc), fix="dockerd &")]
    info = engine.api.info()
    checks = [
        Check(
            name="engine",
            passed=True,
            happened=(
                f"Docker {info.get('ServerVersion', '?')}, "
                f"cgroup v{info.get('CgroupVersion', '?')}, "
                f"{info.get('NCPU', '?')} CPUs"
            ),
        )
    ]
    checks += [check_image(engine, image), check_runtimes(engine, limits.runtime)]
    if not all(check.passed for check in checks):
        return checks
    with tempfile.TemporaryDirectory(prefix="sbx-doctor-") as scratch:
        checks += [
            check_runtime_usable(engine, image, name, Path(scratch))
            for name in ("runc", "runsc")
            if name in engine.runtimes()
        ]
        try:
            checks += check_enforcement(engine, image, limits, Path(scratch))
        except SandboxError as exc:
            checks.append(
                Check(name="probe", passed=False, happened=first_line(exc), fix=ENGINE_FIX)
            )
    return checks
