"""Every tool call passes one gate: typed tools, a deny-by-default policy, a verifiable audit log.

Map of the package (data flows top to bottom):

    registry      @tool: a typed function -> Tool (schema and validation by pydantic)
    schema        strict JSON Schema and Google docstring parsing
    context       ToolContext (what a run gives its tools), CodeRunner protocol
    policy        Policy: the gate's part of sbx.toml (tools, argument rules, quotas, audit)
    rules         argument rules and quotas, each denial naming its policy key
    gate          ToolGate.call: lookup, enable, validate, rules, quota, audit, run
    observation   the one renderer of model-visible text (executions and failures)
    audit         AuditLog: flock'd, fsync'd, hash-chained JSON Lines
    audit_chain   record format and seals (SHA-256 or HMAC-SHA256)
    audit_verify  verify_log: the first bad record and why
    redact        secrets never reach the log
    netguard      allowlist matching and public-address checks for http_get
    builtin/      execute_python, calculate, list_data_files, preview_data_file, http_get
"""

from sbx.tools.audit import AuditError, AuditLog
from sbx.tools.audit_verify import VerifyReport, verify_log
from sbx.tools.context import CodeRunner, ToolContext
from sbx.tools.gate import ToolGate, build_gate
from sbx.tools.observation import render_execution, render_failure
from sbx.tools.outcome import ToolOutcome
from sbx.tools.policy import Policy, PolicyError
from sbx.tools.redact import Redactor
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, tool

__all__ = [
    "AuditError",
    "AuditLog",
    "CodeRunner",
    "Policy",
    "PolicyError",
    "Redactor",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolGate",
    "ToolOutcome",
    "ToolReturn",
    "VerifyReport",
    "build_gate",
    "render_execution",
    "render_failure",
    "tool",
    "verify_log",
]
