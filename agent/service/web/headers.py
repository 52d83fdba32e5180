"""Security headers on every answer of `sbx serve`, and the page's strict policy.

The page's Content-Security-Policy allows scripts, styles, images and
connections from this server only: no inline script or style, no `eval`, no
plugin, no framing by anyone (`frame-ancestors 'none'`), forms only to here.
Even if some text slipped into the page as markup, the browser would not run
it. Every other answer gets `default-src 'none'; frame-ancestors 'none'` unless
it set its own (artifacts do), so no JSON or file can be framed or run as a page,
and `Cross-Origin-Resource-Policy: same-origin`, so another origin's page cannot
load our answers as images or scripts with the visitor's cookie.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
"""The web page's policy (`pages.py` sets it on the page and its assets)."""
DEFAULT_CSP = "default-src 'none'; frame-ancestors 'none'"
"""Every other answer's policy, unless it sets its own."""


class SecurityHeaders:
    """ASGI layer adding the headers above to every HTTP answer that lacks them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; add the headers to its answer."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.setdefault("Content-Security-Policy", DEFAULT_CSP)
                headers.setdefault("X-Frame-Options", "DENY")
                headers.setdefault("Referrer-Policy", "no-referrer")
                headers.setdefault("Cross-Origin-Resource-Policy", "same-origin")
            await send(message)

        await self.app(scope, receive, send_with_headers)
