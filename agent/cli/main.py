"""The `sbx` command line: wires the layers together and turns operator errors into one line.

Each command group lives in its own module of this package (`exec`, `image`, `audit`,
`ask`, ...); this module only assembles them and owns the error boundary:
a `SandboxError` (or any error the operator must fix) prints one line on stderr
and exits non-zero, never a stack trace from our own code.
"""

from __future__ import annotations

import click

from sbx.agent.cli import ask, audit, bench, chat, export, image, keys, mcp, selftest, serve
from sbx.agent.cli import exec as exec_commands


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


exec_commands.register(cli)
image.register(cli)
audit.register(cli)
ask.register(cli)
chat.register(cli)
export.register(cli)
selftest.register(cli)
bench.register(cli)
mcp.register(cli)
serve.register(cli)
keys.register(cli)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="sbx")
