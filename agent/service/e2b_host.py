"""What `sbx serve` tells the E2B face (`sbx.agent.e2b`): its keys, slots, quotas, budgets.

An E2B sandbox is admitted as an MCP session is (`mcp_tenancy.ServiceAdmission`):
a `conversations` row (model "e2b") takes a `max_conversations` slot from
`create` until `kill` or its timeout, the key's datasets are its `/data`, and
each execution is a run of the service's `StoreRecorder` (runs per hour, CPU
seconds, money budgets, the replica's queue, the drain). A refusal is the
face's `Refused(429)`, which the SDK raises as its `RateLimitException`.
"""

from __future__ import annotations

from pathlib import Path

from sbx.agent import App, RunOutcome, RunRecorder, RunTicket
from sbx.agent.e2b.host import Admitted, Refused, Tenant
from sbx.agent.mcp.admission import Caller
from sbx.agent.mcp.admission import Refused as McpRefused
from sbx.agent.service.core import Service
from sbx.agent.service.mcp_tenancy import ServiceAdmission
from sbx.agent.store.keys import lookup_key

E2B_MODEL = "e2b"


class ServiceE2bHost:
    """The service as the E2B face's host; thread-safe."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.app: App = service.app
        self.output_root: Path = service.paths.root / "e2b"
        self.output_root.mkdir(mode=0o700, exist_ok=True)
        self.idle_s = service.settings.idle_timeout
        self.admission = ServiceAdmission(service, self.output_root, model=E2B_MODEL,
                                          label="E2B sandbox")

    def authenticate(self, api_key: str) -> Tenant:
        """The key's principal and team, or 401."""
        key = lookup_key(self.service.db, api_key.strip())
        if key is None:
            raise Refused(401, "the API key is unknown or was revoked")
        return Tenant(principal=key.principal, team=key.team, grant=key)

    def admit(self, tenant: Tenant, sandbox_id: str) -> Admitted:
        """A conversation slot and the key's datasets, or 429 naming the quota."""
        try:
            opened = self.admission.open(_caller(tenant, sandbox_id), sandbox_id)
        except McpRefused as exc:
            raise Refused(429, str(exc), retry_after=_retry(str(exc))) from None
        return Admitted(data=opened.data, recorder=_Translated(opened.recorder))

    def release(self, tenant: Tenant, sandbox_id: str) -> None:
        """The slot is freed, the sandbox's artifacts deleted."""
        self.admission.close(_caller(tenant, sandbox_id), sandbox_id)


def _caller(tenant: Tenant, sandbox_id: str) -> Caller:
    return Caller(key=f"{tenant.principal}\ne2b:{sandbox_id}", principal=tenant.principal,
                  team=tenant.team, grant=tenant.grant)


def _retry(detail: str) -> float | None:
    """The seconds in the refusal's "(retry in N s)", if it says."""
    _, found, rest = detail.rpartition("(retry in ")
    try:
        return float(rest.split(" ", 1)[0]) if found else None
    except ValueError:
        return None


class _Translated:
    """The admission's recorder, whose refusals the E2B face answers as 429."""

    def __init__(self, inner: RunRecorder) -> None:
        self.inner = inner

    def admitted(self, ticket: RunTicket) -> None:
        """Admitted, or `Refused(429)` naming the quota."""
        try:
            self.inner.admitted(ticket)
        except McpRefused as exc:
            raise Refused(429, str(exc), retry_after=_retry(str(exc))) from None

    def started(self, ticket: RunTicket) -> None:
        """Marked running."""
        self.inner.started(ticket)

    def finished(self, ticket: RunTicket, outcome: RunOutcome) -> None:
        """Recorded."""
        self.inner.finished(ticket, outcome)

    def withdrawn(self, ticket: RunTicket) -> None:
        """Nothing ran."""
        self.inner.withdrawn(ticket)
