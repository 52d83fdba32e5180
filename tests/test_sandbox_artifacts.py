"""Acceptance 6: artifacts come out; links, special files and escaping names do not."""

from __future__ import annotations

import base64

import pytest

from sbx.sandbox.files import ArtifactSink, unsafe_name_reason
from sbx.sandbox.protocol import ArtifactFrame
from sbx.sandbox.session import Session


@pytest.mark.docker
def test_matplotlib_png_comes_out(session: Session, output_dir) -> None:
    result = session.run(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [2, 4, 1])\n"
        "plt.savefig('/output/plot.png')\n"
    )
    assert result.ok, result
    assert [a.name for a in result.artifacts] == ["plot.png"]
    png = (output_dir / "plot.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) == result.artifacts[0].size


@pytest.mark.docker
def test_symlinks_fifos_and_escapes_are_refused_and_reported(session: Session, output_dir) -> None:
    result = session.run(
        "import os\n"
        "os.symlink('/etc/passwd', '/output/passwd')\n"
        "os.mkfifo('/output/pipe')\n"
        "os.makedirs('/output/sub', exist_ok=True)\n"
        "open('/output/sub/ok.txt', 'w').write('fine')\n"
        "try:\n"
        "    open('/output/../../escape', 'w').write('x')\n"
        "except OSError as exc:\n"
        "    print('escape failed:', exc.strerror)\n"
    )
    refused = {item.name: item.reason for item in result.refused_artifacts}
    assert refused == {"passwd": "symlink", "pipe": "special file"}
    assert [a.name for a in result.artifacts] == ["sub/ok.txt"]
    assert "escape failed:" in result.stdout  # EROFS under runc, EACCES under gVisor
    assert sorted(p.name for p in output_dir.rglob("*")) == ["ok.txt", "sub"]
    assert not (output_dir.parent / "escape").exists()
    again = session.run("print(1)")
    assert again.artifacts == [] and again.refused_artifacts == []


@pytest.mark.docker
def test_oversized_and_too_many_artifacts_are_refused(engine, runtime, tmp_path) -> None:
    from conftest import TEST_IMAGE
    from sbx.sandbox.limits import Limits

    limits = Limits(runtime=runtime, max_artifact_bytes="1k", max_artifacts=2)
    with Session.open(limits=limits, image=TEST_IMAGE, engine=engine, output_dir=tmp_path) as s:
        result = s.run(
            "open('/output/big.bin', 'wb').write(b'x' * 5000)\n"
            "for i in range(4):\n"
            "    open(f'/output/f{i}.txt', 'w').write('x')\n"
        )
    reasons = sorted(item.reason for item in result.refused_artifacts)
    assert reasons == ["too large (5000 bytes)", "too many artifacts", "too many artifacts"]
    assert len(result.artifacts) == 2


@pytest.mark.parametrize(
    "name",
    [
        "../../escape",
        "../escape",
        "/etc/passwd",
        "a/../../b",
        "a/./b",
        "",
        "a\\b",
        "x\x00y",
        "new\nline",
        "ok/" + "y" * 300,
    ],
)
def test_host_refuses_unsafe_names_from_the_container(name) -> None:
    assert unsafe_name_reason(name) is not None


@pytest.mark.parametrize("name", ["plot.png", "sub/dir/table.csv", "é résumé.txt", ".hidden"])
def test_host_accepts_plain_relative_names(name) -> None:
    assert unsafe_name_reason(name) is None


def test_sink_never_writes_outside_the_directory_even_for_forged_frames(tmp_path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "link").symlink_to(tmp_path)
    sink = ArtifactSink(out, max_bytes=100, max_count=10)
    accepted, refused = [], []
    for name in ["../../escape", "link/escape", "ok.txt"]:
        data = base64.b64encode(b"data").decode()
        frame = ArtifactFrame(type="artifact", id=1, name=name, size=4, data=data)
        sink.accept(frame, accepted, refused)
    sink.accept(
        ArtifactFrame(type="artifact", id=1, name="lie.txt", size=1, data="AAAA"), accepted, refused
    )
    assert [a.name for a in accepted] == ["ok.txt"]
    assert [r.name for r in refused] == ["../../escape", "link/escape", "lie.txt"]
    assert not (tmp_path / "escape").exists() and not (tmp_path.parent / "escape").exists()
