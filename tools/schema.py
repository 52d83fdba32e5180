"""Turn a function signature's pydantic model into the strict JSON Schema the model sees.

Pydantic writes the schema (`model_json_schema()`, a public API); this
module only tightens it: every object gets `additionalProperties: false` and a
`required` list, titles are dropped (they cost tokens and say nothing the
property name does not), and `is_strict_compatible` tells whether the result
also meets OpenAI's strict mode (every property required, no defaults), in
which case the tool advertises `"strict": true`.

It also reads Google-style docstrings: the text before `Args:` becomes the
tool's description and each `Args:` entry becomes a parameter description.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Return (description, {arg name: description}) from a Google-style docstring.

    The description is every paragraph before the first section (`Args:`),
    each paragraph's lines joined, paragraphs separated by a blank line.
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    paragraphs: list[list[str]] = [[]]
    for line in lines:
        if _SECTION.match(line.strip()):
            break
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    description = "\n\n".join(" ".join(p) for p in paragraphs if p)
    return description, _parse_args_section(lines)


def _parse_args_section(lines: list[str]) -> dict[str, str]:
    """Collect the `Args:` entries, joining indented continuation lines."""
    args: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        section = _SECTION.match(stripped)
        if section:
            in_args = section.group(1) in ("Args", "Arguments", "Parameters")
            current = None
            continue
        if not in_args or not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(stripped)
        if match and indent <= 4:
            current = match.group(1).lstrip("*")
            args[current] = match.group(2).strip()
        elif current is not None:
            args[current] = f"{args[current]} {stripped}".strip()
    return args


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of a pydantic JSON Schema with closed objects and without titles."""
    tightened: dict[str, Any] = _tighten(schema)
    return tightened


def _tighten(node: Any) -> Any:
    """Walk the schema: titles go, objects close; property *names* are never touched."""
    if isinstance(node, list):
        return [_tighten(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: _tighten(sub) for name, sub in value.items()}
        else:
            out[key] = _tighten(value)
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("properties", {})
        out["additionalProperties"] = False
        out.setdefault("required", [])
    return out


def is_strict_compatible(schema: Any) -> bool:
    """True when every object requires all its properties and no default appears anywhere."""
    if isinstance(schema, list):
        return all(is_strict_compatible(item) for item in schema)
    if not isinstance(schema, dict):
        return True
    if "default" in schema:
        return False
    props = schema.get("properties")
    if isinstance(props, dict) and set(schema.get("required", [])) != set(props):
        return False
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            if not all(is_strict_compatible(sub) for sub in value.values()):
                return False
        elif key not in ("enum", "const", "required") and not is_strict_compatible(value):
            return False
    return True


def without_keyword(node: Any, keyword: str) -> Any:
    """A copy of a schema without `keyword` anywhere (property *names* are kept)."""
    if isinstance(node, list):
        return [without_keyword(item, keyword) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: without_keyword(sub, keyword) for name, sub in value.items()}
        elif key != keyword:
            out[key] = without_keyword(value, keyword)
    return out
