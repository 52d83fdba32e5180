"""`Closing`: `with` support for objects whose whole clean-up is `close()`."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closing:
    """Mixin: `with obj:` calls `obj.close()` on the way out, Ctrl-C and errors included."""

    def close(self) -> None:
        """Release what the object holds (subclasses implement it)."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
