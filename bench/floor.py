"""steerable's step against the floor: the cheapest durable write of the same rows (issue 24).

A step is what ``Session.save`` stores between two model requests: two messages of about
1 KB each (an assistant message with a tool call, and its tool result) appended to the
session's transcript in one durable commit. steerable is timed on ``Session.save(transcript,
take=16)``, the call its loop makes at a step (it also takes waiting steers, in the same
transaction; none wait here), and on ``Session.save(transcript)`` (``take=0``) to show what
the take costs. On Postgres the store's pool resets with ``reset_when_needed``, as the one
``steerable serve --store postgresql://...`` makes (no reset query after each call); a
third column times ``take=16`` over a pool with asyncpg's default reset, as an application's
default pool gives the store. The floor writes the same two rows into a table of the
store's own shape (the store's own ``steerable_messages`` table: its columns, its indexes),
in the cheapest
durable way we know, with the rows' text encoded beforehand and the position known:

- SQLite: one two-row ``INSERT`` (its own implicit transaction) with ``sqlite3`` on the
  event loop's own thread, on a file with steerable's default journal mode and
  ``synchronous``; and the same write handed to a worker thread (``asyncio.to_thread``),
  which is what a store that keeps the loop free pays for the hop.
- Postgres: one held asyncpg connection, one two-row ``INSERT`` (prepared by asyncpg; one
  statement is one transaction, one round trip).
- MariaDB/MySQL: one held aiomysql connection (the store's driver) in autocommit mode, one
  two-row ``INSERT``: the statement commits itself, one round trip (an explicit ``COMMIT``
  would be a second).

Each system starts every round on a new session already holding N messages (stored
untimed), takes ``--warm`` unmeasured steps, then ``--steps`` measured ones. Rounds are
interleaved: each round runs every store, size and system, in a rotating order, after a
``sync`` so no system's writes pay for another's. A figure is the median over rounds of each
round's median; a ratio is the median of the rounds' own ratios.

Each store works in a database of its own (a temporary SQLite directory, a new Postgres
database, a new MariaDB database), dropped at the end; a server that does not answer is
skipped with a note. ``python -m bench.floor`` (``--quick``: a few seconds; ``--json``: one
JSON line of the figures at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench._common import Payloads, machine, median, micros, table, version
from bench._servers import (
    Unavailable,
    close_mysql_pool,
    driver,
    mysql_database,
    mysql_pool,
    postgres_database,
    postgres_pool,
    steerable_mysql,
    steerable_postgres,
    store_module,
)
from steerable import Message, Session, Store, ToolCall, ToolResult, codec, user
from steerable.stores._sqlite_rows import CLOCK
from steerable.stores.sqlite import SQLiteStore

OURS = "steerable"
NO_TAKE = "steerable take=0"
DEFAULT_RESET = "steerable default reset"
FLOOR = "floor"
THREAD = "floor to_thread"

Row = tuple[str, str]  # (message id, codec text)


# -- the messages -----------------------------------------------------------------------------


def step_messages(payloads: Payloads) -> list[Message]:
    """A step's two messages: a tool call with ~1 KB of arguments, its ~1 KB result."""
    call_id = f"call_{uuid.uuid4().hex[:24]}"
    arguments = json.dumps({"query": payloads.text(980)})
    return [
        Message("assistant", (ToolCall(call_id, "lookup", arguments),)),
        Message("user", (ToolResult(call_id, "lookup", payloads.text(1000)),)),
    ]


def transcript(messages: int, payloads: Payloads) -> list[Message]:
    """A stored transcript of ``messages`` messages: a prompt, then steps."""
    stored = [user(payloads.text(1000))]
    while len(stored) < messages:
        stored += step_messages(payloads)
    return stored[:messages]


def rows_of(messages: Sequence[Message]) -> list[Row]:
    return [(m.id, codec.encode(m)) for m in messages]


# -- the systems ------------------------------------------------------------------------------


class System(Protocol):
    name: str

    async def start(self, stored: list[Message], rows: list[Row]) -> None:
        """A new session holding ``stored`` (``rows`` is it encoded); not timed."""
        ...

    async def step(self, new: list[Message], rows: list[Row]) -> None:
        """Store one step's two messages (``rows``: them encoded); timed."""
        ...


@dataclass
class Steerable:
    """``Session.save(transcript, take=take)`` on one of steerable's stores."""

    store: Store
    take: int
    name: str = OURS
    _session: Session | None = None
    _transcript: list[Message] = field(default_factory=list)

    async def start(self, stored: list[Message], rows: list[Row]) -> None:
        sid = uuid.uuid4().hex
        await self.store.save(sid, stored, at=0)
        self._session = Session(sid, self.store)
        self._transcript = await self._session.messages()  # as a resumed run loads it

    async def step(self, new: list[Message], rows: list[Row]) -> None:
        assert self._session is not None
        self._transcript.extend(new)
        await self._session.save(self._transcript, take=self.take)


_SQLITE_INSERT = (
    "INSERT INTO steerable_messages (session, position, id, body, at)"
    f" VALUES (?, ?, ?, ?, {CLOCK}), (?, ?, ?, ?, {CLOCK})"
)


@dataclass
class SQLiteFloor:
    """One two-row INSERT with sqlite3, on the loop's thread or (``hop``) a worker thread."""

    db: sqlite3.Connection
    hop: bool
    name: str = FLOOR
    _sid: str = ""
    _next: int = 0

    async def start(self, stored: list[Message], rows: list[Row]) -> None:
        self._sid = uuid.uuid4().hex
        self.db.execute("BEGIN")  # isolation_level=None: the transactions are ours
        self.db.executemany(
            f"INSERT INTO steerable_messages (session, position, id, body, at)"
            f" VALUES (?, ?, ?, ?, {CLOCK})",
            [(self._sid, i, id, body) for i, (id, body) in enumerate(rows)],
        )
        self.db.execute("COMMIT")
        self._next = len(rows)

    def _write(self, params: tuple[object, ...]) -> None:
        self.db.execute(_SQLITE_INSERT, params)

    async def step(self, new: list[Message], rows: list[Row]) -> None:
        (a, body_a), (b, body_b) = rows
        at, sid = self._next, self._sid
        params = (sid, at, a, body_a, sid, at + 1, b, body_b)
        if self.hop:
            await asyncio.to_thread(self._write, params)
        else:
            self._write(params)
        self._next = at + 2


_PG_INSERT = (
    "INSERT INTO steerable_messages (session, position, id, body)"
    " VALUES ($1, $2, $3, $4), ($1, $5, $6, $7)"
)


@dataclass
class PostgresFloor:
    """One held asyncpg connection, one two-row INSERT (one statement, one transaction)."""

    conn: Any
    name: str = FLOOR
    _sid: str = ""
    _next: int = 0

    async def start(self, stored: list[Message], rows: list[Row]) -> None:
        self._sid = uuid.uuid4().hex
        await self.conn.executemany(
            "INSERT INTO steerable_messages (session, position, id, body) VALUES ($1, $2, $3, $4)",
            [(self._sid, i, id, body) for i, (id, body) in enumerate(rows)],
        )
        self._next = len(rows)

    async def step(self, new: list[Message], rows: list[Row]) -> None:
        (a, body_a), (b, body_b) = rows
        at = self._next
        await self.conn.execute(_PG_INSERT, self._sid, at, a, body_a, at + 1, b, body_b)
        self._next = at + 2


_MY_INSERT = (
    "INSERT INTO steerable_messages (session, position, id, body)"
    " VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)"
)


@dataclass
class MySQLFloor:
    """One held aiomysql connection (autocommit), one two-row INSERT that commits itself."""

    conn: Any
    name: str = FLOOR
    _sid: str = ""
    _next: int = 0

    async def start(self, stored: list[Message], rows: list[Row]) -> None:
        self._sid = uuid.uuid4().hex
        async with self.conn.cursor() as cursor:
            await cursor.execute("START TRANSACTION")
            await cursor.executemany(
                "INSERT INTO steerable_messages (session, position, id, body)"
                " VALUES (%s, %s, %s, %s)",
                [(self._sid, i, id, body) for i, (id, body) in enumerate(rows)],
            )
            await cursor.execute("COMMIT")
        self._next = len(rows)

    async def step(self, new: list[Message], rows: list[Row]) -> None:
        (a, body_a), (b, body_b) = rows
        at, sid = self._next, self._sid
        async with self.conn.cursor() as cursor:
            await cursor.execute(_MY_INSERT, (sid, at, a, body_a, sid, at + 1, b, body_b))
        self._next = at + 2


# -- the stores -------------------------------------------------------------------------------


@dataclass
class Backend:
    """The systems measured on one store's database."""

    name: str
    systems: list[System]
    notes: list[str] = field(default_factory=list)


def _sqlite_default_synchronous() -> str:
    return str(inspect.signature(SQLiteStore).parameters["synchronous"].default)


async def _sqlite_floor_file(path: Path, synchronous: str) -> sqlite3.Connection:
    """A file with the store's tables (made by the store), opened as the store opens it."""
    async with SQLiteStore(path):
        pass
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA busy_timeout = 30000")
    (mode,) = db.execute("PRAGMA journal_mode = WAL").fetchone()
    db.execute(f"PRAGMA synchronous = {synchronous}")
    assert mode == "wal", mode
    return db


@contextlib.asynccontextmanager
async def sqlite_backend() -> AsyncIterator[Backend]:
    """SQLiteStore with its defaults, and the floors, each on its own file."""
    synchronous = _sqlite_default_synchronous()
    async with contextlib.AsyncExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-floor-")))
        store = await stack.enter_async_context(SQLiteStore(root / "steerable.db"))
        store_nt = await stack.enter_async_context(SQLiteStore(root / "steerable-take0.db"))
        floor = await _sqlite_floor_file(root / "floor.db", synchronous)
        stack.callback(floor.close)
        hop = await _sqlite_floor_file(root / "floor-thread.db", synchronous)
        stack.callback(hop.close)
        yield Backend(
            f"SQLite {sqlite3.sqlite_version}",
            [
                Steerable(store, 16),
                Steerable(store_nt, 0, NO_TAKE),
                SQLiteFloor(floor, hop=False),
                SQLiteFloor(hop, hop=True, name=THREAD),
            ],
            [f"SQLite: WAL, synchronous={synchronous} (SQLiteStore's default) on every file"],
        )


@contextlib.asynccontextmanager
async def postgres_backend() -> AsyncIterator[Backend]:
    """PostgresStore over an asyncpg pool, and the floor on a held connection; one database."""
    async with contextlib.AsyncExitStack() as stack:
        db = await stack.enter_async_context(postgres_database("floor"))
        asyncpg = driver("asyncpg", "postgres")
        postgres = store_module("postgres")
        pool = await postgres_pool(db, 2, reset=postgres.reset_when_needed)
        stack.push_async_callback(pool.close)
        store = await steerable_postgres(pool)
        default_pool = await postgres_pool(db, 2)
        stack.push_async_callback(default_pool.close)
        conn = await asyncpg.connect(host=db.host, port=db.port, user=db.user, database=db.name)
        stack.push_async_callback(conn.close)
        server = await conn.fetchval("SHOW server_version")
        sync = await conn.fetchval("SHOW synchronous_commit")
        yield Backend(
            f"Postgres {server.split()[0]}",
            [
                Steerable(store, 16),
                Steerable(store, 0, NO_TAKE),
                Steerable(postgres.PostgresStore(default_pool), 16, DEFAULT_RESET),
                PostgresFloor(conn),
            ],
            [
                f"Postgres: synchronous_commit={sync}; asyncpg {version('asyncpg')}; steerable's"
                " pool resets with reset_when_needed (as `steerable serve` makes it), the"
                " default-reset column's with asyncpg's default reset query"
            ],
        )


@contextlib.asynccontextmanager
async def mysql_backend() -> AsyncIterator[Backend]:
    """MySQLStore over an aiomysql pool, and the floor on a held connection; one database."""
    async with contextlib.AsyncExitStack() as stack:
        db = await stack.enter_async_context(mysql_database("floor"))
        aiomysql = driver("aiomysql", "mysql")
        pool = await mysql_pool(db, 2)
        stack.push_async_callback(close_mysql_pool, pool)
        store = await steerable_mysql(pool)
        conn = await aiomysql.connect(
            host=db.host,
            port=db.port,
            user=db.user,
            password=db.password,
            db=db.name,
            autocommit=True,
            charset="utf8mb4",
        )
        stack.callback(conn.close)
        async with conn.cursor() as cursor:
            await cursor.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit")
            server, flush = await cursor.fetchone()
        name = "MariaDB" if "mariadb" in server.lower() else "MySQL"
        yield Backend(
            f"{name} {server.split('-')[0]}",
            [Steerable(store, 16), Steerable(store, 0, NO_TAKE), MySQLFloor(conn)],
            [f"{name}: innodb_flush_log_at_trx_commit={flush}; aiomysql {version('aiomysql')}"],
        )


STORES: dict[str, Callable[[], contextlib.AbstractAsyncContextManager[Backend]]] = {
    "sqlite": sqlite_backend,
    "postgres": postgres_backend,
    "mysql": mysql_backend,
}


# -- the run ----------------------------------------------------------------------------------

# (store, messages, system) -> each round's median seconds per step
Rounds = dict[tuple[str, int, str], list[float]]


async def _timed(system: System, steps: Sequence[tuple[list[Message], list[Row]]]) -> list[float]:
    times = []
    for new, rows in steps:
        start = time.perf_counter()
        await system.step(new, rows)
        times.append(time.perf_counter() - start)
    return times


async def measure(backends: Sequence[Backend], args: argparse.Namespace) -> Rounds:
    """Every round runs every store, size and system once, in a rotating order."""
    payloads = Payloads()
    stored = {m: transcript(m, payloads) for m in args.sizes}
    stored_rows = {m: rows_of(s) for m, s in stored.items()}
    runs = [(b, m, s) for b in backends for m in args.sizes for s in b.systems]
    rounds: Rounds = {}
    for index in range(args.rounds):
        steps = [step_messages(payloads) for _ in range(args.warm + args.steps)]
        encoded = [(new, rows_of(new)) for new in steps]
        shift = index * 3 % len(runs)
        for backend, messages, system in runs[shift:] + runs[:shift]:
            await asyncio.to_thread(os.sync)  # what the last system left dirty is written
            await system.start(stored[messages], stored_rows[messages])
            times = (await _timed(system, encoded))[args.warm :]
            key = (backend.name, messages, system.name)
            rounds.setdefault(key, []).append(median(times))
    return rounds


def encode_cost(repeat: int = 2000) -> float:
    """Seconds to encode a step's two messages with steerable's codec (median of batches)."""
    new = step_messages(Payloads(11))
    batches = []
    for _ in range(max(1, repeat // 200)):
        start = time.perf_counter()
        for _ in range(200):
            rows_of(new)
        batches.append((time.perf_counter() - start) / 200)
    return median(batches)


def figures(backends: Sequence[Backend], rounds: Rounds, sizes: Sequence[int]) -> dict[str, Any]:
    """Per store and size: each system's µs per step, and steerable's ratios to the floors."""
    stores: dict[str, Any] = {}
    for backend in backends:
        names = [s.name for s in backend.systems]
        per_size: dict[str, Any] = {}
        for messages in sizes:
            got = {n: rounds.get((backend.name, messages, n), []) for n in names}
            entry: dict[str, Any] = {"us_per_step": {n: median(v) * 1e6 for n, v in got.items()}}
            ratios = {}
            for floor in (FLOOR, THREAD):
                if floor in got:
                    pairs = zip(got[OURS], got[floor], strict=True)
                    ratios[floor] = median([a / b for a, b in pairs if b > 0])
            entry["ratio"] = ratios
            entry["rounds_us"] = {n: [round(t * 1e6, 1) for t in v] for n, v in got.items()}
            per_size[str(messages)] = entry
        stores[backend.name] = per_size
    return {"stores": stores}


def _x(value: float | None) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:.2f}x" if value < 10 else f"{value:.0f}x"


def report(result: dict[str, Any]) -> str:
    headers = [
        "store",
        "messages",
        "steerable µs/step",
        "take=0 µs/step",
        "floor µs/step",
        "steerable / floor",
        "to_thread floor µs/step",
        "steerable / to_thread floor",
        "default-reset pool µs/step",
    ]
    rows = []
    for store, per_size in result["stores"].items():
        for messages, entry in per_size.items():
            us, ratios = entry["us_per_step"], entry["ratio"]
            thread, default = us.get(THREAD), us.get(DEFAULT_RESET)
            rows.append(
                [
                    store,
                    f"{int(messages):,}",
                    micros(us[OURS] / 1e6),
                    micros(us[NO_TAKE] / 1e6),
                    micros(us[FLOOR] / 1e6),
                    _x(ratios.get(FLOOR)),
                    "-" if thread is None else micros(thread / 1e6),
                    _x(ratios.get(THREAD)),
                    "-" if default is None else micros(default / 1e6),
                ]
            )
    return table(headers, rows)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--sizes", type=int, nargs="+", default=[10, 1000], help="messages already stored")
    add("--rounds", type=int, default=15, help="interleaved rounds")
    add("--steps", type=int, default=20, help="measured steps per system and round")
    add("--warm", type=int, default=3, help="unmeasured steps first")
    add("--stores", nargs="+", default=list(STORES), choices=list(STORES))
    add("--quick", action="store_true", help="a few seconds: 2 rounds of 5 steps (after 1)")
    add("--json", action="store_true", help="end with one JSON line of the figures")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.warm = 2, 5, 1
    return args


async def run(args: argparse.Namespace) -> dict[str, Any]:
    notes: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        backends = []
        for key in args.stores:
            try:
                backends.append(await stack.enter_async_context(STORES[key]()))
            except Unavailable as exc:
                notes.append(f"{key} skipped: {exc}")
        load = os.getloadavg()[0]
        rounds = await measure(backends, args)
        after = os.getloadavg()[0]
        result = figures(backends, rounds, args.sizes)
    result["encode_us"] = encode_cost(200 if args.quick else 4000) * 1e6
    result["load"] = [round(load, 2), round(after, 2)]
    result["notes"] = [n for b in backends for n in b.notes] + notes
    result["rounds"], result["steps"], result["warm"] = args.rounds, args.steps, args.warm
    return result


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    started = time.perf_counter()
    result = await run(args)
    print("# steerable's step against the floor\n")
    extra = [
        f"- {args.rounds} interleaved rounds x {args.steps} steps (after {args.warm}) per"
        " store, size and system; median of the rounds' medians, ratio: median of the"
        " rounds' ratios",
        f"- load average (1 min) {result['load'][0]:.2f} before, {result['load'][1]:.2f} after",
    ]
    print(machine(extra))
    print()
    print(report(result))
    print(
        f"\nEncoding a step's two messages (steerable's codec, untimed for the floors):"
        f" {micros(result['encode_us'] / 1e6)} µs"
    )
    for note in result["notes"]:
        print(f"\n- {note}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
