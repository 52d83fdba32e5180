"""`[pool]`: how many warm containers the application core keeps, and how far demand may grow it.

Read once by `sbx.agent.core.config` and turned into the sandbox layer's
`PoolConfig` by `App.open` (`pool_config`). The defaults keep no warm container (every
conversation creates its own, as before); with `max_size` the pool's size
follows demand (`sbx.sandbox.pool_demand`), within `memory_budget` and the
host's caps (`SBX_MAX_SANDBOXES`, `SBX_MAX_MEMORY`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sbx.tools.policy import Bytes, Seconds, Wait


class PoolSettings(BaseModel):
    """The operator's warm-pool knobs (`[pool]`); no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    size: int = Field(default=0, ge=0, le=1024)
    """Warm containers kept ready with no demand (with `max_size` 0: always exactly this many)."""
    max_size: int = Field(default=0, ge=0, le=1024)
    """Most warm containers when the size follows demand: leases taken in about the last
    `window`, plus (`sbx serve`) open conversations that hold no sandbox; 0: a fixed size."""
    window: Seconds = Field(default=60.0, gt=0, le=86_400)
    """How far back arrivals count (the decayed rate's time constant), and so how long the
    pool stays grown after a burst before idle containers are removed."""
    refill_delay: Wait = Field(default=2.0, le=60)
    """How long a refill may wait after a take while the next arrival is still served warm
    or unlikely that soon, so it does not compete with the taker's first questions; 0: at
    once."""
    memory_budget: Bytes = 2 * 1024**3
    """Bytes of memory limits (`[sandbox] memory` each) the warm containers reserve at most
    together; the host's caps bound them too."""

    @property
    def keeps_warm(self) -> bool:
        """Whether any container is kept warm at all (a key to warm is needed)."""
        return self.size > 0 or self.max_size > 0
