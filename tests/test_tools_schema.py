"""Acceptance 1: the tool list is valid for the openai SDK and matches hand-checked JSON Schema."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Literal

import pytest
from openai.types.chat import ChatCompletionToolParam
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from sbx.tools.context import ToolContext
from sbx.tools.registry import tool
from sbx.tools.schema import parse_docstring
from tools_support import make_gate, policy_from


class Unit(StrEnum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Location(BaseModel):
    """Where to look."""

    model_config = ConfigDict(extra="forbid")

    city: str
    country: str | None = None


@tool
def weather(
    location: Location, unit: Unit, days: Literal[1, 3, 7] = 1, note: str | None = None
) -> str:
    """Forecast the weather somewhere.

    Args:
        location: The place.
        unit: Temperature unit.
        days: How many days ahead.
        note: Free text, kept in the log.
    """
    return f"{location.city} {unit.value} {days} {note}"


EXPECTED_WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Forecast the weather somewhere.",
        "parameters": {
            "$defs": {
                "Location": {
                    "description": "Where to look.",
                    "type": "object",
                    "properties": {
                        "city": {"type": "string"},
                        "country": {
                            "anyOf": [{"type": "string"}, {"type": "null"}],
                            "default": None,
                        },
                    },
                    "required": ["city"],
                    "additionalProperties": False,
                },
                "Unit": {"enum": ["celsius", "fahrenheit"], "type": "string"},
            },
            "type": "object",
            "properties": {
                "location": {"$ref": "#/$defs/Location", "description": "The place."},
                "unit": {"$ref": "#/$defs/Unit", "description": "Temperature unit."},
                "days": {
                    "default": 1,
                    "description": "How many days ahead.",
                    "enum": [1, 3, 7],
                    "type": "integer",
                },
                "note": {
                    "anyOf": [{"type": "string"}, {"type": "null"}],
                    "default": None,
                    "description": "Free text, kept in the log.",
                },
            },
            "required": ["location", "unit"],
            "additionalProperties": False,
        },
    },
}


def test_schema_matches_hand_checked_json_schema() -> None:
    assert weather.openai_schema() == EXPECTED_WEATHER


def test_schema_is_accepted_by_openai_sdk_types(tmp_path) -> None:
    adapter = TypeAdapter(list[ChatCompletionToolParam])
    policy = policy_from(
        {
            "tools": {
                "calculate": {"enabled": True},
                "list_data_files": {"enabled": True},
                "preview_data_file": {"enabled": True},
                "http_get": {"enabled": True, "allowed_domains": ["example.com"]},
                "custom": {"weather": {"enabled": True}},
            }
        }
    )
    gate, _ = make_gate(tmp_path, policy, extra_tools=[weather])
    schemas = gate.schemas()
    validated = adapter.validate_python(schemas)
    assert [s["function"]["name"] for s in validated] == [
        "calculate",
        "list_data_files",
        "preview_data_file",
        "http_get",
        "weather",
    ]
    assert json.loads(json.dumps(schemas)) == schemas  # plain JSON, as sent on the wire
    for schema in schemas:
        assert schema["function"]["parameters"]["additionalProperties"] is False
    with pytest.raises(ValidationError) as info:  # the adapter has teeth: a nameless function
        adapter.validate_python([{"type": "function", "function": {"description": "x"}}])
    assert [(e["type"], e["loc"]) for e in info.value.errors()] == [
        ("missing", (0, "function", "name"))
    ]


def test_all_required_tool_claims_strict_mode_and_context_is_hidden() -> None:
    @tool(name="lookup", sequential="db")
    def lookup_fn(customer_id: int, ctx: ToolContext) -> str:
        """Look a customer up.

        Args:
            customer_id: The id.
            ctx: Injected.
        """
        return str(customer_id)

    schema = lookup_fn.openai_schema()
    assert schema["function"]["strict"] is True
    assert schema["function"]["parameters"] == {
        "type": "object",
        "properties": {"customer_id": {"type": "integer", "description": "The id."}},
        "required": ["customer_id"],
        "additionalProperties": False,
    }
    assert lookup_fn.sequential == "db"
    assert lookup_fn.context_param == "ctx"


def test_arguments_validated_with_the_same_model() -> None:
    args = weather.parse_arguments('{"location": {"city": "Oslo"}, "unit": "celsius", "days": 3}')
    assert weather.invoke(args, ToolContext(run_id="r", runner=None)) == "Oslo celsius 3 None"
    for arguments, (kind, where, message) in [
        ('{"location": {"city": "Oslo"}, "unit": "kelvin"}',
         ("enum", ("unit",), "Input should be 'celsius' or 'fahrenheit'")),
        ('{"location": {"city": "Oslo"}, "unit": "celsius", "extra": 1}',
         ("extra_forbidden", ("extra",), "Extra inputs are not permitted")),
        ("{not json", ("json_invalid", (), "Invalid JSON: key must be a string")),
    ]:
        with pytest.raises(ValidationError) as info:
            weather.parse_arguments(arguments)
        (error,) = info.value.errors()
        assert (error["type"], error["loc"]) == (kind, where)
        assert error["msg"].startswith(message)


def test_decorator_rejects_what_a_model_could_not_call() -> None:
    def untyped(x):
        """Doc."""

    def no_doc(x: int) -> None:
        pass

    def star(*args: int) -> None:
        """Doc."""

    for fn, message in [
        (untyped, "tool 'untyped': parameter 'x' needs a type annotation"),
        (no_doc, "tool 'no_doc' needs a docstring (its summary is the description)"),
        (star, "tool 'star': *args/**kwargs cannot be described to a model"),
    ]:
        with pytest.raises(TypeError) as info:
            tool(fn)
        assert str(info.value) == message
    with pytest.raises(TypeError) as info:
        tool(name="bad name!")(no_doc)
    assert str(info.value) == "tool name 'bad name!' must match [A-Za-z0-9_-]{1,64}"


def test_docstring_parser_joins_paragraphs_and_continuations() -> None:
    description, args = parse_docstring(
        """Summary line
        continues here.

        Second paragraph.

        Args:
            a: First
                continued.
            b (int): Second.

        Returns:
            Nothing.
        """
    )
    assert description == "Summary line continues here.\n\nSecond paragraph."
    assert args == {"a": "First continued.", "b": "Second."}
