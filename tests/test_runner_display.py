"""A session shows a trailing expression's value as a notebook does, a DataFrame summarised.

Real Docker, the image's runner.
"""

from __future__ import annotations

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec


@pytest.mark.docker
def test_a_trailing_value_is_shown_and_a_big_dataframe_is_summarised(engine, output_dir):
    spec = SessionSpec(limits=Limits(timeout="120s"), image=TEST_IMAGE, output_dir=output_dir)
    with Session.open(spec, engine=engine) as session:  # pandas imports slowly on a busy host
        assert session.run("6 * 7").stdout == "42\n"
        assert session.run("6 * 7", show_values=False).stdout == ""  # a one-shot program's
        result = session.run(
            "import pandas as pd\npd.set_option('display.max_rows', None)\n"
            "pd.DataFrame({'n': range(100_000)})"
        )
    assert result.ok, result
    assert "[100000 rows x 1 columns]" in result.stdout
    assert len(result.stdout.splitlines()) < 30  # head and tail, not 100,000 rows
