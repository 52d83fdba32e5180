"""The run as a Jupyter notebook (nbformat v4), validated before it is returned.

Cells: the final plan, when the model wrote one (`report.plan_section`), the
header (`export_code.header`); per run, a markdown cell with the
question, one code cell per execution (its code with paths rewritten, its
execution number as `execution_count`, its recorded outputs), and a markdown
cell with the answer and where its numbers came from. A cell whose code
raised in the run carries the `raises-exception` tag, so Run All (and
`jupyter nbconvert --execute`) goes on past it, as the run did. An execution
that did not run to its end (a timeout, a memory kill) is shown, with what it
printed, in a markdown cell: running it again would hang or be killed too.

The conversation's history (`sbx.agent.core.history`) says where state was
lost: a loss a restore rebuilt leaves no trace here (the interpreter held the
same names again), a partial restore a note of the names that may differ; a
loss never restored (a reset the user asked for, a kill in the last question)
is a note and a cell that forgets every name except the header's, so Run All
behaves as the conversation did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import nbformat
import nbformat.v4

from sbx.agent.core.history import RecordedConversation, RecordedExecution, StateLoss
from sbx.agent.export.code import RESET_CODE, rewrite_paths
from sbx.agent.export.common import executions, header_for, markdown_text, png_base64
from sbx.agent.export.report import answer_section, plan_section, unfinished_section

KERNEL = {"display_name": "Python 3", "language": "python", "name": "python3"}

# nbformat's builders carry no annotations: typed names for them, once.
new_code_cell: Callable[..., Any] = nbformat.v4.new_code_cell
new_markdown_cell: Callable[..., Any] = nbformat.v4.new_markdown_cell
new_notebook: Callable[..., Any] = nbformat.v4.new_notebook
new_output: Callable[..., Any] = nbformat.v4.new_output
_writes: Callable[..., str] = nbformat.writes


def to_notebook(record: RecordedConversation) -> str:
    """The notebook as JSON text; raises nbformat's `ValidationError` if it were invalid."""
    cells: list[Any] = [new_code_cell(header_for(record).rstrip("\n"))]
    plan = plan_section(record)
    if plan is not None:  # the notebook starts with what the model set out to do
        cells.insert(0, new_markdown_cell(plan))
    last_run = -1
    for count, (run_index, execution) in enumerate(executions(record), start=1):
        if run_index != last_run:
            cells.extend(_closing(record, last_run))
            cells.append(new_markdown_cell(f"## {markdown_text(_one_line(record, run_index))}"))
            last_run = run_index
        cells.extend(_loss_cells(execution.loss_before))
        cells.append(_code_cell(execution, count) if not execution.unfinished
                     else new_markdown_cell(unfinished_section(execution)))
    cells.extend(_closing(record, last_run))
    for index in range(last_run + 1, len(record.runs)):  # runs without executions
        cells.append(new_markdown_cell(f"## {markdown_text(_one_line(record, index))}"))
        cells.extend(_closing(record, index))
    notebook = new_notebook(
        cells=cells,
        metadata={"kernelspec": KERNEL, "language_info": {"name": "python"},
                  "sbx": {"transcript": record.path.name,
                          "runs": [run.run_id for run in record.runs]}},
    )
    nbformat.validate(notebook)
    return _writes(notebook)


def _one_line(record: RecordedConversation, index: int) -> str:
    question = record.runs[index].question.strip()
    return f"Question: {question}" if question else f"Run {record.runs[index].run_id}"


def _closing(record: RecordedConversation, index: int) -> list[Any]:
    """The answer cell after a run's last execution (none before the first run)."""
    if index < 0:
        return []
    return [new_markdown_cell(answer_section(record.runs[index]))]


RESET_NOTE = (
    "*The sandbox's interpreter was reset here in the original conversation ({cause}), and "
    "nothing restored it: what the cells above defined was gone. The next cell does the same "
    "(keeping DATA_DIR and OUTPUT_DIR), so Run All behaves as the conversation did.*"
)
PARTIAL_NOTE = (
    "*The sandbox was replaced here ({cause}) and its state rebuilt by re-running the cells "
    "above, but some came back different; these names may have held other values in the "
    "conversation: {names}.*"
)


def _loss_cells(loss: StateLoss | None) -> list[Any]:
    """What a state loss before an execution leaves in the notebook (see the module)."""
    if loss is None or loss.restored == "restored":
        return []
    if loss.restored == "partial":
        names = ", ".join(f"`{markdown_text(name)}`" for name in loss.variables) or "(none named)"
        return [new_markdown_cell(PARTIAL_NOTE.format(cause=markdown_text(loss.reason),
                                                      names=names))]
    return [new_markdown_cell(RESET_NOTE.format(cause=markdown_text(loss.reason))),
            new_code_cell(RESET_CODE)]


def _code_cell(execution: RecordedExecution, count: int) -> Any:
    outputs = []
    if execution.stdout:
        outputs.append(new_output("stream", name="stdout", text=execution.stdout))
    if execution.stderr:
        outputs.append(new_output("stream", name="stderr", text=execution.stderr))
    if execution.failed:
        outputs.append(
            new_output(
                "error", ename=execution.error_type or "Error",
                evalue=execution.error_message or "",
                traceback=(execution.traceback or "").splitlines(),
            )
        )
    for path in execution.artifacts:
        encoded = png_base64(path)
        if encoded is not None:
            outputs.append(new_output("display_data", data={"image/png": encoded}, metadata={}))
    metadata = {"tags": ["raises-exception"]} if execution.failed else {}
    return new_code_cell(
        rewrite_paths(execution.code).rstrip("\n"), execution_count=count,
        outputs=outputs, metadata=metadata,
    )
