"""The edge: who a request's client is behind trusted proxies, and what each client may hold.

`TrustedProxies` names the reverse proxies (`[service] trusted_proxies`) whose
`X-Forwarded-For` and `X-Forwarded-Proto` are believed. Behind them the client is the
right-most address of that header that is not itself a trusted proxy: the one the
nearest proxy saw, which a client cannot forge (what a client writes itself stands to
the left), and the scheme is the one the nearest proxy names (an `https` request makes
the sign-in cookie `Secure`). From any other peer both headers are ignored, loopback
included: the peer is the client and the connection's scheme stands. This is the
server's only reading of them (uvicorn's own, which believes 127.0.0.1, is off).

`EdgeSlots` counts what clients hold at the edge, on the event loop (no locks):
connections (or, behind a proxy, requests in progress) per client address, at most
`client_connections` each; and requests that present no credentials but send a body,
at most `MAX_ANONYMOUS` of the server's connections, so the slow bodies of clients
without a key never take the place an authenticated request needs.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from sbx.agent.service.web.signin_sessions import COOKIE

MAX_ANONYMOUS = 512
"""Requests with a body and no credentials in progress at once, from all clients."""
AUTHENTICATED_RESERVE = 128
"""Connections that requests without credentials can never hold."""
MAX_CONNECTIONS = MAX_ANONYMOUS + AUTHENTICATED_RESERVE
"""Connections and requests at once; past it uvicorn answers 503."""
FORWARDED_SCHEMES = frozenset({"http", "https"})
"""The schemes a trusted proxy's `X-Forwarded-Proto` may name."""

class TrustedProxies:
    """The proxies whose `X-Forwarded-For` is believed (none: every peer is the client)."""

    def __init__(self, networks: Sequence[str] = ()) -> None:
        """`networks`: addresses and CIDR networks, as the settings validated them."""
        self._networks = [ipaddress.ip_network(network, strict=False) for network in networks]

    def trusts(self, address: str) -> bool:
        """Whether `address` is one of the trusted proxies (none by default: nothing to parse)."""
        if not self._networks:
            return False
        ip = _ip(address)
        return ip is not None and any(ip in network for network in self._networks)

    def client(self, peer: str, forwarded: Iterable[bytes]) -> str:
        """The client of a request from `peer` with these `X-Forwarded-For` values, in order."""
        if not self.trusts(peer):
            return peer
        hops = _hops(forwarded)
        for hop in reversed(hops):
            ip = _ip(hop)
            if ip is None:
                return peer  # not an address: believe nothing further left
            if not self.trusts(str(ip)):
                return str(ip)
        return str(_ip(hops[0])) if hops else peer  # every hop is a trusted proxy

    def scheme(self, peer: str, forwarded_proto: Iterable[bytes]) -> str | None:
        """The scheme the client used, as the nearest trusted proxy says (`X-Forwarded-Proto`).

        None when `peer` is no trusted proxy or says nothing usable: the connection's own
        scheme stands. Only the right-most value counts, the one the nearest proxy wrote.
        """
        if not self.trusts(peer):
            return None
        said = _hops(forwarded_proto)
        nearest = said[-1].lower() if said else None
        return nearest if nearest in FORWARDED_SCHEMES else None


def _hops(values: Iterable[bytes]) -> list[str]:
    """The comma-separated entries of a forwarding header's values, in order, left to right."""
    return [hop.strip() for value in values
            for hop in value.decode("latin-1").split(",") if hop.strip()]


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address in `text` (`1.2.3.4`, `1.2.3.4:56`, `[::1]:56`, `::1`), else None."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def has_credentials(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the request presents a key or the web page's session (checked later, not here)."""
    cookie = COOKIE.encode("latin-1") + b"="
    return any(name == b"authorization" or (name == b"cookie" and cookie in value)
               for name, value in headers)


def sends_body(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the request has a body to wait for (a declared length above 0, or chunks)."""
    for name, value in headers:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
    return False  # HTTP/1.1: a request with neither has no body


class EdgeSlots:
    """What clients hold at the edge (the module docstring); one per server, for its protocols."""

    def __init__(self, *, per_client: int, anonymous: int = MAX_ANONYMOUS) -> None:
        self.per_client = per_client
        self.anonymous = anonymous
        self.clients: dict[str, int] = {}
        """Connections (or proxied requests) held per client address."""
        self.anonymous_held = 0
        """Requests without credentials, with a body, in progress."""

    def take(self, address: str) -> bool:
        """One of `address`'s places, or False when it holds `per_client` already."""
        held = self.clients.get(address, 0)
        if held >= self.per_client:
            return False
        self.clients[address] = held + 1
        return True

    def give(self, address: str) -> None:
        """Give back one of `address`'s places."""
        left = self.clients.get(address, 1) - 1
        if left > 0:
            self.clients[address] = left
        else:
            self.clients.pop(address, None)

    def take_anonymous(self) -> bool:
        """A place for a request without credentials, or False when they hold their share."""
        if self.anonymous_held >= self.anonymous:
            return False
        self.anonymous_held += 1
        return True

    def give_anonymous(self) -> None:
        """Give back a place `take_anonymous` gave."""
        self.anonymous_held = max(0, self.anonymous_held - 1)
