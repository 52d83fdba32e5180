"""What the calling model is told about the sandbox: tool descriptions and server instructions.

An MCP client's model sees nothing of sbx but these texts, so they say what
the sandbox really holds, from the same sources that build it: the packages
of the image (`images/requirements.in`), `/data` (read-only: the names given
with `--data`, or what the face says it holds), `/output`, the network
setting and the limits of the policy file in force. A tool the policy
disables is still listed (a call to it is denied and audited like any other)
and its description says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from sbx.agent import AppConfig, format_size, index_data_files

MAX_NAMED_FILES = 20
"""Data files named in the descriptions; `list_data_files` lists them all."""


@dataclass(frozen=True, kw_only=True)
class Descriptions:
    """The texts of one server: its instructions and each tool's description."""

    instructions: str
    execute_python: str
    list_data_files: str
    preview_data_file: str
    reset_sandbox: str


def sandbox_packages() -> list[str]:
    """The packages the sandbox image installs, as listed in `images/requirements.in`."""
    text = resources.files("sbx.images").joinpath("requirements.in").read_text(encoding="utf-8")
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def describe(config: AppConfig, data_note: str, *, idle_s: float | None) -> Descriptions:
    """Every text from the configuration in force; `data_note` says what `/data` holds."""
    limits = config.limits
    network = (
        "There is no network: nothing can be downloaded or installed."
        if limits.network == "none"
        else "Network egress is OPEN in this deployment (the operator's policy says so)."
    )
    idle = f", or after {idle_s:g} s without a call" if idle_s else ""
    sandbox = (
        f"Python 3.11 in a locked-down Linux container with {', '.join(sandbox_packages())} "
        f"(matplotlib draws with the Agg backend). {network} "
        f"Input files are read-only under /data ({data_note}). "
        "Save plots and tables to /output: each file comes back as a resource link, "
        "PNG images also inline. "
        f"Each call may run for {limits.timeout:g} s and use {format_size(limits.memory)} of "
        f"memory (no swap) and {limits.cpus:g} CPU; past a limit the code is killed and the "
        f"sandbox's variables are lost. Output is kept up to {format_size(limits.stdout_bytes)} "
        "(head and tail)."
    )
    execute = (
        "Run Python code in this session's sandbox and return its output: the error first, "
        "then stdout and stderr, then resource notes. Variables, imports and files persist "
        "between calls of this session, like a notebook, until the sandbox is reset "
        f"(reset_sandbox, a cancelled call, a timeout or memory kill{idle}); the next result "
        f"then says so. print() what you need to see. {sandbox}"
    )
    rules = config.policy.tools
    return Descriptions(
        instructions=(
            "sbx runs your Python in a sandbox that persists for this session, under the "
            "operator's policy; every call is checked and written to an audit log. " + sandbox
        ),
        execute_python=_gated(execute, rules.execute_python.enabled),
        list_data_files=_gated(
            "List the data files given to this session (names and sizes); each is readable "
            "in the sandbox at /data/NAME.", rules.list_data_files.enabled,
        ),
        preview_data_file=_gated(
            "Show the first rows of one data file (CSV/TSV as a table, other text as lines), "
            f"at most {rules.preview_data_file.max_rows} rows. Binary formats (Parquet, "
            "Excel) are read with execute_python.", rules.preview_data_file.enabled,
        ),
        reset_sandbox=(
            "Remove this session's sandbox and start the next execute_python call in a fresh "
            "one: every variable, import and file in the sandbox is lost. Waits for a running "
            "call to finish (cancel that call to stop it at once)."
        ),
    )


def _gated(text: str, enabled: bool) -> str:
    if enabled:
        return text
    return text + " DISABLED by the operator's policy: every call is denied and audited."


def data_names(data: Sequence[Path]) -> str:
    """`/data/a.csv, /data/b.csv and 3 more`, or that none were given."""
    index = index_data_files(list(data), max_files=MAX_NAMED_FILES + 1)
    names = [f"/data/{item.name}" for item in index.files[:MAX_NAMED_FILES]]
    if not names:
        return "no data files were given"
    more = " and more (list_data_files)" if len(index.files) > MAX_NAMED_FILES else ""
    return ", ".join(names) + more
