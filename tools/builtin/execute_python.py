"""`execute_python`: the model's programs go to the run's sandbox, through the gate like any tool.

The tool owns no container: it calls `ToolContext.runner` (a `CodeRunner`,
in practice the run's sandbox session) and renders the `ExecutionResult` with
the one renderer, `render_execution`. All calls share the sequential key
`sandbox-session`, so one session never runs two programs at once.
"""

from __future__ import annotations

import time
from typing import Any

from sbx.sandbox.live_output import OutputCallback
from sbx.sandbox.result import ExecutionResult
from sbx.tools.context import ToolContext
from sbx.tools.hints import missing_module
from sbx.tools.observation import render_execution
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, build_tool

SESSION_KEY = "sandbox-session"
DEADLINE_SLACK_S = 1.0
"""A timeout this close to the run's deadline is the run's time budget running out."""


def make_execute_python() -> Tool:
    """The `execute_python` tool (the sandbox's limits are the session's, not the tool's)."""

    def execute_python(code: str, ctx: ToolContext) -> ToolReturn:
        """Run Python code in this run's sandbox and return its stdout, stderr and any error.

        Variables, imports and files persist between calls in one run, like a notebook.
        Input files are read-only under /data; save plots and tables to /output. There
        is no network. print() what you need to see.

        Args:
            code: A complete Python program (not a shell command).
            ctx: The run's context, injected by the gate (not part of the schema).
        """
        if ctx.runner is None:
            raise ToolFailure("no sandbox is available in this run")
        result = ctx.runner.run(code, **run_options(ctx))
        if result.timed_out and out_of_time(ctx):
            result.notes = [*result.notes, OUT_OF_TIME_NOTE]
        text = render_execution(result, max_chars=ctx.observation_chars)
        audit = audit_fields(result)
        module = missing_module(result)
        if module is not None:  # counted by `sbx packages` (with who needed it)
            audit |= {"missing_module": module, "principal": ctx.principal}
        return ToolReturn(text=text, execution=result, audit=audit)

    return build_tool(execute_python, sequential=SESSION_KEY)


OUT_OF_TIME_NOTE = (
    "the run's time budget (max_wall_time, --max-time) ran out while this code ran, so it "
    "was stopped: the run ends now"
)


def run_options(ctx: ToolContext) -> dict[str, Any]:
    """The runner's options: live output, the run's time left, whether values are shown.

    An option not needed is left out, so a runner written before it still works.
    """
    options: dict[str, Any] = {}
    callback = live_output(ctx)
    if callback is not None:
        options["on_output"] = callback
    if ctx.deadline is not None:
        options["timeout"] = max(0.0, ctx.deadline - time.monotonic())
    if not ctx.show_values:
        options["show_values"] = False
    if not ctx.print_values:
        options["print_values"] = False
    return options


def out_of_time(ctx: ToolContext) -> bool:
    """The run's deadline (nearly) passed: a timeout then is the run's, not the sandbox's."""
    return ctx.deadline is not None and time.monotonic() >= ctx.deadline - DEADLINE_SLACK_S


def live_output(ctx: ToolContext) -> OutputCallback | None:
    """The callback that hands this call's live output to the run's sink, if it has one."""
    sink, call_id = ctx.on_output, ctx.call_id or ""
    if sink is None:
        return None
    return lambda stream, text: sink(call_id, stream, text)


def audit_fields(result: ExecutionResult) -> dict[str, Any]:
    """The outcome fields the audit record keeps for one execution."""
    return {
        "exit_code": result.exit_code,
        "error_type": result.error.type if result.error else None,
        "timed_out": result.timed_out,
        "oom_killed": result.oom_killed,
        "state_reset": result.state_reset,
        "stdout_bytes": len(result.stdout.encode()) + result.stdout_dropped_bytes,
        "stderr_bytes": len(result.stderr.encode()) + result.stderr_dropped_bytes,
        "truncated": result.truncated,
        "execution_s": result.duration_s,
        "cpu_seconds": result.cpu_seconds,
        "peak_memory_bytes": result.peak_memory_bytes,
        "artifacts": [a.model_dump(include={"name", "size", "sha256"}) for a in result.artifacts],
        "refused_artifacts": [r.model_dump() for r in result.refused_artifacts],
    }
