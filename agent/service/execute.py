"""`POST /v1/execute`: one program in a sandbox of its own, for callers that bring their own agent.

The call goes through the same tool gate as a model's `execute_python` (the
policy must enable it; the audit log records the request, the decision and
the outcome under the caller's principal), in a workspace opened for this
call and removed after it. It counts as a run for `runs_per_hour` and its
CPU seconds for `cpu_seconds_per_day`. When the host's sandbox cap stays
full (`HostBusy`) the answer is 503 with `Retry-After`.

The result comes back as JSON when the execution ends, or, for a client
that sends `Accept: text/event-stream`, as Server-Sent Events: the output
while the code runs, then the same result (`execute_stream.py`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from starlette.responses import Response, StreamingResponse

from sbx.agent.core.config import AppConfig
from sbx.agent.core.workspace import Workspace, WorkspaceSpec
from sbx.agent.service.api import Call, api, json_response
from sbx.agent.service.datasets_held import datasets_held
from sbx.agent.service.execute_stream import Cancellation, ExecutionStream
from sbx.agent.service.outcomes import notify
from sbx.agent.service.problems import Problem, unavailable
from sbx.agent.service.quotas import effective_quotas, reserve_run
from sbx.agent.service.runs import artifact_row
from sbx.agent.service.runs_api import artifact_out
from sbx.agent.service.schemas import ExecuteCode, ExecutionOut
from sbx.agent.service.store.db import lock_principal
from sbx.agent.service.store.models import ArtifactRow, Run
from sbx.agent.service.tenancy import dataset_paths, limits_within
from sbx.agent.service.tenant_view import incident
from sbx.sandbox.errors import HostBusy
from sbx.sandbox.session import new_run_id
from sbx.tools.context import OutputSink
from sbx.tools.gate import ToolGate

HOST_BUSY_RETRY_S = 10.0


@api("POST", "/v1/execute", body=ExecuteCode, response=ExecutionOut, streams="text/event-stream",
     work=True)
def execute(call: Call, body: ExecuteCode) -> Response:
    """Run one program in a fresh sandbox with some of your datasets; JSON, or SSE on request."""
    service = call.service
    if not service.config.policy.tools.execute_python.enabled:
        raise Problem(403, "tool-disabled", "the policy does not enable execute_python")
    limits = limits_within(service.config.limits, body.limits)
    if len(body.code.encode()) > limits.max_code_bytes:
        raise Problem(413, "code-too-large", f"code: at most {limits.max_code_bytes} bytes "
                      "(the policy's [sandbox] max_code_bytes)")
    run_id = new_run_id()
    service.runs.admit()
    released = False
    try:
        with service.db.write() as session:
            lock_principal(session, call.principal)  # before the datasets: see datasets_held
            ids = list(dict.fromkeys(body.datasets))
            data = dataset_paths(session, ids, call.principal, service.paths.datasets)
            reserve_run(session, call.principal,
                        effective_quotas(service.settings.quotas, call.key), time.time())
            session.add(Run(id=run_id, kind="execute", principal=call.principal,
                            replica_id=service.replica_id, status="running", question="",
                            message="", cpu_seconds=0.0, created_at=time.time(),
                            started_at=time.time(), result=datasets_held(ids)))
        config = replace(service.config, limits=limits)
        if "text/event-stream" in call.headers.get("accept", ""):
            streamed = _streamed(call, run_id, data, config, body.code)
            released = True  # the stream's thread releases the place when the code ends
            return streamed
        out = _run(call, run_id, data, config, body.code)
    finally:
        if not released:
            service.runs.release()
    return json_response(out)


def _streamed(call: Call, run_id: str, data: tuple[Path, ...], config: AppConfig, code: str
              ) -> Response:
    """Run on a thread of its own; the output and then the result as Server-Sent Events."""
    cancellation = Cancellation()

    def work(on_output: OutputSink) -> ExecutionOut:
        try:
            return _run(call, run_id, data, config, code, on_output=on_output,
                        watch=cancellation.watch)
        finally:
            call.service.runs.release()

    stream = ExecutionStream(work, cancel=cancellation.cancel, request_id=call.request_id)
    stream.start()
    return StreamingResponse(stream.events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _run(call: Call, run_id: str, data: tuple[Path, ...], config: AppConfig, code: str, *,
         on_output: OutputSink | None = None, watch: Callable[[ToolGate], None] | None = None
         ) -> ExecutionOut:
    """Open the workspace and its gate, make the one call, record the run, close everything.

    `on_output` gets the output while the code runs; `watch` the gate (to cancel its call).
    """
    service = call.service
    output = service.paths.executions / run_id
    workspace = Workspace(
        spec=WorkspaceSpec(owner_id=run_id, principal=call.principal, data=data, output=output),
        config=config, audit=service.app.audit, pool=service.app.pool, image=service.app.image,
    )
    try:
        with workspace:
            gate = workspace.open_gate(run_id, on_output=on_output)
            if watch is not None:
                watch(gate)
            try:
                outcome = gate.call(name="execute_python",
                                    arguments=json.dumps({"code": code}), call_id="call-1")
            finally:
                gate.close(reason="completed")
        text = outcome.text
        execution = outcome.execution.model_dump(mode="json") if outcome.execution else None
        status = outcome.status if outcome.status != "ok" else (
            "error" if outcome.failed else "ok")
        artifacts = tuple(artifact.path for artifact in outcome.artifacts)
        message = text.splitlines()[0] if text else ""
    except HostBusy as exc:  # nothing ran: the attempt costs no run of the hourly quota
        with service.db.write() as session:
            session.execute(delete(Run).where(Run.id == run_id))
        raise unavailable(f"the host is at its sandbox cap: {exc}", HOST_BUSY_RETRY_S) from None
    except Exception as exc:
        _record(call, run_id, "error", incident(f"execution {run_id}", exc), None, 0.0, ())
        raise
    cpu = float((execution or {}).get("cpu_seconds") or 0.0)
    rows = _record(call, run_id, status, message, execution, cpu, artifacts)
    notify(service.observer.execution_finished, principal=call.principal, run_id=run_id,
           status=status, execution=execution)
    view = service.tenant_view  # as the stored row: no host path, no secret
    return ExecutionOut(run_id=run_id, status=status, observation=view.text(text),
                        execution=view.value(execution),
                        artifacts=[artifact_out(row) for row in rows])


def _record(call: Call, run_id: str, status: str, message: str, execution: dict[str, Any] | None,
            cpu: float, artifacts: tuple[str, ...]) -> list[ArtifactRow]:
    output = call.service.paths.executions / run_id
    with call.service.db.write() as session:
        row = session.get(Run, run_id)
        if row is not None:
            row.status, row.message, row.cpu_seconds, row.ended_at = (
                status, message[:2000], cpu, time.time())
            row.result = {"execution": execution} if execution is not None else None
        for path in artifacts:
            artifact = artifact_row(path, output, run_id, call.principal)
            if artifact is not None:
                session.add(artifact)
    with call.service.db.read() as session:
        return list(session.scalars(select(ArtifactRow).where(ArtifactRow.run_id == run_id)))
