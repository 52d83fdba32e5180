"""The one renderer: what the model reads after execute_python and after any failure."""

from __future__ import annotations

from sbx.sandbox.limits import Limits
from sbx.sandbox.outcome import resource_notes
from sbx.sandbox.result import Artifact, ExecutionError, ExecutionResult, RefusedArtifact
from sbx.tools.observation import (
    Denied,
    Halted,
    InvalidArguments,
    ToolError,
    UnknownTool,
    render_execution,
    render_failure,
)

LIMITS = Limits()


def test_error_comes_first_then_output() -> None:
    result = ExecutionResult(
        stdout="partial\n",
        exit_code=1,
        error=ExecutionError(
            type="AttributeError",
            message="'list' object has no attribute 'mean'",
            traceback='Traceback (most recent call last):\n  File "<cell>", line 2, in <module>\n'
            "AttributeError: 'list' object has no attribute 'mean'\n",
        ),
    )
    assert render_execution(result) == (
        "Error: AttributeError: 'list' object has no attribute 'mean'\n"
        "Traceback (most recent call last):\n"
        '  File "<cell>", line 2, in <module>\n'
        "AttributeError: 'list' object has no attribute 'mean'\n"
        "[stdout]\npartial\n"
        "[resources] 0.00 s wall"
    )


def test_long_traceback_is_trimmed_keeping_the_bottom() -> None:
    frames = "\n".join(f'  File "<cell>", line {i}, in f{i}' for i in range(200))
    tb = f"Traceback (most recent call last):\n{frames}\nRecursionError: too deep"
    result = ExecutionResult(
        exit_code=1, error=ExecutionError(type="RecursionError", message="too deep", traceback=tb)
    )
    text = render_execution(result)
    assert "traceback lines cut" in text
    assert text.splitlines()[-2:] == ["RecursionError: too deep", "[resources] 0.00 s wall"]
    assert len(text.splitlines()) <= 43


def noted(result: ExecutionResult, limits: Limits) -> ExecutionResult:
    """The result as the session hands it over: its notes derived once, from its figures."""
    return result.model_copy(update={"notes": resource_notes(result, limits)})


def test_resource_notes_name_the_limit_and_the_knob() -> None:
    result = ExecutionResult(exit_code=137, timed_out=True, state_reset=True)
    text = render_execution(noted(result, Limits.model_validate({"timeout": "5s"})))
    assert (
        "timed out: the execution passed the 5 s wall-clock limit and was killed; "
        "variables were reset" in text
    )
    assert "`timeout` in the policy's [sandbox] table, or --timeout" in text
    oom = ExecutionResult(exit_code=137, oom_killed=True, state_reset=True)
    text = render_execution(noted(oom, LIMITS))
    assert "- killed: memory limit 512 MiB reached; variables were reset" in text
    assert "`memory` in the policy's [sandbox] table, or --memory" in text


def test_the_sandboxs_own_notes_are_shown_once_and_verbatim() -> None:
    noted = ExecutionResult(
        exit_code=137,
        oom_killed=True,
        state_reset=True,
        notes=["killed: memory limit 512 MiB reached", "container replaced"],
    )
    text = render_execution(noted)
    assert text.count("killed:") == 1
    assert "- container replaced" in text


def test_truncation_artifacts_and_refusals() -> None:
    result = ExecutionResult(
        stdout="head\n[... 5000 bytes cut ...]\ntail\n",
        truncated=True,
        stdout_dropped_bytes=5000,
        artifacts=[Artifact(name="plot.png", path="/tmp/x/plot.png", size=2048, sha256="0" * 64)],
        refused_artifacts=[RefusedArtifact(name="link", reason="symlink")],
    )
    text = render_execution(noted(result, LIMITS))
    assert "[... 5000 bytes cut ...]" in text  # the sandbox's cut marker is kept
    assert "output truncated: 5000 bytes of stdout cut from the middle (keeps 1 MiB" in text
    assert "artifacts saved: plot.png (2 KiB)" in text
    assert "artifacts refused: 'link' (symlink)" in text


def test_silent_success_and_exit_codes() -> None:
    assert render_execution(ExecutionResult()).startswith("(no output")
    assert "- exit code 3" in render_execution(ExecutionResult(exit_code=3))
    reset = ExecutionResult(exit_code=7, state_reset=True)
    assert "state reset: the interpreter exited (status 7)" in render_execution(
        noted(reset, LIMITS)
    )


def test_render_failure_texts() -> None:
    assert (
        render_failure(UnknownTool(name="x", available=["a", "b"]))
        == "Unknown tool name: 'x'. Available tools: a, b"
    )
    assert (
        render_failure(UnknownTool(name="x", available=[]))
        == "Unknown tool name: 'x'. Available tools: (none)"
    )
    invalid = render_failure(
        InvalidArguments(
            tool="t", errors=[{"type": "missing", "loc": ["a"], "msg": "Field required"}]
        )
    )
    assert invalid == (
        "1 validation error for tool 't': "
        '[{"type":"missing","loc":["a"],"msg":"Field required"}]\n'
        "Fix the errors and try again."
    )
    denied = render_failure(Denied(tool="t", rule="quotas.total", reason="too many", hint="Stop."))
    assert denied == "Call to 't' denied by policy rule quotas.total: too many Stop."
    assert render_failure(Halted(reason="x")).startswith("The run was halted by policy: x.")
    assert render_failure(ToolError(tool="t", message="m")) == "Error from t: m"


def test_resources_line_reports_wall_cpu_and_peak_memory() -> None:
    result = ExecutionResult(
        stdout="1\n", duration_s=0.25, cpu_seconds=0.2, peak_memory_bytes=48 * 1024 * 1024
    )
    assert render_execution(result).splitlines()[-1] == (
        "[resources] 0.25 s wall, 0.20 s CPU, peak memory 48 MiB"
    )
