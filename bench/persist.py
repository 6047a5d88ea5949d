"""Persist cost per step as the transcript grows: steerable, a naive store and the peers.

A step is what the ReAct loop persists between two model requests: one assistant message
holding a tool call (about 1 KB of arguments) and one tool result (about 1 KB). Every
system starts from a stored transcript of N messages (the prompt and N/2 earlier steps of
the same shape), takes ``--warm`` steps that are not measured, then ``--steps`` measured
ones. Repetitions are interleaved: each repetition runs every system at every size once, in
a rotating order, so the noise of a shared machine falls on all of them alike; the page cache
is flushed (``sync``) before each, so no system's fsyncs pay for another's writes. Times are
medians over all measured steps; bytes are means (they include the periodic costs, such as a
SQLite WAL checkpoint, that a median would hide).

Per step, each system is timed on exactly the persistence its own loop does:

- steerable: ``Session.save(transcript, take=16)``, the one store call of a step (it
  also takes waiting steers, in the same transaction).
- naive: the transcript as one JSON document, its row replaced on every save.
- LangGraph: its checkpointer under a ReAct graph (``durability="sync"``): the time its
  ``aput``/``aput_writes`` calls are in flight during the step (overlaps counted once).
- OpenAI Agents SDK: ``session.add_items([call, output])``, what its Runner does per step.

Bytes per step, two ways:

- payload: the serialized data each system hands its database for the step (steerable:
  codec text of the new messages; naive: the whole document; LangGraph: everything its
  serializer produced; Agents SDK: the items' JSON).
- written: bytes the process passed to ``write()`` during the step (``/proc/self/io``).
  On SQLite that is every page image put in the WAL, plus checkpoints into the main file;
  on a server it is everything sent to it (statements and parameters).

Backends: SQLite (always), Postgres, MySQL/MariaDB and MongoDB when steerable's store for
them imports and the server answers; anything missing is skipped with a note. Run:
``python -m bench.persist`` (``--help`` for the knobs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from bench._common import Payloads, machine, mean, median, micros, ratio, size, table, written
from bench._naive import NaiveMongo, NaiveMySQL, NaivePostgres, NaiveSQLite, NaiveStore
from bench._persist_saver import SAVER, steerable_saver
from bench._servers import (
    Database,
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
from steerable import Message, Session, Store, ToolCall, ToolResult, codec, user
from steerable.stores.sqlite import SQLiteStore

OURS = "steerable"


# -- the conversation, neutral ------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One step's content: a tool call and its result."""

    call_id: str
    arguments: str  # JSON text, about 1 KB
    result: str  # about 1 KB


@dataclass(frozen=True)
class Conversation:
    """A prompt, the earlier steps already stored, and the steps to take."""

    prompt: str
    stored: tuple[Turn, ...]
    steps: tuple[Turn, ...]

    @property
    def stored_messages(self) -> int:
        return 1 + 2 * len(self.stored)


def conversation(messages: int, steps: int, payloads: Payloads) -> Conversation:
    """A conversation of about ``messages`` stored messages and ``steps`` steps to take."""

    def turn() -> Turn:
        arguments = json.dumps({"query": payloads.text(980)})
        return Turn(f"call_{uuid.uuid4().hex[:24]}", arguments, payloads.text(1000))

    return Conversation(
        payloads.text(1000),
        tuple(turn() for _ in range(messages // 2)),
        tuple(turn() for _ in range(steps)),
    )


@dataclass(frozen=True)
class Sample:
    """One measured step."""

    seconds: float
    payload: int
    written: int


class System(Protocol):
    """One way of persisting the loop's steps, on one backend."""

    name: str

    async def measure(self, chat: Conversation, warm: int) -> list[Sample]:
        """Store ``chat.stored``, take ``chat.steps``; samples of all but the first ``warm``."""
        ...


class Timer:
    """Times one awaited call and counts the bytes the process wrote meanwhile."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    async def step(self, work: Awaitable[Any], payload: int, keep: bool) -> Any:
        before = written()
        start = time.perf_counter()
        result = await work
        seconds = time.perf_counter() - start
        after = written()
        if keep:
            self.samples.append(Sample(seconds, payload, after - before))
        return result


# -- steerable and the naive store --------------------------------------------------------


def steerable_messages(turn: Turn) -> list[Message]:
    """The two messages of a step, as steerable's loop records them."""
    return [
        Message("assistant", (ToolCall(turn.call_id, "lookup", turn.arguments),)),
        Message("user", (ToolResult(turn.call_id, "lookup", turn.result),)),
    ]


def steerable_transcript(chat: Conversation) -> list[Message]:
    """The stored part of ``chat`` as steerable messages."""
    return [user(chat.prompt), *(m for t in chat.stored for m in steerable_messages(t))]


@dataclass
class Steerable:
    """steerable's store, driven the way the loop drives it: one ``Session.save`` a step."""

    store: Store
    name: str = OURS

    async def measure(self, chat: Conversation, warm: int) -> list[Sample]:
        sid = uuid.uuid4().hex
        await self.store.save(sid, steerable_transcript(chat), at=0)
        session = Session(sid, self.store)
        transcript = await session.messages()  # a resumed run loads it like this
        timer = Timer()
        for index, turn in enumerate(chat.steps):
            new = steerable_messages(turn)
            transcript.extend(new)
            payload = sum(len(codec.encode(m).encode()) for m in new)
            await timer.step(session.save(transcript, take=16), payload, index >= warm)
        return timer.samples


@dataclass
class Naive:
    """The naive store: the whole transcript rewritten on every save."""

    store: NaiveStore
    name: str = "naive rewrite"

    async def measure(self, chat: Conversation, warm: int) -> list[Sample]:
        sid = uuid.uuid4().hex
        transcript = steerable_transcript(chat)
        await self.store.save(sid, transcript)
        timer = Timer()
        for index, turn in enumerate(chat.steps):
            transcript.extend(steerable_messages(turn))
            before, start = written(), time.perf_counter()
            payload = await self.store.save(sid, transcript)
            seconds, after = time.perf_counter() - start, written()
            if index >= warm:
                timer.samples.append(Sample(seconds, payload, after - before))
        return timer.samples


# -- the OpenAI Agents SDK ------------------------------------------------------------------


def agents_items(turn: Turn) -> list[dict[str, Any]]:
    """The two items the Agents SDK's Runner saves for a step."""
    return [
        {
            "type": "function_call",
            "id": f"fc_{turn.call_id}",
            "call_id": turn.call_id,
            "name": "lookup",
            "arguments": turn.arguments,
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": turn.call_id, "output": turn.result},
    ]


@dataclass
class AgentsSDK:
    """An Agents SDK session: ``add_items`` with a step's two items."""

    open: Callable[[str], Awaitable[Any]]
    serialize: Callable[[dict[str, Any]], str]
    name: str = "Agents SDK"

    async def measure(self, chat: Conversation, warm: int) -> list[Sample]:
        session = await self.open(uuid.uuid4().hex)
        try:
            prompt: dict[str, Any] = {"role": "user", "content": chat.prompt}
            await session.add_items([prompt, *(i for t in chat.stored for i in agents_items(t))])
            timer = Timer()
            for index, turn in enumerate(chat.steps):
                items = agents_items(turn)
                payload = sum(len(self.serialize(i).encode()) for i in items)
                await timer.step(session.add_items(items), payload, index >= warm)
            return timer.samples
        finally:
            closing = getattr(session, "close", None)
            if closing is not None:
                closed = closing()
                if inspect.isawaitable(closed):
                    await closed


# -- LangGraph --------------------------------------------------------------------------------


@dataclass
class LangGraph:
    """A LangGraph ReAct graph over one of LangGraph's checkpointers."""

    saver: Any
    name: str = "LangGraph"
    spans: list[tuple[float, float]] = field(default_factory=list)
    graph: Any = None

    def __post_init__(self) -> None:
        from bench._langgraph import ReActGraph, timed_saver

        self._results: dict[str, str] = {}
        self.graph = ReActGraph(self.saver, lambda call: self._results[call["id"]])
        self.graph.count_serialized(self.saver.serde)
        timed_saver(self.saver, self.spans)

    async def measure(self, chat: Conversation, warm: int) -> list[Sample]:
        from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage

        from bench._langgraph import covered

        def call(turn: Turn) -> AIMessage:
            args = json.loads(turn.arguments)
            return AIMessage("", tool_calls=[{"name": "lookup", "args": args, "id": turn.call_id}])

        stored: list[AnyMessage] = [HumanMessage(chat.prompt)]
        for turn in chat.stored:
            stored += [call(turn), ToolMessage(turn.result, tool_call_id=turn.call_id)]
        self._results = {t.call_id: t.result for t in chat.steps}
        graph = self.graph
        graph.script = iter([*(call(t) for t in chat.steps), AIMessage("done")])
        graph.marks.clear()
        self.spans.clear()
        await graph.run(stored, uuid.uuid4().hex, len(chat.steps))
        samples = []
        for index in range(warm, len(chat.steps)):
            (start, io0, payload0), (end, io1, payload1) = graph.marks[index : index + 2]
            samples.append(Sample(covered(self.spans, start, end), payload1 - payload0, io1 - io0))
        return samples


def langgraph_serde() -> Any:
    """A serializer of LangGraph's default kind, owned by one saver (we count its output)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


# -- backends ---------------------------------------------------------------------------------


@dataclass
class Backend:
    """The systems measured on one database, and notes on what was skipped."""

    name: str
    systems: list[System] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, label: str, make: Callable[[], System]) -> None:
        """Add the system ``make`` builds, or a note if its package is missing."""
        try:
            self.systems.append(make())
        except ImportError as exc:
            self.notes.append(f"{label} skipped: {exc} (pip install -e '.[bench]')")

    async def add_async(self, label: str, make: Callable[[], Awaitable[System]]) -> None:
        """:meth:`add` for a system built by a coroutine; any failure becomes a note."""
        try:
            self.systems.append(await make())
        except ImportError as exc:
            self.notes.append(f"{label} skipped: {exc} (pip install -e '.[bench]')")
        except Exception as exc:
            self.notes.append(f"{label} skipped: {type(exc).__name__}: {exc}")


@contextlib.asynccontextmanager
async def sqlite_backend(synchronous: str) -> AsyncIterator[Backend]:
    """Every system on its own SQLite file in a temporary directory, WAL, ``synchronous``."""
    backend = Backend(f"SQLite (WAL, synchronous={synchronous})")
    async with contextlib.AsyncExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-persist-")))
        mode: Literal["NORMAL", "FULL"] = "FULL" if synchronous == "FULL" else "NORMAL"
        store = await stack.enter_async_context(
            SQLiteStore(root / "steerable.db", synchronous=mode)
        )
        backend.systems.append(Steerable(store))
        naive = NaiveSQLite(root / "naive.db", synchronous)
        stack.push_async_callback(naive.close)
        backend.systems.append(Naive(naive))

        async def langgraph() -> System:
            import aiosqlite
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            conn = await aiosqlite.connect(root / "langgraph.db")
            stack.push_async_callback(conn.close)
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute(f"PRAGMA synchronous = {synchronous}")
            return LangGraph(AsyncSqliteSaver(conn, serde=langgraph_serde()))

        await backend.add_async("LangGraph (langgraph-checkpoint-sqlite)", langgraph)
        saver_store = SQLiteStore(root / "saver.db", synchronous=mode)
        await backend.add_async(
            SAVER, lambda: steerable_saver(stack, saver_store, LangGraph, langgraph_serde())
        )

        def agents() -> System:
            from agents import SQLiteSession

            async def open_session(sid: str) -> Any:
                session = SQLiteSession(sid, root / "agents.db")
                configure = session._configure_connection

                def configured(conn: Any) -> None:  # the same durability as the others
                    configure(conn)
                    conn.execute(f"PRAGMA synchronous = {synchronous}")

                vars(session)["_configure_connection"] = configured
                return session

            return AgentsSDK(open_session, json.dumps)

        backend.add("Agents SDK (SQLiteSession)", agents)
        yield backend


def _sqlalchemy_session(engine: Any, create_tables: bool) -> Callable[[str], Awaitable[Any]]:
    from agents.extensions.memory import SQLAlchemySession

    async def open_session(sid: str) -> Any:
        return SQLAlchemySession(sid, engine=engine, create_tables=create_tables)

    return open_session


def _compact_json(item: dict[str, Any]) -> str:
    return json.dumps(item, separators=(",", ":"))


# SQLAlchemySession's own DDL fails on MySQL ("VARCHAR requires a length"): these are its
# tables as it declares them, with the lengths MySQL needs.
_AGENTS_MYSQL_DDL = [
    "CREATE TABLE agent_sessions (session_id VARCHAR(255) PRIMARY KEY,"
    " created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,"
    " updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=InnoDB",
    "CREATE TABLE agent_messages (id INTEGER AUTO_INCREMENT PRIMARY KEY,"
    " session_id VARCHAR(255) NOT NULL, message_data LONGTEXT NOT NULL,"
    " created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,"
    " INDEX idx_agent_messages_session_time (session_id, created_at),"
    " FOREIGN KEY (session_id) REFERENCES agent_sessions (session_id) ON DELETE CASCADE"
    ") ENGINE=InnoDB",
]


async def _agents_sqlalchemy(
    stack: contextlib.AsyncExitStack, url: str, ddl: Sequence[str] = ()
) -> System:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    stack.push_async_callback(engine.dispose)
    if ddl:
        async with engine.begin() as conn:
            for statement in ddl:
                await conn.exec_driver_sql(statement)
    system = AgentsSDK(_sqlalchemy_session(engine, create_tables=not ddl), _compact_json)
    # SQLAlchemySession creates its tables on first use: fail here, not mid-measurement
    await system.measure(conversation(2, 1, Payloads()), 0)
    return system


@contextlib.asynccontextmanager
async def postgres_backend() -> AsyncIterator[Backend]:
    """steerable, naive, LangGraph and the Agents SDK on a fresh Postgres database."""
    async with contextlib.AsyncExitStack() as stack:
        db: Database = await stack.enter_async_context(postgres_database("persist"))
        backend = Backend("Postgres")
        pool = await postgres_pool(db, 2)
        stack.push_async_callback(pool.close)
        backend.systems.append(Steerable(ours := await steerable_postgres(pool)))
        naive = NaivePostgres(pool)
        await naive.setup()
        backend.systems.append(Naive(naive))

        async def langgraph() -> System:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
            from psycopg import AsyncConnection
            from psycopg.rows import dict_row

            conninfo = f"host={db.host} port={db.port} user={db.user} dbname={db.name}"
            conn = await AsyncConnection.connect(
                conninfo, autocommit=True, prepare_threshold=0, row_factory=dict_row
            )
            stack.push_async_callback(conn.close)
            saver = AsyncPostgresSaver(conn, serde=langgraph_serde())
            await saver.setup()
            return LangGraph(saver)

        await backend.add_async("LangGraph (langgraph-checkpoint-postgres)", langgraph)
        await backend.add_async(
            SAVER, lambda: steerable_saver(stack, ours, LangGraph, langgraph_serde())
        )
        await backend.add_async(
            "Agents SDK (SQLAlchemySession, asyncpg)",
            lambda: _agents_sqlalchemy(stack, db.url("postgresql+asyncpg")),
        )
        yield backend


@contextlib.asynccontextmanager
async def mysql_backend() -> AsyncIterator[Backend]:
    """steerable, naive and the Agents SDK on a fresh MySQL/MariaDB database."""
    async with contextlib.AsyncExitStack() as stack:
        db: Database = await stack.enter_async_context(mysql_database("persist"))
        backend = Backend("MySQL/MariaDB")
        backend.notes.append("LangGraph skipped: it ships no MySQL checkpointer")
        pool = await mysql_pool(db, 2)
        stack.push_async_callback(close_mysql_pool, pool)
        backend.systems.append(Steerable(await steerable_mysql(pool)))
        naive = NaiveMySQL(pool)
        await naive.setup()
        backend.systems.append(Naive(naive))
        await backend.add_async(
            "Agents SDK (SQLAlchemySession, aiomysql)",
            lambda: _agents_sqlalchemy(
                stack, db.url("mysql+aiomysql") + "?charset=utf8mb4", _AGENTS_MYSQL_DDL
            ),
        )
        backend.notes.append(
            "Agents SDK on MySQL: SQLAlchemySession(create_tables=True) fails there (VARCHAR"
            " without a length); its tables were created beforehand with lengths added"
        )
        yield backend


@contextlib.asynccontextmanager
async def mongodb_backend() -> AsyncIterator[Backend]:
    """steerable, naive and the Agents SDK on a fresh MongoDB database."""
    async with mongodb_database("persist") as (client, db, server):
        backend = Backend(server)
        backend.notes.append("LangGraph skipped: langgraph-checkpoint-mongodb is not a peer here")
        backend.systems.append(Steerable(await steerable_mongodb(db)))
        backend.systems.append(Naive(NaiveMongo(db)))

        def agents() -> System:
            from agents.extensions.memory.mongodb_session import MongoDBSession

            async def open_session(sid: str) -> Any:
                return MongoDBSession(sid, client=client, database=db.name)

            return AgentsSDK(open_session, _compact_json)

        backend.add("Agents SDK (MongoDBSession)", agents)
        yield backend


BACKENDS: dict[str, Callable[[argparse.Namespace], contextlib.AbstractAsyncContextManager[Backend]]]
BACKENDS = {
    "sqlite": lambda args: sqlite_backend(args.synchronous),
    "postgres": lambda args: postgres_backend(),
    "mysql": lambda args: mysql_backend(),
    "mongodb": lambda args: mongodb_backend(),
}


# -- the run ----------------------------------------------------------------------------------

Results = dict[tuple[str, int], list[Sample]]  # (system, transcript size) -> samples


async def measure(backend: Backend, args: argparse.Namespace) -> Results:
    """Every system at every size; each repetition runs them all, in a rotating order."""
    results: Results = {}
    payloads = Payloads()
    runs = [(system, messages) for messages in args.sizes for system in backend.systems]
    for rep in range(args.reps):
        shift = rep * (len(backend.systems) + 1) % len(runs)
        chats = {m: conversation(m, args.warm + args.steps, payloads) for m in args.sizes}
        for system, messages in runs[shift:] + runs[:shift]:
            # flush what the last system left dirty, or this one's fsyncs would pay for it
            await asyncio.to_thread(os.sync)
            samples = await system.measure(chats[messages], args.warm)
            results.setdefault((system.name, messages), []).extend(samples)
    return results


def report(backend: Backend, results: Results, sizes: Sequence[int]) -> str:
    """The backend's table: per size and system, time and bytes per step, ratios to ours."""
    rows = []
    for messages in sizes:
        ours = results.get((OURS, messages), [])
        base = [
            median([s.seconds for s in ours]),
            mean([s.payload for s in ours]),
            mean([s.written for s in ours]),
        ]
        for system in backend.systems:
            samples = results.get((system.name, messages), [])
            t = median([s.seconds for s in samples])
            p, w = (mean([getattr(s, f) for s in samples]) for f in ("payload", "written"))
            rows.append(
                [
                    f"{messages:,}",
                    system.name,
                    micros(t),
                    ratio(t, base[0]),
                    size(p),
                    ratio(p, base[1]),
                    size(w) if w >= 0 else "n/a",
                    ratio(w, base[2]),
                ]
            )
    headers = ["messages", "system", "µs/step", "vs ours", "payload", "vs ours"]
    text = table([*headers, "written", "vs ours"], rows)
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        flat = [
            f"{s.name} {ratio(_median(results, s.name, last), _median(results, s.name, first))}"
            for s in backend.systems
        ]
        text += f"\n\nTime per step at {last:,} messages / at {first:,}: " + ", ".join(flat)
    return text


def _median(results: Results, name: str, messages: int) -> float:
    return median([s.seconds for s in results.get((name, messages), [])])


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--reps", type=int, default=12, help="interleaved repetitions")
    parser.add_argument("--steps", type=int, default=5, help="measured steps per repetition")
    parser.add_argument("--warm", type=int, default=2, help="unmeasured steps first")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    parser.add_argument("--synchronous", default="NORMAL", choices=["NORMAL", "FULL"])
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    started = time.perf_counter()
    print("# Persist cost per step\n")
    print(machine([f"- {args.reps} repetitions x {args.steps} steps (after {args.warm})"]))
    for key in args.backends:
        try:
            async with BACKENDS[key](args) as backend:
                results = await measure(backend, args)
        except Unavailable as exc:
            print(f"\n## {key}\n\nskipped: {exc}")
            continue
        print(f"\n## {backend.name}\n")
        print(report(backend, results, args.sizes))
        for note in backend.notes:
            print(f"\n- {note}")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
