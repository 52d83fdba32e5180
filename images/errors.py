"""The one error the image builder raises: something the operator must fix, said in one line.

It lives in its own module so that every builder step (`apt_source`, `wheels`,
`rootfs`, `engine`) can raise it without importing the orchestrator in `build`.
"""

from __future__ import annotations

from sbx.sandbox.errors import SbxError


class ImageBuildError(SbxError):
    """The image could not be built; the message is one line that says what to do."""
