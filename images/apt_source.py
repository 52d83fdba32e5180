"""Find the host's Debian archive mirror in its apt sources, at run time.

The image is bootstrapped from whatever mirror the host already trusts and can
reach (there is no general internet here, and a hard-coded host would be wrong
on the next machine). apt reads two formats and so do we:

- one-line: `/etc/apt/sources.list` and `/etc/apt/sources.list.d/*.list`
  (`deb [opts] URI SUITE COMPONENT...`);
- deb822: `/etc/apt/sources.list.d/*.sources` (paragraphs of `Field: value`).

Files with any other suffix (`*.disabled`, editor backups) are ignored, as apt
ignores them. Of the entries we keep the main archive: a `deb` entry for a bare
Debian suite with the `main` component. `-security`, `-updates` and
`-backports` entries are skipped: debootstrap needs the archive itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sbx.images.errors import ImageBuildError

DEBIAN_SUITES = frozenset(
    {"oldoldstable", "oldstable", "stable", "testing", "unstable", "sid", "experimental",
     "buster", "bullseye", "bookworm", "trixie", "forky", "duke"}
)
"""Bare suite names of the Debian archive; a third-party repo's suite is none of these."""

SUPPORTED_SCHEMES = ("http://", "https://", "file://")
"""URI schemes debootstrap can fetch from (not apt's `mirror+`, `cdrom:` or `tor+` methods)."""


@dataclass(frozen=True, kw_only=True)
class AptSource:
    """One `deb` entry, from either file format."""

    uris: tuple[str, ...]
    """Archive roots, in file order (deb822 allows several)."""
    suites: tuple[str, ...]
    """Suites (codenames or aliases) this entry enables."""
    components: tuple[str, ...]
    """Archive components, e.g. `main`."""
    signed_by: str | None = None
    """The `Signed-By` keyring path, if it names a file (inline keys are dropped)."""
    origin: str = ""
    """The file it came from, for error messages."""


@dataclass(frozen=True, kw_only=True)
class Mirror:
    """What debootstrap needs: where the archive is and which keyring vouches for it."""

    uri: str
    """The archive root, e.g. the URI of the host's main Debian entry."""
    keyring: str | None
    """A keyring file to check Release signatures with; None means debootstrap's default."""


def parse_one_line(text: str, *, origin: str = "") -> list[AptSource]:
    """Parse the one-line format; `deb-src` lines and comments are skipped."""
    found: list[AptSource] = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        options, rest = _split_options(line)
        words = rest.split()
        if len(words) < 3 or words[0] != "deb":
            continue
        signed_by = options.get("signed-by")
        found.append(
            AptSource(uris=(words[1],), suites=(words[2],), components=tuple(words[3:]),
                      signed_by=_keyring_path(signed_by), origin=origin)
        )
    return found


def parse_deb822(text: str, *, origin: str = "") -> list[AptSource]:
    """Parse the deb822 format; disabled stanzas and `deb-src`-only stanzas are skipped."""
    found: list[AptSource] = []
    for stanza in _stanzas(text):
        if "deb" not in stanza.get("types", "").split():
            continue
        if stanza.get("enabled", "yes").strip().lower() in {"no", "false", "0"}:
            continue
        uris = tuple(stanza.get("uris", "").split())
        suites = tuple(stanza.get("suites", "").split())
        if not uris or not suites:
            continue
        found.append(
            AptSource(uris=uris, suites=suites,
                      components=tuple(stanza.get("components", "").split()),
                      signed_by=_keyring_path(stanza.get("signed-by")), origin=origin)
        )
    return found


def read_host_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every `deb` entry apt itself would read under `etc_apt`, in apt's order."""
    found: list[AptSource] = []
    main_list = etc_apt / "sources.list"
    if main_list.is_file():
        found += parse_one_line(_read(main_list), origin=str(main_list))
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list" and path.is_file():
                found += parse_one_line(_read(path), origin=str(path))
            elif path.suffix == ".sources" and path.is_file():
                found += parse_deb822(_read(path), origin=str(path))
    return found


def pick_debian_mirror(sources: list[AptSource], *, suite: str) -> Mirror:
    """The main Debian archive among `sources`: an entry for `suite` itself wins.

    A bare Debian suite of another release (a trixie host building a bookworm
    image) is the fallback: the same archive serves every release.
    """
    best: tuple[int, AptSource, str] | None = None
    for source in sources:
        rank = _rank(source, suite)
        uri = next((u for u in source.uris if u.startswith(SUPPORTED_SCHEMES)), None)
        if rank is None or uri is None or _is_security_archive(uri):
            continue
        if best is None or rank < best[0]:
            best = (rank, source, uri)
    if best is None:
        raise ImageBuildError(
            f"no Debian archive entry (suite {suite!r} or another bare Debian suite, component "
            "'main', http/https/file URI) in the host's apt sources under /etc/apt; add one, "
            "or set SBX_DEBIAN_MIRROR to the archive URI"
        )
    _, source, uri = best
    return Mirror(uri=uri.rstrip("/"), keyring=source.signed_by)


def host_mirror(*, suite: str, etc_apt: Path = Path("/etc/apt")) -> Mirror:
    """The host's main Debian archive for `suite`, read now from its apt sources."""
    return pick_debian_mirror(read_host_sources(etc_apt), suite=suite)


def _rank(source: AptSource, suite: str) -> int | None:
    """0 for the wanted suite, 1 for another bare Debian suite, None to skip the entry."""
    if "main" not in source.components:
        return None
    if suite in source.suites:
        return 0
    if any(s in DEBIAN_SUITES for s in source.suites):
        return 1
    return None


def _is_security_archive(uri: str) -> bool:
    """The security archive has its own root (`.../debian-security`); it holds no base system."""
    return uri.rstrip("/").endswith("-security")


def _split_options(line: str) -> tuple[dict[str, str], str]:
    """Split `deb [a=b c=d] rest` into its options and the rest of the line."""
    match = re.match(r"^(\S+)\s+\[([^\]]*)\]\s*(.*)$", line)
    if match is None:
        return {}, line
    options: dict[str, str] = {}
    for item in match.group(2).split():
        key, _, value = item.partition("=")
        options[key.lower()] = value
    return options, f"{match.group(1)} {match.group(3)}"


def _stanzas(text: str) -> list[dict[str, str]]:
    """deb822 paragraphs as lower-cased field names to values (continuations joined)."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key: str | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif line[0] in " \t" and key is not None:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def _keyring_path(value: str | None) -> str | None:
    """A `Signed-By` value that names a keyring file; inline key blocks and fingerprints are not."""
    if not value:
        return None
    first = value.strip().split()[0]
    return first if first.startswith("/") else None


def _read(path: Path) -> str:
    """A sources file's text; an unreadable one is reported, not silently skipped."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ImageBuildError(f"cannot read apt sources file {path}: {exc.strerror}") from None
