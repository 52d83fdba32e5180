"""Rich results through E2B's own SDK, unchanged, against a real `sbx serve` and real Docker.

A DataFrame's `data`, `display()` of HTML, Markdown, SVG and JSON, each figure
shown by `plt.show()` as a PNG with its chart (bar, line, scatter, pie, box),
`execution_count`, and the streaming callbacks in the order things happened.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from e2b_code_interpreter import Sandbox
from e2b_code_interpreter.charts import (
    BarChart,
    BoxAndWhiskerChart,
    LineChart,
    PieChart,
    ScatterChart,
)
from test_e2b import point_sdk_at

import service_support

serve = service_support.serve
llm = service_support.llm

CHARTS = """
import matplotlib.pyplot as plt
plt.bar(['north', 'south'], [3, 1]); plt.title('Sales'); plt.ylabel('Revenue (USD)'); plt.show()
plt.plot([1, 2, 3], [4, 5, 7], label='growth'); plt.show()
plt.scatter([1, 2], [9, 8]); plt.show()
plt.pie([1, 3], labels=['a', 'b']); plt.show()
plt.boxplot([[1, 2, 3, 4, 5, 40]], tick_labels=['A']); plt.show()
"""


@pytest.fixture
def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


@pytest.mark.docker
def test_the_sdk_reads_rich_results_charts_counts_and_callbacks_in_order(
    sqlite, serve, engine, monkeypatch
):
    server = serve(sqlite)
    point_sdk_at(monkeypatch, server, server.key("ann"))
    sandbox = Sandbox.create()
    try:
        heard: list[tuple[str, Any]] = []
        frame = sandbox.run_code(
            "import pandas as pd\nfrom IPython.display import HTML, Markdown, SVG, JSON\n"
            "print('before', flush=True)\n"
            "display(HTML('<b>bold</b>'), Markdown('**md**'))\n"
            "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"><circle r=\"1\"/></svg>'))\n"
            "display(JSON({'k': [1, 2]}))\n"
            "pd.DataFrame({'city': ['Oslo', 'Rome'], 'n': [1, 2]})",
            on_stdout=lambda m: heard.append(("stdout", m.line)),
            on_result=lambda r: heard.append(("result", r)),
        )
        assert frame.error is None and frame.execution_count == 1
        kinds = [kind for kind, _ in heard]
        assert heard[0][0] == "stdout" and heard[0][1].startswith("before\n")
        assert frame.logs.stdout == ["before\n"]  # the value is a result, never a log
        assert kinds[-5:] == ["result"] * 5
        assert [r for kind, r in heard if kind == "result"] == frame.results
        html, markdown, svg, json_result, main = frame.results
        assert html.html == "<b>bold</b>" and markdown.markdown == "**md**"
        assert svg.svg is not None and "<circle" in svg.svg
        assert json_result.json == {"k": [1, 2]}
        assert main.is_main_result and main.data == {"city": ["Oslo", "Rome"], "n": [1, 2]}
        assert main.html is not None and "<table" in main.html and "Oslo" in (frame.text or "")
        shown = sandbox.run_code(CHARTS)
        assert shown.error is None and shown.execution_count == 2
        assert all(base64.b64decode(r.png or "")[:4] == b"\x89PNG" for r in shown.results)
        bar, line, scatter, pie, box = (r.chart for r in shown.results)
        assert isinstance(bar, BarChart) and bar.title == "Sales" and bar.y_unit == "USD"
        assert [(e.label, e.value) for e in bar.elements] == [("north", 3.0), ("south", 1.0)]
        assert isinstance(line, LineChart) and line.elements[0].label == "growth"
        assert line.elements[0].points == [(1, 4), (2, 5), (3, 7)]
        assert isinstance(scatter, ScatterChart)
        assert scatter.elements[0].points == [(1.0, 9.0), (2.0, 8.0)]
        assert isinstance(pie, PieChart)
        assert [(e.label, e.angle) for e in pie.elements] == [("a", 90.0), ("b", 270.0)]
        assert isinstance(box, BoxAndWhiskerChart)
        assert (box.elements[0].median, box.elements[0].outliers) == (3.5, [40.0])
        context = sandbox.create_code_context()
        assert sandbox.run_code("1", context=context).execution_count == 1  # its own count
        assert sandbox.run_code("1 + 1").execution_count == 3
    finally:
        sandbox.kill()
