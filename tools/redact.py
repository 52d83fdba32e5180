"""Keep secrets out of the audit log: the one place where full payloads are written.

Two rules, applied to every string and key of a record before it is sealed:
the *values* of configured secrets (the API key in use, the environment
variables the policy names) are replaced wherever they appear, also
URL-encoded; and the values of arguments with a secret-looking *name*
(`api_key`, `password`, ...) are replaced whole. Strings that look like an
OpenAI-style key (`sk-...`) are replaced too. Values shorter than 8
characters are not treated as secrets: replacing "1" everywhere would make
the log useless and protect nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")


@dataclass(frozen=True, kw_only=True)
class Redactor:
    """Replaces secret values and secret-named fields in a JSON-like structure."""

    secrets: tuple[str, ...] = ()
    """Literal secret values (and their URL-encoded forms), longest first."""
    fields: frozenset[str] = field(default_factory=frozenset)
    """Lower-cased field names whose values are always redacted."""

    @classmethod
    def build(
        cls,
        *,
        secret_values: Iterable[str | None] = (),
        secret_env: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
        secret_fields: Iterable[str] = (),
    ) -> Redactor:
        """Collect secrets from explicit values and from the named environment variables."""
        env = environ or {}
        values = {v for v in secret_values if v} | {env[n] for n in secret_env if env.get(n)}
        expanded = {form for value in values for form in (value, quote(value, safe=""))}
        kept = sorted((v for v in expanded if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True)
        return cls(secrets=tuple(kept), fields=frozenset(f.lower() for f in secret_fields))

    def text(self, value: str) -> str:
        """Redact one string."""
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return _KEY_LIKE.sub(REDACTED, value)

    def secret_field(self, name: str) -> bool:
        """Whether a field called `name` has its whole value redacted."""
        return name.lower() in self.fields

    def redact(self, value: Any) -> Any:
        """Return a redacted copy of a JSON-like value (dicts, lists, strings, scalars)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                name = self.text(str(key))
                out[name] = REDACTED if self.secret_field(str(key)) else self.redact(item)
            return out
        if isinstance(value, list | tuple):
            return [self.redact(item) for item in value]
        return value
