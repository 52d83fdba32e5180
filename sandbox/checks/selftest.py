"""`sbx selftest`: the containment battery an operator runs on their own host.

Each check tries something a hostile program would try, against the
operator's configured image, runtime and limits, and reports what was tried
and what happened. A check passes only when the attempt was stopped the way
the control promises; anything else (including "could not tell") fails, so a
weakened configuration shows up as failures. The checks are bounded: the
pids check forks at most `pids + 32` children, the flood prints 64 MiB.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from sbx.sandbox.checks.common import Check, Probe
from sbx.sandbox.checks.probes import (
    ARTIFACT_PROBE,
    CPU_PROBE,
    FORK_PROBE,
    INTERFACES_PROBE,
    NETWORK_PROBE,
    PRIVILEGE_PROBE,
)
from sbx.sandbox.checks.protocol import check_mountinfo, check_protocol
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

CANARY_VARIABLE = "SBX_SELFTEST_CANARY"


UNREACHABLE = ("Network is unreachable", "No route to host")


def check_network(probe: Probe) -> list[Check]:
    """No interface but loopback, and no packet reaches the internet, the host or metadata.

    With `probe.egress` off, only the interfaces are listed: nothing is sent
    even if the configuration under test has a network (used by our own tests,
    which must not send traffic off this machine).
    """
    gateway = bridge_gateway(probe.engine) if probe.egress else ""
    code = NETWORK_PROBE.replace("GATEWAY", repr(gateway)) if probe.egress else INTERFACES_PROBE
    facts = probe.facts(code)
    checks = [
        Check(
            name="network.interfaces",
            passed=facts.get("interfaces") == ["lo"],
            tried="list network interfaces",
            happened=f"found {facts.get('interfaces', facts)}",
        )
    ]
    if not probe.egress:
        return checks
    for key, target in (
        ("public", "1.1.1.1:443"),
        ("gateway", f"bridge gateway {gateway}:2375"),
        ("metadata", "169.254.169.254:80"),
    ):
        outcome = str(facts.get(key, "no answer"))
        checks.append(
            Check(
                name=f"network.{key}",
                passed=outcome in UNREACHABLE,
                tried=f"TCP connect to {target}",
                happened=outcome,
            )
        )
    checks.append(
        Check(
            name="network.dns",
            passed=facts.get("dns") != "resolved",
            tried="resolve example.com",
            happened=str(facts.get("dns")),
        )
    )
    return checks


def bridge_gateway(engine: Engine) -> str:
    """The default bridge's gateway address (the host as seen from a bridged container)."""
    try:
        config = engine.api.inspect_network("bridge")["IPAM"]["Config"]
        return str(config[0].get("Gateway", "172.17.0.1"))
    except Exception:
        return "172.17.0.1"


def check_privileges(probe: Probe) -> list[Check]:
    """Non-root, no capabilities, no privilege gain, read-only root, no host paths, no host env."""
    os.environ[CANARY_VARIABLE] = secrets.token_hex(12)  # set on the host: must not get in
    try:
        facts = probe.facts(PRIVILEGE_PROBE)
    finally:
        os.environ.pop(CANARY_VARIABLE, None)
    zero = "0000000000000000"
    env_value = facts.get("env")
    env = [str(name) for name in env_value] if isinstance(env_value, list) else None
    return [
        Check(
            name="privileges.user",
            passed=facts.get("uid") not in (0, None),
            tried="read own uid",
            happened=f"uid {facts.get('uid')}",
        ),
        Check(
            name="privileges.capabilities",
            passed=facts.get("capeff") == zero and facts.get("capbnd") == zero,
            tried="read effective and bounding capability sets",
            happened=f"CapEff {facts.get('capeff')}, CapBnd {facts.get('capbnd')}",
        ),
        Check(
            name="privileges.escalation",
            passed=facts.get("nnp") == 1 and facts.get("setuid") != "became root",
            tried="setuid(0); read no_new_privs",
            happened=f"setuid: {facts.get('setuid')}; no_new_privs={facts.get('nnp')}",
        ),
        Check(
            name="filesystem.root",
            passed=facts.get("root_ro") is True and facts.get("root_write") != "written",
            tried="write to the image's filesystem",
            happened=str(facts.get("root_write")),
        ),
        Check(
            name="filesystem.host_paths",
            passed=not facts.get("docker_sock") and not facts.get("host_mounts"),
            tried="look for the Docker socket and host directories",
            happened=f"docker.sock={facts.get('docker_sock')}, "
            f"host mounts={facts.get('host_mounts')}",
        ),
        Check(
            name="environment.leak",
            passed=env is not None and CANARY_VARIABLE not in env,
            tried=f"look for {CANARY_VARIABLE}, set on the host",
            happened="could not tell"
            if env is None
            else ("absent" if CANARY_VARIABLE not in env else "PRESENT inside"),
        ),
    ]


def check_pids(probe: Probe) -> Check:
    """A fork bomb stops at the process limit (bounded: at most `pids + 32` children)."""
    forks = probe.fresh(
        FORK_PROBE.replace("LIMIT", str(probe.limits.pids + 32)),
        probe.limits.model_copy(update={"timeout": 30.0}),
    )
    words = forks.stdout.split()
    stopped = len(words) > 1 and words[0] == "stopped" and int(words[1]) <= probe.limits.pids
    if probe.limits.runtime == "runsc" and forks.oom_killed and probe.limits.pids <= 1024:
        stopped = True  # gVisor: each process costs Sentry memory; the memory limit may win
    return Check(
        name="limits.pids",
        passed=stopped,
        tried=f"fork up to {probe.limits.pids + 32} children (limit {probe.limits.pids})",
        happened=(forks.stdout.strip() or "; ".join(forks.notes))[:120],
    )


def check_memory(probe: Probe) -> Check:
    """Allocating twice the memory limit is OOM-killed and reported as such."""
    memory = probe.fresh(f"b = bytearray({probe.limits.memory * 2})")
    return Check(
        name="limits.memory",
        passed=memory.oom_killed,
        tried=f"allocate twice the {probe.limits.memory // 2**20} MiB limit",
        happened="OOM-killed" if memory.oom_killed else f"exit {memory.exit_code}",
    )


def check_time(probe: Probe) -> Check:
    """A busy loop is killed at the wall-clock limit."""
    spin = probe.fresh("while True: pass", probe.limits.model_copy(update={"timeout": 2.0}))
    return Check(
        name="limits.time",
        passed=spin.timed_out and spin.duration_s < 10,
        tried="busy loop under a 2 s limit",
        happened=f"stopped after {spin.duration_s:.1f} s" if spin.timed_out else "not stopped",
    )


def check_cpu(probe: Probe) -> Check:
    """Two busy processes get no more CPU time than the quota allows."""
    busy = probe.fresh(CPU_PROBE)
    allowed = 1.5 * probe.limits.cpus * 1.3
    return Check(
        name="limits.cpu",
        passed=busy.cpu_seconds is not None and busy.cpu_seconds <= allowed,
        tried=f"two busy processes for 1.5 s under {probe.limits.cpus:g} CPUs",
        happened=f"{busy.cpu_seconds} CPU seconds used (at most {allowed:.2f} allowed)",
    )


def check_resources(probe: Probe) -> list[Check]:
    """pids, memory, time and CPU limits bite."""
    return [check_pids(probe), check_memory(probe), check_time(probe), check_cpu(probe)]


def check_output(probe: Probe) -> list[Check]:
    """Output floods are capped; artifact tricks are refused."""
    flood = probe.fresh("import sys\nfor _ in range(64):\n    sys.stdout.write('x' * (1 << 20))")
    kept = len(flood.stdout.encode())
    cap = probe.limits.stdout_bytes
    tricks = probe.fresh(ARTIFACT_PROBE.replace("LIMIT", str(probe.limits.max_artifact_bytes)))
    refused = sorted(item.name for item in tricks.refused_artifacts)
    copied = sorted(item.name for item in tricks.artifacts)
    return [
        Check(
            name="output.flood",
            passed=flood.truncated and kept <= cap + 200,
            tried="print 64 MiB",
            happened=f"kept {kept} bytes, dropped {flood.stdout_dropped_bytes}",
        ),
        Check(
            name="output.artifacts",
            passed=refused == ["big.bin", "fifo", "passwd"] and copied == ["ok.txt"],
            tried="symlink to /etc/passwd, a FIFO, an oversized file, a plain file",
            happened=f"copied {copied}, refused {refused}",
        ),
    ]


def check_isolation(probe: Probe) -> list[Check]:
    """Two sessions at once see neither each other's files nor processes; nothing carries over."""
    marker = secrets.token_hex(8)
    holder = (
        f"open('/tmp/{marker}', 'w').write('secret')\n"
        "import subprocess\nsubprocess.run(['sleep', '4.31337'])"
    )
    peek_code = (
        f"import os, time\ntime.sleep(1.5)\nprint(os.path.exists('/tmp/{marker}'))\n"
        "print(sum(1 for p in os.listdir('/proc') if p.isdigit()"
        " and b'4.31337' in open(f'/proc/{p}/cmdline', 'rb').read()))"
    )
    with (
        Session.open(
            SessionSpec(limits=probe.limits, image=probe.image, output_dir=probe.scratch / "a"),
            engine=probe.engine,
        ) as first,
        Session.open(
            SessionSpec(limits=probe.limits, image=probe.image, output_dir=probe.scratch / "b"),
            engine=probe.engine,
        ) as second,
    ):
        busy = threading.Thread(target=first.run, args=(holder,))
        busy.start()
        peek = second.run(peek_code)
        busy.join()
        own = first.run(f"import os\nprint(os.path.exists('/tmp/{marker}'))")
    later = probe.fresh(f"import os\nprint(os.path.exists('/tmp/{marker}'))")
    seen = peek.stdout.split()
    sane = own.stdout.strip() == "True"  # the marker really was written
    return [
        Check(
            name="isolation.files",
            passed=sane and seen[:1] == ["False"],
            tried="read another live session's /tmp file",
            happened=f"visible: {seen[:1]} (written: {sane})",
        ),
        Check(
            name="isolation.processes",
            passed=seen[1:2] == ["0"],
            tried="look for another live session's process",
            happened=f"processes seen: {seen[1:2]}",
        ),
        Check(
            name="isolation.next_run",
            passed=later.stdout.strip() == "False",
            tried="read a file written by an earlier run",
            happened=f"visible: {later.stdout.strip()}",
        ),
    ]


def check_cleanup(probe: Probe, run_ids_before: set[str], started: float) -> list[Check]:
    """No container of ours remains, and the host answered promptly throughout."""
    left = [
        c
        for c in probe.engine.managed_containers()
        if c["Labels"].get("sbx.run_id") not in run_ids_before
        and c["Labels"].get("sbx.owner") == owner_tag()
    ]
    host_started = time.monotonic()
    os.stat("/")
    latency = time.monotonic() - host_started
    return [
        Check(
            name="cleanup.containers",
            passed=not left,
            tried="list sbx containers created by this selftest",
            happened=f"{len(left)} remaining",
        ),
        Check(
            name="host.responsive",
            passed=latency < 1.0,
            tried="stat / on the host after the battery",
            happened=f"{latency * 1000:.1f} ms; battery took {time.monotonic() - started:.0f} s",
        ),
    ]


def run_selftest(
    limits: Limits,
    *,
    image: str = DEFAULT_IMAGE,
    engine: Engine | None = None,
    progress: Callable[[Check], None] | None = None,
    egress: bool = True,
) -> list[Check]:
    """Run every check in order and return the results (and report each as it completes)."""
    engine = engine or Engine.connect()
    engine.require_image(image)
    engine.require_runtime(limits.runtime)
    before = {c["Labels"].get("sbx.run_id", "") for c in engine.managed_containers()}
    started = time.monotonic()
    results: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="sbx-selftest-") as scratch:
        probe = Probe(
            engine=engine, limits=limits, image=image, scratch=Path(scratch), egress=egress
        )
        batches: list[Callable[[], list[Check]]] = [
            lambda: check_network(probe),
            lambda: check_privileges(probe),
            lambda: [*check_protocol(probe), check_mountinfo(probe)],
            lambda: check_resources(probe),
            lambda: check_output(probe),
            lambda: check_isolation(probe),
            lambda: check_cleanup(probe, before, started),
        ]
        for batch in batches:
            for result in batch():
                results.append(result)
                if progress:
                    progress(result)

    return results


def as_json(results: list[Check]) -> str:
    """The report for automation."""
    return json.dumps(
        {"passed": all(r.passed for r in results), "checks": [asdict(r) for r in results]}, indent=2
    )


__all__ = ["Check", "Probe", "as_json", "run_selftest"]
