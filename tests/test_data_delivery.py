"""What a warm container's `/data` directory receives, and how.

A data file is hard-linked (same inode: what a bind mount shows), a
directory's contents are copied (so the host's data tools, which refuse a
second name below a data directory, keep listing the run's own files), and
nothing is followed, left unbounded or made readable that uid 1000 could not
read. The sandbox's own view is tested with Docker in `test_pool_data.py`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_tools_data_files import deny_acl

from sbx.sandbox.datadir import DataDir, NotDeliverable, host_label, prepare_root
from sbx.sandbox.errors import InvalidInput, SandboxError
from sbx.sandbox.files import data_mounts
from sbx.sandbox.gc import collect_orphan_data
from sbx.tools.builtin.data_files import index_data_files

SANDBOX_UID = 1000
MIB = 1 << 20


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Path]:
    if os.geteuid() == SANDBOX_UID:
        pytest.fail("these tests judge uid 1000's access; run them as another user (CI: root)")
    sales = tmp_path / "in" / "sales.csv"
    reports = tmp_path / "in" / "reports"
    (reports / "2024").mkdir(parents=True)
    sales.write_text("region,amount\nnorth,3\n")
    (reports / "q1.csv").write_text("q,1\n")
    (reports / "2024" / "notes.txt").write_text("fine\n")
    (reports / "link.txt").symlink_to(sales)
    os.mkfifo(reports / "pipe")
    return {"sales": sales, "reports": reports}


def fill(root: Path, paths: list[Path], max_copy_bytes: int = 64 * MIB) -> DataDir:
    data_dir = DataDir.create(root)
    data_dir.fill(data_mounts(paths), max_copy_bytes=max_copy_bytes)
    return data_dir


def tree(path: Path) -> dict[str, str]:
    """Relative path -> kind for everything below `path` (never following a link)."""
    found = {}
    for entry in sorted(path.rglob("*")):
        info = entry.lstat()
        kinds = {stat.S_ISDIR(info.st_mode): "dir", stat.S_ISREG(info.st_mode): "file"}
        found[str(entry.relative_to(path))] = kinds.get(True, "?")
    return found


def test_a_file_is_linked_and_a_directory_is_copied_without_links_or_pipes(tmp_path, data):
    data_dir = fill(tmp_path / "root", [data["sales"], data["reports"]])
    assert tree(data_dir.path) == {
        "reports": "dir",
        "reports/2024": "dir",
        "reports/2024/notes.txt": "file",
        "reports/q1.csv": "file",
        "sales.csv": "file",
    }
    linked, original = (data_dir.path / "sales.csv").stat(), data["sales"].stat()
    assert (linked.st_dev, linked.st_ino) == (original.st_dev, original.st_ino)
    copy = (data_dir.path / "reports" / "q1.csv").stat()
    assert copy.st_ino != (data["reports"] / "q1.csv").stat().st_ino
    assert stat.S_IMODE(copy.st_mode) == 0o444 and copy.st_nlink == 1
    assert copy.st_mtime_ns == (data["reports"] / "q1.csv").stat().st_mtime_ns
    assert (data_dir.path / "reports" / "2024" / "notes.txt").read_text() == "fine\n"
    assert stat.S_IMODE(data_dir.path.stat().st_mode) == 0o755
    assert stat.S_IMODE((data_dir.path / "reports").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "root").stat().st_mode) == 0o700
    data_dir.remove()
    assert not data_dir.path.exists() and data["sales"].read_text().startswith("region")


def test_the_host_data_tools_still_list_a_delivered_directory(tmp_path, data):
    """A linked file below a data directory would be refused as a hard link by the host tools."""
    before = index_data_files([data["sales"], data["reports"]], max_files=100)
    data_dir = fill(tmp_path / "root", [data["sales"], data["reports"]])
    after = index_data_files([data["sales"], data["reports"]], max_files=100)
    assert [f.name for f in after.files] == [f.name for f in before.files]
    assert after.refused == before.refused
    data_dir.remove()


def test_across_filesystems_a_file_is_copied_within_the_bound(tmp_path, data):
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.fail("this test needs /dev/shm on another filesystem than the test's tmp_path")
    root = shm / f"sbx-test-{os.getpid()}"
    try:
        data_dir = fill(root, [data["sales"]])
        copied = (data_dir.path / "sales.csv").stat()
        assert copied.st_ino != data["sales"].stat().st_ino
        assert stat.S_IMODE(copied.st_mode) == 0o444
        assert (data_dir.path / "sales.csv").read_text() == data["sales"].read_text()
        with pytest.raises(NotDeliverable, match="max_copy_bytes"):
            fill(root, [data["sales"]], max_copy_bytes=10)
    finally:
        collect_orphan_data(root, everything=True)
        root.rmdir()


def test_past_the_bounds_or_with_an_acl_the_data_is_not_deliverable(tmp_path, data, monkeypatch):
    big = data["reports"] / "big.bin"
    big.write_bytes(b"x" * 4096)
    with pytest.raises(NotDeliverable, match="max_copy_bytes"):
        fill(tmp_path / "root", [data["reports"]], max_copy_bytes=4000)
    monkeypatch.setattr("sbx.sandbox.datadir.MAX_DATA_ENTRIES", 4)
    with pytest.raises(NotDeliverable, match="more than 4 data entries"):
        fill(tmp_path / "root", [data["reports"]])
    monkeypatch.undo()
    deny_acl(data["reports"] / "q1.csv", SANDBOX_UID)  # the mode bits still say anyone may read
    with pytest.raises(NotDeliverable, match="access control list"):
        fill(tmp_path / "root", [data["reports"]])


def test_a_file_locked_or_swapped_after_the_check_is_refused(tmp_path, data):
    mounts = data_mounts([data["sales"], data["reports"]])
    data["sales"].chmod(0o600)  # after the check before the run
    with pytest.raises(InvalidInput, match="changed after it was checked"):
        DataDir.create(tmp_path / "root").fill(mounts, max_copy_bytes=MIB)
    data["sales"].chmod(0o644)
    (data["reports"] / "q1.csv").chmod(0o600)
    with pytest.raises(InvalidInput, match="changed after it was checked"):
        DataDir.create(tmp_path / "root").fill(mounts, max_copy_bytes=MIB)
    (data["reports"] / "q1.csv").chmod(0o644)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    data["sales"].unlink()
    data["sales"].symlink_to(secret)  # swapped for a link after the check
    data_dir = DataDir.create(tmp_path / "root")
    with pytest.raises(InvalidInput, match="changed after it was checked"):
        data_dir.fill((mounts[0],), max_copy_bytes=MIB)
    assert not (data_dir.path / "sales.csv").exists()


def test_the_root_must_be_ours_and_closed(tmp_path):
    root = tmp_path / "open"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    with pytest.raises(SandboxError, match="open to other users"):
        prepare_root(root)
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, SANDBOX_UID, SANDBOX_UID)
    with pytest.raises(SandboxError, match="not a directory owned by this user"):
        prepare_root(theirs)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "fresh", target_is_directory=True)
    (tmp_path / "fresh").mkdir(mode=0o700)
    with pytest.raises(SandboxError, match="not a directory owned"):
        prepare_root(link)


def test_gc_removes_only_the_directories_of_dead_owners(tmp_path, data):
    root = tmp_path / "root"
    mine = fill(root, [data["sales"], data["reports"]])
    dead = root / f"{host_label()}.4194305.0123456789ab"  # a pid above pid_max: dead
    dead.mkdir()
    (dead / "left.csv").write_text("x")
    other_host = root / "0000ffff.4194305.0123456789ab"
    other_host.mkdir()
    stranger = root / "not-ours"
    stranger.mkdir()
    assert collect_orphan_data(root) == [dead.name]
    assert sorted(os.listdir(root)) == sorted([mine.path.name, other_host.name, stranger.name])
    assert data["sales"].exists() and data["reports"].is_dir()  # links and copies only went
    assert collect_orphan_data(root, everything=True) == sorted([mine.path.name, other_host.name])
    assert os.listdir(root) == [stranger.name]
