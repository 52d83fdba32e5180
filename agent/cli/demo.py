"""`sbx demo`: the whole agent with a scripted model, so it runs without any LLM or network.

The model is `sbx.agent.testing.scripted_model.ScriptedLLM` on 127.0.0.1, reached through the
real `openai` SDK; the sandbox, the gate, the audit log and the transcript are
the real ones. The script shows the one thing the agent exists for: its
first program fails (`.mean()` on a plain list), the traceback goes back as
the observation, the second program fixes it (reusing the variables the
first one left, since state persists) and computes the answer, and the final
reply quotes the numbers the sandbox printed. The progress and the answer
say plainly that the model is scripted.

Data: `examples/sales.csv` when run from a clone of the repository, else a
small deterministic table of the same shape written to a temporary directory.
"""

from __future__ import annotations

import csv
from pathlib import Path

from sbx.agent import (
    ScriptedReply,
    ScriptedRequest,
    ScriptedTurn,
    scripted_answer,
    scripted_tool_call,
)

QUESTION = "Which region grew fastest in 2024?"
LABEL = "sbx demo: the model is a SCRIPT (no LLM); the sandbox, gate and audit log are real"
MODEL_NAME = "sbx-demo-scripted"
API_KEY = "sbx-demo-no-key"
EXAMPLE = Path("examples/sales.csv")

FIRST_PROGRAM = """\
import pandas as pd

sales = pd.read_csv("/data/sales.csv")
print(sales.shape, list(sales.columns))
revenue_2024 = list(sales[sales.year == 2024].revenue)
print("mean 2024 revenue per row:", revenue_2024.mean())
"""

SECOND_PROGRAM = """\
import statistics

import matplotlib.pyplot as plt

# A plain list has no .mean(); `sales` and `revenue_2024` survive from the last run.
print("mean 2024 revenue per row:", round(statistics.mean(revenue_2024), 2))
by_year = sales.pivot_table(index="region", columns="year", values="revenue", aggfunc="sum")
by_year["growth_%"] = (by_year[2024] / by_year[2023] - 1) * 100
by_year = by_year.sort_values("growth_%", ascending=False)
print(by_year.round(1).to_string())
top = by_year.index[0]
row = by_year.loc[top]
print(f"ANSWER: {top} grew fastest in 2024: revenue {row[2024]:,.0f} vs {row[2023]:,.0f} "
      f"in 2023 ({row['growth_%']:+.1f}%).")
ax = by_year["growth_%"].plot.bar(title="Revenue growth, 2024 vs 2023 (%)")
ax.set_ylabel("%")
plt.tight_layout()
plt.savefig("/output/growth_by_region.png", dpi=100)
print("saved /output/growth_by_region.png")
"""


def demo_turns(tool_format: str = "native") -> list[ScriptedTurn]:
    """The scripted model: a failing program, its fix, and an answer built from the output.

    With `tool_format="text"` the model writes its programs in ```python blocks, as a
    model served without a tool-call parser does (`--tool-format text`).
    """
    if tool_format == "text":
        return [scripted_answer(fenced(FIRST_PROGRAM, "Let me load the data.")), _fix_text, _answer]
    return [scripted_tool_call("execute_python", code=FIRST_PROGRAM), _fix, _answer]


def fenced(code: str, before: str) -> str:
    """A reply in text format: a sentence, then the program in a ```python block."""
    return f"{before}\n\n```python\n{code}```\n"


def _fix(request: ScriptedRequest) -> ScriptedReply:
    """Turn 2: the "model" read the traceback (the demo test checks it was there)."""
    return scripted_tool_call("execute_python", code=SECOND_PROGRAM)


def _fix_text(request: ScriptedRequest) -> ScriptedReply:
    """Turn 2 in text format: the traceback came back as a user message."""
    return scripted_answer(fenced(SECOND_PROGRAM, "A list has no .mean(); fixing that."))


def _since_last_reply(request: ScriptedRequest) -> str:
    """The text of every message after the model's last reply.

    In text format the observation is a user message, and a chart's description may follow it.
    """
    texts: list[str] = []
    for message in reversed(request.messages):
        if message.get("role") == "assistant":
            break
        content = message.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        texts += [str(part.get("text") or "") for part in parts if isinstance(part, dict)]
    return "\n".join(reversed(texts))


def _answer(request: ScriptedRequest) -> ScriptedReply:
    """Turn 3: quote the sandbox's `ANSWER:` line, so every number shown was computed."""
    observation = request.last_tool_message or _since_last_reply(request)
    found = [line for line in observation.splitlines() if line.startswith("ANSWER:")]
    if not found:
        return scripted_answer(
            "(scripted demo model) The second program printed no answer; "
            "see its observation above."
        )
    return scripted_answer(
        f"(scripted demo model) {found[0].removeprefix('ANSWER:').strip()}\n\n"
        "Measured:\n"
        "- Revenue summed by region and year in the sandbox with pandas; growth = "
        "2024 / 2023 - 1. The first program failed (a list has no .mean()), and the second "
        "fixed it. Chart: growth_by_region.png.\n\n"
        "Interpretation:\n- None: the data shows which region grew, not why.\n\n"
        "Assumptions:\n- Revenue is in one currency across regions and years."
    )


def demo_data(scratch: Path) -> Path:
    """`examples/sales.csv` if it is here, else a generated table in `scratch`."""
    if EXAMPLE.is_file():
        return EXAMPLE
    path = scratch / "sales.csv"
    regions = {"North": 1.04, "South": 1.12, "East": 0.97, "West": 1.08}
    products = {"Hardware": 50_000.0, "Software": 40_000.0, "Services": 25_000.0}
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["period", "year", "quarter", "region", "product", "units", "revenue"])
        for year in (2023, 2024):
            for quarter in (1, 2, 3, 4):
                for r_index, (region, growth) in enumerate(regions.items()):
                    for p_index, (product, base) in enumerate(products.items()):
                        factor = growth ** (year - 2023) * (1 + 0.01 * quarter + 0.02 * r_index)
                        revenue = round(base * factor * (1 - 0.03 * p_index), 2)
                        units = int(revenue / (400 + 100 * p_index))
                        writer.writerow(
                            [f"{year}-Q{quarter}", year, quarter, region, product, units, revenue]
                        )
    return path
