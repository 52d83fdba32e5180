"""Data the sandbox's uid (1000:1000) cannot read is an error before the run.

sbx runs as root here, so "sbx can read it" says nothing: `data_mounts` judges
the mode bits of each data path and of every entry below it for uid/gid 1000,
and the sandbox itself confirms the judgement for what it may read.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from conftest import TEST_IMAGE
from sbx.agent.cli.main import cli
from sbx.sandbox.config import SANDBOX_USER
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.files import data_mounts
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec

SANDBOX_UID, SANDBOX_GID = (int(part) for part in SANDBOX_USER.split(":"))


@pytest.fixture
def tree(tmp_path):
    if os.geteuid() == SANDBOX_UID:
        pytest.fail("these tests judge uid 1000's access; run them as another user (CI: root)")
    root = tmp_path / "data"
    (root / "deep" / "er").mkdir(parents=True)
    (root / "open.csv").write_text("a\n1\n")
    (root / "deep" / "er" / "fine.csv").write_text("b\n2\n")
    mine = root / "deep" / "theirs.csv"
    mine.write_text("c\n3\n")
    os.chown(mine, SANDBOX_UID, SANDBOX_GID)
    mine.chmod(0o400)
    group = root / "group.csv"
    group.write_text("d\n4\n")
    os.chown(group, 0, SANDBOX_GID)
    group.chmod(0o040)
    return root


def test_readable_trees_are_mounted(tree) -> None:
    assert [m.target for m in data_mounts([tree, tree / "open.csv"])] == [
        "/data/data",
        "/data/open.csv",
    ]


@pytest.mark.parametrize(
    ("lock", "mode", "where"),
    [
        ("open.csv", 0o000, "'open.csv' inside it"),
        ("open.csv", 0o600, "'open.csv' inside it"),  # root's own, others may not read
        ("deep/er", 0o711, "'deep/er' inside it"),  # enterable but not listable
        ("deep/er", 0o744, "'deep/er' inside it"),  # listable but not enterable
        ("deep/theirs.csv", 0o200, "'deep/theirs.csv' inside it"),  # owner bits rule
        (".", 0o700, "not readable"),
    ],
)
def test_anything_uid_1000_cannot_read_is_refused(tree, lock, mode, where) -> None:
    (tree / lock).chmod(mode)
    with pytest.raises(InvalidInput, match="not readable by the sandbox's user 1000:1000") as exc:
        data_mounts([tree])
    assert where in str(exc.value)


def test_a_locked_file_given_directly_is_refused(tree) -> None:
    (tree / "open.csv").chmod(0o000)
    with pytest.raises(InvalidInput, match="not readable by the sandbox's user"):
        data_mounts([tree / "open.csv"])


CASES = [  # (owner uid, group gid, mode)
    (0, 0, 0o644),
    (0, 0, 0o600),
    (0, 0, 0o000),
    (0, 0, 0o604),
    (SANDBOX_UID, SANDBOX_GID, 0o400),
    (SANDBOX_UID, 0, 0o044),  # the owner's bits rule, even when others may read
    (0, SANDBOX_GID, 0o040),
    (0, SANDBOX_GID, 0o604),  # the group's bits rule, even when others may read
]


@pytest.mark.docker
def test_the_sandbox_agrees_with_the_judgement(engine, runtime, tmp_path) -> None:
    from sbx.sandbox.files import sandbox_can_read

    root = tmp_path / "judged"
    root.mkdir()
    for index, _ in enumerate(CASES):
        (root / f"f{index}").write_text("readable\n")
    for name in ("listonly", "enteronly"):
        (root / name).mkdir()
        (root / name / "inner").write_text("readable\n")
    program = (
        "import os\n"
        f"for index in range({len(CASES)}):\n"
        "    try:\n"
        "        open(f'/data/judged/f{index}').read()\n"
        "        print(f'f{index}', True)\n"
        "    except PermissionError:\n"
        "        print(f'f{index}', False)\n"
        "for name in ('listonly', 'enteronly'):\n"
        "    try:\n"
        "        os.listdir(f'/data/judged/{name}')\n"
        "        open(f'/data/judged/{name}/inner').read()\n"
        "        print(name, True)\n"
        "    except PermissionError:\n"
        "        print(name, False)\n"
    )
    limits = Limits(runtime=runtime)
    with Session.open(
        SessionSpec(image=TEST_IMAGE, data=(root,), output_dir=tmp_path / "out", limits=limits),
        engine=engine,
    ) as session:
        # locked after the mount check, so the sandbox itself can be asked
        for index, (uid, gid, mode) in enumerate(CASES):
            os.chown(root / f"f{index}", uid, gid)
            (root / f"f{index}").chmod(mode)
        (root / "listonly").chmod(0o744)
        (root / "enteronly").chmod(0o711)
        result = session.run(program)
    assert result.ok, result
    seen = dict(line.split() for line in result.stdout.splitlines())
    judged = {path.name: str(sandbox_can_read(os.stat(path))) for path in root.iterdir()}
    assert seen == judged
    assert seen["f0"] == "True" and seen["f2"] == "False"  # the judgement is not trivial


def test_ask_refuses_unreadable_data_as_a_settings_error(tmp_path, tree) -> None:
    (tree / "open.csv").chmod(0o000)
    outcome = CliRunner().invoke(
        cli,
        [
            "ask",
            "q",
            "--data",
            str(tree),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key",
            "k",
            "--model",
            "m",
            "--output",
            str(tmp_path / "out"),
            "--transcript",
            str(tmp_path / "run.jsonl"),
            "--audit-log",
            str(tmp_path / "audit.jsonl"),
        ],
    )
    assert outcome.exit_code == 2, outcome.output
    assert outcome.stdout == ""
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and "not readable by the sandbox's user" in lines[0]
    assert not (tmp_path / "run.jsonl").exists()  # refused before the run began
