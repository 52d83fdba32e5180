"""Errors an operator must fix. Each message is one line that says what to do.

`SbxError` is the root of every error sbx raises for an operator to act on,
whichever layer raises it (the sandbox, the gate and its audit log, the policy,
the app's settings, transcripts, the store, the image builder); `sbx.agent`
hands it out. It sits here, in the lowest layer, so that every layer's errors
can derive from it without importing a layer above. Hierarchy here:

    SbxError
    └── SandboxError
        ├── DockerUnavailable   engine not installed, not running, or not reachable
        ├── ImageMissing        the sandbox image has not been built
        ├── RuntimeUnavailable  the requested OCI runtime is not registered
        ├── InvalidInput        unreadable data path, code not UTF-8 or too large
        ├── SandboxBroken       the in-container runner misbehaved (protocol, crash at start)
        └── HostBusy            the host-wide cap was reached and the wait timed out

Errors in the executed code are never raised: they are `ExecutionResult` fields.
"""

from __future__ import annotations


class SbxError(Exception):
    """The root of sbx's errors: something an operator (not the model) has to act on."""


class SandboxError(SbxError):
    """Base class: an error the operator (not the model) has to act on."""


class DockerUnavailable(SandboxError):
    """The Docker engine cannot be reached."""


class ImageMissing(SandboxError):
    """The sandbox image does not exist locally (we never pull)."""


class RuntimeUnavailable(SandboxError):
    """The requested OCI runtime (e.g. runsc) is not registered with the engine."""


class InvalidInput(SandboxError):
    """The caller passed something we refuse: bad data path, non-UTF-8 or oversized code."""


class SandboxBroken(SandboxError):
    """The container or its runner did not behave as the protocol requires."""


class HostBusy(SandboxError):
    """The host-wide sandbox cap stayed full for longer than the caller would wait."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text, for one-line operator messages."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
