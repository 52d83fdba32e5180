"""The code interpreter's side of the sandbox URL: `/execute` (an NDJSON stream), `/contexts`.

An execution is the sandbox's `ToolSession` call (gate, audit, the key's
quotas). Its output is streamed as it comes (`stdout`/`stderr` lines), then
its error (name, value, traceback), `number_of_executions` and
`end_of_execution`, as E2B's Jupyter server sends them. A refusal before it
starts is an HTTP error (429 for a quota). A client that goes away (its
`timeout`) cancels the execution: the sandbox is replaced, and the next call
restores its variables by replay. A sandbox killed meanwhile cuts the
stream, which the SDK reports as a sandbox killed mid-request.

Contexts: `default` is the sandbox's own namespace; each context created is
a namespace of its own in the same interpreter (`KeptSession.open_namespace`),
with its own working directory. Other languages are refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from sbx.agent import CallReport, ExecutionResult, streamed
from sbx.agent.e2b.files import HOME, inside
from sbx.agent.e2b.sandboxes import E2bSandbox, Refused

DEFAULT = "default"
PYTHON = (None, "", "python", "python3")


class Cut(Exception):
    """The sandbox ended under a running execution: the stream is cut, not finished."""


def _line(kind: str, **fields: Any) -> bytes:
    return (json.dumps({"type": kind, **fields}) + "\n").encode()


class Lines:
    """What was streamed of each stream, sent whole lines at a time (as Jupyter does)."""

    def __init__(self) -> None:
        self.taken = {"stdout": 0, "stderr": 0}
        self.held = {"stdout": "", "stderr": ""}

    def add(self, stream: str, text: str) -> Iterator[bytes]:
        """A chunk streamed while the code runs: its complete lines now, the rest held."""
        self.taken[stream] += len(text)
        held = self.held[stream] + text
        cut = held.rfind("\n") + 1
        self.held[stream] = held[cut:]
        if cut:
            yield _output(stream, held[:cut])

    def rest(self, stream: str, text: str) -> Iterator[bytes]:
        """At the end: what was held, and what came only with the result."""
        tail = self.held[stream] + text[self.taken[stream]:]
        if tail:
            yield _output(stream, tail)


def _output(stream: str, text: str) -> bytes:
    return _line(stream, text=text, timestamp=time.time_ns() // 1000)


def _closing(sandbox: E2bSandbox, report: CallReport, lines: Lines,
             context_id: str = DEFAULT) -> Iterator[bytes]:
    """What follows the streamed output: the rest of it, the error if any, the count, the end.

    A quick cell's output comes with its result rather than streamed (the runner
    waits a moment before its first frame): its stdout, then its stderr. When the
    sandbox had been replaced before it (an idle release, a timeout), what was
    restored is said last on stderr, as sbx says it to every caller.
    """
    outcome, execution = report.outcome, report.outcome.execution
    if sandbox.killed:
        raise Cut(sandbox.id)
    if report.reset_note:
        lines.held["stderr"] += report.reset_note.rstrip("\n") + "\n"
    if execution is not None:
        yield from lines.rest("stdout", execution.stdout)
        yield from lines.rest("stderr", execution.stderr)
    if outcome.status == "cancelled":  # the server's drain stopped it
        yield _line("error", name="CancelledError", value=outcome.text, traceback=outcome.text)
    elif execution is None:  # the gate refused it (policy, validation): no code ran
        yield _line("error", name="PolicyError", value=outcome.text, traceback=outcome.text)
    elif execution.error is not None:
        error = execution.error
        yield _line("error", name=error.type, value=error.message, traceback=error.traceback)
    elif not execution.ok:
        name = "TimeoutError" if execution.timed_out else "SandboxError"
        value = "; ".join(execution.notes) or outcome.text[:500]
        yield _line("error", name=name, value=value, traceback=value)
    yield from _results(sandbox, execution, context_id)
    yield _line("end_of_execution")


def _results(sandbox: E2bSandbox, execution: ExecutionResult | None,
             context_id: str) -> Iterator[bytes]:
    """The cell's rich results as E2B's `result` lines, then its `number_of_executions`.

    A named context counts its own cells (the kernel's count for its namespace);
    the default context is counted here, since the face runs helper programs
    (env vars, files) in it that are no cells of the caller's.
    """
    for result in execution.results if execution is not None else []:
        yield _line("result", **result.model_dump(by_alias=True, exclude_none=True))
    count = execution.execution_count if execution is not None else None
    if context_id == DEFAULT or count is None:
        sandbox.executions += 1
        count = sandbox.executions
    yield _line("number_of_executions", execution_count=count)


async def execute(request: Request, sandbox: E2bSandbox) -> Response:
    """`POST /execute`: the code's output as it comes, then its error and count."""
    body = await request.json()
    code, language = body.get("code"), body.get("language")
    if not isinstance(code, str):
        raise Refused(400, "code: a string")
    if language not in PYTHON:
        raise Refused(400, f"language {language!r}: sbx runs Python only")
    context_id = body.get("context_id") or DEFAULT
    namespace = None if context_id == DEFAULT else context_id
    envs = body.get("env_vars") or {}
    if not isinstance(envs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in envs.items()
    ):
        raise Refused(400, "env_vars: an object of strings")
    events = streamed(lambda on_output, on_start: sandbox.python(
        code, on_output=on_output, on_start=on_start, envs=envs, namespace=namespace),
        sandbox.cancel_running)
    first = await anext(events)  # a refusal before it ran is raised here: an HTTP error
    return StreamingResponse(_stream(sandbox, first, events, context_id),
                             media_type="application/x-ndjson")


async def _stream(sandbox: E2bSandbox, first: tuple[str, Any],
                  events: AsyncGenerator[tuple[str, Any], None],
                  context_id: str) -> AsyncIterator[bytes]:
    """The NDJSON lines; a client gone before the end closes `events`, which stops the code."""
    lines = Lines()
    kind, value = first
    try:
        while True:
            if kind in ("stdout", "stderr"):
                for line in lines.add(kind, value):
                    yield line
            elif kind == "done":
                for line in _closing(sandbox, value, lines, context_id):
                    yield line
                return
            kind, value = await anext(events)
    except Exception as exc:  # the sandbox ended under it
        raise Cut(sandbox.id) from exc
    finally:
        await events.aclose()


def _context(context_id: str, cwd: str) -> dict[str, str]:
    return {"id": context_id, "language": "python", "cwd": cwd}


async def contexts(request: Request, sandbox: E2bSandbox) -> Response:
    """`GET /contexts` lists them; `POST` makes a namespace of its own (Python only)."""
    if request.method == "GET":
        return JSONResponse([_context(DEFAULT, HOME)] + [
            _context(name, cwd) for name, cwd in sandbox.namespaces.items()])
    body = await request.json()
    if body.get("language") not in PYTHON:
        raise Refused(400, f"language {body.get('language')!r}: sbx runs Python only")
    name = sandbox.open_namespace(inside(str(body.get("cwd") or HOME)))
    return JSONResponse(_context(name, sandbox.namespaces[name]))


async def context(request: Request, sandbox: E2bSandbox) -> Response:
    """`POST /contexts/{id}/restart` empties a namespace; `DELETE` forgets one."""
    context_id, remove = request.path_params["context_id"], request.method == "DELETE"
    if remove and context_id == DEFAULT:
        raise Refused(400, "the default context cannot be removed: kill the sandbox")
    await run_in_threadpool(sandbox.reset_namespace,
                            None if context_id == DEFAULT else context_id, remove=remove)
    return Response(status_code=204)
