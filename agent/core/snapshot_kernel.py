"""The code a snapshot runs inside the sandbox: its text is sent as a cell, never run on the host.

`sbx.agent.core.snapshot` reads this file as text and sends it to the
conversation's kernel through the normal execution path, with the user's
namespace and a few arguments. So the pickling happens where the objects
live, with the image's own libraries (cloudpickle, locked in the image), and
the host only ever sees opaque bytes. Loading happens in the same place, in
a later sandbox of the same conversation: `pickle.loads` on bytes the
conversation's own code could have shaped runs only where that code may run
anyway.

The file a dump writes holds two parts, each checked by the load:

    MAGIC, 8-byte length, the namespace (cloudpickle, protocol 5),
    then the files (a plain pickle of `[(root, relative path, mode, bytes)]`).

Files are those the cells wrote in `/work` (the working directory), `/home/user`
(E2B's home), `/tmp`
(matplotlib's cache excepted) and `/output` (copied out after every cell
already, but a later cell may read one back: the load writes them again, and
the host settles the copies as it does a replay's). Only regular files and
directories are kept; links and special files are skipped.
"""

from __future__ import annotations

from typing import Any

MAGIC = b"SBXSNAP1"
ROOTS = ("/work", "/home/user", "/tmp", "/output")
SKIPPED = ("/tmp/matplotlib",)
REPORT = "SBX-SNAPSHOT "
"""How the one line of JSON this code prints begins (the host reads it from stdout)."""


def _files(limit: int, target: str) -> tuple[list[tuple[str, str, int, bytes]], int]:
    """Regular files under `ROOTS` (links and special files skipped) and their bytes in all."""
    import os
    import stat

    found: list[tuple[str, str, int, bytes]] = []
    total = 0
    for root in ROOTS:
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if os.path.join(folder, d) not in SKIPPED]
            for name in names:
                path = os.path.join(folder, name)
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode) or path == target:
                    continue
                total += info.st_size
                if total > limit:
                    return found, total
                with open(path, "rb") as handle:
                    found.append((root, os.path.relpath(path, root), info.st_mode & 0o777,
                                  handle.read()))
    return found, total


def _held(namespace: dict[str, Any]) -> tuple[bytes, list[str]]:
    """The namespace's values pickled together (shared objects stay shared), and what was not.

    Tried whole first; if anything fails, each name is tried alone and the
    ones that cannot be pickled are left out (the host replays their cells).
    """
    import cloudpickle  # type: ignore[import-not-found, unused-ignore]

    names = {k: v for k, v in namespace.items() if not (k.startswith("__") and k.endswith("__"))}
    try:
        return cloudpickle.dumps(names, protocol=5), []
    except Exception:
        pass
    unheld: list[str] = []
    for name, value in list(names.items()):
        try:
            cloudpickle.dumps(value, protocol=5)
        except Exception:
            unheld.append(name)
            del names[name]
    return cloudpickle.dumps(names, protocol=5), unheld


def dump(namespace: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Write the snapshot to `args["target"]` unless it passes `args["limit"]` bytes."""
    import pickle

    limit = int(args["limit"])
    state, unheld = _held(namespace)
    files, size = _files(limit, args["target"])
    if len(state) + size > limit:
        return {"ok": False, "reason": f"the state is more than {limit} bytes", "unheld": unheld}
    blob = pickle.dumps(files, protocol=5)
    with open(args["target"], "wb") as handle:
        handle.write(MAGIC + len(state).to_bytes(8, "big"))
        handle.write(state)
        handle.write(blob)
    return {"ok": True, "unheld": unheld, "names": len(namespace) - len(unheld),
            "files": len(files), "loaded": _loaded(args.get("modules", []))}


def _loaded(modules: list[str]) -> list[str]:
    """Those of `modules` whose top-level package this interpreter has imported.

    The package, not the module itself: a conversation that fitted a linear model
    restores faster in a container that imported `sklearn.ensemble` too (the same
    package's base, utilities and scipy).
    """
    import sys

    return [name for name in modules if name.split(".")[0] in sys.modules]


def load(namespace: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Check the snapshot's digest, put its files back, then its values into `namespace`."""
    import hashlib
    import pickle

    with open(args["source"], "rb") as handle:
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != args["sha256"]:
        return {"ok": False, "reason": "the snapshot does not match its digest"}
    if not data.startswith(MAGIC):
        return {"ok": False, "reason": "not a snapshot"}
    start = len(MAGIC) + 8
    end = start + int.from_bytes(data[len(MAGIC):start], "big")
    _restore_files(pickle.loads(data[end:]))
    values = pickle.loads(data[start:end])
    namespace.update(_rebound(values, namespace))
    return {"ok": True, "names": len(values)}


def _restore_files(files: list[tuple[str, str, int, bytes]]) -> None:
    """Write each file back below its root; a path that leaves its root is skipped."""
    import os

    for root, relative, mode, content in files:
        path = os.path.normpath(os.path.join(root, relative))
        if root not in ROOTS or not path.startswith(root + "/"):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content)
        os.chmod(path, mode)


def _rebound(values: dict[str, Any], namespace: dict[str, Any]) -> dict[str, Any]:
    """Functions the cells defined, bound to the namespace again (not to a copy of it).

    cloudpickle gives a function its own globals; a cell's function must see
    the variables as they are now, as it did before the snapshot.
    """
    import types

    rebound: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(value, types.FunctionType) and value.__module__ == "__main__":
            fresh = types.FunctionType(value.__code__, namespace, value.__name__,
                                       value.__defaults__, value.__closure__)
            fresh.__kwdefaults__ = value.__kwdefaults__
            fresh.__dict__.update(value.__dict__)
            fresh.__qualname__ = value.__qualname__
            fresh.__doc__ = value.__doc__
            value = fresh
        rebound[name] = value
    return rebound


def _main(namespace: dict[str, Any], args: dict[str, Any]) -> None:
    import json

    try:
        outcome = dump(namespace, args) if args["action"] == "dump" else load(namespace, args)
    except Exception as exc:  # whatever went wrong is reported; the host falls back to replay
        outcome = {"ok": False, "reason": f"{type(exc).__name__}: {exc}"[:300]}
    print(REPORT + json.dumps(outcome))


if __name__ == "sbx_snapshot":  # run as a cell by the host (see the module)
    _main(globals()["NAMESPACE"], globals()["ARGS"])
