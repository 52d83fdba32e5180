"""What the real runner sends about `/output` is bounded before the host caps it.

A program controls `/output`: it can fill it with thousands of entries the runner must
refuse, or with sparse files whose sizes add up to far more than the tmpfs holds. The
runner lists a bounded number of refusals (with a count of the rest) and stops copying
at the byte budget the host gives it, so an honest runner never trips the host's caps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker


def test_thousands_of_refused_entries_are_listed_briefly(session: Session) -> None:
    """Each refusal used to be listed, in the result, the model's observation and the
    audit log; now at most 20 are, with the count of the rest."""
    result = session.run(
        "import os\nfor i in range(600):\n    os.symlink('/etc/passwd', f'/output/link{i:03}')"
    )
    assert result.ok
    assert len(result.refused_artifacts) == 20
    assert result.refused_unlisted == 580
    notes = [note for note in result.notes if note.startswith("artifacts refused")]
    assert len(notes) == 1 and notes[0].endswith("and 580 more"), notes
    assert len(notes[0]) < 2000
    assert session.run("print(1)").refused_artifacts == []  # each refusal reported once


def test_sparse_files_copy_out_no_more_than_the_output_size(
    engine: Engine, runtime: str, tmp_path: Path
) -> None:
    """Sparse files take no room in the tmpfs, so their sizes can add up to far more than
    `output_size`; the landed runner sent them all and the host wrote them all."""
    limits = Limits(runtime=runtime, output_size="2m", max_artifact_bytes="1m")
    with Session.open(
        SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path), engine=engine
    ) as session:
        result = session.run(
            "import os\nfor i in range(8):\n    open(f'/output/s{i}', 'w').close()\n"
            "    os.truncate(f'/output/s{i}', 1 << 20)"
        )
        assert result.ok, result
        assert len(result.artifacts) == 2
        reasons = {item.reason for item in result.refused_artifacts}
        assert reasons == {"over the 2 MiB of artifacts one execution may copy out (output_size)"}
        assert session.container_id is not None  # an honest runner breaks no cap
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) <= 2 << 20


def test_artifacts_past_the_copy_time_are_refused_and_the_result_still_comes(
    engine: Engine, runtime: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's deadline is absolute, so the runner must stop copying in time: past its
    copy time it refuses what is left, and the result arrives (here the copy time is
    set to nothing, so every artifact is refused)."""
    import sbx.sandbox.session as session_module

    monkeypatch.setattr(session_module, "COPY_MARGIN_S", 100.0, raising=False)
    limits = Limits(runtime=runtime, timeout="5s")
    with Session.open(
        SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path), engine=engine
    ) as session:
        result = session.run("open('/output/late.txt', 'w').write('x')\nprint('done')")
        assert result.ok and result.stdout == "done\n" and not result.artifacts
        assert [(r.name, r.reason) for r in result.refused_artifacts] == [
            (
                "late.txt",
                "not copied: no time left before the host's deadline (timeout plus its grace)",
            )
        ]
        assert session.container_id is not None


def test_a_file_the_code_cannot_read_is_refused_and_the_session_survives(
    session: Session,
) -> None:
    """The runner reads `/output` with the code's own rights (never more: a symlink swapped
    in mid-copy opens nothing the code could not). A file the code made unreadable is
    refused; on the landed runner it raised, and the container was replaced."""
    assert session.run("x = 5").ok
    result = session.run(
        "import os\nopen('/output/locked', 'w').write('x')\nos.chmod('/output/locked', 0)\n"
        "open('/output/open.txt', 'w').write('y')"
    )
    assert result.ok and [a.name for a in result.artifacts] == ["open.txt"], result
    assert [r.name for r in result.refused_artifacts] == ["locked"]
    assert session.run("print(x)").stdout == "5\n"
