"""Tools from typed functions: schemas, validation, sync and async."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import Field

from steerable import ToolCall, UsageError, tool
from steerable.tools import as_tools


def weather(
    city: Annotated[str, Field(description="The city, in English")],
    unit: Literal["celsius", "fahrenheit"] = "celsius",
    days: int = 1,
) -> dict[str, object]:
    """The forecast for a city.

    More detail that the model does not need.
    """
    return {"city": city, "unit": unit, "days": days}


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    t = tool(weather)
    assert t.name == "weather"
    assert t.description == "The forecast for a city."
    assert t.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city, in English"},
            "unit": {"enum": ["celsius", "fahrenheit"], "type": "string", "default": "celsius"},
            "days": {"type": "integer", "default": 1},
        },
        "required": ["city"],
        "additionalProperties": False,
    }


async def test_arguments_are_validated_and_the_result_is_json_text() -> None:
    t = tool(weather)
    ok = await t.run(ToolCall("c1", "weather", '{"city": "Oslo", "days": 3}'))
    assert not ok.is_error
    assert ok.content == '{"city":"Oslo","unit":"celsius","days":3}'
    bad = await t.run(ToolCall("c2", "weather", '{"city": "Oslo", "unit": "kelvin"}'))
    assert bad.is_error and "unit" in bad.content


async def test_a_decorated_async_tool_with_options() -> None:
    @tool(name="lookup", description="Find it.", timeout=5)
    async def find(q: str) -> str:
        return q.upper()

    assert (find.name, find.description, find.timeout) == ("lookup", "Find it.", 5)
    result = await find.run(ToolCall("c", "lookup", '{"q": "abc"}'))
    assert result.content == "ABC" and result.call_id == "c"


async def test_empty_arguments_mean_no_arguments() -> None:
    def now() -> str:
        return "noon"

    assert (await tool(now).run(ToolCall("c", "now", ""))).content == "noon"


def test_functions_the_model_cannot_call_are_refused() -> None:
    def star(*args: int) -> int:
        return 0

    with pytest.raises(UsageError, match=r"\*args"):
        tool(star)
    with pytest.raises(UsageError, match="share the names"):
        as_tools([weather, weather])
