"""What `sbx serve` tells the E2B face (`sbx.agent.e2b`): its keys, slots, quotas, budgets.

An E2B sandbox is admitted as an MCP session is (the hosting's `ServiceAdmission`):
a `conversations` row (model "e2b") takes a `max_conversations` slot from
`create` until `kill` or its timeout, the key's datasets are its `/data`, and
each execution is a run of the service's `StoreRecorder` (runs per hour, CPU
seconds, money budgets, the replica's queue, the drain). A refusal is the
face's `Refused(429)` with the retry time: the SDK's `RateLimitException`
(`run_code` reports it as a `SandboxException` starting "429"). Keys are
looked up as the service's every route does (`Service.keys`).
"""

from __future__ import annotations

from pathlib import Path

from sbx.agent import Admitted, App, Caller, Owner, ServiceAdmission
from sbx.agent.e2b.sandboxes import Refused
from sbx.agent.service.host import Service

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
                                          label="E2B sandbox", failure=_too_many)

    def authenticate(self, api_key: str) -> Owner:
        """The key's principal and team, or 401."""
        key = self.service.keys.lookup(api_key.strip())  # as every face's keys are
        if key is None:
            raise Refused(401, "the API key is unknown or was revoked")
        return Owner(principal=key.principal, team=key.team, grant=key)

    def admit(self, owner: Owner, sandbox_id: str) -> Admitted:
        """A conversation slot and the key's datasets, or 429 naming the quota.

        Its recorder refuses an execution over a quota the same way.
        """
        opened = self.admission.open(_caller(owner, sandbox_id), sandbox_id)
        return Admitted(data=opened.data, recorder=opened.recorder)

    def release(self, owner: Owner, sandbox_id: str) -> None:
        """The slot is freed, the sandbox's artifacts deleted."""
        self.admission.close(_caller(owner, sandbox_id), sandbox_id)


def _caller(owner: Owner, sandbox_id: str) -> Caller:
    return Caller(key=f"{owner.principal}\ne2b:{sandbox_id}", principal=owner.principal,
                  team=owner.team, grant=owner.grant)


def _too_many(detail: str) -> Refused:
    """A quota's refusal as 429, with the seconds of its "(retry in N s)" as Retry-After."""
    _, found, rest = detail.rpartition("(retry in ")
    try:
        retry = float(rest.split(" ", 1)[0]) if found else None
    except ValueError:
        retry = None
    return Refused(429, detail, retry_after=retry)
