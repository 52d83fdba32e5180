"""Where `http_get` may connect: allowlisted host names, and only public addresses.

Two checks, both applied to the first URL and to every redirect target:
the host name must match the policy's `allowed_domains`, and every address
the name resolves to must be public (not loopback, link-local, private,
reserved, multicast or otherwise non-global). The fetch then connects to the
very address that passed, never resolving twice, so a DNS answer that changes
between check and connect (rebinding) cannot steer it inward.

The resolver is injectable (`Resolver`): tests map names to loopback and
exempt exactly those addresses, through the Python API only; the policy file
has no way to exempt an address.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the host's resolver (`getaddrinfo`); every address, in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for info in infos:
        seen[str(info[4][0])] = None
    return list(seen)


def host_matches(host: str, patterns: Sequence[str]) -> bool:
    """`example.com` matches only itself; `*.example.com` matches its subdomains, not itself."""
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and host != pattern[2:]:
                return True
        elif host == pattern:
            return True
    return False


def non_public_reason(address: IPAddress) -> str | None:
    """Why an address must not be reached from the host, or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    checks = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("private", address.is_private),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("unspecified", address.is_unspecified),
        ("not globally routable", not address.is_global),
    )
    for name, hit in checks:
        if hit:
            return name
    return None


def parse_ip(text: str) -> IPAddress | None:
    """An IP address from a host string (brackets and zone ids removed), or None for a name."""
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
