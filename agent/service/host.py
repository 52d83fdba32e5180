"""`Service`: the hosted conversations of one replica, and what the HTTP face adds to them.

The hosting itself (store, sandbox pool, conversations, drain) is the core's
`Host`; MCP over HTTP and E2B's API work on the same one. HTTP adds the
gateway's state, per-key admission of long work, the `/metrics` registry, the
web page's sign-in provider and the sibling workers of `--workers N`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from sbx.agent import (
    App,
    AppConfig,
    Database,
    DataPaths,
    Endpoint,
    Host,
    Observer,
    Observers,
    Replicas,
    ServeOptions,
)
from sbx.agent.service.admission import Admission
from sbx.agent.service.metrics import Metrics, live_figures
from sbx.agent.service.middleware import GatewayState
from sbx.agent.service.oidc_client import OidcClient, open_client
from sbx.agent.service.siblings import Siblings


class Service(Host):
    """A `Host` served over HTTP: see the module docstring."""

    def __init__(self, *, options: ServeOptions, config: AppConfig, paths: DataPaths,
                 db: Database, replicas: Replicas, app: App, endpoint: Endpoint | None,
                 endpoint_error: str, observer: Observer) -> None:
        self.metrics = Metrics(runtime=config.limits.runtime)
        super().__init__(options=options, config=config, paths=paths, db=db, replicas=replicas,
                         app=app, endpoint=endpoint, endpoint_error=endpoint_error,
                         observer=Observers(self.metrics, observer))
        self.gateway = GatewayState(max_body=self.settings.max_body,
                                    client_timeout=self.settings.client_timeout,
                                    observer=self.observer)
        self.admission = Admission()
        """Per-key slots for long work, and the thread pools kept apart from request threads."""
        self.oidc: OidcClient | None = None
        """The OpenID Connect provider the web page signs in through (`[service.oidc]`)."""
        worker = options.worker
        self.siblings = Siblings(
            self.replicas.me.id, worker.siblings() if worker else {}, db=db,
            primary=worker.primary if worker else None)
        """The other workers of this server, to which changes of their conversations go."""
        self.metrics.watch(lambda: live_figures(self))

    @classmethod
    def open(cls, options: ServeOptions, *, environ: Mapping[str, str],
             observer: Observer | None = None) -> Self:
        """The host opened (see `Host.open`), with the web page's sign-in provider."""
        service = super().open(options, environ=environ, observer=observer)
        try:
            service.oidc = open_client(service.config.service.oidc, environ)
        except BaseException:
            service.close()
            raise
        return service

    def begin_drain(self, grace_s: float) -> None:
        """SIGTERM: the gateway refuses changes from now on; then the host drains."""
        self.gateway.draining = True
        super().begin_drain(grace_s)

    def close(self) -> None:
        """The gateway refuses changes; the host closes (see `Host.close`), then the siblings."""
        self.gateway.draining = True
        try:
            super().close()
        finally:
            self.siblings.close()
