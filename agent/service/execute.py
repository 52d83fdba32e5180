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

from sqlalchemy import select
from starlette.responses import Response, StreamingResponse

from sbx.agent import (
    ArtifactRow,
    Cancellation,
    HostBusy,
    LimitsRequest,
    OutputSink,
    ProgramSpec,
    StoreRecorder,
    call_status,
    dataset_paths,
    limited,
    new_run_id,
    tenant_of,
)
from sbx.agent.service.api import Call, api, json_response
from sbx.agent.service.execute_stream import ExecutionStream
from sbx.agent.service.problems import Problem, unavailable
from sbx.agent.service.runs_api import artifact_out
from sbx.agent.service.schemas import ExecuteCode, ExecutionOut

HOST_BUSY_RETRY_S = 10.0


@api("POST", "/v1/execute", body=ExecuteCode, response=ExecutionOut, streams="text/event-stream",
     work=True)
def execute(call: Call, body: ExecuteCode) -> Response:
    """Run one program in a fresh sandbox with some of your datasets; JSON, or SSE on request."""
    service = call.service
    if not service.config.policy.tools.execute_python.enabled:
        raise Problem(403, "tool-disabled", "the policy does not enable execute_python")
    limits = limited(service.config, body.limits).limits  # above the policy's: 422
    if len(body.code.encode()) > limits.max_code_bytes:
        raise Problem(413, "code-too-large", f"code: at most {limits.max_code_bytes} bytes "
                      "(the policy's [sandbox] max_code_bytes)")
    with service.db.read() as session:
        data = dataset_paths(session, list(dict.fromkeys(body.datasets)), call.principal,
                             service.paths.datasets)
    run_id = new_run_id()
    tenant = tenant_of(service, call.key)
    program = ProgramSpec(run_id=run_id, code=body.code, principal=call.principal,
                          team=tenant.team,
                          output=service.paths.executions / run_id, data=data,
                          limits=body.limits or LimitsRequest())
    cancel = Cancellation()
    recorder = StoreRecorder(service, tenant,
                             datasets=tuple(dict.fromkeys(body.datasets)))
    if "text/event-stream" in call.headers.get("accept", ""):
        stream = ExecutionStream(lambda sink: _run(call, program, cancel, recorder, sink),
                                 cancel=cancel.cancel, request_id=call.request_id)
        stream.start()
        return StreamingResponse(stream.events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
    return json_response(_run(call, program, cancel, recorder, None))


def _run(call: Call, program: ProgramSpec, cancel: Cancellation, recorder: StoreRecorder,
         on_output: OutputSink | None) -> ExecutionOut:
    """The core runs the program, the store records it; the run's document."""
    service = call.service
    try:
        run = service.app.execute(program, recorder=recorder, cancel=cancel,
                                  on_output=on_output)
    except HostBusy as exc:  # nothing ran: the attempt costs no run of the hourly quota
        raise unavailable(f"the host is at its sandbox cap: {exc}", HOST_BUSY_RETRY_S) from None
    with service.db.read() as session:
        rows = list(session.scalars(select(ArtifactRow).where(ArtifactRow.run_id == run.run_id)))
    outcome = run.outcome
    execution = outcome.execution.model_dump(mode="json") if outcome.execution else None
    view = service.tenant_view  # as the stored row: no host path, no secret
    return ExecutionOut(run_id=run.run_id, status=call_status(outcome),
                        observation=view.text(outcome.text), execution=view.value(execution),
                        artifacts=[artifact_out(row) for row in rows])
