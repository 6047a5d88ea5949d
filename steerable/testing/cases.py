"""The cases of the store contract: each a coroutine, each its own pytest test.

Each case asks for what it uses by parameter name: ``store`` (a store object, opened in
the case's loop), ``store_factory`` (to open more objects over the same data) and
``hooks`` (the test class, whose methods reach behind the store). A case that needs an
ability is marked with :func:`~steerable.testing.abilities.needs`. Every case uses fresh
random session ids, so all cases can share one backing database.

The checks are plain ``assert`` statements: pytest rewrites this module (the plugin
registers it before it is imported), so a failure shows both sides, diffed.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from steerable.errors import (
    CorruptRecord,
    InvalidMessage,
    StoreUnavailable,
    TranscriptConflict,
    UsageError,
)
from steerable.messages import (
    Message,
    Native,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    assistant,
    new_id,
    user,
)
from steerable.session import Session
from steerable.store import CheckedStore, Steer, Store
from steerable.testing.abilities import (
    Corruptible,
    CorruptibleSteers,
    Hold,
    Lockable,
    OpenStore,
    Outage,
    needs,
)

CASES: list[Callable[..., Coroutine[Any, Any, None]]] = []
"""Every case, in the order they run."""


def _case(case: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., Any]:
    CASES.append(case)
    return case


def _sid() -> str:
    return f"contract-{new_id()}"


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


# -- round trip ---------------------------------------------------------------------------


@_case
async def round_trip_is_exact(store: Store) -> None:
    """Every kind of part comes back exactly as it was saved."""
    sid = _sid()
    messages = [
        user("hello"),
        Message(
            "assistant",
            (
                Reasoning("thinking", "anthropic", '{"type":"thinking","signature":"c2ln"}'),
                Text("let me look"),
                ToolCall("call_1", "search", '{"q": "leases"}'),
                ToolCall("call_2", "read", "{}"),
            ),
        ),
        Message(
            "user",
            (
                ToolResult("call_1", "search", "found 3", False),
                ToolResult("call_2", "read", "boom", True),
            ),
        ),
        Message("user", (Text("steered"),), id="steer-1", steered=True),
        Message(
            "assistant",
            (Native("openai-agents", '{"type": "message",  "id":"x", "k":[1, 2]}', "hi ✓"),),
        ),
        Message("assistant", (Text(""),)),
    ]
    await store.save(sid, messages, at=0)
    assert await store.messages(sid) == messages


@_case
async def raw_json_arguments_are_kept_byte_for_byte(store: Store) -> None:
    """A tool call's arguments are the model's text: never parsed, never re-serialized."""
    sid = _sid()
    raw = [
        '{"z":1,"a":[1, 2],"z":3}',
        '{ "spaced" :  true , "n": 1.50, "e": 1E3 }',
        '{"unicode": "\\u00e9 é 😀", "esc": "a\\"b\\\\c"}',
        "not json at all {",
        "",
    ]
    calls = tuple(ToolCall(f"c{i}", "f", r) for i, r in enumerate(raw))
    await store.save(sid, [user("go"), Message("assistant", calls)], at=0)
    back = (await store.messages(sid))[1].tool_calls
    assert [c.arguments for c in back] == raw


@_case
async def unicode_round_trips(store: Store) -> None:
    """Astral characters, combining marks, right-to-left text and joiners are kept."""
    sid = _sid()
    text = (
        "astral 😀\U0001d518\U0001d52b, combining e\u0301 a\u030a,"
        " RTL \u05e9\u05dc\u05d5\u05dd, zwj 👩\u200d💻"
    )
    await store.save(sid, [user(text)], at=0)
    assert _texts(await store.messages(sid)) == [text]


@_case
async def nul_is_kept(store: Store) -> None:
    """NUL is kept in text, tool arguments and steers (the docs promise it; ids are not text)."""
    sid = _sid()
    text = "before\x00after"
    await store.save(sid, [user(text), Message("assistant", (ToolCall("c", "f", text),))], at=0)
    await store.steer(sid, Steer(text, "s-nul"))
    back = await store.messages(sid)
    assert back[0].text == text
    assert back[1].tool_calls[0].arguments == text
    assert [(s.id, s.text) for s in await store.steers(sid)] == [("s-nul", text)]
    assert _texts(await store.take_steers(sid, at=None, limit=1)) == [text]


@_case
async def invalid_unicode_is_refused_and_nothing_written(store: Store) -> None:
    """A lone surrogate cannot be stored: the save is refused whole."""
    sid = _sid()
    await store.save(sid, [user("fine")], at=0)
    with pytest.raises(InvalidMessage):
        await store.save(sid, [user("ok"), user("lone \ud800 surrogate")], at=1)
    assert _texts(await store.messages(sid)) == ["fine"]


@_case
async def large_message_round_trips(store: Store) -> None:
    """A 1 MiB message comes back whole."""
    sid = _sid()
    text = "0123456789abcdef" * 65536
    await store.save(sid, [user(text)], at=0)
    back = await store.messages(sid)
    assert len(back) == 1
    assert back[0].text == text, "a 1 MiB message did not come back whole"


# -- order and appends ----------------------------------------------------------------------


@_case
async def order_is_by_position(store: Store) -> None:
    """Order is the position, never the ids nor the time of writing."""
    sid = _sid()
    batches = [[user(f"m{i}", id=f"{999 - i:04d}") for i in range(j, j + 5)] for j in (0, 5, 10)]
    at = 0
    for batch in batches:
        await store.save(sid, batch, at=at)
        at += len(batch)
    assert _texts(await store.messages(sid)) == [f"m{i}" for i in range(15)]


@_case
async def a_save_appends_and_keeps_what_was_stored(store: Store) -> None:
    """A save appends; what was stored before stays as it was."""
    sid = _sid()
    first = [user("a"), user("b")]
    await store.save(sid, first, at=0)
    await store.save(sid, [user("c")], at=2)
    await store.save(sid, [], at=3)
    back = await store.messages(sid)
    assert _texts(back) == ["a", "b", "c"]
    assert back[:2] == first


@_case
async def a_save_that_does_not_extend_the_store_conflicts_and_changes_nothing(
    store: Store, store_factory: OpenStore
) -> None:
    """Behind the store or past its end: a conflict that names both counts, and no change.

    An empty save (nothing to store, no steer to take) is a check of the position: readers
    that cache a transcript (LangGraph's checkpointer over a store) rely on it.
    """
    sid = _sid()
    await store.save(sid, [user("a"), user("b")], at=0)
    await store.steer(sid, Steer("waiting", "w"))
    async with store_factory() as other:
        for at in (0, 1, 3, 10):
            with pytest.raises(TranscriptConflict) as caught:
                await other.save(sid, [user("late")], at=at, take=16)
            assert (caught.value.session, caught.value.expected, caught.value.stored) == (
                sid,
                at,
                2,
            )
            with pytest.raises(TranscriptConflict):
                await other.take_steers(sid, at=at, limit=16)
            with pytest.raises(TranscriptConflict):  # an empty save checks the position too
                await other.save(sid, [], at=at)
        assert await other.save(sid, [], at=2) == []  # ...and at the stored length is a no-op
        assert _texts(await store.messages(sid)) == ["a", "b"]
        assert [s.id for s in await store.steers(sid)] == ["w"]
        # having learnt the stored length, the other writer extends the transcript
        assert [m.id for m in await other.save(sid, [user("c")], at=2, take=16)] == ["w"]
    assert _texts(await store.messages(sid)) == ["a", "b", "c", "waiting"]


@_case
async def two_writers_at_one_position_one_wins(store: Store, store_factory: OpenStore) -> None:
    """Two store objects saving at one position at once: one wins whole, one conflicts."""
    sid = _sid()
    async with store_factory() as second:
        await store.save(sid, [user("base")], at=0)
        results = await asyncio.gather(
            store.save(sid, [user("from first"), user("more")], at=1),
            second.save(sid, [user("from second")], at=1),
            return_exceptions=True,
        )
    assert sorted(type(r).__name__ for r in results) == ["TranscriptConflict", "list"]
    back = _texts(await store.messages(sid))
    assert back in (["base", "from first", "more"], ["base", "from second"])


@_case
async def a_redo_of_a_stored_step_is_a_conflict_not_a_duplicate_id(
    store: Store, store_factory: OpenStore
) -> None:
    """Two replicas saving the very same step (same ids) at one position: a conflict."""
    async with store_factory() as second:
        for _ in range(10):
            sid = _sid()
            prompt = user("prompt")
            await store.save(sid, [prompt], at=0)
            step = [assistant("answer"), user("more")]
            results = await asyncio.gather(
                store.save(sid, step, at=1), second.save(sid, step, at=1), return_exceptions=True
            )
            assert sorted(type(r).__name__ for r in results) == ["TranscriptConflict", "list"]
            with pytest.raises(TranscriptConflict):
                await second.save(sid, step, at=1)  # and once the first has committed
            assert await store.messages(sid) == [prompt, *step]


@_case
async def a_duplicate_message_id_is_refused(store: Store) -> None:
    """An id already in the transcript, or twice in one save: refused whole."""
    sid = _sid()
    await store.save(sid, [user("a", id="same")], at=0)
    with pytest.raises(InvalidMessage):
        await store.save(sid, [user("b"), user("c", id="same")], at=1)
    assert _texts(await store.messages(sid)) == ["a"]
    with pytest.raises(InvalidMessage):
        await store.save(sid, [user("d", id="twice"), user("e", id="twice")], at=1)
    assert _texts(await store.messages(sid)) == ["a"]


# -- steers --------------------------------------------------------------------------------


@_case
async def steers_come_out_in_the_order_they_went_in(store: Store) -> None:
    """Waiting and taken steers keep the order they were left in."""
    sid = _sid()
    texts = [f"steer {i}" for i in range(12)]
    for text in texts:
        await store.steer(sid, Steer(text))
    assert [s.text for s in await store.steers(sid)] == texts
    taken = await store.take_steers(sid, at=0, limit=5)
    taken += await store.take_steers(sid, at=5, limit=100)
    assert _texts(taken) == texts


@_case
async def a_steer_id_sent_twice_is_one_steer(store: Store) -> None:
    """The same steer id again, waiting or taken, is one steer."""
    sid = _sid()
    await store.steer(sid, Steer("first", "s-1"))
    await store.steer(sid, Steer("first again", "s-1"))
    assert [s.text for s in await store.steers(sid)] == ["first"]
    taken = await store.take_steers(sid, at=0, limit=16)
    await store.steer(sid, Steer("first, retried after the take", "s-1"))
    assert await store.steers(sid) == []
    assert await store.take_steers(sid, at=1, limit=16) == []
    assert [m.id for m in taken] == ["s-1"]


@_case
async def a_take_records_the_steer_in_the_transcript(store: Store) -> None:
    """A save-and-take returns the steered messages and stores them after the save's own."""
    sid = _sid()
    await store.steer(sid, Steer("use celsius", "s-1"))
    prompt = [user("weather?")]
    taken = await store.save(sid, prompt, at=0, take=16)
    expected = Message("user", (Text("use celsius"),), id="s-1", steered=True)
    assert taken == [expected]
    assert await store.messages(sid) == [*prompt, expected]
    assert await store.steers(sid) == []


@_case
async def a_steer_already_in_the_transcript_is_taken_but_not_recorded_again(
    store: Store,
) -> None:
    """A waiting steer recorded another way (a run's own box) is taken, not recorded twice."""
    sid = _sid()
    recorded = Steer("from a run's own box", "s-1")
    await store.save(sid, [user("go"), recorded.message()], at=0)
    await store.steer(sid, Steer("from a run's own box", "s-1"))
    await store.steer(sid, Steer("new", "s-2"))
    await store.steer(sid, Steer("in this very save", "s-3"))
    taken = await store.save(sid, [Steer("in this very save", "s-3").message()], at=2, take=5)
    assert [m.id for m in taken] == ["s-2"]
    assert [m.id for m in await store.messages(sid)][1:] == ["s-1", "s-3", "s-2"]
    assert await store.steers(sid) == []


@_case
async def a_take_respects_its_limit_and_at_end(store: Store) -> None:
    """``take`` and ``limit`` bound a take; ``at=None`` appends where the transcript ends."""
    sid = _sid()
    await store.save(sid, [user("a")], at=0)
    for i in range(5):
        await store.steer(sid, Steer(f"s{i}"))
    assert await store.save(sid, [user("b")], at=1, take=0) == []
    assert len(await store.take_steers(sid, at=None, limit=2)) == 2
    assert len(await store.take_steers(sid, at=None, limit=16)) == 3
    assert _texts(await store.messages(sid)) == ["a", "b", "s0", "s1", "s2", "s3", "s4"]


async def _take_all(store: Store, sid: str, takers: int, done: Callable[[], bool]) -> list[str]:
    """Take with ``takers`` tasks until ``done()`` and a take comes back empty; the ids taken."""

    async def taker() -> list[str]:
        got: list[str] = []
        while True:
            finished = done()
            taken = await store.take_steers(sid, at=None, limit=3)
            got += [m.id for m in taken]
            if finished and not taken:
                return got
            await asyncio.sleep(0 if taken else 0.001)

    results = await asyncio.gather(*(taker() for _ in range(takers)))
    return [i for r in results for i in r]


@_case
async def concurrent_takers_get_each_steer_exactly_once(store: Store) -> None:
    """Ten tasks taking while steers arrive: each steer is taken and recorded once."""
    sid = _sid()
    ids = [f"s{i:03d}" for i in range(120)]

    async def produce() -> None:
        for i in ids:
            await store.steer(sid, Steer(f"text {i}", i))

    producer = asyncio.create_task(produce())
    taken = await _take_all(store, sid, 10, producer.done)
    assert sorted(taken) == ids
    assert sorted(m.id for m in await store.messages(sid)) == ids


@_case
async def replicas_saving_and_taking_at_once_record_each_steer_once_in_order(
    store: Store, store_factory: OpenStore
) -> None:
    """Two store objects run steps on one session as steers arrive: once each, in order."""
    sid = _sid()
    ids = [f"s{i:03d}" for i in range(60)]
    await store.save(sid, [user("go")], at=0)
    async with store_factory() as second:

        async def produce() -> None:
            for i in ids:
                await store.steer(sid, Steer(i, i))

        async def replica(replica: Store, producer: asyncio.Task[None]) -> None:
            while not producer.done() or await replica.steers(sid):
                at = len(await replica.messages(sid))
                try:
                    await replica.save(sid, [assistant("step")], at=at, take=2)
                except TranscriptConflict:
                    await asyncio.sleep(0)

        producer = asyncio.create_task(produce())
        await asyncio.gather(*(replica(s, producer) for s in (store, second) for _ in range(4)))
    assert [m.id for m in await store.messages(sid) if m.steered] == ids


def _process_taker(
    store_factory: OpenStore, sid: str, tasks: int, go: Any, produced: Any, out: Any
) -> None:
    async def main() -> list[str]:
        async with store_factory() as store:
            await store.steers(sid)  # connected and ready before the race starts
            out.put("ready")
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            return await _take_all(store, sid, tasks, produced.is_set)

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"taker failed: {exc!r}")
        raise


@_case
@needs("processes")
async def takers_in_four_processes_get_each_steer_exactly_once(
    store: Store, store_factory: OpenStore
) -> None:
    """Four processes of four takers each, while steers arrive: each steer once."""
    try:
        pickle.dumps(store_factory)
    except Exception as exc:
        raise UsageError(f"the 'processes' ability needs a picklable store_factory: {exc}") from exc
    sid = _sid()
    ids = [f"s{i:03d}" for i in range(200)]
    context = multiprocessing.get_context("spawn")
    out, go, produced = context.Queue(), context.Event(), context.Event()
    workers = [
        context.Process(target=_process_taker, args=(store_factory, sid, 4, go, produced, out))
        for _ in range(4)
    ]
    loop = asyncio.get_running_loop()
    for i in ids[:100]:
        await store.steer(sid, Steer(f"text {i}", i))
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            assert await loop.run_in_executor(None, out.get, True, 120) == "ready"
        go.set()
        for i in ids[100:]:  # more steers while the four processes take
            await store.steer(sid, Steer(f"text {i}", i))
            # paced: the race lasts while every process takes, however fast the store
            # (a store that takes in microseconds let the first process to wake drain it)
            await asyncio.sleep(0.001)
        produced.set()
        results = [await loop.run_in_executor(None, out.get, True, 120) for _ in workers]
        for got in results:
            assert isinstance(got, list), got
    finally:
        go.set()
        produced.set()
        for worker in workers:
            await loop.run_in_executor(None, worker.join, 30)
            if worker.is_alive():
                worker.kill()
    assert sorted(i for r in results for i in r) == ids
    assert sorted(m.id for m in await store.messages(sid)) == ids
    assert await store.steers(sid) == []
    assert sum(1 for r in results if r) >= 2, "one process took everything; no race was run"


@_case
@needs("lockable")
async def the_loser_of_a_race_for_one_position_is_told(
    store: Store, store_factory: OpenStore, hooks: Lockable
) -> None:
    """Two replicas resume one session while its waiting steer is locked: one takes it.

    Both first steps are ``save([], at=n, take=16)`` through their own store objects, in
    flight at once; the other is a conflict, never an empty take over a transcript that
    has moved on.
    """
    sid = _sid()
    stored = [user("prompt"), Message("assistant", (ToolCall("c", "f", "{}"),))]
    stored.append(Message("user", (ToolResult("c", "f", "done", False),)))
    steer = Steer("use celsius", "s-race")
    await store.save(sid, stored, at=0)
    await store.steer(sid, steer)
    n = len(stored)
    async with store_factory() as other:
        await other.steers(sid)  # connected before the race
        saves: list[asyncio.Task[list[Message]]] = []
        try:
            async with hooks.hold_steer(store, sid) as hold:
                saves = [
                    asyncio.create_task(s.save(sid, [], at=n, take=16)) for s in (store, other)
                ]
                await hold.until_waiting(2)
        finally:
            results = await asyncio.gather(*saves, return_exceptions=True)
    taken = [r for r in results if isinstance(r, list)]
    refused = [r for r in results if isinstance(r, TranscriptConflict)]
    assert taken == [[steer.message()]], results
    assert [(c.expected, c.stored) for c in refused] == [(n, n + 1)], results
    assert await store.messages(sid) == [*stored, steer.message()]
    assert await store.steers(sid) == []


# -- sessions ------------------------------------------------------------------------------


@_case
async def sessions_are_isolated(store: Store) -> None:
    """Sessions share no messages, steers or ids."""
    a, b = _sid(), _sid()
    await store.save(a, [user("for a")], at=0)
    await store.steer(a, Steer("steer a", "same-id"))
    await store.steer(b, Steer("steer b", "same-id"))
    await store.save(b, [user("for b", id="x")], at=0)
    await store.save(a, [user("also a", id="x")], at=1)
    assert _texts(await store.take_steers(b, at=None, limit=16)) == ["steer b"]
    assert _texts(await store.messages(a)) == ["for a", "also a"]
    assert _texts(await store.messages(b)) == ["for b", "steer b"]
    assert [s.text for s in await store.steers(a)] == ["steer a"]


@_case
async def ids_compare_exactly(store: Store) -> None:
    """Ids differing by case, a trailing space or normalization are different ids."""
    base = _sid()
    sessions = [f"{base}-a", f"{base}-A", f"{base}-a ", f"{base}-\u00e9", f"{base}-e\u0301"]
    for sid in sessions:
        await store.save(sid, [user(sid, id="m"), user("x", id="m ")], at=0)
        await store.steer(sid, Steer(sid, "s"))
        await store.steer(sid, Steer("other", "S"))
    for sid in sessions:
        back = await store.messages(sid)
        assert [(m.id, m.text) for m in back] == [("m", sid), ("m ", "x")]
        assert [(s.id, s.text) for s in await store.steers(sid)] == [("s", sid), ("S", "other")]


@_case
async def steer_text_round_trips_exactly(store: Store) -> None:
    """A steer's text is kept exactly, waiting and taken."""
    sid = _sid()
    texts = ["😀 astral \U0001d518, e\u0301, trailing space ", "nul \x00 in it", "x" * 100_000]
    for i, text in enumerate(texts):
        await store.steer(sid, Steer(text, f"s{i}"))
    assert [s.text for s in await store.steers(sid)] == texts
    assert _texts(await store.take_steers(sid, at=0, limit=16)) == texts
    assert _texts(await store.messages(sid)) == texts


@_case
async def a_missing_session_is_empty(store: Store) -> None:
    """A session nobody wrote to is empty, not an error."""
    sid = _sid()
    assert await store.messages(sid) == []
    assert await store.steers(sid) == []
    assert await store.take_steers(sid, at=None, limit=16) == []


@_case
async def bad_arguments_at_the_front_door_are_usage_errors(store: Store) -> None:
    """CheckedStore and Session refuse what no store is given: the store trusts its input."""
    bad: Any = 42
    checked = CheckedStore(store)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: checked.messages(bad),
        lambda: checked.save(bad, [user("x")], at=0),
        lambda: checked.steer(bad, Steer("x")),
        lambda: checked.take_steers(bad, at=None, limit=1),
        lambda: checked.steers(bad),
        lambda: Session(bad, store).messages(),
    ]
    for call in calls:
        with pytest.raises(UsageError, match="session id"):
            await call()
    sid = _sid()
    for call in (
        lambda: checked.save(sid, [user("x")], at=-1),
        lambda: checked.save(sid, ["not a message"], at=0),  # type: ignore[list-item]
        lambda: checked.save(sid, [], at=0, take=True),
        lambda: checked.steer(sid, "not a steer"),  # type: ignore[arg-type]
        lambda: checked.take_steers(sid, at=None, limit=-1),
    ):
        with pytest.raises(UsageError):
            await call()
    assert await store.messages(sid) == []
    assert await store.steers(sid) == []


@_case
@needs("persistent")
async def everything_is_kept_across_a_new_store_object(
    store: Store, store_factory: OpenStore
) -> None:
    """A new store object sees the transcript, the waiting steers and the ids taken."""
    sid = _sid()
    messages = [user("kept"), Message("assistant", (ToolCall("c", "f", '{"z":1,"z":2}'),))]
    await store.save(sid, messages, at=0)
    await store.steer(sid, Steer("taken", "t"))
    await store.take_steers(sid, at=None, limit=1)
    await store.steer(sid, Steer("waiting", "w"))
    async with store_factory() as again:
        back = await again.messages(sid)
        waiting = await again.steers(sid)
        await again.steer(sid, Steer("taken again?", "t"))
        after = await again.steers(sid)
    assert back == [*messages, Steer("taken", "t").message()]
    assert [s.id for s in waiting] == ["w"]
    assert [s.id for s in after] == ["w"], "a taken steer id was forgotten by a new object"


# -- what a test reaches behind the store for --------------------------------------------


@_case
@needs("corruptible")
async def a_damaged_message_is_a_corrupt_record_that_names_it(
    store: Store, hooks: Corruptible
) -> None:
    """A stored row that cannot be decoded is a CorruptRecord naming session and position."""
    sid = _sid()
    await store.save(sid, [user("fine"), user("to be damaged", id="m-bad")], at=0)
    await hooks.corrupt_message(store, sid, 1)
    with pytest.raises(CorruptRecord) as caught:
        await store.messages(sid)
    assert f"session {sid!r}, position 1" in str(caught.value)
    assert "'m-bad'" in str(caught.value)


@_case
@needs("corruptible")
async def a_damaged_steer_is_a_corrupt_record_that_names_it(
    store: Store, hooks: Corruptible
) -> None:
    """A waiting steer's row that cannot be decoded is a CorruptRecord naming it."""
    if not isinstance(hooks, CorruptibleSteers):
        pytest.skip("the store keeps a steer's text as it is: no encoding to damage")
    sid = _sid()
    await store.steer(sid, Steer("fine", "s-ok"))
    await store.steer(sid, Steer("to be damaged", "s-bad"))
    await hooks.corrupt_steer(store, sid, "s-bad")
    with pytest.raises(CorruptRecord) as caught:
        await store.steers(sid)
    assert repr(sid) in str(caught.value)
    assert "'s-bad'" in str(caught.value)


async def _once_reachable(store: Store, sid: str) -> list[Message]:
    """The transcript, once the store reaches its server again (a driver may back off)."""
    for _ in range(100):
        try:
            return await store.messages(sid)
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    return await store.messages(sid)


@_case
@needs("outage")
async def the_server_going_away_is_store_unavailable_and_loses_nothing(hooks: Outage) -> None:
    """Cut off its server, every verb raises StoreUnavailable; back, nothing was lost."""
    sid = _sid()
    async with hooks.outage() as line:
        store = line.store
        before = [user("prompt"), assistant("answer")]
        await store.save(sid, before, at=0)
        await store.steer(sid, Steer("waiting", "w"))
        await line.cut()
        verbs: list[Callable[[], Awaitable[object]]] = [
            lambda: store.messages(sid),
            lambda: store.save(sid, [user("lost?")], at=2, take=1),
            lambda: store.steer(sid, Steer("while down", "d")),
            lambda: store.steers(sid),
            lambda: store.take_steers(sid, at=None, limit=1),
        ]
        for verb in verbs:
            with pytest.raises(StoreUnavailable):
                await verb()
        await line.restore()
        assert await _once_reachable(store, sid) == before
        assert [s.id for s in await store.steers(sid)] == ["w"]
        taken = await store.save(sid, [user("again")], at=2, take=16)
        assert [m.id for m in taken] == ["w"]
        assert _texts(await store.messages(sid)) == ["prompt", "answer", "again", "waiting"]


async def _done_or_waiting(task: asyncio.Task[Any], hold: Hold, count: int) -> None:
    """Return once ``task`` is done or ``count`` calls wait for ``hold``, whichever is first.

    A save that takes nothing waits for the lock on some stores (one lock for a session)
    and runs straight through on others (a row lock it never asks for).
    """
    waiting = asyncio.ensure_future(hold.until_waiting(count))
    try:
        await asyncio.wait([task, waiting], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await waiting  # its poll bound ran out: it says so
    finally:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)


@_case
@needs("lockable")
async def a_take_of_only_recorded_steers_is_told_when_a_save_overtook_it(
    store: Store, store_factory: OpenStore, hooks: Lockable
) -> None:
    """A take that waited and then had nothing new to record is still a conflict if the
    transcript moved on while it waited.

    The waiting steer's id is already in the transcript (a client sent again an id the run
    recorded from its own box): the take marks it taken and records nothing, so no key of
    the transcript can collide. B's ``save([], at=n, take=16)`` waits for the steer's lock;
    A's ``save([m], at=n)`` takes nothing. Where A is stored while B still waits and the
    steer still waits (a row lock A never asks for), B comes after A: a conflict. Where A
    waits too, either order is fine, and each save's answer agrees with the order it ran.
    """
    sid = _sid()
    steer = Steer("use celsius", "s-recorded")
    stored = [user("prompt"), steer.message()]
    await store.save(sid, stored, at=0)
    await store.steer(sid, steer)  # a store may refuse it here, or take it later
    n = len(stored)
    later = assistant("from replica A")
    async with store_factory() as other:
        await other.steers(sid)  # connected before the race
        saves: list[asyncio.Task[list[Message]]] = []
        overtaken = False
        try:
            async with hooks.hold_steer(store, sid) as hold:
                saves.append(asyncio.create_task(other.save(sid, [], at=n, take=16)))
                await hold.until_waiting(1)
                saves.append(asyncio.create_task(store.save(sid, [later], at=n)))
                await _done_or_waiting(saves[1], hold, 2)
                if saves[1].done() and not saves[0].done():
                    waiting = [s.id for s in await store.steers(sid)]
                    overtaken = steer.id in waiting and saves[1].exception() is None
        finally:
            results = await asyncio.gather(*saves, return_exceptions=True)
    b, a = results
    assert a == [], results
    if overtaken:
        assert isinstance(b, TranscriptConflict), results
    assert b == [] or (isinstance(b, TranscriptConflict) and (b.expected, b.stored) == (n, n + 1))
    assert await store.messages(sid) == [*stored, later]
    left = [s.id for s in await store.steers(sid)]
    assert left == [] if b == [] else left in ([], [steer.id]), results  # a conflict may leave it
