"""`sbx export`: a past run as a notebook, a script or a report, written to run next to its data.

    ipynb   nbformat v4: the model's final plan (a markdown task list, when it
            wrote one), a header cell (DATA_DIR, OUTPUT_DIR), then per run a
            markdown cell with the question, one code cell per execution with
            its recorded outputs (stdout, stderr, the error, PNG artifacts as
            `image/png`), and a markdown cell with the answer and its sources
            (`agent.export_notebook`)
    py      the same code as one script with `# %%` cells (Jupytext, VS Code)
    md      a report: the final plan, then question, steps (code and output), answer, sources,
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

from collections.abc import Callable
from typing import Literal

from sbx.agent.core.history import RecordedConversation, RecordedRun, StateLoss
from sbx.agent.export.code import RESET_CODE, comment, rewrite_paths
from sbx.agent.export.common import executions, header_for, outcome_phrase
from sbx.agent.provenance.parts import UNMARKED_NOTE
from sbx.tools.text_safety import safe_text

Format = Literal["ipynb", "py", "md"]
FORMATS: tuple[Format, ...] = ("ipynb", "py", "md")


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
        from sbx.agent.export.notebook import to_notebook  # nbformat loads only when asked

        return to_notebook(record)
    if fmt == "md":
        from sbx.agent.export.report import to_markdown

        return to_markdown(record, artifact_link=artifact_link)
    return to_script(record)


RUN_CELL = '''
def run_cell(source, name):
    """Run code that raised in the original run; print its traceback and go on."""
    import traceback

    try:
        exec(compile(source, name, "exec"), globals())
    except Exception:
        traceback.print_exc()
'''


def answer_comment(run: RecordedRun) -> str:
    """The answer for a script's comment: each part under its title when it has parts."""
    if run.parts is None or not run.parts.marked:
        note = f"\n{UNMARKED_NOTE}" if run.parts is not None else ""
        return f"Answer: {run.answer}{note}"
    titled = [f"{title}:\n{text}" for title, text in run.parts.titled()]
    return "Answer:\n" + "\n".join(titled)


def to_script(record: RecordedConversation) -> str:
    """The code as one Python script with `# %%` cells."""
    parts = [header_for(record)]
    if any(execution.failed for _, execution in executions(record)):
        parts.append(RUN_CELL.lstrip("\n"))
    for run in record.runs:
        parts.append(f"# %% [markdown]\n{comment('Question: ' + run.question)}\n")
        for execution in run.executions:
            parts.extend(_loss_part(execution.loss_before))
            title = f"execution {execution.number} [{execution.call_id}]"
            code = rewrite_paths(execution.code)
            if execution.unfinished:
                title += f" ({outcome_phrase(execution)} in the run: not run here)"
                code = comment(execution.code)
            elif execution.failed:
                title += f" (raised {execution.error_type or 'an error'} in the run)"
                code = f"run_cell({code!r}, {f'execution {execution.number}'!r})\n"
            parts.append(f"# %% {safe_text(title)}\n{code.rstrip()}\n")
        if run.answer is not None:
            parts.append(f"# %% [markdown]\n{comment(answer_comment(run))}\n")
        if run.needs_input is not None:
            parts.append(f"# %% [markdown]\n{comment('The model asked: ' + run.needs_input)}\n")
    return "\n\n".join(part.rstrip("\n") for part in parts) + "\n"


def _loss_part(loss: StateLoss | None) -> list[str]:
    """A state loss before an execution: nothing when a restore rebuilt it, else a reset."""
    if loss is None or loss.restored == "restored":
        return []
    if loss.restored == "partial":
        names = ", ".join(loss.variables) or "(none named)"
        said = comment(f"State restored after {loss.reason}; these may differ: {names}")
        return [f"# %% [markdown]\n{said}\n"]
    note = comment(f"The interpreter was reset here ({loss.reason}) and nothing restored it.")
    return [f"# %% reset\n{note}\n{RESET_CODE}\n"]
