"""Local HTTP servers for tests: a quiet handler that answers whole bodies, and one way to run it.

The model's TLS endpoint, the OIDC provider, the `http_get` tool's targets and the
web page's attacker all need a small server on 127.0.0.1 on a thread of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import TypeVar

Server = TypeVar("Server", bound=HTTPServer)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (pytest would show it) and sends whole bodies."""

    def log_message(self, *args: object) -> None:
        pass

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        """One response: status, type, length, then the body."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    """Serve on a daemon thread while the block runs; then shut down, close and join."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
