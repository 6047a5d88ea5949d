"""A structured output under the service is the turn's answer as JSON, not a repr."""

from __future__ import annotations

import json

from pydantic import BaseModel
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from steerable.integrations.pydantic_ai import PydanticAIAgent
from steerable.service import Service
from steerable.stores.memory import MemoryStore


class Forecast(BaseModel):
    city: str
    celsius: int


async def test_a_structured_output_is_the_answer_as_json() -> None:
    model = TestModel(custom_output_args={"city": "Rome", "celsius": 24})
    agent = Agent(model, output_type=Forecast)
    service = Service(MemoryStore(), PydanticAIAgent(agent), poll=0.05)
    async with service.serving():
        sent = await service.send("s", "weather in Rome?")
        done = await service.wait("s", sent.id, seconds=10)
    assert done is not None and done.state == "completed"
    assert json.loads(done.text or "") == {"city": "Rome", "celsius": 24}
