"""Who calls a tool session, and what its host lets them do: `Caller`, `Admission`, `Refused`.

A tool session for another agent (MCP, E2B) knows nothing of API keys, quotas
or datasets. The face that serves it says, for every request, who calls and
which session the request belongs to (a `Caller`, from the transport and its
authentication, never from a tool argument), and the host answers through its
`Admission`:

    open(caller, session_id)       may this caller open a session now; with which data
                                   (`/data`), which extra gate tools, and which
                                   `RunRecorder` accounts for its executions (runs per
                                   hour, CPU seconds, the replica's queue)
    close(caller, session_id)      the session ended: free what `open` took

`FixedData` is MCP over stdio's: one principal, the `--data` paths, no limits
beyond the policy's gate. A host's sessions (`/mcp` and E2B's sandboxes on
`sbx serve`) have `ServiceAdmission` (`sbx.agent.core.hosting.session_tenancy`).
An admission refuses with `Refused`: the calling model reads the message as a
tool error and the session goes on, unlike an operator error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sbx.agent.core.limits_request import LimitsRequest
from sbx.agent.core.run_recorder import NoRecorder, RunRecorder
from sbx.tools.registry import Tool


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who sends a request and which session it belongs to, as the face established it."""

    key: str
    """The session's key, unique across principals (a stdio connection has one)."""
    principal: str
    """Who calls, as the face authenticated them: every audit record of the session has it."""
    team: str | None = None
    """The principal's team, as the face authenticated it (audited beside the principal)."""
    grant: object = None
    """What the face authenticated (an API key's record), handed back to its `Admission`."""
    limits: LimitsRequest = field(default_factory=LimitsRequest)
    """Sandbox limits the client asked for its session: only below the policy's (the face
    refused anything above it before the call came here)."""


@dataclass(frozen=True, kw_only=True)
class Opened:
    """What a session gets when its face lets it open."""

    data: tuple[Path, ...] = ()
    """Files mounted read-only at `/data/<name>` (the host-side data tools read only these)."""
    tools: tuple[Tool, ...] = ()
    """Gate tools of the face, besides the built-ins (`upload_dataset` over HTTP)."""
    recorder: RunRecorder = field(default_factory=NoRecorder)
    """Hears each execution admitted (or refusing it with `Refused`), started and ended."""


class Refused(Exception):
    """The face's limits refuse this call now (a quota, a full queue); the message says which."""


class Admission(Protocol):
    """A face's say over sessions and executions (see the module docstring); thread-safe."""

    def open(self, caller: Caller, session_id: str) -> Opened:
        """Let a session open (or raise `Refused`); its data and extra tools."""
        ...

    def close(self, caller: Caller, session_id: str) -> None:
        """The session ended (its sandbox is gone): release what `open` reserved."""
        ...


class FixedData:
    """The stdio face: every session gets the same data; nothing beyond the gate is limited."""

    def __init__(self, data: Sequence[Path] = ()) -> None:
        self.data = tuple(data)

    def open(self, caller: Caller, session_id: str) -> Opened:
        """The `--data` paths."""
        return Opened(data=self.data)

    def close(self, caller: Caller, session_id: str) -> None:
        """Nothing was reserved."""
