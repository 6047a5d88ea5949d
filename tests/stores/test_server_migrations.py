"""The migrations of every server store, one test each over Postgres, MySQL and MongoDB.

Each backend gives an empty database of its own (a Postgres schema, a MySQL database, a
MongoDB database), its next step for the tests to append, a way to record a version by
hand, and the rows an input had before the trace context (issue 21) written by hand. What
is one backend's alone (Postgres's transactional steps, MySQL's adopted tables, MongoDB's
layout 1) is tested beside that backend.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from steerable import codec
from steerable.errors import StoreUnavailable
from steerable.messages import user
from steerable.service_store import Input
from steerable.stores.migrations import Migration, SchemaVersioned, check_schema
from tests.stores.conftest import unavailable


@dataclass(frozen=True)
class Backend:
    """What the tests need of one server store."""

    name: str  # steerable.stores.<name>
    empty: Callable[[], AbstractAsyncContextManager[Any]]  # yields what migrate() takes
    store: Callable[[Any], Any]  # a Store that is SchemaVersioned
    record: Callable[[Any, int], Awaitable[None]]  # a version row written by hand
    step: Migration[Any]  # the next step, appended by a test
    ran: Callable[[Any], Awaitable[bool]]  # whether that step has run
    apply: str  # how the refusals say to apply the steps (a pattern)
    serialised: bool  # migrators queue on a lock: one applies, the others find it done
    untraced: int  # the steps of the last schema whose inputs had no trace context
    queued: Callable[[Any], Awaitable[None]]  # OLD_INPUT waiting in session "s", as it wrote
    fixtures: tuple[str, ...] = ()

    @property
    def migrations(self) -> tuple[Migration[Any], ...]:
        return self.package.MIGRATIONS  # type: ignore[no-any-return]

    @property
    def package(self) -> Any:
        return importlib.import_module(f"steerable.stores.{self.name}")

    async def migrate(self, handle: Any) -> list[int]:
        applied: list[int] = await self.package.migrate(handle)
        return applied


OLD_INPUT = Input("send", "sent before", "q", {"k": 1})
"""The input each backend's ``queued`` writes by hand, as the release before the trace did."""
TRACE = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}


# -- Postgres: a schema of its own in the server's database, on a pool whose search path
# starts there


@asynccontextmanager
async def _postgres() -> AsyncIterator[Any]:
    import asyncpg  # type: ignore[import-untyped]

    from tests.stores.postgres.support import DSN

    name = f"scratch_{uuid.uuid4().hex[:12]}"
    try:
        admin = await asyncpg.connect(DSN, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        unavailable(f"Postgres at {DSN} is not usable: {exc}")
    try:
        await admin.execute(f'CREATE SCHEMA "{name}"')
        pool = await asyncpg.create_pool(
            DSN, min_size=1, max_size=4, server_settings={"search_path": name}
        )
        try:
            yield pool
        finally:
            await pool.close()
            await admin.execute(f'DROP SCHEMA "{name}" CASCADE')
    finally:
        await admin.close()


async def _postgres_record(pool: Any, version: int) -> None:
    await pool.execute("INSERT INTO steerable_schema (version) VALUES ($1)", version)


async def _postgres_queued(pool: Any) -> None:
    await pool.execute(
        "INSERT INTO steerable_sessions (session, inputs, queued) VALUES ('s', 1, 1)"
    )
    await pool.execute(
        "INSERT INTO steerable_inputs (session, seq, id, kind, body, ahead, metadata)"
        " VALUES ('s', 1, $1, 'send', $2, 0, $3)",
        OLD_INPUT.id,
        codec.encode(OLD_INPUT.message(steered=True)),
        json.dumps(OLD_INPUT.metadata),
    )


async def _postgres_ran(pool: Any) -> bool:
    return bool(await pool.fetchval("SELECT count(*) FROM steerable_next") == 1)


def _postgres_store(pool: Any) -> Any:
    from steerable.stores.postgres import PostgresStore

    return PostgresStore(pool)


# -- MySQL: a database of its own on the server


@asynccontextmanager
async def _mysql() -> AsyncIterator[Any]:
    import aiomysql  # type: ignore[import-untyped]

    from tests.stores.mysql import server

    try:
        await server.query("SELECT 1", database=None)
    except (OSError, aiomysql.OperationalError) as exc:
        unavailable(f"no MySQL/MariaDB server at {server.HOST}:{server.PORT}: {exc}")
    async with server.scratch_database() as pool:
        yield pool


async def _mysql_query(pool: Any, sql: str) -> Any:
    from tests.stores.mysql import server

    return await server.on_pool(pool, sql)


async def _mysql_record(pool: Any, version: int) -> None:
    await _mysql_query(pool, f"INSERT INTO steerable_schema (version) VALUES ({version})")


async def _mysql_queued(pool: Any) -> None:
    await _mysql_query(
        pool, "INSERT INTO steerable_service (session, queued, inputs) VALUES ('s', 1, 1)"
    )
    async with pool.acquire() as conn, conn.cursor() as cursor:
        await cursor.execute(
            "INSERT INTO steerable_inputs (session, seq, id, kind, text, ahead, state, metadata,"
            " at) VALUES ('s', 1, %s, 'send', %s, 0, 'waiting', %s, 1700000000)",
            (OLD_INPUT.id, json.dumps(OLD_INPUT.text), json.dumps(OLD_INPUT.metadata)),
        )
        await conn.commit()


async def _mysql_ran(pool: Any) -> bool:
    return bool(await _mysql_query(pool, "SELECT id FROM steerable_next") == ((1,),))


def _mysql_store(pool: Any) -> Any:
    from steerable.stores.mysql import MySQLStore

    return MySQLStore(pool)


# -- MongoDB: a database of its own on the SecantusDB server of the run


def _mongodb() -> AbstractAsyncContextManager[Any]:
    from tests.stores.mongodb._server import scratch_database

    return scratch_database()


async def _mongodb_record(db: Any, version: int) -> None:
    await db["steerable_schema"].insert_one({"_id": version})


async def _mongodb_next(db: Any) -> None:
    await db["steerable_next"].update_one({"_id": 1}, {"$set": {"ran": True}}, upsert=True)


async def _mongodb_queued(db: Any) -> None:
    from steerable.stores.mongodb._documents import NEW_SESSION

    service = {"_id": "s", **NEW_SESSION, "seq": 1, "q": 1, "wt": 1, "w": True}
    await db["steerable_service"].insert_one(service)
    doc: dict[str, Any] = {"_id": {"s": "s", "i": OLD_INPUT.id}, "s": "s", "i": OLD_INPUT.id}
    doc |= {"n": 1, "at": 1_700_000_000_000, "kd": "send", "tx": json.dumps(OLD_INPUT.text)}
    doc |= {"of": None, "ah": 0, "st": "waiting", "t": None, "sp": None}
    doc["md"] = json.dumps(OLD_INPUT.metadata)
    await db["steerable_inputs"].insert_one(doc)


async def _mongodb_ran(db: Any) -> bool:
    return bool(await db["steerable_next"].count_documents({}) == 1)


def _mongodb_store(db: Any) -> Any:
    from steerable.stores.mongodb import MongoStore

    return MongoStore(db)


_NEXT = "the service's tables"

BACKENDS = [
    Backend(
        "postgres",
        _postgres,
        _postgres_store,
        _postgres_record,
        Migration(
            0,
            _NEXT,
            (
                "CREATE TABLE steerable_next (id text PRIMARY KEY)",
                "INSERT INTO steerable_next VALUES ('a')",
            ),
        ),
        _postgres_ran,
        apply=r"postgres\.migrate\(pool\)",
        serialised=True,
        untraced=5,
        queued=_postgres_queued,
    ),
    Backend(
        "mysql",
        _mysql,
        _mysql_store,
        _mysql_record,
        Migration(
            0,
            _NEXT,
            (
                "CREATE TABLE IF NOT EXISTS steerable_next (id INT PRIMARY KEY)",
                "INSERT IGNORE INTO steerable_next VALUES (1)",
            ),
        ),
        _mysql_ran,
        apply=r"mysql\.migrate\(pool\)",
        serialised=True,
        untraced=4,
        queued=_mysql_queued,
    ),
    Backend(
        "mongodb",
        _mongodb,
        _mongodb_store,
        _mongodb_record,
        Migration(0, _NEXT, (_mongodb_next,)),
        _mongodb_ran,
        apply=r"mongodb\.migrate\(db\)",
        serialised=False,  # no lock: every step may run twice, and at once
        untraced=5,  # no step: an input document without `tc` has none
        queued=_mongodb_queued,
        fixtures=("mongo_server",),
    ),
]


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    """One server store; the servers it needs are started first."""
    chosen: Backend = request.param
    for fixture in chosen.fixtures:
        request.getfixturevalue(fixture)
    return chosen


@pytest.fixture
async def empty(backend: Backend) -> AsyncIterator[Any]:
    """An empty database of the backend's, gone after the test."""
    async with backend.empty() as handle:
        yield handle


def _append_a_step(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Migration[Any]:
    """The next release's list: today's steps and one more, seen by the store and migrate."""
    step = Migration(len(backend.migrations) + 1, backend.step.summary, backend.step.steps)
    newer = (*backend.migrations, step)
    for module in ("_store", "_migrate"):
        monkeypatch.setattr(f"steerable.stores.{backend.name}.{module}.MIGRATIONS", newer)
    return step


async def test_a_fresh_database_migrated_passes_the_check(backend: Backend, empty: Any) -> None:
    store = backend.store(empty)
    assert isinstance(backend.store(empty), SchemaVersioned)
    assert await store.schema_version() == 0
    latest = [m.version for m in backend.migrations]
    assert await backend.migrate(empty) == latest
    assert await backend.migrate(empty) == []  # again: nothing to do
    assert await store.schema_version() == latest[-1] == backend.package.SCHEMA_VERSION
    await check_schema(store)
    await store.save("s", [user("x")], at=0)
    assert [m.text for m in await store.messages("s")] == ["x"]


async def test_a_database_without_the_schema_is_refused_naming_the_first_step(
    backend: Backend, empty: Any
) -> None:
    step = rf"step 1 \({backend.migrations[0].summary}\)"
    with pytest.raises(StoreUnavailable, match=rf"no steerable schema.*{step}"):
        await backend.store(empty).check_schema()
    with pytest.raises(StoreUnavailable, match=rf"{step}.*{backend.apply}"):
        await backend.store(empty).save("s", [user("x")], at=0)


async def test_a_database_one_step_behind_is_refused_naming_the_step_until_it_is_applied(
    backend: Backend, empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await backend.migrate(empty)
    current = len(backend.migrations)
    step = _append_a_step(backend, monkeypatch)
    named = rf"version {current};.*step {step.version} \({_NEXT}\).*{backend.apply}"
    with pytest.raises(StoreUnavailable, match=named):
        await backend.store(empty).check_schema()
    with pytest.raises(StoreUnavailable, match=named):  # the first write, checked once
        await backend.store(empty).save("s", [user("x")], at=0)
    assert await backend.migrate(empty) == [step.version]
    assert await backend.migrate(empty) == []
    assert await backend.ran(empty)
    store = backend.store(empty)
    await store.check_schema()
    await store.save("s", [user("x")], at=0)


async def test_a_newer_database_asks_for_a_newer_steerable_and_is_left_alone(
    backend: Backend, empty: Any
) -> None:
    await backend.migrate(empty)
    await backend.record(empty, 99)
    newer = r"version 99.*upgrade steerable"
    with pytest.raises(StoreUnavailable, match=newer):
        await backend.store(empty).check_schema()
    with pytest.raises(StoreUnavailable, match=newer):
        await backend.migrate(empty)
    with pytest.raises(StoreUnavailable, match=newer):  # the first write, checked once
        await backend.store(empty).save("s", [user("x")], at=0)


async def test_replicas_migrating_at_once_record_each_step_once(
    backend: Backend, empty: Any
) -> None:
    # Without Postgres's advisory lock or MySQL's named lock, concurrent migrators collide
    # on their DDL or on recording one version twice; MongoDB's steps may overlap instead.
    latest = [m.version for m in backend.migrations]
    applied = await asyncio.gather(*(backend.migrate(empty) for _ in range(4)))
    if backend.serialised:
        assert sorted(applied) == [[], [], [], latest]
    else:
        assert latest in applied
        assert all(done == latest[len(latest) - len(done) :] for done in applied)
    await backend.store(empty).check_schema()
    assert await backend.migrate(empty) == []


async def test_the_inputs_of_before_the_trace_context_read_none(
    backend: Backend, empty: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a database of the last schema without an input's trace, with an input waiting as
    # that release wrote it: migrated, it reads {} in every view and in its turn's claim
    monkeypatch.setattr(
        f"steerable.stores.{backend.name}._migrate.MIGRATIONS",
        backend.migrations[: backend.untraced],
    )
    assert await backend.migrate(empty) == list(range(1, backend.untraced + 1))
    monkeypatch.undo()
    await backend.queued(empty)
    later = [m.version for m in backend.migrations[backend.untraced :]]
    assert await backend.migrate(empty) == later
    store = backend.store(empty)
    view = await store.input("s", OLD_INPUT.id)
    assert view is not None and (view.text, view.metadata, view.trace) == (
        "sent before",
        {"k": 1},
        {},
    )
    assert [(v.id, v.trace) for v in await store.inputs("s", after=0, limit=10)] == [("q", {})]
    assert [(w.id, w.trace) for w in (await store.status("s")).waiting] == [("q", {})]
    await store.enqueue("s", Input("send", "sent after", "u", trace=dict(TRACE)))
    claim = await store.claim("a", seconds=60, cap=16, session="s")
    assert claim is not None and claim.prompt == OLD_INPUT
    traced = await store.input("s", "u")
    assert traced is not None and traced.trace == TRACE
