"""`Housekeeper`: the replica's background duties, one thread, one tick.

Every tick (the policy's `[service] heartbeat`, or sooner when `idle_timeout`
is shorter): write this replica's heartbeat; interrupt the conversations and
runs of replicas whose heartbeat went stale (`Replicas.sweep`); release the
sandboxes of conversations idle for `idle_timeout` (`RunManager.release_idle`);
delete runs that ended more than `retention` ago (`retention.expire_runs`);
while callers wait for the host, release the idle sandboxes of keys over their
share (`SandboxShare.tick`); tell the pool how many sandboxes the open conversations
without one will ask for (`SandboxShare.expected`, `[pool] max_size`).
A failing duty is logged and retried at the next tick; it never stops the
others. Start-up recovery and the SIGTERM drain are `Host.open` and
`Host.begin_drain`.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from sbx.agent.core.hosting.retention import expire_runs

if TYPE_CHECKING:
    from sbx.agent.core.hosting.host import Host

logger = logging.getLogger(__name__)


class Housekeeper:
    """Heartbeat, sweep of dead replicas, idle release, retention: see the module docstring."""

    def __init__(self, service: Host) -> None:
        self.service = service
        settings = service.settings
        self.tick_s = max(0.05, min(settings.heartbeat, settings.idle_timeout / 2))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sbx-housekeeper", daemon=True)

    def start(self) -> None:
        """Begin ticking."""
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking and wait for the current tick to end."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def tick(self) -> None:
        """One round of every duty."""
        service = self.service
        state = "draining" if service.draining else "serving"
        for name, duty in (
            ("heartbeat", lambda: service.replicas.heartbeat(state=state)),
            ("sweep", service.replicas.sweep),
            ("idle release", lambda: service.runs.release_idle(service.settings.idle_timeout)),
            ("host share", service.share.tick),
            ("pool demand", lambda: service.app.expect_sessions(service.share.expected())),
            ("retention", lambda: expire_runs(service)),
        ):
            try:
                duty()
            except Exception:
                logger.warning("housekeeping (%s) failed", name, exc_info=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()
