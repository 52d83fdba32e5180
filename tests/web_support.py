"""Fixtures for the web page's tests: Debian's chromium driven by Playwright, and a page watcher.

    browser    a fresh Chromium profile (its own user-data dir) per test, 1280x800,
               downloads accepted; Playwright never downloads a browser here
    watch(page)  records dialogs (dismissed), console errors, uncaught page errors and
                 requests that failed; `assert_clean()` fails on any of them

Without /usr/bin/chromium the tests fail in CI (CI=true) and skip elsewhere,
naming the packages to install (setup.sh installs them).

A test module binds it at module level, with the service fixtures:

    browser = web_support.browser
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
DOCS = Path(__file__).resolve().parents[1] / "docs"
SCREENSHOTS_ENV = "SBX_WEB_SCREENSHOTS"
"""Set to 1 to write the README's screenshots to docs/ (tests otherwise keep them in tmp)."""
EVENT_TIMEOUT_MS = 180_000
"""How long a wait on the page may take: a run under a loaded shared engine can be slow."""
ROUTE_ROUND_TRIPS = 100
"""Round trips to the page `until_routed` waits through for a request to reach its route."""


def _require_chromium() -> None:
    if not CHROMIUM.exists():
        message = "chromium not found: apt-get install chromium chromium-driver"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """A Chromium context with a fresh profile (user-data dir) of its own.

    Playwright's driver is started per test: a sync driver owns an event loop, and two
    alive at once (one per test module) refuse to start.
    """
    _require_chromium()
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EVENT_TIMEOUT_MS)
    with sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(CHROMIUM), headless=True,
            args=CHROMIUM_ARGS, viewport=DESKTOP, accept_downloads=True,
        )
        context.set_default_timeout(EVENT_TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


@dataclass
class PageWatch:
    """What a page did that it must not: dialogs, console errors, uncaught errors."""

    dialogs: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        assert self.dialogs == [], f"a dialog opened: {self.dialogs}"
        assert self.console_errors == [], f"console errors: {self.console_errors}"
        assert self.page_errors == [], f"uncaught errors: {self.page_errors}"
        assert self.failed_requests == [], f"requests failed: {self.failed_requests}"


def watch(page: Any) -> PageWatch:
    """Start recording what `page` does wrong (call before it loads anything)."""
    seen = PageWatch()

    def on_dialog(dialog: Any) -> None:
        seen.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def on_console(message: Any) -> None:
        if message.type in ("error", "assert"):
            seen.console_errors.append(message.text)

    def on_failed(request: Any) -> None:
        failure = request.failure or ""
        if "ERR_ABORTED" not in failure:  # a download or a stream the page closed itself
            seen.failed_requests.append(f"{request.method} {request.url}: {failure}")

    page.on("dialog", on_dialog)
    page.on("console", on_console)
    page.on("pageerror", lambda error: seen.page_errors.append(str(error)))
    page.on("requestfailed", on_failed)
    return seen


def sign_in(page: Any, url: str, key: str) -> None:
    """Open the page and sign in with `key`, waiting until the workspace shows."""
    from playwright.sync_api import expect

    page.goto(url + "/")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#workspace")).to_be_visible()
    expect(page.locator("#usage dt").first).to_be_visible()


def signed_in_page(browser: Any, url: str, key: str) -> tuple[Any, PageWatch]:
    """A new page of `browser`, watched from its first request, signed in with `key`."""
    page = browser.new_page()
    seen = watch(page)
    sign_in(page, url, key)
    return page, seen


def until_routed(page: Any, routes: list[Any]) -> None:
    """Return once a route handler has put a request into `routes`.

    Playwright runs a route's handler while the sync API reads the page's messages,
    so each round trip lets a request the page already sent reach it.
    """
    for _ in range(ROUTE_ROUND_TRIPS):
        if routes:
            return
        page.evaluate("() => 0")
    raise AssertionError(f"no request reached the route in {ROUTE_ROUND_TRIPS} round trips")


def screenshot(page: Any, name: str, tmp_path: Path, *, full_page: bool = False) -> Path:
    """A screenshot of the page: into docs/ when SBX_WEB_SCREENSHOTS=1, else into tmp_path."""
    folder = DOCS if os.environ.get(SCREENSHOTS_ENV) == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path), full_page=full_page)
    assert path.read_bytes().startswith(b"\x89PNG"), path
    return path


@pytest.fixture
def render_page(serve: Any, browser: Any, tmp_path: Path) -> Iterator[Any]:
    """A page of a real `sbx serve` with one `RunView` in it (`window.view`) to feed events."""
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page = browser.new_page()
    seen = watch(page)
    page.goto(server.url + "/")
    page.evaluate("""async () => {
        const { RunView } = await import('/static/run.js');
        window.view = new RunView('run-0123456789ab', 'q?');
        document.body.append(window.view.root);
    }""")
    yield page
    seen.assert_clean()
