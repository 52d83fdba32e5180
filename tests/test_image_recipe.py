"""The image recipe without Docker: apt sources -> mirror, recipe -> hash, lock format."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from sbx.images.apt_source import (
    parse_deb822,
    parse_one_line,
    pick_debian_mirror,
    read_host_sources,
)
from sbx.images.errors import ImageBuildError
from sbx.images.recipe import BASE_CODE_FILES, IMAGES_DIR, Recipe, load_recipe
from sbx.images.wheels import LockedWheel, parse_lock, render_lock

ARCHIVE = "http://archive.example.test/debian"
SECURITY = "http://archive.example.test/debian-security"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

ONE_LINE = f"""\
# the main archive, after noise
deb-src {ARCHIVE} bookworm main
deb {SECURITY} bookworm-security main contrib
deb {ARCHIVE} bookworm-updates main
deb [arch=amd64 signed-by={KEYRING}] {ARCHIVE}/ bookworm main non-free-firmware  # a comment
deb https://vendor.example.test/apt cloud-sdk-bookworm main
"""

DEB822 = f"""\
Types: deb
# {SECURITY}
URIs: {SECURITY}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://sources-only.example.test/debian
Suites: bookworm
Components: main

Types: deb
URIs: http://disabled.example.test/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb deb-src
URIs: {ARCHIVE}
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def test_one_line_format_yields_the_main_archive_with_its_keyring() -> None:
    mirror = pick_debian_mirror(parse_one_line(ONE_LINE), suite="bookworm")
    assert mirror.uri == ARCHIVE
    assert mirror.keyring == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_one_line_parser_skips_deb_src_and_comments() -> None:
    entries = parse_one_line(ONE_LINE)
    assert [e.suites for e in entries] == [
        ("bookworm-security",), ("bookworm-updates",), ("bookworm",), ("cloud-sdk-bookworm",)
    ]
    assert entries[2].components == ("main", "non-free-firmware")


def test_deb822_format_yields_the_main_archive() -> None:
    entries = parse_deb822(DEB822)
    assert [e.uris for e in entries] == [(SECURITY,), (ARCHIVE,)]  # deb-src-only, disabled: gone
    mirror = pick_debian_mirror(entries, suite="bookworm")
    assert mirror.uri == ARCHIVE
    assert mirror.keyring == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_security_and_updates_entries_are_never_chosen() -> None:
    only_extras = f"deb {SECURITY} bookworm-security main\ndeb {ARCHIVE} bookworm-updates main\n"
    with pytest.raises(ImageBuildError, match="no Debian archive entry"):
        pick_debian_mirror(parse_one_line(only_extras), suite="bookworm")


def test_security_archive_is_skipped_even_under_a_bare_suite_name() -> None:
    odd = f"deb {SECURITY} bookworm main\ndeb {ARCHIVE} bookworm main\n"
    assert pick_debian_mirror(parse_one_line(odd), suite="bookworm").uri == ARCHIVE


def test_third_party_repositories_are_not_mistaken_for_debian() -> None:
    vendor = "deb https://vendor.example.test/node nodistro main\n"
    with pytest.raises(ImageBuildError, match="^no Debian archive entry .*set SBX_DEBIAN_MIRROR"):
        pick_debian_mirror(parse_one_line(vendor), suite="bookworm")


def test_exact_suite_beats_another_debian_release() -> None:
    text = ("deb http://a.example.test/debian trixie main\n"
            "deb http://b.example.test/debian bookworm main\n")
    assert pick_debian_mirror(parse_one_line(text), suite="bookworm").uri.startswith("http://b.")
    only_trixie = "deb http://a.example.test/debian trixie main\n"
    assert pick_debian_mirror(parse_one_line(only_trixie), suite="bookworm").uri.startswith(
        "http://a."
    )


def test_inline_signed_by_key_is_not_taken_for_a_keyring_path() -> None:
    text = (f"Types: deb\nURIs: {ARCHIVE}\nSuites: bookworm\nComponents: main\n"
            "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n")
    assert pick_debian_mirror(parse_deb822(text), suite="bookworm").keyring is None


def test_host_sources_read_both_formats_and_ignore_other_suffixes(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(f"deb {SECURITY} bookworm-security main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    (tmp_path / "sources.list.d" / "vendor.list").write_text(
        "deb http://v.example.test/x stable main\n"
    )
    (tmp_path / "sources.list.d" / "old.sources.disabled").write_text(
        "Types: deb\nURIs: http://old.example.test/debian\nSuites: bookworm\nComponents: main\n"
    )
    entries = read_host_sources(tmp_path)
    assert {e.origin.rsplit("/", 1)[-1] for e in entries} == {
        "sources.list", "debian.sources", "vendor.list"
    }
    assert pick_debian_mirror(entries, suite="bookworm").uri == ARCHIVE


def _recipe(*, lock: bytes = b"lock", base_code: bytes = b"code", dockerfile: bytes = b"FROM x",
            runner: bytes = b"run") -> Recipe:
    return Recipe(lock=lock, base_code=base_code, dockerfile=dockerfile, runner=runner)


def test_recipe_hash_is_stable_for_the_same_inputs() -> None:
    assert _recipe().recipe_hash() == _recipe().recipe_hash()
    assert len(_recipe().recipe_hash()) == 64


def test_runner_change_rebuilds_only_the_top_layer() -> None:
    changed = _recipe(runner=b"run, changed")
    assert changed.recipe_hash() != _recipe().recipe_hash()
    assert changed.base_hash() == _recipe().base_hash()


def test_lock_change_rebuilds_the_base() -> None:
    changed = _recipe(lock=b"lock, changed")
    assert changed.base_hash() != _recipe().base_hash()
    assert changed.recipe_hash() != _recipe().recipe_hash()


def test_base_code_and_packages_are_base_inputs() -> None:
    assert _recipe(base_code=b"other").base_hash() != _recipe().base_hash()
    more = dataclasses.replace(_recipe(), packages=("python3", "libgomp1"))
    assert more.base_hash() != _recipe().base_hash()


def _copy_recipe_files(target: Path) -> None:
    for name in (*BASE_CODE_FILES, "requirements.lock", "Dockerfile", "runner.py", "preimport.txt"):
        shutil.copy(IMAGES_DIR / name, target / name)


def test_recipe_files_on_disk_change_the_hash_only_when_runner_or_lock_change(
    tmp_path: Path,
) -> None:
    _copy_recipe_files(tmp_path)
    before = load_recipe(tmp_path)
    (tmp_path / "requirements.in").write_text("not an input: only the lock is\n")
    (tmp_path / "Dockerfile.slim").write_text("FROM elsewhere\n")
    assert load_recipe(tmp_path).recipe_hash() == before.recipe_hash()

    (tmp_path / "runner.py").write_bytes(before.runner + b"\n# edited\n")
    after_runner = load_recipe(tmp_path)
    assert after_runner.recipe_hash() != before.recipe_hash()
    assert after_runner.base_hash() == before.base_hash()

    (tmp_path / "requirements.lock").write_bytes(before.lock + b"\n")
    assert load_recipe(tmp_path).base_hash() != before.base_hash()


def test_the_preimport_list_is_a_top_layer_input(tmp_path: Path) -> None:
    """The modules the runner imports before the first question are part of the image: a
    changed list is a new recipe, built in seconds on the same base."""
    _copy_recipe_files(tmp_path)
    before = load_recipe(tmp_path)
    (tmp_path / "preimport.txt").write_text("numpy\nscipy\n")
    after = load_recipe(tmp_path)
    assert after.recipe_hash() != before.recipe_hash()
    assert after.base_hash() == before.base_hash()


def test_missing_runner_is_reported(tmp_path: Path) -> None:
    _copy_recipe_files(tmp_path)
    (tmp_path / "runner.py").unlink()
    with pytest.raises(FileNotFoundError) as info:  # images/build.py turns it into one line
        load_recipe(tmp_path)
    assert info.value.filename == str(tmp_path / "runner.py")


def test_lock_round_trips_and_names_each_wheel_file() -> None:
    wheels = [
        LockedWheel(name="zeta", version="1.0", sha256="a" * 64,
                    filename="zeta-1.0-py3-none-any.whl"),
        LockedWheel(name="Alpha", version="2.0", sha256="b" * 64,
                    filename="Alpha-2.0-cp311-cp311-manylinux_2_17_x86_64.whl"),
    ]
    text = render_lock(wheels, header="header line")
    assert text.startswith("# header line\n")
    assert [w.name for w in parse_lock(text)] == ["Alpha", "zeta"]
    assert set(parse_lock(text)) == set(wheels)


def test_hand_edited_lock_is_refused() -> None:
    with pytest.raises(ImageBuildError, match="regenerate"):
        parse_lock("numpy==2.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")


def test_committed_lock_pins_the_whole_stack_for_cpython_311() -> None:
    wheels = parse_lock((IMAGES_DIR / "requirements.lock").read_text())
    names = {w.name.lower().replace("_", "-") for w in wheels}
    wanted = {"numpy", "pandas", "pyarrow", "scipy", "matplotlib", "seaborn", "scikit-learn",
              "statsmodels", "openpyxl"}
    assert wanted <= names
    for wheel in wheels:
        assert wheel.filename.endswith(".whl")
        tags = wheel.filename[:-4].split("-")[-3:]
        assert tags[0] in {"cp311", "py3", "py2.py3"} or tags[1] == "abi3", wheel.filename
        assert tags[2] == "any" or "x86_64" in tags[2], wheel.filename
