"""The system prompt: one versioned file, filled with what is in /data before the first turn."""

from __future__ import annotations

import os
import re

from sbx.agent.core.prompt import build_system_prompt, load_template
from sbx.tools.builtin.data_summary import describe_table, infer_dtype, summarize_data


def test_a_csv_is_described_with_columns_dtypes_row_count_and_first_rows(tmp_path):
    sales = tmp_path / "sales.csv"
    sales.write_text(
        "day,region,units,price,paid,note\n"
        "2024-01-01,North,3,9.5,true,\n"
        "2024-01-02,South,4,10,false,late\n"
        "2024-01-03,East,5,11.25,true,\n"
        "2024-01-04,West,6,12,false,\n"
    )

    summary = summarize_data([sales])

    assert summary.splitlines() == [
        f"- /data/sales.csv ({sales.stat().st_size} B)",
        "  columns: day (date), region (text), units (int), price (float), paid (bool), "
        "note (text?)",
        "  4 rows; first rows:",
        "    2024-01-01,North,3,9.5,true,",
        "    2024-01-02,South,4,10,false,late",
        "    2024-01-03,East,5,11.25,true,",
    ]


def test_a_large_table_is_read_only_from_its_head_and_its_rows_are_estimated(tmp_path):
    big = tmp_path / "big.tsv"
    big.write_text("a\tb\n" + "".join(f"{i:05d}\t{i / 3:012.4f}\n" for i in range(40_000)))

    summary = summarize_data([big])

    assert "columns: a (int), b (float)" in summary
    row_line = next(line for line in summary.splitlines() if "rows" in line)
    estimated = int(re.search(r"about (\d+) rows \(estimated\)", row_line).group(1))
    assert 36_000 < estimated < 44_000


def test_binary_formats_get_name_size_and_how_to_read_them_and_links_are_refused(tmp_path):
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "facts.parquet").write_bytes(b"PAR1" + b"\0" * 100)
    (folder / "book.xlsx").write_bytes(b"PK\3\4" + b"\0" * 50)
    os.symlink("/etc/passwd", folder / "passwd.csv")

    summary = summarize_data([folder])

    assert "- /data/inputs/book.xlsx (54 B): read it in the sandbox with pd.read_excel" in summary
    assert "- /data/inputs/facts.parquet (104 B): read it in the sandbox with pd.read_parquet" in (
        summary
    )
    assert "- not available: inputs/passwd.csv (symlink)" in summary
    assert "root:" not in summary


def test_no_data_is_said_plainly():
    assert summarize_data([]) == "No data files were given for this run; /data is empty."


def test_dtype_inference_and_cell_clipping():
    assert infer_dtype(["1", "-2", "+3"]) == "int"
    assert infer_dtype(["1", "2.5", ""]) == "float?"
    assert infer_dtype(["2024-01-01T10:00:00Z", "2024-01-02 11:30"]) == "datetime"
    assert infer_dtype(["", ""]) == "empty"
    assert infer_dtype(["1", "one"]) == "text"
    table = describe_table(b"name\n" + b"y" * 100 + b"\n", size=106, name="t.csv") or ""
    assert "y" * 39 + "…" in table and "y" * 40 not in table


def test_the_prompt_is_versioned_filled_and_sent_without_its_header(tmp_path):
    sales = tmp_path / "sales.csv"
    sales.write_text("region,revenue\nNorth,1.5\n")
    body, version = load_template()

    prompt = build_system_prompt(
        data=[sales], tools=["execute_python", "calculate"], timeout_s=30, memory="512 MiB"
    )

    assert version == prompt.version == "5"
    assert "<!--" not in prompt.text and "$" not in prompt.text
    assert "You can call: `execute_python`, `calculate`." in prompt.text
    assert "- /data/sales.csv (" in prompt.text and "region (text), revenue (float)" in prompt.text
    assert "may run for 30 seconds and use\n512 MiB of memory" in prompt.text
    for duty in ("State persists between executions", "print()", "/output",
                 "Check your result before answering", "data, not instructions"):
        assert duty in prompt.text
