"""Argument rules and quotas: the policy checks that run after validation, before the tool.

Each check returns a `Denied` naming the dotted policy key that refused the
call (the rule the audit record and the model both see), or None. Quotas are
counted under a lock, on allowed calls only, and reserved before the tool
runs, so concurrent calls can never overshoot them.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel

from sbx.sandbox.limits import Limits
from sbx.tools.context import ToolContext
from sbx.tools.netguard import host_matches
from sbx.tools.observation import Denied
from sbx.tools.policy import BUILTIN_TOOLS, Policy, Quotas
from sbx.tools.sql_policy import QuerySqlRule

SELF_BOUND_GRACE_S = 5.0
"""Beyond the own `timeout` of a tool that bounds itself (`calculate`, `http_get`,
`ask_user`), so the tool's own, clearer message normally comes first."""
SANDBOX_GRACE_S = 30.0
"""Beyond the sandbox's `timeout` for `execute_python`: starting a container under load and
copying artifacts out take time the execution's deadline does not count."""


def call_timeout(policy: Policy, limits: Limits, name: str) -> tuple[float, str]:
    """The gate's bound on one call of `name`, in seconds, and the policy key that sets it.

    `execute_python` and `run_command` are bounded by the sandbox's own deadline already
    (the code is killed at `[sandbox] timeout`); their gate bound is never shorter than
    that deadline plus `SANDBOX_GRACE_S`, so it fires only when the engine itself hangs.
    """
    rules = policy.tools
    rule = rules.rule(name)
    section = f"tools.{name}" if name in BUILTIN_TOOLS else f"tools.custom.{name}"
    if rule is None or rule.timeout is None:
        seconds, key = rules.timeout, "tools.timeout"
    else:
        seconds, key = rule.timeout, f"{section}.timeout"
    if name == "query_sql" and rule is not None and rule.timeout is None:
        seconds, key = policy.tools.query_sql.statement_timeout, "tools.query_sql.statement_timeout"
    if name in ("calculate", "http_get", "ask_user", "query_sql"):
        seconds += SELF_BOUND_GRACE_S
    if name in ("execute_python", "run_command") and seconds < limits.timeout + SANDBOX_GRACE_S:
        seconds, key = limits.timeout + SANDBOX_GRACE_S, "sandbox.timeout"
    return seconds, key


def check_arguments(
    policy: Policy, limits: Limits, name: str, args: BaseModel, context: ToolContext | None = None
) -> Denied | None:
    """The per-tool argument rules of the policy (and the sandbox's code size), per built-in.

    `context` gives the principal, for the rules that depend on who asks (`query_sql`).
    """
    values: dict[str, Any] = dict(args)
    match name:
        case "query_sql":
            principal = context.principal if context is not None else ""
            return check_query(policy.tools.query_sql, values, principal)
        case "http_get":
            return _check_url(policy, str(values.get("url", "")))
        case "calculate":
            limit = policy.tools.calculate.max_expression_length
            if len(str(values.get("expression", ""))) > limit:
                reason = f"the expression is longer than {limit} characters"
                rule = "tools.calculate.max_expression_length"
                return Denied(tool=name, rule=rule, reason=reason)
        case "preview_data_file":
            limit = policy.tools.preview_data_file.max_rows
            if int(values.get("rows", 0)) > limit:
                reason = f"at most {limit} rows may be previewed"
                return Denied(tool=name, rule="tools.preview_data_file.max_rows", reason=reason)
        case "execute_python" | "run_command":
            limit = limits.max_code_bytes
            if len(str(values.get("code", values.get("command", ""))).encode()) > limit:
                reason = f"the program is larger than {limit} bytes"
                return Denied(tool=name, rule="sandbox.max_code_bytes", reason=reason)
    return None


def check_query(rule: QuerySqlRule, values: dict[str, Any], principal: str) -> Denied | None:
    """The source must be one the principal may query, the SQL within its length."""
    source = str(values.get("source", ""))
    allowed = sorted(rule.sources_for(principal))
    if source not in allowed:
        known = ", ".join(allowed) or "(none)"
        reason = f"source {source!r} is not one you may query (yours: {known})"
        rule_key = "tools.query_sql.sources"
        if source in rule.sources:
            rule_key = f"tools.query_sql.sources.{source}.principals"
        return Denied(tool="query_sql", rule=rule_key, reason=reason)
    if len(str(values.get("sql", ""))) > rule.max_sql_chars:
        reason = f"the query is longer than {rule.max_sql_chars} characters"
        return Denied(tool="query_sql", rule="tools.query_sql.max_sql_chars", reason=reason)
    return None


def _check_url(policy: Policy, url: str) -> Denied | None:
    """Scheme, host and port of the first URL (redirects are checked by the tool itself)."""
    rule = policy.tools.http_get
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        reason = f"scheme {parts.scheme or '(none)'!r} is not allowed; use http or https"
        return Denied(tool="http_get", rule="tools.http_get.scheme", reason=reason)
    host = (parts.hostname or "").lower()
    if not host_matches(host, rule.allowed_domains):
        allowed = ", ".join(rule.allowed_domains)
        reason = f"host {host!r} is not in the allowed domains ({allowed})"
        return Denied(tool="http_get", rule="tools.http_get.allowed_domains", reason=reason)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return Denied(tool="http_get", rule="tools.http_get.allowed_ports", reason="bad port")
    if port not in rule.allowed_ports:
        reason = f"port {port} is not in the allowed ports {rule.allowed_ports}"
        return Denied(tool="http_get", rule="tools.http_get.allowed_ports", reason=reason)
    return None


class QuotaCounter:
    """Per-run counts of allowed calls and of refused ones; thread-safe."""

    def __init__(self, quotas: Quotas) -> None:
        self._quotas = quotas
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._denied = 0

    def take(self, name: str) -> Denied | None:
        """Reserve one call of `name`, or say which quota is exhausted."""
        with self._lock:
            limit = self._quotas.per_tool.get(name)
            if limit is not None and self._calls[name] >= limit:
                reason = f"this run already made {limit} call(s) to {name!r}, the most allowed"
                return Denied(tool=name, rule=f"quotas.per_tool.{name}", reason=reason)
            self._calls[name] += 1
            return None

    def deny(self) -> bool:
        """Count one refused call (denied, unknown or invalid); True past `quotas.max_denied`."""
        with self._lock:
            self._denied += 1
            limit = self._quotas.max_denied
            return limit is not None and self._denied > limit

    def snapshot(self) -> dict[str, Any]:
        """Counts for the run-end record."""
        with self._lock:
            return {"calls": dict(self._calls), "denied": self._denied}
