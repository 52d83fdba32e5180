"""What every check of `sbx selftest` and `sbx doctor` shares: one result type, one probe."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import new_run_id, run_fresh
from sbx.sandbox.spec import SessionSpec


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of a report: `sbx selftest`'s containment battery or `sbx doctor`'s host check."""

    name: str
    """Short id of the check, e.g. `network.interfaces` or `image`."""
    passed: bool
    """Whether the control held (or the host is ready)."""
    happened: str
    """What was observed."""
    tried: str = ""
    """What the probe attempted (empty when the check only looked)."""
    fix: str = ""
    """What to do when it failed."""
    limit: bool = False
    """Passed only as far as this runtime allows: a known limit (security.md names it), shown
    as `limit`, not `pass`, so an operator sees it without the battery failing."""


@dataclass(kw_only=True)
class Probe:
    """What the checks share: the engine, the configuration under test, a scratch directory."""

    engine: Engine
    limits: Limits
    image: str
    scratch: Path
    egress: bool = True
    """Try real connections and DNS (off: list interfaces only, send nothing)."""

    def fresh(self, code: str, limits: Limits | None = None) -> ExecutionResult:
        """Run `code` in a new container with the configured (or given) limits."""
        return run_fresh(
            code,
            SessionSpec(
                limits=limits or self.limits,
                image=self.image,
                output_dir=self.scratch / new_run_id(),
            ),
            engine=self.engine,
        )

    def facts(self, code: str) -> dict[str, object]:
        """Run a probe that prints one JSON object, and parse it (empty dict if it did not)."""
        result = self.fresh(code)
        try:
            parsed = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": (result.error.message if result.error else result.stderr)[:200]}
        return parsed if isinstance(parsed, dict) else {}
