"""`run_command`: a shell command in the run's sandbox, through the gate like any tool.

Off unless the operator enables `[tools.run_command]`: a shell reaches no
further than Python does (the same container, its walls, no network unless
the policy opens it), but an operator who allowed only Python should not
find shell commands running. The command runs as a small Python program in
the sandbox session (`/bin/sh -c`, its output copied line by line as it
comes, its exit status the program's), so it shares the session's limits,
timeout and audit record with `execute_python`, and the same sequential key:
one session never runs two programs at once.
"""

from __future__ import annotations

from sbx.tools.builtin.execute_python import SESSION_KEY, audit_fields, run_options
from sbx.tools.context import ToolContext
from sbx.tools.observation import render_execution
from sbx.tools.registry import Tool, ToolFailure, ToolReturn, build_tool

_PROGRAM = r'''
import os, subprocess, sys, threading
proc = subprocess.Popen(["/bin/sh", "-c", COMMAND], cwd=CWD or None,
                        env={**os.environ, **ENVS}, stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
def copy(pipe, out):
    for line in iter(pipe.readline, b""):
        out.write(line.decode("utf-8", "replace"))
        out.flush()
copying = [threading.Thread(target=copy, args=(proc.stdout, sys.stdout)),
           threading.Thread(target=copy, args=(proc.stderr, sys.stderr))]
for thread in copying:
    thread.start()
for thread in copying:
    thread.join()
raise SystemExit(proc.wait())
'''


def command_program(command: str, cwd: str = "", envs: dict[str, str] | None = None) -> str:
    """The Python program that runs `command` with `/bin/sh` and exits with its status."""
    values = {"COMMAND": command, "CWD": cwd, "ENVS": dict(envs or {})}
    return f"exec({_PROGRAM!r}, {values!r})\n"


def make_run_command() -> Tool:
    """The `run_command` tool (the sandbox's limits are the session's, not the tool's)."""

    def run_command(command: str, ctx: ToolContext, cwd: str = "",
                    envs: dict[str, str] | None = None) -> ToolReturn:
        """Run a shell command (`/bin/sh -c`) in this run's sandbox: its output and exit status.

        The same sandbox as execute_python: its files, its limits, no network.

        Args:
            command: The command line, as a shell reads it.
            ctx: The run's context, injected by the gate (not part of the schema).
            cwd: The working directory (empty: the sandbox's own, /work).
            envs: Environment variables for this command only.
        """
        if ctx.runner is None:
            raise ToolFailure("no sandbox is available in this run")
        result = ctx.runner.run(command_program(command, cwd, envs), **run_options(ctx))
        text = render_execution(result, max_chars=ctx.observation_chars)
        return ToolReturn(text=text, execution=result, audit=audit_fields(result))

    return build_tool(run_command, sequential=SESSION_KEY)
