"""Restore-ready containers: warm ones that import a released conversation's libraries too.

A restore loads a conversation's snapshot into a warm container, which has the
data stack (numpy, pandas) imported. A snapshot that holds a fitted
scikit-learn model or a figure then imports scikit-learn or pyplot while the
user waits: measured here, `import sklearn.ensemble` alone is 0.7 s of CPU
after pandas, 14 times a live question, and the first answer after the
restore waits for it.

So while released conversations wait whose snapshot had one of
`[restore] preimport` loaded (the dump reports which, see `snapshot_kernel`),
the pool keeps up to `[restore] ready` containers that import those modules
as well (`Pool.keep`), and such a conversation's next sandbox is taken from
them. They are kept only for conversations that may come back, and never
more than `ready` whatever their number: a host with a hundred released
conversations holds one or two such containers, not a hundred sandboxes.
When none is waiting, none is kept.

Only the policy's own limits and image are served (as the warm pool warms
only those); a conversation with tighter limits restores as before. The
module names come from the operator's configuration, never from a sandbox:
the dump's report only says which of them were loaded.
"""

from __future__ import annotations

import logging
import threading

from sbx.sandbox.errors import SandboxError
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool, PoolKey

logger = logging.getLogger(__name__)


class RestoreReady:
    """The released conversations that want a restore-ready container, and the pool's count.

    Thread-safe: idle releases (housekeeping) and restores (runs) call it at once.
    """

    def __init__(self, pool: Pool | None, *, image: str, limits: Limits,
                 modules: tuple[str, ...], most: int) -> None:
        self.key = PoolKey(image=image, limits=limits, also_import=modules)
        """What a restore-ready container is: the policy's limits, `modules` imported too."""
        self._pool = pool if modules and most > 0 else None
        self._most = most
        self._waiting: set[str] = set()
        self._lock = threading.Lock()

    def serves(self, image: str, limits: Limits) -> bool:
        """Whether a sandbox of `image` and `limits` can be a restore-ready container."""
        return self._pool is not None and (image, limits) == (self.key.image, self.key.limits)

    def wanted(self, loaded: tuple[str, ...]) -> bool:
        """Whether a snapshot that had `loaded` imported is restored in a restore-ready one."""
        return self._pool is not None and any(name in self.key.also_import for name in loaded)

    def released(self, owner: str) -> None:
        """`owner`'s sandbox was released with a snapshot that wants one: keep it ready."""
        with self._lock:
            if owner in self._waiting:
                return
            self._waiting.add(owner)
            count = len(self._waiting)
        self._keep(count)

    def back(self, owner: str) -> None:
        """`owner` opened its sandbox again, or is gone: it waits no longer."""
        with self._lock:
            if owner not in self._waiting:
                return
            self._waiting.discard(owner)
            count = len(self._waiting)
        self._keep(count)

    @property
    def waiting(self) -> int:
        """Released conversations that want a restore-ready container now."""
        with self._lock:
            return len(self._waiting)

    def _keep(self, waiting: int) -> None:
        """Tell the pool how many to keep; an engine that fails here only costs the speed-up."""
        if self._pool is None:
            return
        try:
            self._pool.keep(self.key, min(self._most, waiting))
        except SandboxError as exc:
            logger.warning("no restore-ready container kept: %s", exc)
