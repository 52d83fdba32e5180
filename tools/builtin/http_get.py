"""`http_get`: fetch one URL from the host, only from domains the policy allows.

Disabled unless the policy enables it with `allowed_domains`. The gate checks
the first URL against the policy before the tool runs (a denial names the
rule); the tool's `Fetcher` checks it again and every redirect target, and
refuses non-public addresses (see `http_fetch`, `netguard`). The resolver and
the exempt addresses are parameters of `make_http_get` for tests; the policy
file cannot reach them.
"""

from __future__ import annotations

from sbx.tools.builtin.http_fetch import Fetcher, FetchResult
from sbx.tools.netguard import IPAddress, Resolver, system_resolver
from sbx.tools.policy import HttpGetRule
from sbx.tools.registry import Tool, ToolReturn, build_tool

_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/csv", "+json", "+xml")


def make_http_get(
    rule: HttpGetRule,
    *,
    resolver: Resolver = system_resolver,
    exempt: frozenset[IPAddress] = frozenset(),
) -> Tool:
    """The `http_get` tool bound to the policy's rule."""
    fetcher = Fetcher(rule, resolver=resolver, exempt=exempt)

    def http_get(url: str) -> ToolReturn:
        """Fetch a web page or file over HTTP(S) from an allowed domain and return its text.

        Only domains the operator allowed can be fetched; redirects are followed only to
        allowed domains. Large bodies are cut.

        Args:
            url: An absolute http:// or https:// URL.
        """
        result = fetcher.fetch(url)
        audit = {"status_code": result.status, "final_url": result.url,
                 "redirects": result.redirects, "body_bytes": len(result.body),
                 "truncated": result.truncated}
        return ToolReturn(text=render_fetch(result, max_bytes=rule.max_bytes), audit=audit)

    return build_tool(http_get)


def render_fetch(result: FetchResult, *, max_bytes: int) -> str:
    """Status line, final URL, type, then the body as text (binary bodies are not shown)."""
    lines = [f"HTTP {result.status} {result.reason}", f"URL: {result.url}"]
    if result.redirects:
        lines.append(f"Redirected via: {', '.join(result.redirects)}")
    lines.append(f"Content-Type: {result.content_type or '(none)'}")
    kind = result.content_type.lower()
    if b"\0" in result.body[:4096] or (kind and not any(t in kind for t in _TEXT_TYPES)):
        lines.append(f"\n[binary content, {len(result.body)} bytes, not shown]")
    else:
        lines.append("")
        lines.append(result.body.decode(result.charset or "utf-8", errors="replace"))
    if result.truncated:
        lines.append(f"\n[body cut at {max_bytes} bytes: tools.http_get.max_bytes]")
    return "\n".join(lines)
