"""The run as a markdown report: question, steps (code and output), answer, sources.

Everything in it came from the model, the sandbox or a transcript file, so
it is made inert before it is written: prose through `markdown_text` (no
HTML, no links or images that a viewer would fetch), code and output in
fences longer than any run of backticks inside them, table cells with their
pipes escaped. A plot is shown as an image only when its file is a PNG on
this machine: by its local path from the CLI, by the service's artifact URL
from the web page (never the server's own path).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sbx.agent.core.history import (
    RecordedConversation,
    RecordedExecution,
    RecordedRun,
    StateLoss,
)
from sbx.agent.export.common import markdown_text, outcome_phrase, png_bytes
from sbx.agent.provenance.parts import UNMARKED_NOTE
from sbx.tools.text_safety import safe_text

MAX_OUTPUT_LINES = 200
"""Output lines shown per step; the notebook keeps them all."""
_SAFE_PATH = re.compile(r"[\w./%~-]+")
_TASK = {"done": "- [x] {}", "pending": "- [ ] {}", "in_progress": "- [ ] {} (in progress)",
         "dropped": "- ~~{}~~ (dropped)"}
"""A plan step as a markdown task-list item, by status."""


Linker = Callable[[str], "str | None"]
"""Host path of an artifact -> the URL to link it by (None: name it only)."""


def to_markdown(record: RecordedConversation, *, artifact_link: Linker | None = None) -> str:
    """The report for every run of the conversation; charts linked by `artifact_link`."""
    parts = [f"# sbx report: {markdown_text(record.path.name)}"]
    plan = plan_section(record)
    if plan is not None:
        parts.append(plan)
    for run in record.runs:
        parts.append(_run_header(run))
        for execution in run.executions:
            if execution.loss_before is not None:
                parts.append(loss_line(execution.loss_before))
            parts.append(_step(execution, artifact_link))
        parts.append(answer_section(run))
    return "\n\n".join(parts) + "\n"


def _run_header(run: RecordedRun) -> str:
    lines = [f"## Question\n\n{markdown_text(run.question)}", "",
             f"- Run: `{_code_span(run.run_id)}`, model `{_code_span(run.model)}`, prompt "
             f"v{markdown_text(run.prompt_version)}, image `{_code_span(run.image)}`"]
    for name, digest in run.data_sha256.items():
        lines.append(f"- Data: `{_code_span(name)}` (sha256 `{_code_span(digest)}`)")
    return "\n".join(lines)


def loss_line(loss: StateLoss) -> str:
    """One italic line: the state was lost here, why, and whether a restore rebuilt it."""
    after = {"restored": "sbx restored it by re-running the earlier code",
             "partial": "sbx restored it, but some values may differ: "
                        + ", ".join(loss.variables)}.get(loss.restored, "it was not restored")
    return f"*The sandbox's state was lost here ({markdown_text(loss.reason)}); " \
           f"{markdown_text(after)}.*"


def unfinished_section(execution: RecordedExecution) -> str:
    """An execution that did not run to its end, as markdown: why, its code, what it printed.

    Exports show it instead of running it again (it would hang or be killed again).
    """
    why = outcome_phrase(execution)
    parts = [f"**Not run here**: execution {execution.number} {why} in the conversation; "
             "its code and what it printed before follow.", fenced(execution.code, "python")]
    output = execution.stdout + execution.stderr
    if output.strip():
        parts.append(fenced(output, "text"))
    return "\n\n".join(parts)


def _step(execution: RecordedExecution, link: Linker | None) -> str:
    title = f"### Step {execution.number}"
    if execution.unfinished:
        title += f" ({outcome_phrase(execution)})"
    elif execution.failed:
        title += f" (raised {markdown_text(execution.error_type or 'an error')})"
    parts = [title, fenced(execution.code, "python")]
    output = execution.stdout
    if execution.failed and execution.traceback:
        output += execution.traceback
    if output.strip():
        lines = output.splitlines()
        if len(lines) > MAX_OUTPUT_LINES:
            cut = len(lines) - MAX_OUTPUT_LINES
            lines = [*lines[:MAX_OUTPUT_LINES], f"... ({cut} more lines)"]
        parts += ["Output:", fenced("\n".join(lines), "text")]
    for path in execution.artifacts:
        parts.append(_image(path, link))
    return "\n\n".join(parts)


def plan_section(record: RecordedConversation) -> str | None:
    """The conversation's final plan as a checklist (the last run's that has one), or None.

    Exports start with it: what the model set out to do, and how far it got.
    """
    run = next((run for run in reversed(record.runs) if run.plan), None)
    if run is None:
        return None
    lines = ["## Plan", ""]
    for step in run.plan:
        status = str(step.get("status", ""))
        text = markdown_text(" ".join(str(step.get("description", "")).split()))
        tool = f" (`{_code_span(str(step['tool']))}`)" if step.get("tool") else ""
        lines.append(_TASK.get(status, "- [ ] {} ({})").format(text + tool, _code_span(status)))
    return "\n".join(lines)


def answer_section(run: RecordedRun) -> str:
    """The answer, the verdict on its numbers, and their sources (also the notebook's cell)."""
    if run.needs_input is not None:
        return f"### The model asked\n\n{markdown_text(run.needs_input)}"
    if run.answer is None:
        return f"### No answer\n\nThe run ended `{_code_span(str(run.status))}`."
    parts = ["### Answer", *answer_parts(run)]
    if run.mislabelled:
        quoted = "; ".join(f"“{markdown_text(sentence)}”" for sentence in run.mislabelled)
        parts.append(f"**Interpretation presented as measured**: {quoted}")
    if run.verified is True and run.sources:  # an answer without numbers is not "verified"
        parts.append("**Verified**: every number checked was printed by the run's code.")
    elif run.verified is False:
        missing = ", ".join(markdown_text(number) for number in run.unsupported)
        parts.append(f"**Not verified**: not printed by any output of the run: {missing}")
    if run.sources:
        parts.append(_sources_table(run.sources))
    return "\n\n".join(parts)


def answer_parts(run: RecordedRun) -> list[str]:
    """The answer under its parts' titles, or whole and marked unmarked (markdown)."""
    answer = run.answer or ""
    if run.parts is None:  # recorded before answers had parts
        return [markdown_text(answer)]
    if not run.parts.marked:
        return [markdown_text(answer), f"*{UNMARKED_NOTE}*"]
    return [f"#### {title}\n\n{markdown_text(text)}" for title, text in run.parts.titled()]


def _sources_table(sources: list[dict[str, Any]]) -> str:
    rows = ["| Number | Printed by | Line | Output line |", "|---|---|---|---|"]
    for source in sources:
        execution = source.get("execution")
        where = f"step {execution}" if execution is not None else str(source.get("tool", ""))
        cells = [str(source.get("number", "")), where, str(source.get("line", "")),
                 str(source.get("text", ""))]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return markdown_text(safe_text(text)).replace("|", "\\|")


def _code_span(text: str) -> str:
    """Text for inside single backticks: escaped to one line, no backtick to close it."""
    return safe_text(text).replace("`", "'")


def fenced(text: str, info: str) -> str:
    """`text` in a code fence longer than any run of backticks in it (it cannot break out)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{safe_text(text.rstrip(), multiline=True)}\n{fence}"


def _image(path: str, link: Linker | None) -> str:
    """A PNG shown by its URL (or, from the CLI, its local path); anything else only named."""
    name = markdown_text(Path(path).name)
    url = path if link is None else link(path)
    if url is None or png_bytes(path) is None or not _SAFE_PATH.fullmatch(url):
        return f"(file: {name})"
    return f"![{name}](<{url}>)"
