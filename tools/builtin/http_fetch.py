"""`Fetcher`: one bounded HTTP GET that re-checks every hop and connects only where it checked.

For each hop (the URL, then each redirect target, up to `max_redirects`):
scheme http/https, no credentials in the URL, host in `allowed_domains`,
port in `allowed_ports`; resolve once; every resolved address must be public
(`netguard.non_public_reason`) unless the Python caller exempted it; connect
to that address itself and confirm the peer; for https, verify the
certificate against the host name. The whole fetch has one deadline
(`timeout`), enforced on every socket operation and between reads, and the
body is read up to `max_bytes`. Proxies from the environment are never used:
the connection is ours.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from dataclasses import dataclass, field, replace
from urllib.parse import urljoin, urlsplit

from sbx.tools.netguard import IPAddress, Resolver, host_matches, non_public_reason, parse_ip
from sbx.tools.policy import HttpGetRule
from sbx.tools.registry import ToolFailure

_REDIRECTS = {301, 302, 303, 307, 308}
_CHUNK = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class FetchResult:
    """What the last hop returned."""

    url: str
    """The URL of the last hop."""
    status: int
    """HTTP status code."""
    reason: str
    """HTTP reason phrase."""
    content_type: str
    """The `Content-Type` header, or empty."""
    charset: str | None
    """The charset named in `Content-Type`, if any."""
    body: bytes
    """At most `max_bytes` of the body."""
    truncated: bool
    """True when the body was longer than `max_bytes`."""
    location: str | None = None
    """The `Location` header of a redirect response."""
    redirects: list[str] = field(default_factory=list)
    """Every URL the fetch was redirected to, in order."""


@dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    path: str


class _OwnSocketConnection(http.client.HTTPConnection):
    """An HTTPConnection over a socket the fetcher opened, checked and will close itself.

    `getresponse` closes the connection when the server will close it; here
    that must not close our socket, whose timeout we re-arm between reads.
    """

    def close(self) -> None:
        self.sock = None
        super().close()


class Fetcher:
    """Fetches URLs under an `HttpGetRule`; `resolver` and `exempt` are for tests only."""

    def __init__(
        self, rule: HttpGetRule, *, resolver: Resolver, exempt: frozenset[IPAddress] = frozenset()
    ) -> None:
        self._rule = rule
        self._resolver = resolver
        self._exempt = exempt

    def fetch(self, url: str) -> FetchResult:
        """GET `url`, following allowed redirects; raise `ToolFailure` on any refusal."""
        deadline = time.monotonic() + self._rule.timeout
        redirects: list[str] = []
        for _ in range(self._rule.max_redirects + 1):
            target = self.check_url(url)
            address = self.pick_address(target)
            try:
                result = self._request(url, target, address, deadline)
            except (OSError, ssl.SSLError, http.client.HTTPException) as exc:
                raise ToolFailure(_network_message(target, exc)) from None
            if result.location is None:
                return replace(result, redirects=redirects)
            url = urljoin(url, result.location)
            redirects.append(url)
        raise ToolFailure(f"more than {self._rule.max_redirects} redirects; stopped at {url}")

    def check_url(self, url: str) -> _Target:
        """Scheme, credentials, host allowlist and port of one hop."""
        if any(ch.isspace() or ord(ch) < 32 for ch in url):
            raise ToolFailure("the URL contains whitespace or control characters")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ToolFailure(f"{url!r}: only http and https URLs are allowed")
        if parts.username is not None or parts.password is not None:
            raise ToolFailure("credentials in URLs are not allowed")
        host = _ascii_host(parts.hostname or "")
        if not host_matches(host, self._rule.allowed_domains):
            raise ToolFailure(f"host {host!r} is not in tools.http_get.allowed_domains")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise ToolFailure(f"{url!r} has an invalid port") from None
        if port not in self._rule.allowed_ports:
            raise ToolFailure(f"port {port} is not in tools.http_get.allowed_ports")
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return _Target(parts.scheme, host, port, path)

    def pick_address(self, target: _Target) -> IPAddress:
        """Resolve once; refuse if any answer is non-public; return the address to connect to."""
        literal = parse_ip(target.host)
        if literal is not None:
            answers = [literal]
        else:
            try:
                texts = self._resolver(target.host, target.port)
            except OSError as exc:
                raise ToolFailure(f"cannot resolve {target.host!r}: {exc}") from None
            answers = [a for a in (parse_ip(t) for t in texts) if a is not None]
        if not answers:
            raise ToolFailure(f"{target.host!r} did not resolve to any address")
        for address in answers:
            self._require_public(target.host, address)
        return answers[0]

    def _require_public(self, host: str, address: IPAddress) -> None:
        reason = non_public_reason(address)
        if reason is not None and address not in self._exempt:
            raise ToolFailure(f"{host!r} resolves to {address}, a {reason} address; refused")

    def _request(
        self, url: str, target: _Target, address: IPAddress, deadline: float
    ) -> FetchResult:
        """One GET to `address` itself (network errors propagate to `fetch`)."""
        sock = _connect(target, address, deadline)
        response: http.client.HTTPResponse | None = None
        try:
            conn = _OwnSocketConnection(target.host, target.port)
            conn.sock = sock
            headers = {"User-Agent": "sbx-http-get/1", "Accept-Encoding": "identity"}
            conn.request("GET", target.path, headers={**headers, "Connection": "close"})
            response = conn.getresponse()
            location = response.getheader("Location")
            redirect = response.status in _REDIRECTS and bool(location)
            body, truncated = b"", False
            if not redirect:
                body, truncated = self._read_body(response, sock, deadline)
            return FetchResult(
                url=url, status=response.status, reason=response.reason,
                content_type=response.getheader("Content-Type") or "",
                charset=response.msg.get_content_charset(), body=body, truncated=truncated,
                location=location if redirect else None,
            )
        finally:
            if response is not None:
                response.close()
            sock.close()

    def _read_body(
        self, response: http.client.HTTPResponse, sock: socket.socket, deadline: float
    ) -> tuple[bytes, bool]:
        """Read up to `max_bytes`, re-arming the socket timeout to what is left before each read."""
        limit = self._rule.max_bytes
        chunks: list[bytes] = []
        total = 0
        while total <= limit:
            sock.settimeout(_left(deadline))
            chunk = response.read1(min(_CHUNK, limit + 1 - total))
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)[:limit], True


def _connect(target: _Target, address: IPAddress, deadline: float) -> socket.socket:
    """Connect to the checked address, confirm the peer, and wrap TLS for https."""
    sock = socket.create_connection((str(address), target.port), timeout=_left(deadline))
    try:
        peer = parse_ip(str(sock.getpeername()[0]))
        if peer != address:
            raise ToolFailure(f"connected to {peer}, not the checked address {address}")
        if target.scheme == "https":
            context = ssl.create_default_context()
            return context.wrap_socket(sock, server_hostname=target.host)
        return sock
    except BaseException:
        sock.close()
        raise


def _left(deadline: float) -> float:
    """Seconds left before the deadline; a spent deadline is a refusal."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the fetch ran out of time")
    return left


def _ascii_host(host: str) -> str:
    """The host in ASCII (IDNA) form, lower case, for allowlist matching."""
    try:
        return host.lower().rstrip(".").encode("idna").decode("ascii")
    except UnicodeError:
        raise ToolFailure(f"{host!r} is not a valid host name") from None


def _network_message(target: _Target, exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"fetching {target.host} timed out (limit: tools.http_get.timeout)"
    return f"fetching {target.host} failed: {type(exc).__name__}: {exc}"
