"""The face's ASGI apps: `/e2b/api` (control plane) and `/e2b/sandbox` (the sandbox URL).

The SDK, given `E2B_SANDBOX_URL`, sends every sandbox request to that one URL
and names the sandbox and the port in headers (`E2b-Sandbox-Id`,
`E2b-Sandbox-Port`): 49999 is the code interpreter, any other port envd.
The sandbox URL takes no API key: the access token that `create` (or
`connect`) gave the key's caller (`X-Access-Token`, or the traffic token)
finds the sandbox; a wrong or missing one is 404, as an unknown id is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sbx.agent import SessionHost, SessionNotFound
from sbx.agent.e2b import control, envd, files, interpreter
from sbx.agent.e2b.sandboxes import E2bSandbox, sandboxes

INTERPRETER_PORT = "49999"
"""The code interpreter's port in `E2b-Sandbox-Port` (the SDK's `JUPYTER_PORT`)."""
Handler = Callable[[Request, E2bSandbox], Awaitable[Response]]


class E2bFace:
    """The two apps over one set of sandboxes; `running()` looks after them while served."""

    def __init__(self, host: SessionHost) -> None:
        self.host = host
        self.sandboxes = sandboxes(host)
        self.api: ASGIApp = Starlette(routes=control.routes(self.sandboxes, host.authenticate))
        self._interpreter = Starlette(routes=[
            Route("/execute", self._guard(interpreter.execute), methods=["POST"]),
            Route("/contexts", self._guard(interpreter.contexts), methods=["GET", "POST"]),
            Route("/contexts/{context_id}/restart", self._guard(interpreter.context),
                  methods=["POST"]),
            Route("/contexts/{context_id}", self._guard(interpreter.context),
                  methods=["DELETE"]),
        ])
        self._envd = Starlette(routes=[
            Route("/health", self._health, methods=["GET"]),
            Route("/files", self._guard(files.read_file), methods=["GET"]),
            Route("/files", self._guard(files.write_files), methods=["POST"]),
        ])

    def running(self, tick_s: float) -> AbstractAsyncContextManager[None]:
        """Timeouts and idle releases every `tick_s` while served; every sandbox killed after."""
        return self.sandboxes.looked_after(tick_s)

    async def sandbox(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The sandbox URL: the interpreter or envd by `E2b-Sandbox-Port`."""
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        if request.headers.get("e2b-sandbox-port") == INTERPRETER_PORT:
            await self._interpreter(scope, receive, send)
            return
        path = get_route_path(scope)
        for prefix, rpc in (("/filesystem.Filesystem/", envd.FILESYSTEM),
                            ("/process.Process/", envd.PROCESS)):
            if path.startswith(prefix):
                try:
                    found = self._find(request)
                except SessionNotFound as exc:
                    await control.error(exc)(scope, receive, send)
                    return
                envd.CURRENT.set(found)
                await rpc({**scope, "path": path, "root_path": ""}, receive, send)
                return
        await self._envd(scope, receive, send)

    def _find(self, request: Request) -> E2bSandbox:
        token = (request.headers.get("x-access-token")
                 or request.headers.get("e2b-traffic-access-token"))
        return self.sandboxes.by_token(request.headers.get("e2b-sandbox-id", ""), token)

    async def _health(self, request: Request) -> Response:
        """204 while the sandbox lives; 502 after, which the SDK reads as not running."""
        try:
            self._find(request)
        except SessionNotFound:
            return Response(status_code=502)
        return Response(status_code=204)

    def _guard(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request, self._find(request))
            except control.FAILURES as exc:  # a refusal, a full host (503: retry soon)
                return control.error(exc)
        return endpoint
