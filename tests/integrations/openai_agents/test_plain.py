"""A SteerableSession as the SDK's session alone: what ``SQLiteSession`` users rely on.

``Runner.run(agent, "...", session=SteerableSession(...))`` stores each batch the runner
hands over before ``add_items`` returns, durable and visible to another process; direct
``add_items`` too, in call order however many run at once, and after another writer's.
``session_settings`` is the SDK's, ``pop_item`` and ``clear_session`` cut and forget the
stored session, refused while a service turn runs on it. On SQLite and Postgres.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from agents import Agent, Runner, function_tool
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call

from steerable import InvalidMessage, SessionBusy, Store, UsageError, open_session
from steerable.integrations.openai_agents import OpenAIAgentsAgent, SteerableSession
from steerable.service import Service
from steerable.stores.memory import MemoryStore
from tests.integrations.openai_agents.support import calls_then_answer, kinds, stored_items
from tests.integrations.openai_agents.test_writes import CountingStore

# Each message's items, as to_items rebuilds them, without importing the SDK (slow to load).
_READ_FROM_ANOTHER_PROCESS = """
import asyncio, json, sys
from steerable import open_session
from steerable.stores.url import open_url

def items(m):
    records = [json.loads(p.data) for p in m.natives("openai-agents")]
    return records or [{"role": m.role, "content": m.text}]

async def main() -> None:
    async with open_url(sys.argv[1]) as store:
        messages = await open_session("s", store).messages()
    print(json.dumps([item for m in messages for item in items(m)]))

asyncio.run(main())
"""


async def _read_from_another_process(store_url: str) -> list[str]:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _READ_FROM_ANOTHER_PROCESS,
        store_url,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await child.communicate()
    assert child.returncode == 0
    return kinds(json.loads(out))


def _user(text: object) -> Any:
    return {"role": "user", "content": text}


async def _items(session: SteerableSession, limit: int | None = None) -> list[Any]:
    """``get_items`` as plain dicts (the SDK's item type is a union of TypedDicts)."""
    return list(await session.get_items(limit))


async def _contents(session: SteerableSession, limit: int | None = None) -> list[Any]:
    return [item["content"] for item in await _items(session, limit)]


async def test_a_run_given_only_the_session_stores_each_batch_as_it_is_handed_over(
    store_url: str, store: Store
) -> None:
    seen: list[list[str]] = []

    @function_tool
    async def look(q: str) -> str:
        """Look something up (another process reads the session meanwhile)."""
        seen.append(await _read_from_another_process(store_url))
        return f"found {q}"

    model = ScriptedModel(calls_then_answer("x"))
    agent = Agent(name="a", model=model, tools=[look])
    result = await Runner.run(agent, "hi", session=SteerableSession(open_session("s", store)))
    assert result.final_output == "done"
    assert seen == [["user:hi"]]  # the input, before the model was asked
    done = ["user:hi", "function_call", "function_call_output", "message"]
    assert await _read_from_another_process(store_url) == done


async def test_a_direct_add_items_is_stored_before_it_returns(store_url: str, store: Store) -> None:
    session = SteerableSession(open_session("s", store))
    await session.add_items([_user("one")])
    await session.add_items([_user("two")])
    assert await _read_from_another_process(store_url) == ["user:one", "user:two"]


async def test_ten_add_items_at_once_keep_all_ten_in_call_order(store: Store) -> None:
    session = SteerableSession(open_session("s", store))
    await asyncio.gather(*(session.add_items([_user(f"m{n}")]) for n in range(10)))
    fresh = SteerableSession(open_session("s", store))
    assert await _contents(fresh) == [f"m{n}" for n in range(10)]


async def test_two_objects_on_one_session_both_append(store: Store) -> None:
    first, second = (SteerableSession(open_session("s", store)) for _ in range(2))
    await first.get_items()
    await second.get_items()  # both have read the empty session
    await first.add_items([_user("from first")])
    await second.add_items([_user("from second")])  # behind the first: read, then appended
    await first.add_items([_user("first again")])
    fresh = SteerableSession(open_session("s", store))
    texts = await _contents(fresh)
    assert texts == ["from first", "from second", "first again"]


async def test_session_settings_are_the_sdks_and_get_items_honours_their_limit(
    store: Store,
) -> None:
    base = open_session("s", store)
    assert SteerableSession(base).session_settings == SessionSettings()
    session = SteerableSession(base, session_settings={"limit": 2})
    assert session.session_settings == SessionSettings(limit=2)
    await session.add_items([_user(f"m{n}") for n in range(5)])
    assert await _contents(session) == ["m3", "m4"]
    assert await _contents(session, 3) == ["m2", "m3", "m4"]
    assert await session.get_items(limit=0) == []
    with pytest.raises(UsageError, match="limitt"):
        SteerableSession(base, session_settings={"limitt": 1})
    with pytest.raises(UsageError, match="session_settings"):
        SteerableSession(base, session_settings=3)  # type: ignore[arg-type]


async def test_pop_item_removes_the_latest_item_and_returns_it(store: Store) -> None:
    base = open_session("s", store)
    session = SteerableSession(base)
    assert await session.pop_item() is None
    await session.add_items([_user("hello"), _user("how are you?")])
    assert await session.pop_item() == _user("how are you?")
    assert kinds(stored_items(await base.messages())) == ["user:hello"]
    assert await session.pop_item() == _user("hello")
    assert await base.messages() == []
    assert await session.pop_item() is None


async def test_pop_item_of_one_of_a_responses_calls_keeps_the_others(store: Store) -> None:
    base = open_session("s", store)
    session = SteerableSession(base)
    calls = [function_call("look", {"q": q}, call_id=f"c-{q}") for q in "ab"]
    outputs = [{"type": "function_call_output", "call_id": f"c-{q}", "output": q} for q in "ab"]
    items: list[Any] = [*(c.model_dump(exclude_unset=True) for c in calls), *outputs]
    await session.add_items([_user("hi")])
    await session.add_items(items)
    assert len(await base.messages()) == 3  # the prompt, the two calls, their two outputs
    popped = await session.pop_item()
    assert popped == {"type": "function_call_output", "call_id": "c-b", "output": "b"}
    kept = await base.messages()
    assert [r.call_id for r in kept[-1].tool_results] == ["c-a"]  # the other output stays
    assert kinds(stored_items(kept)) == [
        "user:hi",
        "function_call",
        "function_call",
        "function_call_output",
    ]
    assert (await _items(session))[-1]["call_id"] == "c-a"


async def test_clear_session_forgets_the_transcript_and_the_waiting_steers(store: Store) -> None:
    base = open_session("s", store)
    session = SteerableSession(base)
    await session.add_items([_user("hello")])
    await base.steer("later", id="k")
    await session.clear_session()
    assert await base.messages() == []
    assert await base.steers() == []
    assert await session.get_items() == []
    await session.add_items([_user("again")])
    assert kinds(stored_items(await base.messages())) == ["user:again"]


async def test_pop_and_clear_are_refused_while_a_service_turn_runs(store: Any) -> None:
    inside, release = asyncio.Event(), asyncio.Event()

    @function_tool
    async def wait() -> str:
        """Wait until the test lets go."""
        inside.set()
        await release.wait()
        return "waited"

    model = ScriptedModel([[function_call("wait", {}, call_id="c1")], [assistant_message("ok")]])
    service = Service(
        store, OpenAIAgentsAgent(Agent(name="a", model=model, tools=[wait])), poll=0.05
    )
    session = SteerableSession(open_session("s", store))
    async with service.serving():
        await service.send("s", "hi", id="p")
        await asyncio.wait_for(inside.wait(), 30)
        before = await open_session("s", store).messages()
        with pytest.raises(SessionBusy):
            await session.pop_item()
        with pytest.raises(SessionBusy):
            await session.clear_session()
        assert await open_session("s", store).messages() == before  # nothing cut
        release.set()
        done = await service.wait("s", "p", seconds=30)
    assert done is not None and done.state == "completed"
    popped: Any = await session.pop_item()
    assert popped["type"] == "message"  # the turn over: the answer goes


async def test_bad_input_is_refused_before_anything_is_stored() -> None:
    base = open_session("s", MemoryStore())
    session = SteerableSession(base)
    with pytest.raises(InvalidMessage, match="not an input item"):
        await session.add_items([_user("kept out"), 42])  # type: ignore[list-item]
    with pytest.raises(InvalidMessage, match="not JSON"):
        await session.add_items([_user(object())])
    assert await base.messages() == []
    plain = SteerableSession(open_session("s", CountingStore(MemoryStore())))
    await plain.add_items([_user("kept")])
    with pytest.raises(UsageError, match="cannot cut"):
        await plain.pop_item()
    with pytest.raises(UsageError, match="cannot cut"):
        await plain.clear_session()
