"""What several core tests share: a model whose request never ends."""

from __future__ import annotations

import asyncio

from steerable import ModelRequest, ScriptedModel


def hanging_model() -> tuple[ScriptedModel, asyncio.Event]:
    """A model whose first request waits forever, and the event set once it is under way."""
    entered = asyncio.Event()

    async def hang(request: ModelRequest) -> str:
        entered.set()
        await asyncio.sleep(3600)
        return "never"

    return ScriptedModel([hang]), entered
