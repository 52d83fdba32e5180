"""Custom tools the policy loads: `[tools.custom.NAME] entry = "package.module:function"`.

The entry names a typed function (made a tool the way `@tool` makes one, named
NAME) or a `Tool` already built (whose name must be NAME). A loaded tool goes
through the same gate as every built-in: strict arguments, its enable rule,
quotas, its timeout, the breaker, the audit log. It runs in sbx's own process,
on the host, not in the sandbox: the policy file is the operator's, and only
code the operator trusts belongs in it.

Every way an entry can be wrong (module missing or raising at import, no such
attribute, not a callable, an untyped parameter, a name mismatch) is one
`PolicyError` that names the table and the entry.
"""

from __future__ import annotations

import importlib

from sbx.tools.policy import Policy, PolicyError
from sbx.tools.registry import Tool, build_tool


def custom_tools(policy: Policy) -> list[Tool]:
    """The tools of every `[tools.custom.NAME]` table with an `entry`, in the file's order."""
    return [
        load_entry(name, rule.entry)
        for name, rule in policy.tools.custom.items()
        if rule.entry is not None
    ]


def load_entry(name: str, entry: str) -> Tool:
    """Import `package.module:function` and make it the tool NAME; `PolicyError` if it cannot be."""
    where = f"[tools.custom.{name}] entry {entry!r}"
    module_name, _, attribute = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # anything the import raises is the entry's problem
        problem = f"cannot import {module_name}: {_one_line(exc)}"
        raise PolicyError(f"policy {where}: {problem}") from None
    found = getattr(module, attribute, None)
    if found is None:
        raise PolicyError(f"policy {where}: {module_name} has no attribute {attribute!r}")
    if isinstance(found, Tool):
        if found.name != name:
            named = f"the tool there is named {found.name!r}, not {name!r}"
            raise PolicyError(f"policy {where}: {named}")
        return found
    if not callable(found):
        raise PolicyError(f"policy {where}: {attribute!r} is not a function")
    try:
        return build_tool(found, name=name)
    except TypeError as exc:
        raise PolicyError(f"policy {where}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, at most 300 characters."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]
