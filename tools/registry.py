"""Declare tools: a plain typed function becomes a `Tool` with a strict JSON Schema.

The `@tool` decorator follows openai-agents' `function_schema.py` steps:

1. read the signature and the resolved type hints;
2. read the docstring: summary = description, `Args:` = parameter descriptions;
3. build a pydantic model with `create_model(f"{name}_args", ...)`, `extra="forbid"`;
4. ask pydantic for its JSON Schema and tighten it (`tools.schema`).

The same model validates the model's JSON arguments before the gate calls the
function, so the schema the model sees and the check it meets never drift.
A parameter annotated `ToolContext` is injected by the gate and left out of
the schema. A tool signals an error the model can fix by raising
`ToolFailure`; it may return `ToolReturn` to give the gate both the
observation text and a structured value.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import typing
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, create_model

from sbx.sandbox.result import ExecutionResult
from sbx.tools.context import ToolContext
from sbx.tools.observation_size import fit_text
from sbx.tools.schema import (
    is_strict_compatible,
    parse_docstring,
    strict_schema,
    without_keyword,
)

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolFailure(Exception):
    """Raised by a tool for a failure the model can act on; its message is the observation."""


class DuplicateToolError(ValueError):
    """Two tools registered under one name: the later would silently replace the first."""


def register(
    table: dict[str, Tool], tools: Iterable[Tool], *, replace: bool = False
) -> dict[str, Tool]:
    """Add `tools` to `table` (in order); a name already there is an error unless `replace`.

    `replace` is the explicit way to swap a tool for another of the same name
    (tests give `http_get` a resolver that maps names to loopback); two tools of
    one name within `tools` are an error either way.
    """
    added: set[str] = set()
    for item in tools:
        if item.name in added or (item.name in table and not replace):
            raise DuplicateToolError(f"two tools are registered under the name {item.name!r}")
        added.add(item.name)
        table[item.name] = item
    return table


@dataclass(kw_only=True, frozen=True)
class ToolReturn:
    """What a tool may return instead of a plain value, to control the observation exactly."""

    text: str
    """The observation the model receives."""
    value: object = None
    """A structured result kept for the caller, never sent as is."""
    execution: ExecutionResult | None = None
    """The sandbox's result, for a tool that ran code (`execute_python`)."""
    audit: Mapping[str, Any] = field(default_factory=dict)
    """Extra outcome fields for the audit record (exit code, artifacts, ...)."""


@dataclass(kw_only=True, frozen=True)
class Tool:
    """A callable the model may request, with the schema it sees and the model that checks it."""

    name: str
    """The name the model calls (`[A-Za-z0-9_-]{1,64}`, as the Chat Completions API requires)."""
    description: str
    """What the tool does and when to use it: the docstring's summary paragraph."""
    args_model: type[BaseModel]
    """Pydantic model of the arguments; validates the model's JSON and produces the schema."""
    fn: Callable[..., Any]
    """The function itself, called with validated arguments (and the context, if it asks)."""
    sequential: str | None = None
    """Tools sharing this key never run concurrently (`execute_python` uses "sandbox-session")."""
    context_param: str | None = None
    """Name of the parameter that receives the `ToolContext`, if the function declares one."""

    def openai_schema(self) -> dict[str, Any]:
        """Return the tool in the Chat Completions `tools` format, with closed parameters."""
        parameters, strict = _parameters(self.args_model)
        function: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": parameters,
        }
        if strict:
            function["strict"] = True
        return {"type": "function", "function": function}

    def parse_arguments(self, arguments: str) -> BaseModel:
        """Validate the model's JSON argument string (raises pydantic `ValidationError`)."""
        text = arguments.strip() or "{}"
        return self.args_model.model_validate_json(text)

    def invoke(self, args: BaseModel, context: ToolContext) -> Any:
        """Call the function with validated arguments (nested models stay model instances)."""
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        if self.context_param is not None:
            kwargs[self.context_param] = context
        return self.fn(**kwargs)


def _parameters(args_model: type[BaseModel]) -> tuple[dict[str, Any], bool]:
    """The closed JSON Schema of an arguments' model and whether strict mode takes it.

    Made once per model (a model is built once per tool function, `_described`);
    each caller gets its own copy to send.
    """
    found = _SCHEMAS.get(args_model)
    if found is None:
        parameters = strict_schema(args_model.model_json_schema())
        strict = is_strict_compatible(parameters)
        if strict:  # strict mode's schema subset has no minLength; the gate still enforces it
            parameters = without_keyword(parameters, "minLength")
        found = _SCHEMAS[args_model] = (parameters, strict)
    return copy.deepcopy(found[0]), found[1]


_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], tuple[dict[str, Any], bool]] = (
    weakref.WeakKeyDictionary())


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    fn: None = None, /, *, name: str | None = None, sequential: str | None = None
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    sequential: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a `Tool` from a typed function: `@tool` or `@tool(name=..., sequential=...)`.

    Raises `TypeError` at decoration time for what the model could never call
    correctly: a missing annotation, `*args`/`**kwargs`, a bad name.

    Arguments are validated strictly (`"5"` is not 5, `"true"` is not True: a model
    that sends the wrong type is told so rather than guessed for), and a required
    parameter annotated plain `str` must not be empty. A tool that accepts an empty
    string says so with its annotation, e.g. `Annotated[str, Field(min_length=0)]`.
    """

    def decorate(func: Callable[..., Any]) -> Tool:
        return build_tool(func, name=name, sequential=sequential)

    return decorate if fn is None else decorate(fn)


def build_tool(
    func: Callable[..., Any], *, name: str | None = None, sequential: str | None = None
) -> Tool:
    """The decorator's body, callable directly for functions made at run time (closures).

    The built-in tools are closures made again for every run; what describes one
    (its description, its arguments' model) depends only on its code, docstring
    and defaults, so it is built once per process and shared (`_described`).
    """
    tool_name = name or func.__name__
    if not _NAME.match(tool_name):
        raise TypeError(f"tool name {tool_name!r} must match [A-Za-z0-9_-]{{1,64}}")
    description, args_model, context_param = _described(func, tool_name)
    return Tool(
        name=tool_name,
        description=description,
        args_model=args_model,
        fn=func,
        sequential=sequential,
        context_param=context_param,
    )


_Described = tuple[str, type[BaseModel], str | None]
_DESCRIBED: dict[tuple[Any, ...], _Described] = {}
_DESCRIBED_MAX = 512
"""Distinct tool functions remembered (the built-ins and custom tools are a few dozen)."""


def _described(func: Callable[..., Any], tool_name: str) -> _Described:
    """(description, arguments' model, context parameter) of `func`, built once per key.

    Type hints are resolved from the function's module (every tool module uses
    postponed annotations), so the code object, docstring and defaults decide the
    result; a default whose `repr` hides its value only costs a rebuild.
    """
    code = getattr(func, "__code__", None)
    if code is None:  # a callable object: nothing stable to key it by
        return _describe(func, tool_name)
    key = (tool_name, code, func.__doc__, repr(getattr(func, "__defaults__", None)),
           repr(getattr(func, "__kwdefaults__", None)))
    found = _DESCRIBED.get(key)
    if found is None:
        found = _describe(func, tool_name)
        if len(_DESCRIBED) >= _DESCRIBED_MAX:
            _DESCRIBED.clear()
        _DESCRIBED[key] = found
    return found


def _describe(func: Callable[..., Any], tool_name: str) -> _Described:
    description, arg_docs = parse_docstring(func.__doc__)
    if not description:
        raise TypeError(f"tool {tool_name!r} needs a docstring (its summary is the description)")
    hints = typing.get_type_hints(func, include_extras=True)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {tool_name!r}: *args/**kwargs cannot be described to a model")
        if param.name not in hints:
            raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation")
        if hints[param.name] is ToolContext:
            context_param = param.name
            continue
        required = param.default is param.empty
        default = ... if required else param.default
        doc = arg_docs.get(param.name)
        least = 1 if required and hints[param.name] is str else None
        fields[param.name] = (hints[param.name], Field(default, description=doc, min_length=least))
    args_model: type[BaseModel] = create_model(
        f"{tool_name}_args", __config__=ConfigDict(extra="forbid", strict=True), **fields
    )
    return description, args_model, context_param


def render_value(value: Any) -> str:
    """Render a plain tool return value as observation text: strings as is, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(value, default=str, ensure_ascii=False)


def unpack_return(
    returned: object, max_chars: int | None = None
) -> tuple[str, Mapping[str, Any]]:
    """(observation text, extra audit fields) from a tool's return value.

    The text is bounded to `max_chars` (the model's observation size, head and tail).
    """
    if isinstance(returned, ToolReturn):
        return fit_text(returned.text, max_chars), returned.audit
    return fit_text(render_value(returned), max_chars), {}
