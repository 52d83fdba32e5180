"""`ToolGate`: the one door every tool call passes, `execute_python` included.

For each call, in this order: look the tool up (unknown names are told what
is available); check the policy enables it (deny by default); validate the
JSON arguments with the tool's own pydantic model; apply the argument rules;
reserve the quota; append the request and the decision to the audit log
(fsync'd) and only then run the tool; append the outcome. Every path returns a
`ToolOutcome` whose `text` is the exact observation the model receives.

Three verdicts (openai-agents' guardrails): allow; reject with a message the
model can act on (`denied`, `invalid`, `unknown`); halt, for what an operator
must see: too many refused calls in one run (denied, unknown tool or invalid
arguments alike: each is a model probing or flailing, and `quotas.max_denied`
bounds them all), or an operator error (the audit log cannot be written, the
sandbox is broken). An operator error is recorded and re-raised; after a halt
every call returns status `halted` without running.

The model chooses its tool-call ids, so they key nothing here: each call gets
its own id, `<run_id>-c<n>`, that audit records join on (the model's is kept as
data). Arguments over `max_argument_bytes` are refused before they are parsed,
the audit keeping their size, digest and first bytes. Every observation passes
the data guard (`tools.guard`) on its way to the model.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from sbx.sandbox.errors import SandboxError
from sbx.sandbox.limits import Limits
from sbx.tools.audit import AuditError, AuditLog
from sbx.tools.bounded import CallCancelled, CallTimedOut, run_bounded
from sbx.tools.breaker import BREAKER_RULE, Breaker, failure_signature, tripped_text
from sbx.tools.builtin import builtin_tools, check_plan_call
from sbx.tools.call_records import CallIds, invalid_arguments, outcome_data, request_data, too_large
from sbx.tools.context import ToolContext
from sbx.tools.custom import custom_tools
from sbx.tools.guard import DataGuard
from sbx.tools.observation import Denied, Failure, Halted, ToolError, UnknownTool, render_failure
from sbx.tools.outcome import CANCELLED_TEXT, CallStatus, ToolOutcome
from sbx.tools.policy import BUILTIN_TOOLS, Policy, PolicyError
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, register, unpack_return
from sbx.tools.rules import QuotaCounter, call_timeout, check_arguments
from sbx.tools.tracing import traced_call

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class _Refusal:
    """A decision not to run the tool."""

    status: CallStatus
    failure: Failure
    rule: str | None = None


CLOSE_GRACE_S = 10.0
"""Seconds `close` waits for calls still in flight before writing the run-end record."""
DEFAULT_MAX_ARGUMENT_BYTES = 2 * 1024 * 1024
"""Largest arguments accepted when the caller sets no cap (`AgentSettings.max_argument_bytes`)."""


class ToolGate:
    """Checks, records and runs tool calls for one agent run; thread-safe."""

    def __init__(
        self,
        *,
        policy: Policy,
        limits: Limits,
        tools: Mapping[str, Tool],
        context: ToolContext,
        audit: AuditLog,
        max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    ) -> None:
        self._policy = policy
        self._limits = limits
        self.max_argument_bytes = max_argument_bytes
        self._tools = dict(tools)
        self._context = context
        self._audit = audit
        self.guard = DataGuard(policy.guard.for_principal(context.principal, context.team))
        self._quota = QuotaCounter(policy.quotas)
        self._breaker = Breaker(policy.quotas.max_identical_failures)
        self._lock = threading.Lock()
        self._halted: str | None = None
        self._cancels = 0
        self._closed = False
        self._in_flight = 0
        self._calls = 0
        self._settled = threading.Condition(self._lock)
        keys = {t.sequential for t in self._tools.values() if t.sequential is not None}
        self._sequential = {key: threading.Lock() for key in keys}

    @property
    def run_id(self) -> str:
        """The run this gate serves."""
        return self._context.run_id

    def set_deadline(self, deadline: float | None) -> None:
        """End every later execution by `deadline` (`time.monotonic()`): the run's time budget."""
        self._context.deadline = deadline

    def enabled_names(self) -> list[str]:
        """Registered tools the policy enables, in registration order."""
        return [name for name in self._tools if self._rule_enabled(name)]

    def schemas(self) -> list[dict[str, Any]]:
        """The enabled tools in the Chat Completions `tools` format."""
        return [self._tools[name].openai_schema() for name in self.enabled_names()]

    def sequential_key(self, name: str) -> str | None:
        """Calls of tools with the same key must not run concurrently (None: no constraint)."""
        found = self._tools.get(name)
        return found.sequential if found else None

    def start(self) -> None:
        """Append the run-start record: policy digest, enabled tools, sandbox limits."""
        data = {
            "policy_sha256": self._policy.digest(),
            "enabled_tools": self.enabled_names(),
            "quotas": self._policy.quotas.model_dump(),
            "sandbox": self._limits.model_dump(),
            "conversation_id": self._context.conversation_id,
        }
        if self._context.continues is not None:
            data["continues"] = self._context.continues
        self._record("run_start", data)

    def close(self, *, reason: str = "closed", grace_s: float = CLOSE_GRACE_S) -> None:
        """Append the run-end record (once), after the outcomes of calls still in flight.

        On Ctrl-C a tool thread may still be finishing: a bounded wait keeps `run_end` last.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=grace_s)
        data = {"reason": reason, "halted": self._halted, **self._quota.snapshot()}
        self._record("run_end", data)

    def record_redactions(self, where: str, counts: Mapping[str, int]) -> None:
        """What the data guard replaced outside a tool call (the system prompt), audited."""
        self._record("redaction", {"where": where, "redactions": dict(counts)})

    def record_answer(self, *, continues: str, question: str, answer: str) -> None:
        """The user's answer that continues run `continues` (after `needs_input`), audited."""
        self._record("user_answer", {"continues": continues, "question": question,
                                     "answer": answer})

    def _record(self, kind: str, data: Mapping[str, Any]) -> None:
        """One audit record, always with the principal the face authenticated (never the model)."""
        self._audit.record(self.run_id, kind, {**data, **self._context.who()})

    def cancel(self, *, halt: bool = True) -> None:
        """Calls running now end `cancelled`; with `halt`, no later call runs either.

        The caller then removes the sandbox (the lost runner is not the call's result);
        `halt=False` cancels only what runs now (an MCP client cancelling one call).
        """
        with self._lock:
            self._cancels += 1
            if halt:
                self._halted = self._halted or "the run was cancelled by the operator"
                self._context.stop.set()  # a tool waiting for a person stops waiting

    @traced_call
    def call(
        self,
        *,
        name: str,
        arguments: str | Mapping[str, Any],
        call_id: str,
        model_call_id: str | None = None,
    ) -> ToolOutcome:
        """Check, record and run one call; model errors come back as data, never raised.

        `arguments` is JSON text, or an object (some servers send one): it is taken as that
        object. `call_id` is echoed in the outcome; `model_call_id`, the id the model wrote
        (if it differs or is missing), is kept in the audit as data. Neither keys anything.
        """
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False, default=str)
        with self._lock:
            self._in_flight += 1
            self._calls += 1
            audit_id = f"{self.run_id}-c{self._calls}"
        ids = CallIds(audit=audit_id, reply=call_id, model=model_call_id)
        try:
            return self._call(name=name, arguments=arguments, ids=ids)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._settled.notify_all()

    def _call(self, *, name: str, arguments: str, ids: CallIds) -> ToolOutcome:
        started = time.perf_counter()
        tool = self._tools.get(name)
        size = len(arguments.encode("utf-8", "surrogatepass"))
        decided = self._decide(name, tool, arguments, size)
        self._record_intent(name, arguments, size, ids, decided)
        if isinstance(decided, _Refusal):
            text = render_failure(decided.failure)
            return ToolOutcome(
                call_id=ids.reply, audit_id=ids.audit, name=name, status=decided.status,
                text=text, duration_s=time.perf_counter() - started, rule=decided.rule,
            )
        if tool is None:  # pragma: no cover - _decide refuses unknown tools
            raise RuntimeError("unreachable: an allowed call without a tool")
        return self._run(tool, decided, ids, started)

    def _decide(
        self, name: str, tool: Tool | None, arguments: str, size: int
    ) -> BaseModel | _Refusal:
        """Return the validated arguments, or why the tool must not run."""
        if self._halted is not None:
            return _Refusal("halted", Halted(reason=self._halted), "halted")
        if tool is None:
            return self._refuse("unknown", UnknownTool(name=name, available=self.enabled_names()))
        if not self._rule_enabled(name):
            hint = f"Available tools: {', '.join(self.enabled_names()) or '(none)'}"
            rule = self._enable_key(name)
            denied = Denied(tool=name, rule=rule, reason="this tool is not enabled", hint=hint)
            return self._refuse("denied", denied, rule)
        if self._breaker.is_open(name):
            limit = self._breaker.limit
            reason = f"it failed the same way {limit} times in a row and is disabled for this run"
            return self._refuse("denied", Denied(tool=name, rule=BREAKER_RULE, reason=reason),
                                BREAKER_RULE)
        if size > self.max_argument_bytes:
            return self._refuse("invalid", too_large(name, size, self.max_argument_bytes))
        try:
            args = tool.parse_arguments(arguments)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_context=False, include_input=False)
            return self._refuse("invalid", invalid_arguments(name, [dict(e) for e in errors]))
        denied_or_none = check_arguments(self._policy, self._limits, name, args, self._context)
        denied_or_none = denied_or_none or check_plan_call(self._policy, self._context, name, args)
        denied_or_none = denied_or_none or self._quota.take(name)
        if denied_or_none is None:
            return args
        return self._refuse("denied", denied_or_none, denied_or_none.rule)

    def _refuse(self, status: CallStatus, failure: Failure, rule: str | None = None) -> _Refusal:
        """A refusal (denied, unknown or invalid); past `quotas.max_denied` it halts the run."""
        if self._quota.deny():
            limit = self._policy.quotas.max_denied
            reason = (
                f"more than {limit} refused calls (denied, unknown tool or invalid arguments) "
                "in this run"
            )
            self._halted = reason
            return _Refusal("halted", Halted(reason=reason), "quotas.max_denied")
        return _Refusal(status, failure, rule)

    def _rule_enabled(self, name: str) -> bool:
        rule = self._policy.tools.rule(name)
        return rule is not None and rule.enabled

    @staticmethod
    def _enable_key(name: str) -> str:
        return f"tools.{name}.enabled" if name in BUILTIN_TOOLS else f"tools.custom.{name}.enabled"

    def _record_intent(
        self, name: str, arguments: str, size: int, ids: CallIds, decided: BaseModel | _Refusal
    ) -> None:
        """Request and decision, one fsync'd append, before anything runs."""
        request = request_data(name, arguments, size, ids, self.max_argument_bytes)
        decision: dict[str, Any] = {"call_id": ids.audit, "tool": name, "decision": "allowed"}
        if isinstance(decided, _Refusal):
            decision["decision"] = decided.status
            decision["rule"] = decided.rule
            decision["text"] = render_failure(decided.failure)
        try:
            principal = self._context.who()
            self._audit.record_many(
                self.run_id,
                [("request", {**request, **principal}), ("decision", {**decision, **principal})],
            )
        except AuditError as exc:
            self._halted = str(exc)
            raise

    def _run(self, tool: Tool, args: BaseModel, ids: CallIds, started: float) -> ToolOutcome:
        """Run an allowed call (one at a time per sequential key, within its timeout), record it."""
        cancels = self._cancels
        status: CallStatus = "ok"
        returned: object = None
        extra: Mapping[str, Any] = {}
        rule: str | None = None
        try:
            returned = self._invoke(tool, args, cancels, ids.reply)
            text, extra = unpack_return(returned, self._context.observation_chars)
        except CallTimedOut:
            seconds, key = call_timeout(self._policy, self._limits, tool.name)
            message = f"the call did not finish within {seconds:g} s ({key}) and was abandoned"
            status, text = "error", render_failure(ToolError(tool=tool.name, message=message))
            rule = key
        except ToolFailure as exc:
            status, text = "error", render_failure(ToolError(tool=tool.name, message=str(exc)))
        except (SandboxError, AuditError, KeyboardInterrupt) as exc:
            if self._cancels == cancels:  # a cancelled call's sandbox was removed on purpose
                self._halted = f"operator error: {type(exc).__name__}: {exc}"
                self._record_outcome(tool, ids.audit, "halted", self._halted, started, {})
                raise
            text = CANCELLED_TEXT
        except CallCancelled:
            text = CANCELLED_TEXT
        except Exception as exc:  # a tool's bug: the model is told, the operator sees the log
            logger.warning("Tool %s raised %s", tool.name, type(exc).__name__)
            message = f"{type(exc).__name__}: {exc}"
            status, text = "error", render_failure(ToolError(tool=tool.name, message=message))
        if self._cancels != cancels:
            status, text, extra = "cancelled", CANCELLED_TEXT, {}
            returned = None
        if tool.name != "ask_user":  # the audit keeps the answer as given; the boundary filters it
            text, extra = self.guard.outcome(text, extra)
        execution = returned.execution if isinstance(returned, ToolReturn) else None
        if status != "cancelled" and self._breaker.record(
            tool.name, failure_signature(status, text, execution)
        ):
            text = f"{text}\n\n{tripped_text(tool.name, self._breaker.limit or 0)}"
            rule = BREAKER_RULE
        duration = self._record_outcome(tool, ids.audit, status, text, started, extra)
        value = returned.value if isinstance(returned, ToolReturn) else returned
        return ToolOutcome(
            call_id=ids.reply, audit_id=ids.audit, name=tool.name, status=status, text=text,
            execution=execution, value=value if status == "ok" else None, duration_s=duration,
            rule=rule,
        )

    def _invoke(self, tool: Tool, args: BaseModel, cancels: int, call_id: str) -> object:
        """The tool's return value, from a thread of its own bounded by the call's timeout."""
        lock = self._sequential.get(tool.sequential or "")
        seconds, _ = call_timeout(self._policy, self._limits, tool.name)
        context = self._context.for_call(call_id)

        def call() -> object:
            if lock is None:
                return tool.invoke(args, context)
            with lock:
                return tool.invoke(args, context)

        return run_bounded(
            call, timeout=seconds, cancelled=lambda: self._cancels != cancels, name=tool.name
        )

    def _record_outcome(
        self, tool: Tool, call_id: str, status: CallStatus, text: str, started: float,
        extra: Mapping[str, Any],
    ) -> float:
        duration = time.perf_counter() - started
        try:
            self._record("outcome", outcome_data(call_id, tool.name, status, text, duration, extra))
        except AuditError as exc:
            self._halted = str(exc)
            raise
        return duration


def build_gate(
    policy: Policy,
    *,
    limits: Limits | None = None,
    context: ToolContext,
    audit: AuditLog,
    extra_tools: Sequence[Tool] = (),
    replace: bool = False,
    max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
) -> ToolGate:
    """Register the built-in tools, the policy's `entry` tools and `extra_tools`; start the run.

    Two tools of one name are a `DuplicateToolError` unless `replace` (tests give `http_get`
    a loopback resolver). `PolicyError`: a custom tool the policy names is not registered or
    cannot be loaded, or `execute_python` is enabled without a sandbox runner.
    """
    tools = register({}, [*builtin_tools(policy, context), *custom_tools(policy)])
    register(tools, extra_tools, replace=replace)
    missing = [name for name in policy.tools.custom if name not in tools]
    if missing:
        raise PolicyError(f"policy [tools.custom.{missing[0]}] names a tool that is not registered")
    if policy.tools.execute_python.enabled and context.runner is None:
        raise PolicyError("policy enables execute_python but no sandbox runner was started")
    gate = ToolGate(
        policy=policy, limits=limits or Limits(), tools=tools, context=context, audit=audit,
        max_argument_bytes=max_argument_bytes,
    )
    gate.start()
    return gate
