"""The MongoDB store's migrations, and the function that applies them.

A step is a list of coroutine functions over the database. MongoDB has no DDL transaction
and no advisory lock, so every step is written to be run again, and by several migrators at
once: it creates what is missing, converts a document only on a filter that says it is not
converted yet, and writes a document whose content is fixed by what it is made from (a
duplicate key is another migrator's identical work). A version is recorded, in
``steerable_schema`` (``_id`` the version), once its step is done; until the latest is
recorded the store writes nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, Final, TypeAlias

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, OperationFailure

from steerable.messages import new_id
from steerable.stores.migrations import Migration, pending, refusal, validated
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._errors import reaching

Step: TypeAlias = Callable[[AsyncDatabase[Any]], Awaitable[None]]
"""One part of a MongoDB migration step: a coroutine function over the database."""

SCHEMA: Final = "steerable_schema"  # one document per version applied, _id the version
APPLY: Final = "await steerable.stores.mongodb.migrate(db)"
_NAMESPACE_EXISTS: Final = 48


async def _create_missing(db: AsyncDatabase[Any], names: tuple[str, ...]) -> None:
    """Create the collections of ``names`` that ``db`` lacks."""
    existing = set(await db.list_collection_names())
    for name in names:
        if name not in existing:
            try:
                await db.create_collection(name, check_exists=False)
            except OperationFailure as exc:
                if exc.code != _NAMESPACE_EXISTS:  # created meanwhile: what we wanted
                    raise


async def _collections(db: AsyncDatabase[Any]) -> None:
    """Create the store's collections (and the versions' one) if they are missing."""
    await _create_missing(db, (*layout.CORE_COLLECTIONS, SCHEMA))


async def _heads_of_layout_2(db: AsyncDatabase[Any]) -> None:
    """Turn every layout-1 head into a layout-2 one: an id list per chunk, ``s``, ``k``.

    A layout-1 head (no ``s``) kept every message id in ``ids``. Layout 2 finds the ids of
    the chunks in one id list per chunk, under the unique ``(s, k)`` index: the id lists
    are written first (each fixed by its chunk, so a second migrator's copy is a duplicate
    key, ignored), then the head is converted on the filter that it still lacks ``s``.
    Only chunks below the head's ``base`` are its own: one at ``base`` is a layout-1
    flush cut off before its commit, whose entries are still in the tail; the store
    replaces it when it flushes there.
    """
    heads = db[layout.SESSIONS]
    async for head in heads.find({"s": {"$exists": False}}, {"base": 1}):
        session, base = head["_id"], int(head.get("base", 0))
        if base:
            async for chunk in db[layout.CHUNKS].find(layout.chunk_range(session, base)):
                ids = layout.id_list(session, int(chunk["_id"]["p"]), chunk["m"])
                with suppress(DuplicateKeyError):
                    await heads.insert_one(ids)
        await heads.update_one(
            {"_id": session, "s": {"$exists": False}},
            {"$set": {"s": session, "k": [], "mv": 0}, "$unset": {"ids": ""}},
        )


async def _ids_index(db: AsyncDatabase[Any]) -> None:
    """The unique ``(s, k)`` index: a message or steer id in one document of a session.

    One made by hand under another name is adopted: MongoDB refuses a second index on the
    same keys.
    """
    sessions = db[layout.SESSIONS]
    for spec in (await sessions.index_information()).values():
        key = tuple((str(name), int(order)) for name, order in spec.get("key", ()))
        if key == layout.IDS_KEY and spec.get("unique"):
            return
    await sessions.create_index(list(layout.IDS_KEY), unique=True, name=layout.IDS_INDEX)


async def _service_collections(db: AsyncDatabase[Any]) -> None:
    """Create the service's collections and their indexes, if they are missing.

    Made here rather than on first use: on MongoDB before 4.4 a transaction cannot create
    a collection, and every service write is a transaction. An index of the same keys made
    by hand under another name is adopted, as for step 2's.
    """
    await _create_missing(db, layout.SERVICE_COLLECTIONS)
    await _indexes(db, layout.SERVICE_INDEXES)


async def _indexes(
    db: AsyncDatabase[Any], indexes: tuple[tuple[str, str, tuple[tuple[str, int], ...], bool], ...]
) -> None:
    """Create the ``(collection, name, keys, unique)`` indexes that are missing; one of the
    same keys made by hand under another name is adopted."""
    for collection, name, keys, unique in indexes:
        specs = (await db[collection].index_information()).values()
        if any(tuple((str(k), int(o)) for k, o in spec.get("key", ())) == keys for spec in specs):
            continue
        await db[collection].create_index(list(keys), unique=unique, name=name)


async def _waiting_counts(db: AsyncDatabase[Any]) -> None:
    """Give every session's service document ``wt``, the number of its inputs waiting.

    Only documents that lack it: each is set once, to a count of what the inputs hold (the
    same for every migrator, with the writers stopped).
    """
    service, inputs = db[layout.SERVICE], db[layout.INPUTS]
    async for doc in service.find({"wt": {"$exists": False}}, {"_id": 1}):
        waiting = await inputs.count_documents({"s": doc["_id"], "st": "waiting"})
        await service.update_one(
            {"_id": doc["_id"], "wt": {"$exists": False}}, {"$set": {"wt": waiting}}
        )


async def _turn_seqs(db: AsyncDatabase[Any]) -> None:
    """Give every turn ``n``, its prompt's seq, read from the prompt's input document."""
    turns, inputs = db[layout.TURNS], db[layout.INPUTS]
    async for turn in turns.find({"n": {"$exists": False}}, {"_id": 1}):
        prompt = await inputs.find_one({"_id": turn["_id"]}, {"n": 1})  # the same {s, i}
        if prompt is not None:
            await turns.update_one(
                {"_id": turn["_id"], "n": {"$exists": False}}, {"$set": {"n": prompt["n"]}}
            )


async def _queue_indexes(db: AsyncDatabase[Any]) -> None:
    """The indexes of the waiting inputs in order, the turns by seq, and the stop poll."""
    await _indexes(db, layout.QUEUE_INDEXES)


async def _journal_collection(db: AsyncDatabase[Any]) -> None:
    """Create the tool journal's collection, if it is missing.

    Its entries are found by ``_id`` (``{s, k}``, a session's a range of it), so it needs no
    index of its own; made here because ``delete`` removes entries in a transaction, which
    may not create a collection before MongoDB 4.4.
    """
    await _create_missing(db, (layout.JOURNAL,))


async def _marks(db: AsyncDatabase[Any]) -> None:
    """Give every session's service document ``mk``, a transcript mark of its own.

    Only documents that lack it, each on a filter that it still does: a mark is never
    written over (a claimer may hold what it read under the first migrator's). Documents
    made from here on get theirs when they are made.
    """
    service = db[layout.SERVICE]
    async for doc in service.find({"mk": {"$exists": False}}, {"_id": 1}):
        await service.update_one(
            {"_id": doc["_id"], "mk": {"$exists": False}}, {"$set": {"mk": new_id()}}
        )


MIGRATIONS: Final[tuple[Migration[Step], ...]] = validated(
    [
        Migration(1, "the sessions, chunks and blobs collections", (_collections,)),
        Migration(
            2,
            "layout 2: an id list per chunk and a unique (s, k) index; converts layout-1 heads",
            (_heads_of_layout_2, _ids_index),
        ),
        Migration(
            3,
            "the service's collections: sessions' leases, inputs, turns and events",
            (_service_collections,),
        ),
        Migration(
            4,
            "the queue: waiting inputs counted, turns' prompt seqs, indexes of the views and stops",
            (_waiting_counts, _turn_seqs, _queue_indexes),
        ),
        Migration(
            5,
            "the tool journal: one entry per (session, call key), begun or ended",
            (_journal_collection,),
        ),
        Migration(
            6,
            "a transcript's mark: new whenever a stored message is cut, changed or forked into",
            (_marks,),
        ),
    ]
)
"""The schema of the MongoDB store: apply it with :func:`steerable.stores.mongodb.migrate`."""

SCHEMA_VERSION: Final = len(MIGRATIONS)
"""The schema version this steerable reads and writes: the last of :data:`MIGRATIONS`."""


async def schema_version(db: AsyncDatabase[Any]) -> int:
    """The highest version recorded in ``db``; 0 when none is."""
    last = await db[SCHEMA].find_one({}, {"_id": 1}, sort=[("_id", -1)])
    return int(last["_id"]) if last else 0


async def migrate(db: AsyncDatabase[Any]) -> list[int]:
    """Apply the steps of :data:`MIGRATIONS` that ``db`` lacks; the versions applied.

    Every step may be run again and by several migrators at once (see the module
    docstring), so replicas that all migrate at start-up need no lock: each version is
    recorded once, and a migrator that finds it recorded goes on. Stop the writers of an
    older steerable first: a layout-1 head written after step 2 has run would not be
    converted (run ``migrate`` again). A database newer than this steerable is left
    untouched (:class:`~steerable.errors.StoreUnavailable`, asking for a newer steerable).
    """
    applied: list[int] = []
    with reaching("apply the steerable migrations"):
        version = await schema_version(db)
        error = refusal(version, MIGRATIONS, store="MongoDB", apply=APPLY)
        if error is not None and version > len(MIGRATIONS):
            raise error  # newer than this steerable: leave it as it is
        for step in pending(MIGRATIONS, version):
            for part in step.steps:
                await part(db)
            record = {"_id": step.version, "summary": step.summary, "at": datetime.now(UTC)}
            with suppress(DuplicateKeyError):  # another migrator recorded it first
                await db[SCHEMA].insert_one(record)
            applied.append(step.version)
    return applied
