"""The session side of a framework's run: what is stored so far, and the steers it took.

A framework's integration calls :meth:`Steps.step` where that framework builds a model
request: one atomic store call stores what the run added since the last step and takes the
steers waiting (up to the turn's cap), recorded right after it. :meth:`Steps.save` stores
without taking, for the end of a run (a steer that comes while the model writes its final
answer stays in the store for the next turn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, TypeVar

import pydantic_core

from steerable.messages import Message
from steerable.session import Session
from steerable.store import check_count

if TYPE_CHECKING:
    from steerable.service.agent import Turn

T = TypeVar("T")


class Steps:
    """A framework run's steps against ``session``, whose transcript is ``stored``.

    ``stored`` is what the store holds (or what the first save must find there: the
    session reads it then and refuses a transcript that does not start with it).
    ``steers`` is how many steers the run may still take.
    """

    __slots__ = ("session", "steers_left", "stored", "taken")

    def __init__(self, session: Session, stored: Sequence[Message] = (), *, steers: int = 16):
        self.session = session
        self.stored: list[Message] = list(stored)
        self.steers_left = check_count(steers, "steers")
        self.taken: list[Message] = []

    def __repr__(self) -> str:
        return f"Steps({self.session!r}, stored={len(self.stored)}, taken={len(self.taken)})"

    async def step(self, new: Sequence[Message] = ()) -> list[Message]:
        """Store ``new`` after what is stored and take the waiting steers; one atomic call.

        Returns the steered user messages taken (already recorded after ``new``), in order.
        """
        return await self._save(new, self.steers_left)

    async def save(self, new: Sequence[Message] = ()) -> None:
        """Store ``new`` after what is stored, taking no steer."""
        await self._save(new, 0)

    async def _save(self, new: Sequence[Message], take: int) -> list[Message]:
        self.stored.extend(new)
        try:
            taken = await self.session.save(self.stored, take=take)
        except BaseException:
            del self.stored[len(self.stored) - len(new) :]
            raise
        self.stored.extend(taken)
        self.taken.extend(taken)
        self.steers_left -= len(taken)
        return taken


def answer_text(output: object) -> str:
    """A run's final output as a turn's answer: a str as it is, anything else as JSON.

    A structured output (a Pydantic model, a dataclass, a dict) becomes its JSON text, so a
    client reads the answer rather than a Python ``repr``; what JSON cannot hold is ``str``'d.
    """
    if isinstance(output, str):
        return output
    try:
        return pydantic_core.to_json(output).decode()
    except pydantic_core.PydanticSerializationError:
        return str(output)


async def until_stopped(turn: Turn, run: Awaitable[T]) -> tuple[T | None, bool]:
    """Await ``run``; cancel it once ``turn`` is asked to stop.

    Returns ``(result, False)`` when the run ended on its own, ``(None, True)`` when the
    stop came first. An exception of the run propagates.
    """
    task = asyncio.ensure_future(run)
    stop = asyncio.ensure_future(turn.stopped())
    try:
        await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        stop.cancel()
    if task.done():
        return task.result(), False
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # the caller itself is cancelled while the run winds down: pass it on
    return None, True
