"""`/healthz` (the process answers) and `/readyz` (it can serve: engine, image, store, disk).

Neither needs a key, neither waits for a request thread (`admission`), and
neither says more than each check's name, whether it passed, and a short
reason: a load balancer reads them, so does anyone.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse, Response

from sbx.agent import StoreError
from sbx.agent.service.api import Call, api

if TYPE_CHECKING:
    from sbx.agent.service.host import Service

MIN_FREE_BYTES = 256 * 1024**2
"""Below this much free space in the data dir the replica is not ready (uploads would fail)."""


@api("GET", "/healthz", auth=False)
async def healthz(call: Call) -> Response:
    """The process is up (liveness); answered on the event loop, whatever the threads do."""
    return JSONResponse({"status": "ok", "replica": call.service.replica_id})


@api("GET", "/readyz", auth=False)
async def readyz(call: Call) -> Response:
    """The replica can take work: engine and image, store, disk space (readiness).

    The checks block (engine, database), so they run on the probe's own threads:
    request threads busy with other work never delay the answer.
    """
    service = call.service
    checks: dict[str, str] = await service.admission.probe(lambda: _checks(service))
    ready = all(value.startswith("ok") for value in checks.values())
    return JSONResponse({"status": "ready" if ready else "not ready", "checks": checks},
                        status_code=200 if ready else 503)


def _checks(service: Service) -> dict[str, str]:
    checks: dict[str, str] = {}
    checks["engine"] = service.app.readiness()
    try:
        service.db.ping()
        checks["store"] = "ok"
    except StoreError:
        checks["store"] = "failed: the database does not answer"
    free = shutil.disk_usage(service.paths.root).free
    checks["disk"] = "ok" if free >= MIN_FREE_BYTES else "failed: under 256 MiB free"
    if service.gateway.draining:
        checks["serving"] = "failed: draining"
    return checks
