"""Acceptance 6: artifacts come out; links, special files and escaping names do not.

copy-out never replaces or follows what is already on the host, and
hostile names in /output are refused one by one without losing the
execution's output or the session's variables, under both runtimes.
"""

from __future__ import annotations

import base64

import pytest

from conftest import TEST_IMAGE
from sbx.sandbox.files import ArtifactSink, unsafe_name_reason
from sbx.sandbox.limits import Limits
from sbx.sandbox.protocol import ArtifactFrame
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec


def frame(name: str, data: bytes = b"data") -> ArtifactFrame:
    """An artifact frame as the runner (or a forger) would send it."""
    encoded = base64.b64encode(data).decode()
    return ArtifactFrame(type="artifact", id=1, name=name, size=len(data), data=encoded)


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
    limits = Limits(runtime=runtime, max_artifact_bytes="1k", max_artifacts=2)
    with Session.open(
        SessionSpec(limits=limits, image=TEST_IMAGE, output_dir=tmp_path), engine=engine
    ) as s:
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
        ".hidden",
        ".git/config",
        "sub/.bashrc",
        "invoice_\u202efdp.exe",
        "csi\x9b2J",
        "zero\u200bwidth",
        "line\u2028sep",
        "bad\udcff",
    ],
)
def test_host_refuses_unsafe_names_from_the_container(name) -> None:
    assert unsafe_name_reason(name) is not None


@pytest.mark.parametrize(
    "name", ["plot.png", "sub/dir/table.csv", "é résumé.txt", "a.b.c", "x" * 255, "数据.csv"]
)
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


@pytest.mark.docker
def test_existing_host_files_are_never_replaced_or_followed(engine, tmp_path) -> None:
    out = tmp_path / "out"
    (out / ".git").mkdir(parents=True)
    (out / ".git" / "config").write_text("[core]\n")
    (out / "keep.txt").write_text("the operator's")
    (out / "sub").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "link").symlink_to(elsewhere)
    program = (
        "import os\n"
        "for name in ['keep.txt', '.git/config', '.bashrc', 'sub/new.txt', 'link/x.txt', "
        "'fresh.txt']:\n"
        "    os.makedirs(os.path.dirname('/output/' + name), exist_ok=True)\n"
        "    open('/output/' + name, 'w').write('[core]\\nfsmonitor = touch /tmp/pwned\\n')\n"
        "print('done')\n"
    )
    with Session.open(SessionSpec(image=TEST_IMAGE, output_dir=out), engine=engine) as session:
        first = session.run(program)
        again = session.run(
            "open('/output/fresh.txt', 'w').write('second')\n"
            "open('/output/keep.txt', 'w').write('second')\n"
        )
    assert first.stdout == "done\n"
    assert sorted(a.name for a in first.artifacts) == ["fresh.txt", "sub/new.txt"]
    refused = {item.name: item.reason for item in first.refused_artifacts}
    assert refused == {
        ".git": "hidden name (starts with a dot)",
        ".bashrc": "hidden name (starts with a dot)",
        "keep.txt": "a file of that name already exists on the host; not replaced",
        "link/x.txt": "a file, directory or link on the host is in the way",
    }
    assert (out / "keep.txt").read_text() == "the operator's"
    assert (out / ".git" / "config").read_text() == "[core]\n"
    assert not (out / ".bashrc").exists() and list(elsewhere.iterdir()) == []
    # the session may rewrite its own artifact; the operator's file stays refused
    assert [a.name for a in again.artifacts] == ["fresh.txt"]
    assert (out / "fresh.txt").read_text() == "second"
    assert [r.name for r in again.refused_artifacts] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "the operator's"
    assert sorted(p.name for p in out.iterdir()) == [".git", "fresh.txt", "keep.txt", "link", "sub"]


@pytest.mark.docker
def test_a_file_that_becomes_a_directory_is_refused_and_the_session_survives(
    session: Session, output_dir
) -> None:
    first = session.run("kept = 42\nopen('/output/x', 'w').write('file')\n")
    assert [a.name for a in first.artifacts] == ["x"]
    second = session.run(
        "import os\nos.remove('/output/x')\nos.mkdir('/output/x')\n"
        "open('/output/x/y', 'w').write('inside')\nprint('after')\n"
    )
    assert second.stdout == "after\n" and second.ok
    assert [(r.name, r.reason) for r in second.refused_artifacts] == [
        ("x/y", "a file, directory or link on the host is in the way")
    ]
    third = session.run("print(kept)")
    assert third.stdout == "42\n" and not third.state_reset
    assert (output_dir / "x").read_text() == "file"


HOSTILE_NAMES = [
    b"bad\xff.txt",  # not UTF-8: JSON cannot carry it
    b"new\nline.txt",
    b"osc\x1b]52;c;aGVsbG8=\x07.txt",  # clipboard write
    b"csi\xc2\x9b2J.txt",  # an 8-bit C1 control, valid UTF-8
    "invoice_\u202efdp.exe".encode(),  # bidi override
    b"\x01" * 255,  # 255 bytes, every one a control
    b".profile",
    b"dir\xfe",  # a directory with a bad name is not entered
]


@pytest.mark.docker
def test_hostile_names_are_refused_one_by_one_and_the_output_survives(
    session: Session, output_dir
) -> None:
    program = (
        "import os\n"
        "kept = 'state'\n"
        f"for name in {HOSTILE_NAMES!r}:\n"
        "    if name.startswith(b'dir'):\n"
        "        os.mkdir(b'/output/' + name)\n"
        "        open(b'/output/' + name + b'/inner.txt', 'w').write('x')\n"
        "    else:\n"
        "        open(b'/output/' + name, 'w').write('x')\n"
        "open('/output/' + 'é' * 127 + 'a', 'w').write('255 bytes of UTF-8')\n"
        "open('/output/ok.txt', 'w').write('fine')\n"
        "print('output survives')\n"
    )
    result = session.run(program)
    assert result.stdout == "output survives\n" and result.ok
    assert not result.state_reset and not any("replaced" in note for note in result.notes)
    assert sorted(a.name for a in result.artifacts) == ["ok.txt", "é" * 127 + "a"]
    shown = [item.name for item in result.refused_artifacts]
    assert len(shown) == len(HOSTILE_NAMES)
    for name in shown:
        assert name.isprintable() and len(name) <= 120, name
    assert "bad\\xff.txt" in shown and "invoice_\\u202efdp.exe" in shown
    assert "dir\\xfe" in shown and not any("inner" in name for name in shown)
    assert sorted(p.name for p in output_dir.iterdir()) == sorted(["ok.txt", "é" * 127 + "a"])
    assert session.run("print(kept)").stdout == "state\n"


def test_sink_replaces_only_its_own_earlier_copy(tmp_path) -> None:
    out = tmp_path / "out"
    sink = ArtifactSink(out, max_bytes=100, max_count=10)
    accepted, refused = [], []
    sink.accept(frame("plot.png", b"one"), accepted, refused)
    sink.accept(frame("plot.png", b"two"), accepted, refused)
    assert (out / "plot.png").read_bytes() == b"two" and refused == []
    (out / "plot.png").unlink()
    (out / "plot.png").write_bytes(b"TWO")  # replaced on the host: the inode may be reused
    sink.accept(frame("plot.png", b"three"), accepted, refused)
    assert (out / "plot.png").read_bytes() == b"TWO"
    assert [r.reason for r in refused] == [
        "a file of that name already exists on the host; not replaced"
    ]
    assert sorted(p.name for p in out.iterdir()) == ["plot.png"]  # no temporary left


def test_sink_refuses_instead_of_raising_when_the_output_is_a_file(tmp_path) -> None:
    out = tmp_path / "results.csv"
    out.write_text("a,b\n")
    sink = ArtifactSink(out, max_bytes=100, max_count=10)
    accepted, refused = [], []
    sink.accept(frame("plot.png"), accepted, refused)
    sink.accept(frame("sub/plot.png"), accepted, refused)
    assert accepted == [] and out.read_text() == "a,b\n"
    assert {r.reason for r in refused} == {"a file, directory or link on the host is in the way"}
    assert all(str(tmp_path) not in r.reason for r in refused)


def test_sink_reports_forged_names_escaped_and_bounded(tmp_path) -> None:
    sink = ArtifactSink(tmp_path / "out", max_bytes=100, max_count=10)
    accepted, refused = [], []
    for name in ["\x1b]52;c;aGk=\x07", "new\nline", "\u202e" * 500]:
        sink.accept(frame(name), accepted, refused)
    shown = [r.name for r in refused]
    assert shown[:2] == ["\\x1b]52;c;aGk=\\x07", "new\\nline"]
    assert all(name.isprintable() and len(name) <= 120 for name in shown)
    assert accepted == [] and not (tmp_path / "out").exists()
