"""A service turn's store time against the session's length (issue 24, "Speed").

A claim that knows nothing reads and decodes the session's whole transcript
(``Claim.messages``), so a turn's store time grows with the session's length; a replica
that served the session's last turn holds its transcript and claims with ``known``, and
reads only what is new. This measures both curves in one run: each store and length has a
session claimed knowing nothing (the store's name alone in the table) and one claimed as
the replica that served it would (", held": after each turn it knows the whole transcript
under the claim's mark; a session filled anew gets one untimed turn first, which reads it
all, as the first turn a replica serves of a session does). ``--held-only`` runs only the
held sessions: a claim that reads a whole long transcript slows the store's next calls by
itself, and in the interleaved run that lands on whatever comes next (on SQLite the worker
thread's next call took 1 to 3 ms more after a claim of 10,000 messages while the claim's raw
rows were freed there; now about 0.4 ms more, the CPU's caches emptied by the read:
``python -m bench.sqlite_next_call``).

Each store gets one session per length, filled (untimed, through the store's own ``save``)
with N messages of about 1 KB each, in the pattern of real turns: a user prompt, an
assistant message calling a tool (~1 KB of arguments), the tool's result, the assistant's
answer. Then a turn's store calls are timed, made directly on the
:class:`~steerable.service_store.ServiceStore` verbs in the order the service makes them:

1. ``enqueue`` a send;
2. ``claim`` it with ``first=True`` (the claim returns the transcript, or what is new in it,
   and makes the turn's first step: the prompt stored, ``take=16``);
3. ``step`` saving one tool step: the assistant's call and its result (``take=16``);
4. ``end_turn`` ``completed``, storing the answer with it (``last=``).

(Until 2026-12-04 16:40 UTC a turn here was six calls: the claim, three steps, the prompt's,
the tool's and the answer's, and the end; the service has since made the first step with the
claim and stored the answer with the end.)

Each turn adds 4 messages to its session; a session that has grown past ``N + N/10 + 8``
messages is replaced, between rounds and untimed, by a new one filled to N again, so every
claim of a point reads between N and ``N + N/10 + 8`` messages (10 to 18 for N = 10).
Rounds are interleaved: each round runs one turn on every store and length, after a
``sync``, the stores in a rotating order and each store's lengths together, in a rotating
order; the first ``--warm`` rounds are not counted. A figure is the median over the counted
turns; a ratio is to the same store's shortest session.

Stores: SQLite (a file in a temporary directory, the store's defaults), Postgres and
MariaDB/MySQL (a new database each, dropped at the end; see ``bench/_servers.py`` for where
the servers are), and MongoDB when asked for (``--stores ... mongodb``) and a server answers
at ``BENCH_MONGODB_URL``. A server that does not answer is skipped with a note.

``python -m bench.turn_length`` (about 35 s here); ``--quick`` (SQLite, 10 and 200
messages, seconds); ``--json`` (one JSON line of the figures at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench._common import Payloads, machine, median, micros, ratio, table, version
from bench._servers import (
    Unavailable,
    close_mysql_pool,
    mongodb_database,
    mysql_database,
    mysql_pool,
    postgres_database,
    postgres_pool,
    steerable_mongodb,
    steerable_mysql,
    steerable_postgres,
)
from bench._service_counting import Both
from steerable.messages import Message, ToolCall, ToolResult, assistant, user
from steerable.service_store import Input, Known, Outcome
from steerable.stores.sqlite import SQLiteStore

LENGTHS = (10, 1_000, 10_000)
QUICK_LENGTHS = (10, 200)
STORES = ("sqlite", "postgres", "mysql", "mongodb")
DEFAULT_STORES = ("sqlite", "postgres", "mysql")
NAMES = {"sqlite": "SQLite", "postgres": "Postgres", "mysql": "MariaDB/MySQL", "mongodb": "MongoDB"}
VERBS = ("enqueue", "claim", "step tool", "end_turn")
TAKE = 16
LEASE = 60.0
FILL_CHUNK = 500
POOL = 2

T = TypeVar("T")


# -- the messages -------------------------------------------------------------------------------


def tool_step(payloads: Payloads) -> list[Message]:
    """An assistant message calling a tool with ~1 KB of arguments, and its ~1 KB result."""
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    arguments = json.dumps({"query": payloads.text(980)})
    return [
        Message("assistant", (ToolCall(call_id, "lookup", arguments),)),
        Message("user", (ToolResult(call_id, "lookup", payloads.text(1000)),)),
    ]


def history(count: int, payloads: Payloads) -> list[Message]:
    """``count`` messages of ~1 KB in turns of four: prompt, tool call, result, answer."""
    messages: list[Message] = []
    while len(messages) < count:
        messages += [user(payloads.text(1000)), *tool_step(payloads)]
        messages.append(assistant(payloads.text(1000)))
    return messages[:count]


@dataclass
class TurnInput:
    """What one turn stores, made before it is timed."""

    send: Input
    step: list[Message]
    answer: Message

    @classmethod
    def make(cls, payloads: Payloads) -> TurnInput:
        return cls(
            Input("send", payloads.text(1000), f"in-{uuid.uuid4().hex}"),
            tool_step(payloads),
            assistant(payloads.text(1000)),
        )


# -- a point: one store, one session length -----------------------------------------------------


@dataclass
class Point:
    """One session of ``length`` messages at the start on one store, and its timed turns.

    ``holding``: its claims say what the replica holds of the transcript (``known``: the
    whole transcript after its last turn, as a replica that served it has), so they read
    only what is new; otherwise each claim reads the whole transcript."""

    store: str
    length: int
    session: str
    holding: bool = False
    known: Known | None = None
    messages: int = 0  # the session's length now
    seconds: dict[str, list[float]] = field(default_factory=lambda: {v: [] for v in VERBS})
    turn: list[float] = field(default_factory=list)
    claimed: list[int] = field(default_factory=list)  # messages each claim read
    sessions: int = 0  # how many sessions it filled


async def fill(store: Both, session: str, messages: Sequence[Message]) -> None:
    """Store ``messages`` as the session's transcript with the core ``save``, in chunks."""
    for at in range(0, len(messages), FILL_CHUNK):
        await store.save(session, messages[at : at + FILL_CHUNK], at=at)


def longest(length: int) -> int:
    """The most messages a claim of a session filled to ``length`` reads (then a new one)."""
    return length + length // 10 + 8


async def refill(store: Both, point: Point, messages: Sequence[Message]) -> None:
    """A new session for ``point``, holding ``messages`` (untimed)."""
    point.session = f"turn-length-{point.length}-{uuid.uuid4().hex[:8]}"
    await fill(store, point.session, messages)
    point.messages = len(messages)
    point.known = None
    point.sessions += 1


async def one_turn(store: Both, point: Point, given: TurnInput, *, counted: bool) -> None:
    """One turn's store calls, each timed; recorded in ``point`` when ``counted``."""
    clock = time.perf_counter
    times: dict[str, float] = {}
    sid = point.session

    t0 = clock()
    await store.enqueue(sid, given.send)
    t1 = clock()
    known = {sid: point.known} if point.known is not None else None
    claim = await store.claim(
        "bench", seconds=LEASE, cap=TAKE, session=sid, known=known, first=True
    )
    t2 = clock()
    times["enqueue"], times["claim"] = t1 - t0, t2 - t1
    if claim is None or claim.turn != given.send.id:
        raise AssertionError(f"{point.store}: the claim of {sid} did not start the send")
    if point.known is not None and claim.known != point.known.length:
        raise AssertionError(f"{point.store}: the claim read {claim.known} messages it knew")
    at = claim.known + len(claim.messages)
    if at != point.messages:
        raise AssertionError(f"{point.store}: claimed {at} messages, not {point.messages}")
    if claim.taken != []:
        raise AssertionError(f"{point.store}: the claim of {sid} made no first step")
    lease = claim.lease

    t0 = clock()
    await store.step(lease, given.step, at=at + 1, take=TAKE)
    t1 = clock()
    await store.end_turn(lease, Outcome("completed", "done"), last=[given.answer], at=at + 3)
    t2 = clock()
    times["step tool"], times["end_turn"] = t1 - t0, t2 - t1
    point.messages = at + 4
    if point.holding:
        point.known = Known(point.messages, claim.mark)
    if counted:
        for verb in VERBS:
            point.seconds[verb].append(times[verb])
        point.turn.append(sum(times.values()))
        point.claimed.append(len(claim.messages))


# -- the stores ---------------------------------------------------------------------------------


@dataclass
class Opened:
    name: str
    store: Both
    server: str = ""


@contextlib.asynccontextmanager
async def _sqlite(root: Path) -> AsyncIterator[Opened]:
    async with SQLiteStore(root / "turn_length.db") as store:
        yield Opened(NAMES["sqlite"], _cast(store), f"SQLite {sqlite3.sqlite_version}, a file")


@contextlib.asynccontextmanager
async def _postgres(root: Path) -> AsyncIterator[Opened]:
    async with postgres_database("turn_length") as db:
        pool = await postgres_pool(db, POOL)
        try:
            store = await steerable_postgres(pool)
            server = await pool.fetchval("SHOW server_version")
            yield Opened(NAMES["postgres"], _cast(store), f"Postgres {server}")
        finally:
            await pool.close()


@contextlib.asynccontextmanager
async def _mysql(root: Path) -> AsyncIterator[Opened]:
    async with mysql_database("turn_length") as db:
        pool = await mysql_pool(db, POOL)
        try:
            store = await steerable_mysql(pool)
            async with pool.acquire() as conn, conn.cursor() as cursor:
                await cursor.execute("SELECT VERSION()")
                (server,) = await cursor.fetchone()
            yield Opened(NAMES["mysql"], _cast(store), f"MariaDB/MySQL {server}")
        finally:
            await close_mysql_pool(pool)


@contextlib.asynccontextmanager
async def _mongodb(root: Path) -> AsyncIterator[Opened]:
    async with mongodb_database("turn_length", pool=POOL) as (_, db, server):
        yield Opened(NAMES["mongodb"], _cast(await steerable_mongodb(db)), server)


OPENERS: dict[str, Callable[[Path], contextlib.AbstractAsyncContextManager[Opened]]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    "mysql": _mysql,
    "mongodb": _mongodb,
}


def _cast(store: Any) -> Both:
    typed: Both = store
    return typed


# -- the run ------------------------------------------------------------------------------------


def _rotated(items: list[T], index: int) -> list[T]:
    shift = index % len(items) if items else 0
    return items[shift:] + items[:shift]


def _order(points: list[tuple[Opened, Point]], index: int) -> list[tuple[Opened, Point]]:
    """Round ``index``'s order: the stores in turn, each running its lengths in turn.

    A store's lengths run together, so that the first of them, which comes after another
    store's calls (its code and data colder in the CPU's caches), is each length in turn.
    """
    stores = _rotated(list(dict.fromkeys(o.name for o, _ in points)), index)
    return [
        entry
        for name in stores
        for entry in _rotated([e for e in points if e[0].name == name], index)
    ]


def _progress(started: float, what: str) -> None:
    print(f"[{time.perf_counter() - started:5.1f} s] {what}", file=sys.stderr, flush=True)


async def run(
    args: argparse.Namespace,
) -> tuple[list[Opened], list[Point], list[str], float]:
    """Open the stores, fill the sessions, run the rounds; the points and the notes."""
    started = time.perf_counter()
    notes: list[str] = []
    payloads = Payloads()
    lengths: list[int] = sorted(set(args.lengths))
    transcripts = {n: history(n, payloads) for n in lengths}
    turns = [[TurnInput.make(payloads) for _ in lengths] for _ in range(args.rounds + args.warm)]
    _progress(started, f"messages made: {', '.join(map(str, lengths))}")
    with tempfile.TemporaryDirectory(prefix="bench-turn-length-") as root:
        async with contextlib.AsyncExitStack() as stack:
            opened: list[Opened] = []
            for key in args.stores:
                try:
                    opened.append(await stack.enter_async_context(OPENERS[key](Path(root))))
                except Unavailable as exc:
                    notes.append(f"{NAMES[key]} skipped: {exc}")
            points: list[tuple[Opened, Point]] = []
            for target in opened:
                for n in lengths:
                    for holding in (True,) if args.held_only else (False, True):
                        point = Point(target.name, n, "", holding)
                        await refill(target.store, point, transcripts[n])
                        points.append((target, point))
                _progress(started, f"{target.name}: sessions filled")
            for index in range(args.warm + args.rounds):
                for target, point in points:
                    if point.messages > longest(point.length):
                        await refill(target.store, point, transcripts[point.length])
                    if point.holding and point.known is None:  # as the replica that served it
                        given = TurnInput.make(payloads)
                        await one_turn(target.store, point, given, counted=False)
                os.sync()  # no point pays for the writes of the one before
                for target, point in _order(points, index):
                    given = turns[index][lengths.index(point.length)]
                    # a fresh id per store: the same Input on two stores is two inputs anyway
                    send = Input("send", given.send.text, f"{given.send.id}-{target.name}")
                    await one_turn(
                        target.store,
                        point,
                        TurnInput(send, given.step, given.answer),
                        counted=index >= args.warm,
                    )
                if index == args.warm - 1 or (index + 1) % 10 == 0:
                    _progress(started, f"round {index + 1} of {args.warm + args.rounds}")
            elapsed = time.perf_counter() - started
    return opened, [p for _, p in points], notes, elapsed


# -- the report ---------------------------------------------------------------------------------


def figures(points: list[Point]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per store and length: the medians (µs), the ratios to the shortest session, n."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for point in points:
        name = f"{point.store}, held" if point.holding else point.store
        found.setdefault(name, {})[str(point.length)] = {
            "claim_us": median(point.seconds["claim"]) * 1e6,
            "turn_us": median(point.turn) * 1e6,
            "verbs_us": {v: median(point.seconds[v]) * 1e6 for v in VERBS},
            "turns": len(point.turn),
            "messages_claimed": [min(point.claimed), max(point.claimed)] if point.claimed else [],
            "messages_claimed_median": median(point.claimed),
            "sessions": point.sessions,
        }
    for lengths in found.values():
        base = lengths[min(lengths, key=int)]
        for entry in lengths.values():
            entry["claim_ratio"] = entry["claim_us"] / base["claim_us"]
            entry["turn_ratio"] = entry["turn_us"] / base["turn_us"]
    return found


def report(found: dict[str, dict[str, dict[str, Any]]]) -> str:
    """One table: per store and length, the claim, the whole turn, their ratios."""
    rows = []
    for store, lengths in found.items():
        base = lengths[min(lengths, key=int)]
        for length, entry in lengths.items():
            rest = entry["turn_us"] - entry["claim_us"]
            rows.append(
                [
                    store,
                    f"{int(length):,}",
                    f"{entry['messages_claimed_median']:,.0f}",
                    micros(entry["claim_us"] / 1e6),
                    ratio(entry["claim_us"], base["claim_us"]),
                    micros(entry["turn_us"] / 1e6),
                    ratio(entry["turn_us"], base["turn_us"]),
                    f"{entry['claim_us'] / entry['turn_us']:.0%}",
                    micros(rest / 1e6),
                    str(entry["turns"]),
                ]
            )
    shortest = min((int(n) for lengths in found.values() for n in lengths), default=0)
    headers = [
        "store",
        "messages at start",
        "claimed (median)",
        "claim µs",
        f"claim vs {shortest}",
        "turn µs",
        f"turn vs {shortest}",
        "claim / turn",
        "turn - claim µs",
        "n",
    ]
    return table(headers, rows)


def verbs_table(found: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Each verb's median µs, per store and length."""
    rows = [
        [store, f"{int(length):,}", *(micros(entry["verbs_us"][v] / 1e6) for v in VERBS)]
        for store, lengths in found.items()
        for length, entry in lengths.items()
    ]
    return table(["store", "messages at start", *(f"{v} µs" for v in VERBS)], rows)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="SQLite, 10 and 200: seconds")
    parser.add_argument("--json", action="store_true", help="one JSON line of figures at the end")
    parser.add_argument("--rounds", type=int, default=50, help="counted rounds (turns per point)")
    parser.add_argument("--warm", type=int, default=3, help="uncounted rounds first")
    parser.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    parser.add_argument("--stores", nargs="+", default=list(DEFAULT_STORES), choices=STORES)
    parser.add_argument(
        "--held-only",
        action="store_true",
        help="only the sessions claimed as the replica that served them (no whole reads)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warm, args.lengths, args.stores = 5, 1, list(QUICK_LENGTHS), ["sqlite"]
    if args.rounds < 1 or args.warm < 0 or min(args.lengths) < 0:
        parser.error("--rounds is at least 1, --warm and --lengths at least 0")
    return args


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    opened, points, notes, elapsed = await run(args)
    load_after = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    found = figures(points)
    print("# A turn's store time against the session's length\n")
    lines = [
        f"- {args.rounds} counted rounds after {args.warm} warm-up; each round one turn per"
        " store and length (the stores in turn, each its lengths together, in turn); medians"
        " over the counted turns",
        f"- load average before {load_before}, after {load_after}",
        *(f"- {o.name}: {o.server}" for o in opened),
        *(f"- {d}: {version(d)}" for d in ("asyncpg", "aiomysql", "pymongo")),
    ]
    print(machine(lines))
    print("\n## The claim and the whole turn (enqueue, claim, 3 steps, end_turn)\n")
    print(report(found))
    print("\n## Each verb\n")
    print(verbs_table(found))
    for note in notes:
        print(f"\n- {note}")
    print(f"\n({elapsed:.0f} s)")
    if args.json:
        print(
            json.dumps(
                {
                    "rounds": args.rounds,
                    "warm": args.warm,
                    "lengths": sorted(set(args.lengths)),
                    "verbs": list(VERBS),
                    "stores": found,
                    "servers": {o.name: o.server for o in opened},
                    "notes": notes,
                    "seconds": round(elapsed, 1),
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main())
