"""`/` and `/static/<name>`: the page and its files, read once from the installed package.

Only the files shipped in `static/` are served, looked up by name in a table
built at start (a name is a key, never a path: `..` or a subdirectory is
simply not in the table). The page needs no key to load; everything it shows
comes from the `/v1` API after sign-in.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from sbx.agent.service.problems import Problem
from sbx.agent.service.web.headers import PAGE_CSP

_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def load_assets() -> dict[str, tuple[bytes, str]]:
    """`{name: (content, media type)}` of every file in the package's `static/` folder."""
    folder = files("sbx.agent.service.web") / "static"
    assets: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in _TYPES:
            assets[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    if "index.html" not in assets:
        raise RuntimeError("the web page's files are missing from the installed package")
    return assets


def routes() -> list[Route]:
    """The page's routes, serving the files loaded now."""
    assets = load_assets()

    def serve(name: str) -> Response:
        found = assets.get(name)
        if found is None:
            raise Problem(404, "not-found", f"no file {name[:100]!r}")
        content, media_type = found
        return Response(content, media_type=media_type, headers={
            "Content-Security-Policy": PAGE_CSP, "Cache-Control": "no-cache",
        })

    async def index(request: Request) -> Response:
        return serve("index.html")

    async def static(request: Request) -> Response:
        return serve(str(request.path_params["name"]))

    return [Route("/", index, methods=["GET"]), Route("/static/{name}", static, methods=["GET"])]
