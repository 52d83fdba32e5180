"""A session shows a trailing expression's value as a notebook does, a DataFrame summarised.

Real Docker, the image's runner.
"""

from __future__ import annotations

import pytest


@pytest.mark.docker
def test_a_trailing_value_is_shown_and_a_big_dataframe_is_summarised(session):
    assert session.run("6 * 7").stdout == "42\n"
    shown = session.run(
        "import pandas as pd\npd.set_option('display.max_rows', None)\n"
        "pd.DataFrame({'n': range(100_000)})"
    ).stdout
    assert "[100000 rows x 1 columns]" in shown
    assert len(shown.splitlines()) < 30  # head and tail, not 100,000 rows
