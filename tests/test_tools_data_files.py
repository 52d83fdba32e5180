"""list_data_files / preview_data_file: only the run's files, no escapes or symlinks, bounded."""

from __future__ import annotations

import errno
import json
import os
import struct

import pytest

from sbx.sandbox.config import SANDBOX_USER
from sbx.tools.builtin.data_files import index_data_files, open_data_file
from sbx.tools.builtin.data_summary import summarize_data
from sbx.tools.registry import ToolFailure
from tools_support import make_gate, policy_from

SANDBOX_UID, SANDBOX_GID = (int(part) for part in SANDBOX_USER.split(":"))
HARD_LINK = "hard link: not read on the host; the sandbox can try it under /data"
POLICY = {
    "tools": {
        "list_data_files": {"enabled": True},
        "preview_data_file": {"enabled": True, "max_rows": 20, "max_bytes": 4096},
    }
}


@pytest.fixture
def data(tmp_path):
    root = tmp_path / "data"
    (root / "reports" / "2024").mkdir(parents=True)
    (root / "sales.csv").write_text('region,q1,q2\nnorth,10,12\nsouth,7,9\neast,3,"4,5"\n')
    (root / "reports" / "2024" / "notes.txt").write_text("line one\nline two\nline three\n")
    (root / "reports" / "table.tsv").write_text("a\tb\n1\t2\n")
    (root / "big.csv").write_text("n,square\n" + "".join(f"{i},{i * i}\n" for i in range(100_000)))
    (root / "blob.parquet").write_bytes(b"PAR1\0\0")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    (root / "reports" / "link.txt").symlink_to(secret)
    os.mkfifo(root / "reports" / "pipe")
    outside_link = tmp_path / "linked.csv"  # a data path the operator gave as a symlink
    outside_link.symlink_to(root / "sales.csv")
    return {
        "dir": root / "reports",
        "file": root / "sales.csv",
        "big": root / "big.csv",
        "blob": root / "blob.parquet",
        "link": outside_link,
        "secret": secret,
    }


def gate_for(tmp_path, paths):
    gate, log = make_gate(tmp_path, policy_from(POLICY), data_paths=paths)
    return gate


def call(gate, tool, **arguments):
    return gate.call(name=tool, arguments=json.dumps(arguments), call_id="c")


def test_listing_names_files_and_refusals(tmp_path, data) -> None:
    # a data path given as a symlink is the operator's choice: named by its target, as mounted
    gate = gate_for(tmp_path, [data["link"], data["dir"]])
    outcome = call(gate, "list_data_files")
    assert outcome.status == "ok"
    assert outcome.text.splitlines() == [
        "sales.csv  (48 B)",
        "reports/table.tsv  (8 B)",
        "reports/2024/notes.txt  (29 B)",
        "refused: reports/link.txt (symlink)",
        "refused: reports/pipe (not a regular file)",
    ]
    assert "TOP SECRET" not in outcome.text


def test_preview_csv_as_table(tmp_path, data) -> None:
    gate = gate_for(tmp_path, [data["file"]])
    outcome = call(gate, "preview_data_file", name="sales.csv", rows=2)
    assert outcome.text.splitlines() == [
        "sales.csv: 48 B; showing 2 row(s)",
        "region | q1 | q2",
        "north  | 10 | 12",
        "south  | 7  | 9",
    ]


def test_preview_text_and_tsv_in_directories(tmp_path, data) -> None:
    gate = gate_for(tmp_path, [data["dir"]])
    notes = call(gate, "preview_data_file", name="reports/2024/notes.txt", rows=2)
    assert notes.text.splitlines()[1:] == ["line one", "line two"]
    table = call(gate, "preview_data_file", name="reports/table.tsv")
    assert table.text.splitlines()[1:] == ["a | b", "1 | 2"]


def test_reads_are_bounded(tmp_path, data) -> None:
    gate = gate_for(tmp_path, [data["big"]])
    outcome = call(gate, "preview_data_file", name="big.csv", rows=20)
    assert outcome.status == "ok"
    assert "from the first" in outcome.text.splitlines()[0]
    too_many = call(gate, "preview_data_file", name="big.csv", rows=1000)
    assert (too_many.status, too_many.rule) == ("denied", "tools.preview_data_file.max_rows")


@pytest.mark.parametrize(
    "name",
    [
        "../secret.txt",
        "/etc/passwd",
        "reports/../../secret.txt",
        "linked.csv",
        "reports",
    ],
)
def test_no_escapes(tmp_path, data, name) -> None:
    gate = gate_for(tmp_path, [data["file"], data["dir"]])
    outcome = call(gate, "preview_data_file", name=name)
    assert outcome.status == "error"
    assert outcome.text.startswith(f"Error from preview_data_file: no data file named {name!r}")
    assert "TOP SECRET" not in outcome.text


@pytest.mark.parametrize(
    ("name", "reason"), [("reports/link.txt", "symlink"), ("reports/pipe", "not a regular file")]
)
def test_refused_entries_say_why(tmp_path, data, name, reason) -> None:
    gate = gate_for(tmp_path, [data["file"], data["dir"]])
    outcome = call(gate, "preview_data_file", name=name)
    assert outcome.text == f"Error from preview_data_file: {name!r} is refused: {reason}"


def test_symlink_swapped_in_after_listing_is_refused(tmp_path, data) -> None:
    index = index_data_files([data["dir"]], max_files=100)
    notes = next(f for f in index.files if f.name == "reports/2024/notes.txt")
    target = data["dir"] / "2024" / "notes.txt"
    target.rename(tmp_path / "kept.txt")  # keeps the inode alive, so the next file gets another
    target.symlink_to(data["secret"])
    with pytest.raises(OSError) as info:  # O_NOFOLLOW on every component
        open_data_file(notes)
    assert info.value.errno == errno.ELOOP  # refused as a symlink, not merely unreadable
    target.unlink()
    target.write_text("replaced")  # a different file under the same name
    with pytest.raises(ToolFailure, match="changed since it was listed"):
        open_data_file(notes)
    year = data["dir"] / "2024"
    year.rename(tmp_path / "moved")
    year.symlink_to(tmp_path / "moved")  # a symlinked directory in the middle of the path
    with pytest.raises(OSError) as info:
        open_data_file(notes)
    assert info.value.errno == errno.ENOTDIR  # O_DIRECTORY | O_NOFOLLOW: the link is no directory


def test_binary_formats_point_to_execute_python(tmp_path, data) -> None:
    gate = gate_for(tmp_path, [data["blob"]])
    outcome = call(gate, "preview_data_file", name="blob.parquet")
    assert (
        outcome.text == "Error from preview_data_file: blob.parquet is parquet: "
        "read it with execute_python (pyarrow/pandas)"
    )


def test_no_data(tmp_path) -> None:
    assert (
        call(gate_for(tmp_path, []), "list_data_files").text
        == "No data files were given for this run."
    )


@pytest.fixture
def privileged(tmp_path):
    """A data directory holding what only root (the sbx process here) could read."""
    if os.geteuid() == SANDBOX_UID:
        pytest.fail("these tests judge uid 1000's access; run them as another user (CI: root)")
    root = tmp_path / "data"
    (root / "private").mkdir(parents=True)
    shadow = tmp_path / "shadow"  # outside the data directory, root-only
    shadow.write_text("TOP SECRET root:$6$hash\n")
    shadow.chmod(0o600)
    os.link(shadow, root / "linked.csv")  # a hard link: same inode, same mode 600
    shared = tmp_path / "shared.csv"
    shared.write_text("a,b\n1,2\n")
    os.link(shared, root / "second-name.csv")  # a hard link to a readable file
    (root / "locked.csv").write_text("TOP SECRET\n")
    (root / "locked.csv").chmod(0o000)
    (root / "private" / "inside.csv").write_text("TOP SECRET\n")
    (root / "private").chmod(0o700)  # root's own directory: uid 1000 cannot enter
    (root / "theirs.csv").write_text("x,y\n3,4\n")
    os.chown(root / "theirs.csv", SANDBOX_UID, SANDBOX_GID)
    (root / "theirs.csv").chmod(0o600)  # the sandbox's own file: readable
    (root / "group.csv").write_text("g\n1\n")
    os.chown(root / "group.csv", 0, SANDBOX_GID)
    (root / "group.csv").chmod(0o640)  # readable through the group
    return root


def test_host_tools_read_no_more_than_the_sandbox_uid(tmp_path, privileged) -> None:
    gate = gate_for(tmp_path, [privileged])
    listing = call(gate, "list_data_files").text
    assert listing.splitlines() == [
        "data/group.csv  (4 B)",
        "data/theirs.csv  (8 B)",
        "refused: data/linked.csv (not readable by the sandbox's user)",
        "refused: data/locked.csv (not readable by the sandbox's user)",
        "refused: data/private (not readable by the sandbox's user)",
        f"refused: data/second-name.csv ({HARD_LINK})",
    ]
    for name in ["data/linked.csv", "data/locked.csv", "data/private/inside.csv"]:
        outcome = call(gate, "preview_data_file", name=name)
        assert outcome.status == "error" and "TOP SECRET" not in outcome.text
    linked = call(gate, "preview_data_file", name="data/linked.csv")
    assert "not readable by the sandbox's user" in linked.text
    hard = call(gate, "preview_data_file", name="data/second-name.csv")
    assert hard.status == "error" and "hard link" in hard.text
    assert call(gate, "preview_data_file", name="data/theirs.csv").status == "ok"
    summary = summarize_data([privileged])
    assert "TOP SECRET" not in summary and "not readable by the sandbox" in summary


def test_a_file_locked_after_listing_is_not_read(tmp_path, data) -> None:
    index = index_data_files([data["dir"]], max_files=100)
    notes = next(f for f in index.files if f.name == "reports/2024/notes.txt")
    (data["dir"] / "2024" / "notes.txt").chmod(0o600)
    with pytest.raises(PermissionError, match="not readable by the sandbox"):
        open_data_file(notes)


def test_a_locked_data_path_itself_is_refused(tmp_path, privileged) -> None:
    gate = gate_for(tmp_path, [privileged / "locked.csv"])
    assert call(gate, "list_data_files").text == (
        "refused: locked.csv (not readable by the sandbox's user)"
    )


def deny_acl(path, uid: int) -> None:
    """Give `path` a POSIX ACL that denies `uid` what its mode bits (0644) allow everyone."""
    entries = [
        (0x01, 6, 0xFFFFFFFF),
        (0x02, 0, uid),
        (0x04, 4, 0xFFFFFFFF),
        (0x10, 4, 0xFFFFFFFF),
        (0x20, 4, 0xFFFFFFFF),
    ]  # user::rw- user:uid:--- ... other::r--
    value = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)
    os.setxattr(path, "system.posix_acl_access", value)


def test_a_file_whose_acl_denies_the_sandbox_is_not_read_on_the_host(tmp_path) -> None:
    secret = tmp_path / "acl.csv"
    secret.write_text("TOP SECRET\n")
    secret.chmod(0o644)
    deny_acl(secret, SANDBOX_UID)  # the mode bits still say everyone may read
    outcome = call(gate_for(tmp_path, [secret]), "preview_data_file", name="acl.csv")
    assert outcome.status == "error" and "TOP SECRET" not in outcome.text
    assert "access control list" in outcome.text
