"""Comparing a re-run's output with the record: numbers with tolerance, differences in words."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import pytest

from sbx.agent.provenance import data
from sbx.agent.provenance.data import MISSING, data_changes, data_digests, file_sha256
from sbx.agent.replay.compare import Observed, compare


def test_identical_output_matches_and_counts_its_numbers():
    verdict = compare(Observed(stdout="a 1\nb 2.5\n"), Observed(stdout="a 1\nb 2.5\n"))
    assert (verdict.matches, verdict.detail) == (True, "2 number(s) on 2 line(s) match")


def test_float_noise_matches_at_the_coarser_printed_precision():
    verdict = compare(Observed(stdout="x 0.30000000000000004"), Observed(stdout="x 0.3"))
    assert verdict.matches


def test_a_different_number_is_named_with_its_line():
    recorded, now = Observed(stdout="a 1\nmean 41.2\nz 3"), Observed(stdout="a 1\nmean 41.7\nz 4")
    verdict = compare(recorded, now)
    assert not verdict.matches
    assert verdict.detail == "line 2: 41.2 recorded, 41.7 now (1 more line(s) differ)"


def test_signs_count_when_a_program_is_compared_with_itself():
    assert not compare(Observed(stdout="d -5"), Observed(stdout="d 5")).matches


def test_different_text_and_missing_lines_are_differences():
    verdict = compare(Observed(stdout="West 1"), Observed(stdout="East 1"))
    assert verdict.detail == "line 1: 'West 1' recorded, 'East 1' now"
    verdict = compare(Observed(stdout="a\nb"), Observed(stdout="a"))
    assert verdict.detail == "line 2: 'b' recorded, not printed now"
    verdict = compare(Observed(stdout=""), Observed(stdout="new"))
    assert verdict.detail == "line 1: not printed when recorded, now 'new'"


def test_the_same_exception_again_matches_a_new_one_does_not():
    failed = Observed(stdout="", error_type="KeyError", error_message="'x'")
    assert compare(failed, Observed(stdout="", error_type="KeyError", error_message="'y'")).matches
    verdict = compare(Observed(stdout=""), Observed(stdout="", error_type="FileNotFoundError",
                                                    error_message="no /data/a.csv"))
    assert verdict.detail == "ran without error when recorded, raises FileNotFoundError: " \
        "no /data/a.csv now"
    assert compare(failed, Observed(stdout="")).detail == (
        "raised KeyError when recorded, runs without error now"
    )
    assert compare(Observed(stdout=""), Observed(stdout="", timed_out=True)).detail == (
        "timed out now"
    )


def test_data_digests_name_files_under_data_and_find_changes(tmp_path):
    single = tmp_path / "sales.csv"
    single.write_text("a,b\n1,2\n")
    folder = tmp_path / "shop"
    (folder / "2024").mkdir(parents=True)
    (folder / "2024" / "items.csv").write_text("x\n")
    (folder / "orders.csv").write_text("y\n")
    (folder / "link.csv").symlink_to(single)  # not followed: the sandbox does not see it either

    before = data_digests([single, folder])

    assert sorted(before) == ["sales.csv", "shop/2024/items.csv", "shop/orders.csv"]
    assert before["sales.csv"] == file_sha256(single) and len(before["sales.csv"]) == 64
    single.write_text("a,b\n1,3\n")
    (folder / "orders.csv").unlink()
    changes = data_changes(before, data_digests([single, folder]))
    assert [(c.name, c.now == MISSING) for c in changes] == [
        ("sales.csv", False), ("shop/orders.csv", True)
    ]
    assert changes[0].describe().startswith("sales.csv: changed (sha256 ")
    assert changes[1].describe().startswith("shop/orders.csv: missing now")


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry for each whole file the provenance code hashes."""
    calls: list[int] = []
    real = hashlib.file_digest

    def counted(handle: io.BufferedReader, name: str) -> Any:
        calls.append(1)
        return real(handle, name)

    monkeypatch.setattr(hashlib, "file_digest", counted)
    return calls


def test_a_settled_file_is_hashed_once_and_again_when_it_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashed: list[int]) -> None:
    """The digest is kept for the file's identity: a new inode, size or time is hashed anew."""
    monkeypatch.setattr(data, "SETTLED_S", 0.0)
    table = tmp_path / "sales.csv"
    table.write_bytes(b"region,amount\neast,1\n")
    first = file_sha256(table)
    assert file_sha256(table) == first and len(hashed) == 1  # kept
    os.link(table, tmp_path / "in-a-sandbox.csv")  # a link changes ctime, not the bytes
    assert file_sha256(tmp_path / "in-a-sandbox.csv") == first and len(hashed) == 1
    replaced = tmp_path / "new.csv"
    replaced.write_bytes(b"region,amount\nwest,2\n")  # same size, another inode
    os.replace(replaced, table)
    second = file_sha256(table)
    assert second != first and len(hashed) == 2
    with table.open("ab") as handle:  # the same inode, grown
        handle.write(b"north,3\n")
    assert file_sha256(table) not in (first, second) and len(hashed) == 3


def test_a_digest_remembered_by_the_files_writer_is_not_hashed_again(
        tmp_path: Path, hashed: list[int]) -> None:
    """A stored upload, hashed as it streamed in, is not hashed at its first run; a change is."""
    content = b"region,amount\neast,1\n"
    table = tmp_path / "sales.csv"
    table.write_bytes(content)  # just written: the racy rule would hash it at every run
    assert file_sha256(table) == file_sha256(table) and len(hashed) == 2
    data.remember_sha256(table, hashlib.sha256(content).hexdigest())
    assert file_sha256(table) == hashlib.sha256(content).hexdigest() and len(hashed) == 2
    with table.open("ab") as handle:  # changed after: its identity no longer matches
        handle.write(b"west,2\n")
    assert file_sha256(table) == hashlib.sha256(table.read_bytes()).hexdigest()
    assert len(hashed) == 3


def test_a_file_changed_just_before_it_was_hashed_is_hashed_again(tmp_path: Path) -> None:
    """Rewritten in place with its size and mtime kept: not served from a stale digest."""
    table = tmp_path / "sales.csv"
    table.write_bytes(b"region,amount\neast,1\n")
    first = file_sha256(table)
    status = table.stat()
    table.write_bytes(b"region,amount\nwest,2\n")
    os.utime(table, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert file_sha256(table) != first
