"""The `sbx` command line: one lazily loaded group, and the error boundary around it.

Each command lives in its own module of this package (`exec`, `ask`, `serve`, ...)
and is imported only when it runs, so `sbx exec` never pays for the model SDK,
the MCP SDK or the service's store (importing all of them takes seconds), and a
Ctrl-C while a command loads is one line, never a traceback. `sbx --help` lists
every command from the table below without importing any of them.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

COMMANDS: dict[str, tuple[str, str, str]] = {
    "exec": ("exec", "exec_command", "Run a Python program in a fresh, locked-down container."),
    "ask": ("ask", "ask_command", "Answer a question by letting a model write and run Python."),
    "chat": (
        "chat",
        "chat_command",
        "Talk with the agent about your data; follow-ups build on it.",
    ),
    "demo": ("ask", "demo_command", "Watch the agent fix its own mistake, with a scripted model."),
    "replay": (
        "ask",
        "replay_command",
        "Re-render a past run from its transcript (or run it again).",
    ),
    "export": ("export", "export_command", "A past run as a notebook, a script or a report."),
    "notes": ("notes", "notes", "See, add, edit and delete notes about your data files."),
    "serve": (
        "serve",
        "serve_command",
        "Run sbx as a multi-user HTTP service (loopback by default).",
    ),
    "keys": ("keys", "keys", "Create, list and revoke the service's API keys."),
    "mcp": ("mcp", "mcp_command", "Serve the sandbox to an MCP client over stdio."),
    "image": ("image", "image", "Build and inspect the sandbox image (offline)."),
    "doctor": (
        "doctor",
        "doctor_command",
        "Check the engine, the image, the runtimes and the limits.",
    ),
    "selftest": ("selftest", "selftest_command", "Prove the containment controls on this host."),
    "audit": ("audit", "audit", "Verify and read tool-call audit logs (hash-chained)."),
    "bench": (
        "bench",
        "bench_command",
        "Measure sbx against its floors and a hardened docker run.",
    ),
    "packages": ("packages", "packages", "Modules the image lacked, and adding a package."),
    "gc": ("doctor", "gc_command", "Remove sandbox containers left behind by a crashed process."),
}
"""Command name -> (module of `sbx.agent.cli`, attribute, one-line help for `sbx --help`)."""


class LazyGroup(click.Group):
    """A group whose commands are imported on first use, listed from `COMMANDS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, in the table's order."""
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import the command's module now (Ctrl-C meanwhile is one line, exit 130)."""
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attribute, _ = entry
        try:
            module = importlib.import_module(f"sbx.agent.cli.{module_name}")
        except KeyboardInterrupt:
            click.echo("sbx: interrupted", err=True)
            sys.exit(130)
        command: click.Command = getattr(module, attribute)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `sbx --help`, without importing any command."""
        rows = [(name, short) for name, (_, _, short) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="sbx")
def cli() -> None:
    """sbx: run model-written Python in locked-down, throw-away Docker containers.

    \b
    First steps:
      sbx image build                 build the sandbox image (offline, once)
      sbx doctor                      check the engine, the image and the limits
      sbx exec analysis.py --data sales.csv --output out/
      sbx demo                        watch the agent answer with a scripted model
      sbx chat --data sales.csv       ask questions, then follow-ups, with your model
    """


def prefix_stray_logs() -> None:
    """Make a warning logged where no logging is configured an `sbx:` line.

    Every command but `serve` configures none: stderr then holds the program's own text
    and sbx's prefixed lines, nothing bare.
    """
    logging.lastResort = logging.StreamHandler()  # sys.stderr, at WARNING as Python's was
    logging.lastResort.setLevel(logging.WARNING)
    logging.lastResort.setFormatter(logging.Formatter("sbx: %(message)s"))


def main() -> None:
    """Console-script entry point."""
    prefix_stray_logs()
    try:
        cli(prog_name="sbx")
    except KeyboardInterrupt:  # before a command's own boundary was in place
        click.echo("sbx: interrupted", err=True)
        sys.exit(130)
