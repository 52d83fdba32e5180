"""Artifact resources: a URI is client input, so it reaches only the session's own files.

Host-side only (no Docker): the URI parser and the reader that serves an
artifact from the session's directory without following links and only
while the file is exactly what the sandbox produced.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from sbx.agent.mcp.artifacts import (
    ArtifactUnavailable,
    artifact_blocks,
    artifact_uri,
    parse_artifact_uri,
    read_artifact,
)
from sbx.sandbox.result import Artifact

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def _artifact(directory, name: str, data: bytes) -> Artifact:
    path = directory.joinpath(*name.split("/"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Artifact(name=name, path=str(path), size=len(data),
                    sha256=hashlib.sha256(data).hexdigest())


def test_an_artifact_uri_round_trips_and_foreign_uris_are_not_ours() -> None:
    uri = artifact_uri("mcp-abc", "plots/growth by region.png")
    assert uri == "sbx://artifacts/mcp-abc/plots/growth%20by%20region.png"
    assert parse_artifact_uri(uri) == ("mcp-abc", "plots/growth by region.png")
    assert parse_artifact_uri("file:///etc/passwd") is None
    assert parse_artifact_uri("sbx://artifacts/mcp-abc") is None
    assert parse_artifact_uri("sbx://artifacts/mcp-abc/x.png?raw=1") is None


def test_the_reader_serves_the_recorded_file_and_nothing_else(tmp_path) -> None:
    chart = _artifact(tmp_path, "plots/chart.png", PNG)
    assert read_artifact(tmp_path, chart, max_bytes=1 << 20) == PNG

    traversal = chart.model_copy(update={"name": "../outside.png"})
    with pytest.raises(ArtifactUnavailable):
        read_artifact(tmp_path, traversal, max_bytes=1 << 20)
    with pytest.raises(ArtifactUnavailable):
        read_artifact(tmp_path, chart, max_bytes=len(PNG) - 1)  # over the artifact cap

    (tmp_path / "plots" / "chart.png").write_bytes(PNG[:-1] + b"\x01")  # changed on disk
    with pytest.raises(ArtifactUnavailable, match="changed"):
        read_artifact(tmp_path, chart, max_bytes=1 << 20)


def test_a_link_swapped_in_anywhere_is_refused(tmp_path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = _artifact(outside, "secret.png", PNG)
    session = tmp_path / "session"
    session.mkdir()
    os.symlink(outside / "secret.png", session / "secret.png")
    os.symlink(outside, session / "plots")
    as_leaf = secret.model_copy(update={"name": "secret.png"})
    as_dir = secret.model_copy(update={"name": "plots/secret.png"})
    for artifact in (as_leaf, as_dir):
        with pytest.raises(ArtifactUnavailable):
            read_artifact(session, artifact, max_bytes=1 << 20)


def test_only_real_pngs_go_inline_and_every_artifact_gets_a_link(tmp_path) -> None:
    real = _artifact(tmp_path, "chart.png", PNG)
    fake = _artifact(tmp_path, "fake.png", b"<svg/>")
    table = _artifact(tmp_path, "table.csv", b"a,b\n1,2\n")
    blocks = artifact_blocks("mcp-abc", tmp_path, (real, fake, table), max_bytes=1 << 20)
    kinds = [(block.type, getattr(block, "name", None)) for block in blocks]
    assert kinds == [
        ("resource_link", "chart.png"), ("image", None),
        ("resource_link", "fake.png"), ("resource_link", "table.csv"),
    ]
