"""A fresh sandbox uses the font list the image ships: matplotlib never rebuilds it per container.

Rebuilding the list costs about 0.6 s of a container's start on this host
(measured with `FontManager()` in the sandbox); the image builds it once
(`images/rootfs.py`), and the runner copies it to `MPLCONFIGDIR` before
anything imports matplotlib. A rebuild would write the file again, so its
modification time tells: the copy keeps the image's.
"""

from __future__ import annotations

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

CHECK = """
import os
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([1, 2, 3])
ax.set_title('fonts')
fig.savefig('/tmp/fonts.png')
shipped = {n: os.stat('/opt/sbx/matplotlib/' + n).st_mtime_ns
           for n in os.listdir('/opt/sbx/matplotlib') if n.startswith('fontlist')}
used = {n: os.stat('/tmp/matplotlib/' + n).st_mtime_ns
        for n in os.listdir('/tmp/matplotlib') if n.startswith('fontlist')}
print(bool(shipped) and used == shipped)
"""


@pytest.mark.docker
@pytest.mark.parametrize("preimport", [False, True], ids=["created", "warm"])
def test_a_fresh_sandbox_draws_text_without_rebuilding_the_font_list(engine, tmp_path,
                                                                      preimport):
    spec = SessionSpec(image=TEST_IMAGE, output_dir=tmp_path / "out", preimport=preimport)
    with Session.open(spec, engine=engine) as session:
        result = session.run(CHECK)
    assert result.ok, result.stderr
    assert result.stdout.strip() == "True", result.stdout
    assert "building the font cache" not in result.stderr
