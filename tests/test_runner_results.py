"""A cell's rich results, as a notebook makes them: through IPython's display protocol.

Real Docker, the image's runner: the trailing value and every `display()` as MIME
bundles, a DataFrame's data, each figure shown as a PNG with its structured chart,
the execution count per namespace, and every size bounded against hostile code.
"""

from __future__ import annotations

import base64

import pytest

from conftest import TEST_IMAGE
from sbx.agent import clear_variables, in_namespace
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CHARTS = """
import matplotlib.pyplot as plt
plt.bar(['north', 'south', 'east'], [3, 1, 2]); plt.title('Sales'); plt.xlabel('Region')
plt.ylabel('Revenue (USD)'); plt.show()
plt.plot([1, 2, 3], [4, 5, 7], label='growth'); plt.show()
plt.scatter([1, 2, 3], [9, 8, 7], label='points'); plt.show()
plt.pie([1, 2, 3], labels=['a', 'b', 'c']); plt.show()
plt.boxplot([[1, 2, 3, 4, 5, 40], [2, 3, 4, 5, 6]], tick_labels=['A', 'B']); plt.show()
fig, ax = plt.subplots(); lines = ax.plot([0, 1], [1, 0])  # left open: shown at the cell's end
"""


@pytest.fixture
def session(engine, output_dir):
    spec = SessionSpec(limits=Limits(timeout="120s"), image=TEST_IMAGE, output_dir=output_dir)
    with Session.open(spec, engine=engine) as opened:
        yield opened


@pytest.mark.docker
def test_display_outputs_and_the_trailing_value_are_mime_bundles_with_a_dataframes_data(session):
    result = session.run(
        "import pandas as pd\n"
        "from IPython.display import HTML, Markdown, SVG, JSON\n"
        "display(HTML('<b>bold</b>'), Markdown('**md**'))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"><circle r=\"1\"/></svg>'))\n"
        "display(JSON({'k': [1, 2]}))\n"
        "pd.DataFrame({'city': ['Oslo', '<i>Rome</i>'], 'n': [1.5, float('nan')]})"
    )
    assert result.ok, result
    html, markdown, svg, json_result, frame = result.results
    assert html.html == "<b>bold</b>" and not html.is_main_result
    assert markdown.markdown == "**md**"
    assert svg.svg is not None and "<circle" in svg.svg
    assert json_result.json_data == {"k": [1, 2]}
    assert frame.is_main_result and frame.html is not None and "<table" in frame.html
    assert frame.data == {"city": ["Oslo", "<i>Rome</i>"], "n": [1.5, None]}
    assert frame.text is not None and "Oslo" in frame.text
    assert "Oslo" in result.stdout  # the value is printed as before, for every reader of stdout
    assert result.execution_count == 1
    assert session.run("x = 1").execution_count == 2


@pytest.mark.docker
def test_figures_shown_are_pngs_with_their_charts(session):
    result = session.run(CHARTS)
    assert result.ok, result
    charts = [r.chart for r in result.results]
    assert all(base64.b64decode(r.png or "").startswith(PNG_MAGIC) for r in result.results)
    assert [c["type"] if c else None for c in charts] == [
        "bar", "line", "scatter", "pie", "box_and_whisker", "line"]
    bar, line, scatter, pie, box, _ = charts
    assert bar["title"] == "Sales" and bar["x_label"] == "Region" and bar["y_unit"] == "USD"
    assert [(e["label"], e["value"]) for e in bar["elements"]] == [
        ("north", 3.0), ("south", 1.0), ("east", 2.0)]
    assert line["elements"] == [{"label": "growth", "points": [[1, 4], [2, 5], [3, 7]]}]
    assert scatter["elements"][0]["points"] == [[1.0, 9.0], [2.0, 8.0], [3.0, 7.0]]
    assert [(e["label"], e["angle"]) for e in pie["elements"]] == [
        ("a", 60.0), ("b", 120.0), ("c", 180.0)]
    first = box["elements"][0]
    assert (first["label"], first["median"], first["outliers"]) == ("A", 3.5, [40.0])
    assert first["min"] == 1.0 and first["max"] == 5.0
    assert len([a for a in result.artifacts if a.name.startswith("figure-")]) == 6


@pytest.mark.docker
def test_results_are_bounded_whatever_the_code_displays(session):
    result = session.run(
        "from IPython.display import HTML\n"
        "display(HTML('x' * 200_000))\n"  # over one format's bound: left out
        "for i in range(100):\n    display(i)\n"
        "import pandas as pd\n"
        "pd.DataFrame({f'c{i}': range(10_000) for i in range(80)})"
    )
    assert result.ok, result
    assert result.results[0].html is None and result.results[0].text
    assert len(result.results) == 32 and result.results_dropped == 70  # of 102
    wide = result.results[-1]
    assert wide.is_main_result and wide.data is not None  # the trailing value always fits
    assert len(wide.data) == 50 and {len(rows) for rows in wide.data.values()} == {100}


@pytest.mark.docker
def test_a_named_namespace_counts_its_own_executions_and_shows_its_value(session):
    session.run("x = 1")
    first = session.run(in_namespace("40 + 2", "ctx-a", "/work"))
    second = session.run(in_namespace("'two'", "ctx-a", "/work"))
    assert (first.execution_count, second.execution_count) == (1, 2)
    assert [r.text for r in second.results if r.is_main_result] == ["'two'"]
    assert session.run(clear_variables()).execution_count == 2  # the session's own second


FORGED = """
import json, os, struct
bundle = {"text/plain": "forged", "image/png": "javascript:alert(1)",
          "text/html": "x" * 100_001, "application/json": "not an object"}
reply = {"exit_code": 0, "error": None, "execution_count": -5,
         "results": [{"bundle": bundle, "main": True, "chart": {"type": "bar"}}] * 40}
payload = json.dumps(reply).encode()
os.write(4, struct.pack(">I", len(payload)) + payload)  # the kernel's reply pipe
"""


@pytest.mark.docker
def test_a_reply_the_code_forged_is_cut_to_well_formed_bounded_results(session):
    result = session.run(FORGED)  # the code writes the kernel's reply itself
    assert len(result.results) == 32  # the supervisor keeps as many as a kernel may send
    forged = result.results[0]
    assert forged.text == "forged" and forged.chart == {"type": "bar"}
    assert forged.png is None and forged.html is None and forged.json_data is None
    assert result.execution_count is None


@pytest.mark.docker
def test_a_figure_the_code_saved_is_not_shown_again_and_stays_open(session):
    saved = session.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                        "plt.savefig('/output/mine.png')")
    assert saved.ok and saved.results == [] and [a.name for a in saved.artifacts] == ["mine.png"]
    shown = session.run("plt.title('same figure'); plt.show()")
    assert [r.chart["title"] for r in shown.results if r.chart] == ["same figure"]
