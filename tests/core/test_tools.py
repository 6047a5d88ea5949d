"""Tools from typed functions: schemas, validation, sync and async."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

import pytest
from pydantic import Field

from steerable import Runner, ScriptedModel, Spec, ToolCall, UsageError, tool
from steerable.models.scripted import call
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


@pytest.mark.parametrize("default_timeout", [None, 30.0])
async def test_a_tool_s_own_timeout_error_is_its_error_result_with_its_message(
    default_timeout: float | None,
) -> None:
    async def fetch() -> str:
        raise TimeoutError("the weather service did not answer in 2 s")

    result = await tool(fetch).run(ToolCall("c", "fetch", "{}"), default_timeout=default_timeout)
    assert result.is_error
    assert result.content == "TimeoutError: the weather service did not answer in 2 s"


async def test_only_the_tool_s_deadline_is_reported_as_a_timeout() -> None:
    @tool(timeout=0.01)
    async def slow() -> str:
        await asyncio.sleep(3600)
        return "never"

    result = await slow.run(ToolCall("c", "slow", "{}"))
    assert result.is_error and result.content == "the tool timed out after 0.01 s"


async def test_in_a_run_a_tool_s_own_timeout_error_does_not_fail_the_run() -> None:
    def fetch() -> str:
        """Its own network call timed out."""
        raise TimeoutError("upstream timed out")

    model = ScriptedModel([call("fetch"), "I could not fetch it"])
    result = await Runner.run(Spec(tools=[fetch]), "go", model)
    assert (result.reason, result.output) == ("completed", "I could not fetch it")
    (res,) = result.transcript[2].tool_results
    assert res.is_error and res.content == "TimeoutError: upstream timed out"
