"""`sbx selftest` checks that the runner protocol is the runner's alone, and what `/proc` shows.

User code runs under its own uid (images/runner.py), so it must not be able to open
the descriptors that carry the protocol (init's and the runner's ends of the attach
stream), open their memory, or signal them: with any of these it could forge results
or take a session over. Signal 0 and opening `/proc/<pid>/mem` test the permission
without side effects, so a weakened configuration fails these checks rather than
hanging the battery. The mount table is reported too: under runc it names the
engine's overlay directories on the host, which no runc option hides.
"""

from __future__ import annotations

from sbx.sandbox.checks.common import Check, Probe
from sbx.sandbox.checks.probes import MOUNTINFO_PROBE, PROTOCOL_PROBE

HOST_PATH_MARKERS = ("lowerdir=", "upperdir=", "workdir=", "/var/lib/docker/")
"""What betrays a host path in a mount line: overlay options, or the engine's data root."""


def denied(attempts: object, expected: int) -> bool:
    """Every one of `expected` attempts was refused (anything else, unknown included, fails)."""
    if not isinstance(attempts, dict) or len(attempts) != expected:
        return False
    refusals = ("Permission denied", "Operation not permitted")
    return all(outcome in refusals for outcome in attempts.values())


def check_protocol(probe: Probe) -> list[Check]:
    """Code cannot open init's or the runner's descriptors, their or the zygote's memory.

    Nor can it signal any of the three.
    """
    facts = probe.facts(PROTOCOL_PROBE)
    uids = facts.get("uids")
    uids = uids if isinstance(uids, dict) else {}
    code = uids.get("code")
    return [
        Check(
            name="protocol.users",
            passed=code is not None
            and code not in (uids.get("init"), uids.get("runner"), uids.get("zygote")),
            tried="compare the code's uid with the runner's, the zygote's and init's",
            happened=f"code {code}, runner {uids.get('runner')}, zygote {uids.get('zygote')}, "
            f"init {uids.get('init')}"
            if uids
            else str(facts)[:120],
        ),
        Check(
            name="protocol.descriptors",
            passed=denied(facts.get("descriptors"), 4),
            tried="open the attach stream's ends held by init and the runner (/proc/<pid>/fd)",
            happened=str(facts.get("descriptors", facts))[:160],
        ),
        Check(
            name="protocol.memory",
            passed=denied(facts.get("memory"), 3),
            tried="open init's, the runner's and the zygote's memory (/proc/<pid>/mem, the "
            "ptrace check)",
            happened=str(facts.get("memory", facts))[:120],
        ),
        Check(
            name="protocol.signals",
            passed=denied(facts.get("signals"), 3),
            tried="signal init, the runner and the zygote (signal 0: the permission check alone)",
            happened=str(facts.get("signals", facts))[:120],
        ),
    ]


def check_mountinfo(probe: Probe) -> Check:
    """Host paths in the mount table: hidden under gVisor; a known limit under runc."""
    condition = " or ".join(f"{marker!r} in line" for marker in HOST_PATH_MARKERS)
    facts = probe.facts(MOUNTINFO_PROBE.replace("HOST_MARKERS", condition))
    host = facts.get("host")
    tried = "look for host paths in /proc/self/mountinfo"
    if not isinstance(host, list) or not facts.get("lines"):
        return Check(
            name="filesystem.mountinfo", passed=False, tried=tried, happened=str(facts)[:120]
        )
    if not host:
        return Check(
            name="filesystem.mountinfo", passed=True, tried=tried, happened="no host path shown"
        )
    shown = f"{len(host)} mount(s) name the engine's directories on the host"
    if probe.limits.runtime == "runc":
        return Check(
            name="filesystem.mountinfo",
            passed=True,
            limit=True,
            tried=tried,
            happened=f"runc limit; use runsc: {shown} (no runc option hides them)",
        )
    return Check(name="filesystem.mountinfo", passed=False, tried=tried, happened=shown)
