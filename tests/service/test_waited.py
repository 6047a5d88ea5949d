"""The replica's waits end on a cancellation that comes as their event is set.

``asyncio.wait_for`` on Python 3.11 returns instead of raising when its task is cancelled
in the loop iteration that sets the event it waits for: the replica's claim loop, around
such a wait, then never ended, and a Service's ``serving()`` exit waited for it forever (a
LangGraph turn whose tool raised hung its test one run in twenty: the failed turn's end
woke the loop as the exit cancelled it).
"""

from __future__ import annotations

import asyncio

import pytest

from steerable.service._replica import waited


async def test_a_cancel_as_the_event_is_set_is_raised() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(waited(event, 10))
    await asyncio.sleep(0)  # the task waits on the event
    event.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_it_returns_when_the_event_is_set_or_the_time_is_up() -> None:
    event = asyncio.Event()
    await waited(event, 0.01)  # no event: the time runs out, no TimeoutError
    event.set()
    await waited(event, 10)  # returns at once
