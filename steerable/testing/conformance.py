"""The store conformance suite: every line of the store contract, one pytest test each.

See :func:`store_contract`. Every case uses fresh random session ids, so the cases can
share one backing database and never see each other's rows.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeAlias

from steerable.errors import InvalidMessage, TranscriptConflict, UsageError
from steerable.messages import Message, Reasoning, Text, ToolCall, ToolResult, new_id, user
from steerable.store import Steer, Store

OpenStore: TypeAlias = Callable[[], AbstractAsyncContextManager[Store]]
Case: TypeAlias = Callable[[OpenStore], Coroutine[Any, Any, None]]

CASES: dict[str, Case] = {}
PROCESS_CASES: set[str] = set()
PERSISTENT_CASES: set[str] = set()


def _case(*, processes: bool = False, persistent: bool = False) -> Callable[[Case], Case]:
    def register(case: Case) -> Case:
        name = case.__name__.removeprefix("_")
        CASES[name] = case
        if processes:
            PROCESS_CASES.add(name)
        if persistent:
            PERSISTENT_CASES.add(name)
        return case

    return register


def _sid() -> str:
    return f"contract-{new_id()}"


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)


# -- round trip ---------------------------------------------------------------------------


@_case()
async def _round_trip_is_exact(open_store: OpenStore) -> None:
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
        Message("assistant", (Text(""),)),
    ]
    async with open_store() as store:
        await store.save(sid, messages, at=0)
        back = await store.messages(sid)
    _expect(back == messages, f"stored {messages!r}, read back {back!r}")


@_case()
async def _raw_json_arguments_are_kept_byte_for_byte(open_store: OpenStore) -> None:
    sid = _sid()
    raw = [
        '{"z":1,"a":[1, 2],"z":3}',
        '{ "spaced" :  true , "n": 1.50, "e": 1E3 }',
        '{"unicode": "\\u00e9 é 😀", "esc": "a\\"b\\\\c"}',
        "not json at all {",
        "",
    ]
    calls = tuple(ToolCall(f"c{i}", "f", r) for i, r in enumerate(raw))
    message = Message("assistant", calls)
    async with open_store() as store:
        await store.save(sid, [user("go"), message], at=0)
        back = (await store.messages(sid))[1].tool_calls
    _expect([c.arguments for c in back] == raw, f"arguments changed: {back!r}")


@_case()
async def _unicode_round_trips(open_store: OpenStore) -> None:
    sid = _sid()
    text = (
        "astral 😀\U0001d518\U0001d52b, combining e\u0301 a\u030a,"
        " RTL \u05e9\u05dc\u05d5\u05dd, zwj 👩\u200d💻"
    )
    async with open_store() as store:
        await store.save(sid, [user(text)], at=0)
        back = await store.messages(sid)
    _expect(back[0].text == text, f"unicode changed: {back[0].text!r}")


@_case()
async def _nul_is_kept_or_refused_clearly(open_store: OpenStore) -> None:
    sid = _sid()
    text = "before\x00after"
    async with open_store() as store:
        try:
            await store.save(sid, [user(text)], at=0)
        except InvalidMessage:
            _expect(await store.messages(sid) == [], "a refused save wrote something")
            return
        back = await store.messages(sid)
    _expect(back[0].text == text, f"NUL changed: {back[0].text!r}")


@_case()
async def _invalid_unicode_is_refused_and_nothing_written(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as store:
        await store.save(sid, [user("fine")], at=0)
        try:
            await store.save(sid, [user("ok"), user("lone \ud800 surrogate")], at=1)
        except InvalidMessage:
            pass
        else:
            raise AssertionError("a lone surrogate was accepted")
        _expect(len(await store.messages(sid)) == 1, "a refused save wrote part of its messages")


@_case()
async def _large_message_round_trips(open_store: OpenStore) -> None:
    sid = _sid()
    text = "0123456789abcdef" * 65536  # 1 MiB
    async with open_store() as store:
        await store.save(sid, [user(text)], at=0)
        back = await store.messages(sid)
    _expect(back[0].text == text, "a 1 MiB message did not come back whole")


# -- order and appends ----------------------------------------------------------------------


@_case()
async def _order_is_by_position(open_store: OpenStore) -> None:
    sid = _sid()
    # ids sort in the opposite order of the positions, and all are written in one instant
    batches = [[user(f"m{i}", id=f"{999 - i:04d}") for i in range(j, j + 5)] for j in (0, 5, 10)]
    async with open_store() as store:
        at = 0
        for batch in batches:
            await store.save(sid, batch, at=at)
            at += len(batch)
        back = await store.messages(sid)
    _expect([m.text for m in back] == [f"m{i}" for i in range(15)], f"order: {back!r}")


@_case()
async def _save_appends_only_what_is_new(open_store: OpenStore) -> None:
    sid = _sid()
    first = [user("a"), user("b")]
    async with open_store() as store:
        await store.save(sid, first, at=0)
        await store.save(sid, [user("c")], at=2)
        await store.save(sid, [], at=3)
        back = await store.messages(sid)
    _expect([m.text for m in back] == ["a", "b", "c"], f"after appends: {back!r}")
    _expect([m.id for m in back[:2]] == [m.id for m in first], "earlier messages were rewritten")


@_case()
async def _a_save_behind_the_store_conflicts_and_changes_nothing(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as store:
        await store.save(sid, [user("a"), user("b")], at=0)
        await store.steer(sid, Steer("waiting"))
        for at in (0, 1, 3):
            try:
                await store.save(sid, [user("late")], at=at, take=1)
            except TranscriptConflict as conflict:
                _expect(
                    (conflict.session, conflict.expected, conflict.stored) == (sid, at, 2),
                    f"the conflict says {conflict!r}",
                )
            else:
                raise AssertionError(f"a save at {at} over 2 stored messages was accepted")
        back = await store.messages(sid)
        _expect([m.text for m in back] == ["a", "b"], f"a conflicting save wrote: {back!r}")
        _expect(len(await store.steers(sid)) == 1, "a conflicting save took a steer")


@_case()
async def _two_writers_at_one_position_one_wins(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as first, open_store() as second:
        await first.save(sid, [user("base")], at=0)
        results = await asyncio.gather(
            first.save(sid, [user("from first"), user("more")], at=1),
            second.save(sid, [user("from second")], at=1),
            return_exceptions=True,
        )
        conflicts = [r for r in results if isinstance(r, TranscriptConflict)]
        _expect(len(conflicts) == 1, f"two writers at one position: {results!r}")
        back = [m.text for m in await first.messages(sid)]
    _expect(back in (["base", "from first", "more"], ["base", "from second"]), f"got {back!r}")


@_case()
async def _a_duplicate_message_id_is_refused(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as store:
        await store.save(sid, [user("a", id="same")], at=0)
        try:
            await store.save(sid, [user("b"), user("c", id="same")], at=1)
        except InvalidMessage:
            pass
        else:
            raise AssertionError("a message id already stored was accepted again")
        _expect(len(await store.messages(sid)) == 1, "a refused save wrote part of its messages")
        try:
            await store.save(sid, [user("d", id="twice"), user("e", id="twice")], at=1)
        except InvalidMessage:
            pass
        else:
            raise AssertionError("one save holding an id twice was accepted")
        _expect(len(await store.messages(sid)) == 1, "a refused save wrote part of its messages")


# -- steers --------------------------------------------------------------------------------


@_case()
async def _steers_come_out_in_the_order_they_went_in(open_store: OpenStore) -> None:
    sid = _sid()
    texts = [f"steer {i}" for i in range(12)]
    async with open_store() as store:
        for text in texts:
            await store.steer(sid, Steer(text))
        _expect([s.text for s in await store.steers(sid)] == texts, "waiting order")
        taken = await store.take_steers(sid, at=0, limit=5)
        taken += await store.take_steers(sid, at=5, limit=100)
    _expect([m.text for m in taken] == texts, f"taken order: {[m.text for m in taken]}")


@_case()
async def _a_steer_id_sent_twice_is_one_steer(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as store:
        await store.steer(sid, Steer("first", "s-1"))
        await store.steer(sid, Steer("first again", "s-1"))
        _expect([s.text for s in await store.steers(sid)] == ["first"], "duplicate while waiting")
        taken = await store.take_steers(sid, at=0, limit=16)
        await store.steer(sid, Steer("first, retried after the take", "s-1"))
        _expect(await store.steers(sid) == [], "a steer id already taken came back")
        _expect(await store.take_steers(sid, at=1, limit=16) == [], "taken twice")
    _expect([m.id for m in taken] == ["s-1"], f"taken: {taken!r}")


@_case()
async def _a_take_records_the_steer_in_the_transcript(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as store:
        await store.steer(sid, Steer("use celsius", "s-1"))
        prompt = [user("weather?")]
        taken = await store.save(sid, prompt, at=0, take=16)
        back = await store.messages(sid)
        _expect(await store.steers(sid) == [], "a taken steer is still waiting")
    expected = Message("user", (Text("use celsius"),), id="s-1", steered=True)
    _expect(taken == [expected], f"taken: {taken!r}")
    _expect(back == [*prompt, expected], f"transcript: {back!r}")


@_case()
async def _a_steer_already_in_the_transcript_is_taken_but_not_recorded_again(
    open_store: OpenStore,
) -> None:
    sid = _sid()
    async with open_store() as store:
        recorded = Steer("from a run's own box", "s-1")
        await store.save(sid, [user("go"), recorded.message()], at=0)
        await store.steer(sid, Steer("from a run's own box", "s-1"))
        await store.steer(sid, Steer("new", "s-2"))
        await store.steer(sid, Steer("in this very save", "s-3"))
        taken = await store.save(sid, [Steer("in this very save", "s-3").message()], at=2, take=5)
        back = [m.id for m in await store.messages(sid)]
        left = await store.steers(sid)
    _expect([m.id for m in taken] == ["s-2"], f"taken: {taken!r}")
    _expect(back[1:] == ["s-1", "s-3", "s-2"], f"transcript ids: {back!r}")
    _expect(left == [], f"left waiting: {left!r}")


@_case()
async def _a_take_respects_its_limit_and_at_end(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as store:
        await store.save(sid, [user("a")], at=0)
        for i in range(5):
            await store.steer(sid, Steer(f"s{i}"))
        none = await store.save(sid, [user("b")], at=1, take=0)
        two = await store.take_steers(sid, at=None, limit=2)
        rest = await store.take_steers(sid, at=None, limit=16)
        back = [m.text for m in await store.messages(sid)]
    _expect(none == [] and len(two) == 2 and len(rest) == 3, "limits not respected")
    _expect(back == ["a", "b", "s0", "s1", "s2", "s3", "s4"], f"transcript: {back!r}")


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


@_case()
async def _concurrent_takers_get_each_steer_exactly_once(open_store: OpenStore) -> None:
    sid = _sid()
    ids = [f"s{i:03d}" for i in range(120)]
    async with open_store() as store:

        async def produce() -> None:
            for i in ids:
                await store.steer(sid, Steer(f"text {i}", i))

        producer = asyncio.create_task(produce())
        taken = await _take_all(store, sid, 10, producer.done)
        recorded = [m.id for m in await store.messages(sid)]
    _expect(sorted(taken) == ids, f"{len(taken)} takes for {len(ids)} steers")
    _expect(sorted(recorded) == ids, "the transcript does not hold each steer exactly once")


@_case()
async def _takers_that_race_on_a_position_take_each_steer_once(open_store: OpenStore) -> None:
    sid = _sid()
    ids = [f"s{i:02d}" for i in range(30)]
    async with open_store() as store:
        for i in ids:
            await store.steer(sid, Steer(i, i))

        async def taker() -> list[str]:
            got: list[str] = []
            while await store.steers(sid):
                at = len(await store.messages(sid))
                try:
                    got += [m.id for m in await store.take_steers(sid, at=at, limit=2)]
                except TranscriptConflict:
                    await asyncio.sleep(0)
            return got

        results = await asyncio.gather(*(taker() for _ in range(5)))
        recorded = [m.id for m in await store.messages(sid)]
    taken = [i for r in results for i in r]
    _expect(sorted(taken) == ids, f"{len(taken)} takes for {len(ids)} steers")
    _expect(recorded == sorted(recorded), "steers were recorded out of order")


def _process_taker(
    open_store: OpenStore, sid: str, tasks: int, go: Any, produced: Any, out: Any
) -> None:
    async def main() -> list[str]:
        async with open_store() as store:
            await store.steers(sid)  # connected and ready before the race starts
            out.put("ready")
            await asyncio.get_running_loop().run_in_executor(None, go.wait, 60)
            return await _take_all(store, sid, tasks, produced.is_set)

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:  # the parent fails fast with the real error
        out.put(f"taker failed: {exc!r}")
        raise


@_case(processes=True)
async def _takers_in_four_processes_get_each_steer_exactly_once(open_store: OpenStore) -> None:
    sid = _sid()
    ids = [f"s{i:03d}" for i in range(200)]
    context = multiprocessing.get_context("spawn")
    out, go, produced = context.Queue(), context.Event(), context.Event()
    workers = [
        context.Process(target=_process_taker, args=(open_store, sid, 4, go, produced, out))
        for _ in range(4)
    ]
    loop = asyncio.get_running_loop()
    async with open_store() as store:
        for i in ids[:100]:
            await store.steer(sid, Steer(f"text {i}", i))
        for worker in workers:
            worker.start()
        try:
            for _ in workers:
                ready = await loop.run_in_executor(None, out.get, True, 120)
                _expect(ready == "ready", f"a taker process did not start: {ready}")
            go.set()
            for i in ids[100:]:  # more steers while the four processes take
                await store.steer(sid, Steer(f"text {i}", i))
            produced.set()
            results = [await loop.run_in_executor(None, out.get, True, 120) for _ in workers]
            for got in results:
                _expect(isinstance(got, list), str(got))
        finally:
            go.set()
            produced.set()
            for worker in workers:
                await loop.run_in_executor(None, worker.join, 30)
                if worker.is_alive():
                    worker.kill()
        taken = [i for r in results for i in r]
        recorded = [m.id for m in await store.messages(sid)]
        left = await store.steers(sid)
    _expect(sorted(taken) == ids, f"{len(taken)} takes for {len(ids)} steers across processes")
    _expect(sorted(recorded) == ids, "the transcript does not hold each steer exactly once")
    _expect(left == [], f"{len(left)} steers left waiting")
    _expect(sum(1 for r in results if r) >= 2, "one process took everything; no race was run")


# -- sessions ------------------------------------------------------------------------------


@_case()
async def _sessions_are_isolated(open_store: OpenStore) -> None:
    a, b = _sid(), _sid()
    async with open_store() as store:
        await store.save(a, [user("for a")], at=0)
        await store.steer(a, Steer("steer a", "same-id"))
        await store.steer(b, Steer("steer b", "same-id"))
        await store.save(b, [user("for b", id="x")], at=0)
        await store.save(a, [user("also a", id="x")], at=1)
        taken_b = await store.take_steers(b, at=None, limit=16)
        _expect([m.text for m in await store.messages(a)] == ["for a", "also a"], "a leaked")
        _expect([m.text for m in await store.messages(b)] == ["for b", "steer b"], "b leaked")
        _expect([s.text for s in await store.steers(a)] == ["steer a"], "a's steer was taken")
    _expect([m.text for m in taken_b] == ["steer b"], "b took the wrong steer")


@_case()
async def _ids_compare_exactly(open_store: OpenStore) -> None:
    base = _sid()
    sessions = [f"{base}-a", f"{base}-A", f"{base}-a ", f"{base}-\u00e9", f"{base}-e\u0301"]
    async with open_store() as store:
        for sid in sessions:
            await store.save(sid, [user(sid, id="m"), user("x", id="m ")], at=0)
            await store.steer(sid, Steer(sid, "s"))
            await store.steer(sid, Steer("other", "S"))
        for sid in sessions:
            back = await store.messages(sid)
            _expect([m.text for m in back] == [sid, "x"], f"session {sid!r} read {back!r}")
            _expect([m.id for m in back] == ["m", "m "], f"ids {[m.id for m in back]!r}")
            steers = await store.steers(sid)
            _expect([(s.id, s.text) for s in steers] == [("s", sid), ("S", "other")], "steers")


@_case()
async def _steer_text_round_trips_exactly(open_store: OpenStore) -> None:
    sid = _sid()
    texts = ["😀 astral \U0001d518, e\u0301, trailing space ", "nul \x00 in it", "x" * 100_000]
    async with open_store() as store:
        for i, text in enumerate(texts):
            await store.steer(sid, Steer(text, f"s{i}"))
        waiting = [s.text for s in await store.steers(sid)]
        taken = [m.text for m in await store.take_steers(sid, at=0, limit=16)]
        stored = [m.text for m in await store.messages(sid)]
    _expect(waiting == texts, "a steer's text changed while it waited")
    _expect(taken == texts and stored == texts, "a steer's text changed when it was taken")


@_case()
async def _a_missing_session_is_empty(open_store: OpenStore) -> None:
    sid = _sid()
    async with open_store() as store:
        _expect(await store.messages(sid) == [], "a new session has messages")
        _expect(await store.steers(sid) == [], "a new session has steers")
        _expect(await store.take_steers(sid, at=None, limit=16) == [], "took from nothing")


@_case()
async def _a_session_id_that_is_not_a_string_is_a_usage_error(open_store: OpenStore) -> None:
    bad: Any = 42
    async with open_store() as store:
        for call in (
            lambda: store.messages(bad),
            lambda: store.save(bad, [user("x")], at=0),
            lambda: store.steer(bad, Steer("x")),
            lambda: store.take_steers(bad, at=None, limit=1),
            lambda: store.steers(bad),
        ):
            try:
                await call()
            except UsageError as exc:
                _expect("session id" in str(exc), f"the error does not say what: {exc}")
            else:
                raise AssertionError("a session id of 42 was accepted")


@_case(persistent=True)
async def _everything_is_kept_across_a_new_store_object(open_store: OpenStore) -> None:
    sid = _sid()
    messages = [user("kept"), Message("assistant", (ToolCall("c", "f", '{"z":1,"z":2}'),))]
    async with open_store() as store:
        await store.save(sid, messages, at=0)
        await store.steer(sid, Steer("taken", "t"))
        await store.take_steers(sid, at=None, limit=1)
        await store.steer(sid, Steer("waiting", "w"))
    async with open_store() as store:
        back = await store.messages(sid)
        waiting = await store.steers(sid)
        await store.steer(sid, Steer("taken again?", "t"))
        again = await store.steers(sid)
    _expect(back[:2] == messages and back[2].id == "t", f"not kept: {back!r}")
    _expect([s.id for s in waiting] == ["w"], f"steers not kept: {waiting!r}")
    _expect([s.id for s in again] == ["w"], "a taken steer id was forgotten by a new store object")


# -- the pytest class ----------------------------------------------------------------------


def store_contract(
    open_store: OpenStore, *, persistent: bool = True, processes: bool = True
) -> type:
    """A pytest test class with one test per case of the store contract.

    ``open_store()`` returns an async context manager yielding a store; every call reaches
    the same backing data. ``persistent=False`` (a memory store) skips the case that needs a
    new store object to see the old one's data; ``processes=False`` skips the case with
    takers in separate processes, which also needs ``open_store`` to be picklable.
    """
    import pytest  # the suite runs under pytest; the library itself never imports it

    if processes:
        try:
            pickle.dumps(open_store)
        except Exception as exc:
            raise UsageError(
                f"store_contract(processes=True) needs a picklable open_store: {exc}"
            ) from exc

    def make(name: str, case: Case) -> Callable[[object], None]:
        def test(self: object) -> None:
            if name in PROCESS_CASES and not processes:
                pytest.skip("this store is not shared between processes")
            if name in PERSISTENT_CASES and not persistent:
                pytest.skip("this store keeps nothing past its object")
            asyncio.run(case(open_store))

        test.__name__ = f"test_{name}"
        test.__doc__ = case.__doc__
        return test

    namespace: dict[str, Any] = {f"test_{n}": make(n, c) for n, c in CASES.items()}
    return type("StoreContract", (), namespace)
