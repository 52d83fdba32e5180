"""Runs with data start from the warm pool, and see what a bind mount showed.

A pooled container mounts an empty directory of its own read-only at `/data`;
on lease the run's files are put there. The code sees exactly its own files,
read-only, at the same `/data/<name>` paths as a created container's bind
mounts; the directory goes with the container, and a crashed process's
directories are removed by the next `Pool.start` or `sbx gc`.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import TEST_IMAGE, wait_until_removed
from sbx.agent.cli.main import cli
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.config import OWNER_LABEL
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.gc import owner_tag
from sbx.sandbox.host_caps import HostCaps
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

pytestmark = pytest.mark.docker

GIB = 1 << 30
LOOK = r"""
import hashlib, os
for top, dirs, files in sorted(os.walk('/data')):
    for name in sorted(files):
        path = os.path.join(top, name)
        print(path, hashlib.sha256(open(path, 'rb').read()).hexdigest()[:12])
for path in ('/data/sales.csv', '/data/reports/q1.csv'):
    for attempt, act in (('append', lambda: open(path, 'a')),
                         ('chmod', lambda: os.chmod(path, 0o777)),
                         ('remove', lambda: os.remove(path))):
        try:
            act(); print(attempt, path, 'WORKED')
        except OSError as exc:
            print(attempt, path, 'refused')
for attempt, act in (('create', lambda: open('/data/new.csv', 'w')),
                     ('mkdir', lambda: os.mkdir('/data/d'))):
    try:
        act(); print(attempt, 'WORKED')
    except OSError:
        print(attempt, 'refused')
"""


def capacity(tmp_path: Path) -> HostCapacity:
    caps = HostCaps(sandboxes=8, memory=16 * GIB, cpus=32.0)
    return HostCapacity(directory=tmp_path / "ledger", caps=caps, wait_s=30.0)


@pytest.fixture
def data(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "in"
    (root / "reports" / "2024").mkdir(parents=True)
    sales = root / "sales.csv"
    sales.write_text("region,amount\nnorth,3\n")
    sales.chmod(0o666)  # only the read-only mount may stop a write
    (root / "reports" / "q1.csv").write_text("q,1\n")
    (root / "reports" / "q1.csv").chmod(0o666)
    (root / "reports" / "2024" / "notes.txt").write_text("fine\n")
    return {"sales": sales, "reports": root / "reports"}


def test_a_warm_container_serves_a_run_with_data_read_only_at_the_same_paths(
    engine, runtime, tmp_path, data
) -> None:
    key = PoolKey(image=TEST_IMAGE, limits=Limits(timeout="20s", runtime=runtime))
    root = tmp_path / "data-root"
    paths = [data["sales"], data["reports"]]
    config = PoolConfig(size=1, data_root=root)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config, warm=[key]) as pool:
        assert pool.wait_warm(key)
        warm_id = pool.idle_container_ids(key)[0]
        with pool.session(
            SessionSpec(
                limits=key.limits, image=TEST_IMAGE, data=tuple(paths), output_dir=tmp_path / "o"
            )
        ) as session:
            stats = pool.snapshot()
            assert (stats.hits, stats.misses, stats.data_delivered) == (1, 0, 1)
            assert session.container_id == warm_id  # no container was created for this run
            mounts = engine.inspect(warm_id)["Mounts"]
            assert [(m["Destination"], m["RW"]) for m in mounts] == [("/data", False)]
            directory = session.data_dir.path if session.data_dir else None
            assert directory is not None and directory.parent == root
            warm = session.run(LOOK)
        assert warm.ok, warm
        assert pool.reaper.wait_idle(60)
        assert not directory.exists()  # gone with its container
    with Session.open(
        SessionSpec(
            image=TEST_IMAGE, data=tuple(paths), output_dir=tmp_path / "o2", limits=key.limits
        ),
        engine=engine,
    ) as cold:
        created = cold.run(LOOK)
    assert warm.stdout == created.stdout
    shown = {
        "/data/sales.csv": data["sales"],
        "/data/reports/q1.csv": data["reports"] / "q1.csv",
        "/data/reports/2024/notes.txt": data["reports"] / "2024" / "notes.txt",
    }
    files = [line for line in warm.stdout.splitlines() if line.startswith("/data/")]
    assert files == [
        f"{name} {hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"
        for name, path in shown.items()
    ]
    refusals = [line for line in warm.stdout.splitlines() if not line.startswith("/data/")]
    assert len(refusals) == 8 and all(line.endswith("refused") for line in refusals)
    assert os.listdir(root) == []  # the pool closed: every directory went with its container


def test_data_is_checked_before_a_warm_container_is_taken(engine, tmp_path, data) -> None:
    key = PoolKey(image=TEST_IMAGE, limits=Limits(timeout="10s"))
    config = PoolConfig(size=1, data_root=tmp_path / "data-root")
    locked = data["reports"] / "2024" / "notes.txt"
    locked.chmod(0o600)
    twin = data["reports"] / "2024" / "sales.csv"
    twin.write_text("x\n")
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config, warm=[key]) as pool:
        assert pool.wait_warm(key)
        with pytest.raises(InvalidInput, match="not readable by the sandbox's user"):
            pool.session(SessionSpec(limits=key.limits, image=TEST_IMAGE, data=(data["reports"],)))
        with pytest.raises(InvalidInput, match="two data paths are both named 'sales.csv'"):
            pool.session(
                SessionSpec(
                    limits=key.limits,
                    image=TEST_IMAGE,
                    data=(
                        data["sales"],
                        twin,
                    ),
                )
            )
        stats = pool.snapshot()
        assert (stats.hits, stats.misses, pool.idle(key)) == (0, 0, 1)


def test_data_past_the_copy_bound_gets_a_created_container_with_bind_mounts(
    engine, tmp_path, data
) -> None:
    key = PoolKey(image=TEST_IMAGE, limits=Limits(timeout="10s"))
    (data["reports"] / "big.bin").write_bytes(b"x" * 8192)
    config = PoolConfig(size=1, data_root=tmp_path / "data-root", max_copy_bytes=4096)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config, warm=[key]) as pool:
        assert pool.wait_warm(key)
        result = pool.run_fresh(
            "import os; print(os.path.getsize('/data/reports/big.bin'))",
            SessionSpec(
                limits=key.limits,
                image=TEST_IMAGE,
                data=(data["reports"],),
                output_dir=tmp_path / "o",
            ),
        )
        assert result.stdout == "8192\n"
        stats = pool.snapshot()
        assert (stats.hits, stats.misses, stats.data_cold) == (0, 1, 1)


CRASHER = """
import sys, time
from pathlib import Path
from sbx.sandbox.capacity import HostCapacity
from sbx.sandbox.host_caps import HostCaps
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolConfig, PoolKey
from sbx.sandbox.spec import SessionSpec
image, root, ledger, data, marker = sys.argv[1:]
key = PoolKey(image=image, limits=Limits(timeout="10s"))
caps = HostCaps(sandboxes=8, memory=16 << 30, cpus=32.0)
pool = Pool.start(capacity=HostCapacity(directory=Path(ledger), caps=caps),
                  config=PoolConfig(size=2, data_root=Path(root)), warm=[key])
pool.wait_warm(key)
session = pool.session(SessionSpec(limits=key.limits, image=image, data=(Path(data),)))
print(session.run("print(open('/data/sales.csv').read())").stdout, flush=True)
pool.settle(key)  # no create in flight: the engine would finish it after the kill
Path(marker).write_text("leased")
time.sleep(600)
"""


@pytest.mark.parametrize("cleaner", ["pool start", "sbx gc"])
def test_a_crash_leaves_nothing_the_next_start_or_gc_does_not_clean(
    engine, tmp_path, data, cleaner
) -> None:
    root, marker = tmp_path / "data-root", tmp_path / "leased"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CRASHER,
            TEST_IMAGE,
            str(root),
            str(tmp_path / "ledger"),
            str(data["sales"]),
            str(marker),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        left = os.listdir(root)
        assert len(left) >= 2  # the leased container's and the warm ones'
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    crashed = owner_tag(proc.pid)
    if cleaner == "pool start":
        with Pool.start(
            engine=engine, capacity=capacity(tmp_path), config=PoolConfig(size=0, data_root=root)
        ):
            pass
    else:
        outcome = CliRunner().invoke(cli, ["gc"], env={"SBX_DATA_ROOT": str(root)})
        assert outcome.exit_code == 0, outcome.output
    assert os.listdir(root) == []
    for container in engine.managed_containers():
        if container["Labels"].get(OWNER_LABEL) == crashed:  # a removal the engine had begun
            wait_until_removed(engine, container["Id"], seconds=60)


def test_a_replacement_container_gets_the_same_data_in_a_directory_of_its_own(
    engine, tmp_path, data
) -> None:
    key = PoolKey(image=TEST_IMAGE, limits=Limits(timeout="10s"))
    root = tmp_path / "data-root"
    config = PoolConfig(size=1, data_root=root)
    with Pool.start(engine=engine, capacity=capacity(tmp_path), config=config, warm=[key]) as pool:
        assert pool.wait_warm(key)
        with pool.session(
            SessionSpec(
                limits=key.limits,
                image=TEST_IMAGE,
                data=(data["sales"],),
                output_dir=tmp_path / "o",
            )
        ) as session:
            first = session.data_dir.path if session.data_dir else None
            engine.remove(session.container_id or "")  # the container dies under the session
            lost = session.run("print(1)")
            again = session.run("print(open('/data/sales.csv').read().split()[1])")
            second = session.data_dir.path if session.data_dir else None
        assert not lost.ok and again.stdout == "north,3\n"
        assert first is not None and second is not None and first != second
        assert pool.reaper.wait_idle(60)
        assert not first.exists() and not second.exists()
