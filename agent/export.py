"""`sbx export`: a past run as a notebook, a script or a report, written to run next to its data.

    ipynb   nbformat v4: a header cell (DATA_DIR, OUTPUT_DIR), then per run a
            markdown cell with the question, one code cell per execution with
            its recorded outputs (stdout, stderr, the error, PNG artifacts as
            `image/png`), and a markdown cell with the answer and its sources
            (`agent.export_notebook`)
    py      the same code as one script with `# %%` cells (Jupytext, VS Code)
    md      a report: question, steps (code and output), answer, sources,
            unsupported numbers (`agent.export_report`)

An execution that raised in the run stays in the export, because later code
may use what it defined before raising: the notebook tags its cell
`raises-exception` (Run All goes on past it, as Jupyter documents); the
script runs it through `run_cell`, which prints the traceback and goes on.

The code is the model's and the transcript anyone's: the export says so at
the top; text from the transcript in comments and markdown is escaped
(`export_code.comment`, `markdown_text`), and images are embedded only from
regular files that are PNGs, at most `MAX_IMAGE_BYTES` each.
"""

from __future__ import annotations

import base64
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Literal

from sbx.agent.export_code import comment, header, rewrite_paths
from sbx.agent.provenance_record import RecordedConversation, RecordedExecution
from sbx.tools.text_safety import safe_text

Format = Literal["ipynb", "py", "md"]
FORMATS: tuple[Format, ...] = ("ipynb", "py", "md")
MAX_IMAGE_BYTES = 10 * 1024 * 1024
"""Largest PNG embedded in a notebook."""
_PNG = b"\x89PNG\r\n\x1a\n"
_MARKDOWN_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[",
                                   "]": "\\]"})


def export(
    record: RecordedConversation,
    fmt: Format,
    *,
    artifact_link: Callable[[str], str | None] | None = None,
) -> str:
    """The conversation's runs in `fmt`, as text (a notebook is JSON).

    `artifact_link(host path)` gives the URL a report links a chart by (the service's
    artifact route; None: only named); without it a report links the local path.
    """
    if fmt == "ipynb":
        from sbx.agent.export_notebook import to_notebook  # nbformat loads only when asked

        return to_notebook(record)
    if fmt == "md":
        from sbx.agent.export_report import to_markdown

        return to_markdown(record, artifact_link=artifact_link)
    return to_script(record)


def header_for(record: RecordedConversation) -> str:
    """The header cell of this conversation's export."""
    digests: dict[str, str] = {}
    for run in record.runs:
        digests.update(run.data_sha256)
    if not digests:
        digests = {Path(path).name: "(not recorded)" for run in record.runs for path in run.data}
    return header(
        source=record.path.name, run_ids=[run.run_id for run in record.runs], digests=digests
    )


def executions(record: RecordedConversation) -> Iterable[tuple[int, RecordedExecution]]:
    """(run index, execution) for every execution of every run, in order."""
    for index, run in enumerate(record.runs):
        for execution in run.executions:
            yield index, execution


RUN_CELL = '''
def run_cell(source, name):
    """Run code that raised in the original run; print its traceback and go on."""
    import traceback

    try:
        exec(compile(source, name, "exec"), globals())
    except Exception:
        traceback.print_exc()
'''


def to_script(record: RecordedConversation) -> str:
    """The code as one Python script with `# %%` cells."""
    parts = [header_for(record)]
    if any(execution.failed for _, execution in executions(record)):
        parts.append(RUN_CELL.lstrip("\n"))
    for run in record.runs:
        parts.append(f"# %% [markdown]\n{comment('Question: ' + run.question)}\n")
        for execution in run.executions:
            title = f"execution {execution.number} [{execution.call_id}]"
            code = rewrite_paths(execution.code)
            if execution.failed:
                title += f" (raised {execution.error_type or 'an error'} in the run)"
                code = f"run_cell({code!r}, {f'execution {execution.number}'!r})\n"
            parts.append(f"# %% {safe_text(title)}\n{code.rstrip()}\n")
        if run.answer is not None:
            parts.append(f"# %% [markdown]\n{comment('Answer: ' + run.answer)}\n")
    return "\n\n".join(part.rstrip("\n") for part in parts) + "\n"


def markdown_text(text: str) -> str:
    """Model or transcript text made inert in markdown: no HTML, no links, no images.

    `<`, `>` and `&` become entities and `[`, `]` are escaped, so `![x](https://...)`
    cannot make a viewer fetch a URL; controls are shown escaped (`safe_text`).
    """
    return safe_text(text, multiline=True).translate(_MARKDOWN_ESCAPES)


def png_bytes(path: str) -> bytes | None:
    """The file at `path` if it is a regular file (not a link), a PNG, within the cap."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_IMAGE_BYTES:
            return None
        with open(path, "rb") as handle:
            data = handle.read(MAX_IMAGE_BYTES + 1)
    except OSError:
        return None
    return data if data.startswith(_PNG) and len(data) <= MAX_IMAGE_BYTES else None


def png_base64(path: str) -> str | None:
    """`png_bytes` as base64 text, for `image/png` display data."""
    data = png_bytes(path)
    return base64.b64encode(data).decode("ascii") if data is not None else None
