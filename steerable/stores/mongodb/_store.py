"""MongoStore: the Store verbs over the documents of :mod:`._layout`."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from bson import ObjectId
from pymongo import ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, PyMongoError

from steerable import codec
from steerable.errors import (
    CorruptRecord,
    InvalidMessage,
    StoreError,
    TranscriptConflict,
    UsageError,
)
from steerable.messages import Message
from steerable.store import Steer
from steerable.stores.migrations import require
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._fork import MongoForkable
from steerable.stores.mongodb._layout import Entry, Staged
from steerable.stores.mongodb._leases import MongoLeases
from steerable.stores.mongodb._migrate import APPLY, MIGRATIONS, schema_version
from steerable.stores.mongodb._replace import MongoRepairable

_RACE_RETRIES = 5


class MongoStore(MongoLeases, MongoRepairable, MongoForkable):
    """A :class:`steerable.Store` (:class:`~steerable.store.Rewritable`,
    :class:`~steerable.store.Forkable`, :class:`~steerable.store.Journaling` and
    :class:`~steerable.store.Repairable`) and a service store in a MongoDB database.

    See the package docstring for the transcript's documents,
    :mod:`steerable.stores.mongodb._service` for the service's (which need a replica set),
    :mod:`steerable.stores.mongodb._rewrite` for truncate and delete,
    :mod:`steerable.stores.mongodb._fork` for fork and
    :mod:`steerable.stores.mongodb._replace` for replace (a replica set too), and
    :mod:`steerable.stores.mongodb._journal` for the tool journal.

    ``db`` is a database of the application's ``pymongo.AsyncMongoClient``: its pool,
    timeouts and write concern are the application's choice. Keep the default primary read
    preference: the store reads what it just wrote. The database must hold
    :data:`steerable.stores.mongodb.MIGRATIONS`, applied with
    :func:`steerable.stores.mongodb.migrate`: a store object reads the version recorded
    once, before its first write, and writes nothing until it is the latest. Arguments are
    trusted to be typed as annotated (the front door, :class:`steerable.Session`, checks).
    """

    def __init__(self, db: AsyncDatabase[Any]) -> None:
        if not isinstance(db, AsyncDatabase):
            raise UsageError(
                "MongoStore takes a pymongo AsyncDatabase (pymongo.AsyncMongoClient()[name]),"
                f" not {type(db).__name__}"
            )
        self.db = db
        self._heads: AsyncCollection[Any] = db[layout.SESSIONS]  # heads and id lists
        self._chunks: AsyncCollection[Any] = db[layout.CHUNKS]
        self._blobs: AsyncCollection[Any] = db[layout.BLOBS]
        self._migrated = False  # this store object has seen the latest version recorded

    # -- reading ---------------------------------------------------------------------------

    async def messages(self, session: str) -> list[Message]:
        with reaching(f"read session {session!r}"):
            return await self._messages_from(session, await self._head_of(session), 0)

    async def _head_of(self, session: str) -> dict[str, Any] | None:
        """The fields of the session's head that place its messages (None: it has none)."""
        head: dict[str, Any] | None = await self._heads.find_one(
            {"_id": session}, {"n": 1, "base": 1, "tail": 1}
        )
        return head

    async def _messages_from(
        self, session: str, head: dict[str, Any] | None, first: int
    ) -> list[Message]:
        """The messages at positions ``first`` (at most ``n``) and after, where ``head`` says
        they are: only those are read from the chunks and blobs, and decoded."""
        if head is None:
            return []
        base = int(head["base"])
        entries = await self._flushed(session, base, first) + head["tail"][max(first - base, 0) :]
        bodies = await self._bodies(entries)
        if first + len(entries) != head["n"]:
            raise CorruptRecord(
                f"session {session!r} should hold {head['n']} messages;"
                f" {first + len(entries)} were found"
            )
        return [
            codec.decode(entry["i"], body, where=f"session {session!r}, position {pos}")
            for pos, (entry, body) in enumerate(zip(entries, bodies, strict=True), start=first)
        ]

    async def _flushed(self, session: str, base: int, first: int = 0) -> list[Entry]:
        """The entries at positions ``[first, base)``, from the session's chunks (only those
        that end after ``first``)."""
        if first >= base:
            return []
        query = layout.chunk_range(session, base)
        if first:
            query |= {"e": {"$gt": first}}
        chunks = await self._chunks.find(query).to_list(None)
        chunks.sort(key=lambda c: c["_id"]["p"])
        start = int(chunks[0]["_id"]["p"]) if chunks else first
        entries: list[Entry] = []
        for chunk in chunks:
            if chunk["_id"]["p"] != start + len(entries):
                break  # a hole: reported below
            entries += chunk["m"]
        entries = entries[first - start :] if start <= first else []
        if len(entries) != base - first:
            raise CorruptRecord(
                f"session {session!r}: the chunks hold {len(entries)} of its messages at"
                f" {first} to {base - 1}"
            )
        return entries

    async def _bodies(self, entries: list[Entry]) -> list[str]:
        """Each entry's stored text, fetching out-of-line bodies in one query."""
        refs = [ref for entry in entries for ref in entry.get("r", ())]
        pieces: dict[ObjectId, str] = {}
        if refs:
            async for blob in self._blobs.find({"_id": {"$in": refs}}):
                pieces[blob["_id"]] = blob["d"]
        bodies: list[str] = []
        for entry in entries:
            if "b" in entry:
                bodies.append(entry["b"])
                continue
            try:
                bodies.append("".join(pieces[ref] for ref in entry["r"]))
            except KeyError:
                raise CorruptRecord(
                    f"message {entry['i']!r}: part of its body is missing"
                ) from None
        return bodies

    async def steers(self, session: str) -> list[Steer]:
        with reaching(f"read the steers of session {session!r}"):
            head = await self._heads.find_one({"_id": session}, {"box": 1})
            box: list[Entry] = head["box"] if head else []
            bodies = await self._bodies(box)
        return [
            Steer(
                codec.decode(entry["i"], body, where=f"session {session!r}, steer box").text,
                entry["i"],
            )
            for entry, body in zip(box, bodies, strict=True)
        ]

    # -- writing ---------------------------------------------------------------------------

    async def steer(self, session: str, steer: Steer) -> None:
        staged = layout.stage(session, [(steer.id, codec.encode(steer.message()))])
        unseen = layout.steer_filter(session, steer.id)
        update = layout.steer_update(session, staged.entries[0])
        with reaching(f"leave a steer for session {session!r}"):
            await self._check_migrated()
            await self._write_blobs(staged)
            left = False
            for upsert in (True, False):
                try:
                    result = await self._heads.update_one(unseen, update, upsert=upsert)
                except DuplicateKeyError:
                    # a chunk holds the id (seen before), or the head was created meanwhile
                    continue
                left = result.matched_count > 0 or result.upserted_id is not None
                break
            if not left:
                await self._drop_blobs(staged)  # a steer id seen before: nothing to keep

    async def save(
        self, session: str, messages: Sequence[Message], *, at: int, take: int = 0
    ) -> list[Message]:
        ids = [m.id for m in messages]
        if len(set(ids)) != len(ids):
            raise InvalidMessage(f"session {session!r}: one message id appears twice in a save")
        staged = layout.stage(session, [(m.id, codec.encode(m)) for m in messages])
        return await self._append(session, staged, ids, at, take)

    async def take_steers(self, session: str, *, at: int | None, limit: int) -> list[Message]:
        return await self._append(session, Staged(), [], at, limit)

    async def _append(
        self, session: str, staged: Staged, ids: list[str], at: int | None, take: int
    ) -> list[Message]:
        """Write the blobs, then commit everything with one conditional findAndModify."""
        with reaching(f"save session {session!r}"):
            if not staged.entries and not take:
                await self._check_position(session, ids, at)
                return []
            await self._check_migrated()
            await self._write_blobs(staged)
            try:
                head = await self._commit(session, staged, ids, at, take)
            except (TranscriptConflict, InvalidMessage):
                # surely not committed; after a lost connection it may be, so blobs stay
                await self._drop_blobs(staged)
                raise
            if head is None:
                return []  # take_steers(at=None) with nothing waiting
            if head["tb"] >= layout.FLUSH_BYTES or head.get("mv"):
                await self._flush(session, int(head.get("mv") or 0))
            took: list[Entry] = head["took"]
            bodies = await self._bodies(took)
        return [
            codec.decode(entry["i"], body, where=f"session {session!r}, a steer taken")
            for entry, body in zip(took, bodies, strict=True)
        ]

    async def _commit(
        self, session: str, staged: Staged, ids: list[str], at: int | None, take: int
    ) -> dict[str, Any] | None:
        """The one command of a save: append and take if the head holds ``at`` messages.

        Returns the head's ``took``, ``tb`` and ``mv`` after the update, or None when ``at``
        is None and no steer waits. Raises TranscriptConflict or InvalidMessage when it
        cannot apply.
        """
        query = layout.append_filter(session, ids, at)
        pipeline = layout.append_pipeline(session, staged, ids, take, create=at == 0)
        for _ in range(_RACE_RETRIES):
            try:
                head: dict[str, Any] | None = await self._heads.find_one_and_update(
                    query,
                    pipeline,
                    projection={"took": 1, "tb": 1, "mv": 1},
                    # the first save creates the head; if one exists, the insert collides
                    upsert=at == 0,
                    return_document=ReturnDocument.AFTER,
                )
            except DuplicateKeyError:
                # the head created meanwhile, or (the unique index) a chunk holds a new id
                head = None
            if head is not None or at is None:
                return head
            # no match: learn why; a head that has just reached `at` is tried again
            await self._check_position(session, ids, at)
        raise StoreError(f"session {session!r}: the save kept missing a head that looks right")

    async def _check_position(self, session: str, ids: list[str], at: int | None) -> None:
        """Raise TranscriptConflict or InvalidMessage for a save that did not match."""
        projection: dict[str, Any] = {"n": 1}
        if ids:
            projection["tail"] = {"$elemMatch": {"i": {"$in": ids}}}
        head = await self._heads.find_one({"_id": session}, projection)
        stored = int(head["n"]) if head else 0
        if at is not None and stored != at:
            raise TranscriptConflict(session, at, stored)
        if not head or not ids:
            return
        known = [entry["i"] for entry in head.get("tail", ())]
        if not known:  # the id lists of the chunks (the head's own k may name a steer)
            listed = {"s": session, "k": {"$in": ids}, "_id": {"$ne": session}}
            found = await self._heads.find_one(listed, {"k": 1})
            known = [i for i in found["k"] if i in set(ids)] if found else []
        if known:
            raise InvalidMessage(
                f"session {session!r}: message id {known[0]!r} is already in the transcript"
            )

    async def _flush(self, session: str, marked: int) -> None:
        """Move the head's tail into a chunk, in four steps a crash can stop at.

        Mark (the head gives up the tail's index keys and says how many entries move),
        insert the chunk, insert its id list (the ids now in the index), commit (the head
        drops the entries and its ``base`` covers the chunk). Each step is conditional on
        the ones before, every flusher of a position writes the same documents, and a flush
        found marked is carried on from where it stopped. A failure here leaves the save
        done (it was committed before); the next save flushes again.
        """
        with suppress(PyMongoError):
            head: dict[str, Any] | None
            if marked:
                head = await self._heads.find_one({"_id": session}, {"base": 1, "tail": 1, "mv": 1})
            else:
                head = await self._heads.find_one_and_update(
                    {"_id": session, "mv": 0, "tail.0": {"$exists": True}},
                    layout.MARK_PIPELINE,
                    projection={"base": 1, "tail": 1, "mv": 1},
                    return_document=ReturnDocument.AFTER,
                )
            if head is None or not head.get("mv"):
                return  # another flusher got there first
            base, moved = int(head["base"]), int(head["mv"])
            entries = head["tail"][:moved]
            for collection, doc in (
                (self._chunks, layout.chunk(session, base, entries)),
                (self._heads, layout.id_list(session, base, entries)),
            ):
                if not await self._placed(collection, doc, session, base, entries):
                    return  # the entries stay in the head, readable; the next save goes on
            await self._heads.update_one(
                {"_id": session, "base": base, "mv": moved}, layout.commit_pipeline(moved)
            )

    async def _placed(
        self,
        collection: AsyncCollection[Any],
        doc: dict[str, Any],
        session: str,
        base: int,
        entries: list[Entry],
    ) -> bool:
        """Insert a chunk or id list of the flush at ``base``; whether it is in place.

        The same document found there is another flusher's of this mark, maybe a dead one:
        adopted. A different one is replaced, if this flush is still the head's (its mark
        and entries unchanged): a layout-1 flush cut off before its commit, or one a cut
        called off that wrote after the cut. A stale flusher, or an id held by another
        document (an id list), writes nothing more.
        """
        try:
            await collection.insert_one(doc)
            return True
        except DuplicateKeyError:
            pass
        found = await collection.find_one({"_id": doc["_id"]})
        if found is not None and layout.same_run(found, doc):
            return True
        head = await self._heads.find_one({"_id": session}, {"base": 1, "mv": 1, "tail.i": 1})
        if found is None or head is None or (head["base"], head["mv"]) != (base, len(entries)):
            return False
        if [e["i"] for e in head["tail"][: len(entries)]] != [e["i"] for e in entries]:
            return False
        await collection.replace_one({"_id": doc["_id"]}, doc)
        return True

    async def schema_version(self) -> int:
        """The highest migration the database has applied; 0 when it has none."""
        with reaching("read the steerable schema version"):
            return await schema_version(self.db)

    async def check_schema(self) -> None:
        """Raise :class:`StoreUnavailable` unless the database has this steerable's schema.

        Older, it names the migration step to apply; newer, it asks for a newer steerable.
        """
        require(await self.schema_version(), MIGRATIONS, store="MongoDB", apply=APPLY)
        self._migrated = True

    async def _check_migrated(self) -> None:
        """:meth:`check_schema`, once per store object, before its first write.

        Without the unique index of step 2 a message id, or a steer id sent again, that has
        moved into a chunk would no longer be recognised; a layout-1 head would be written
        as if it were a layout-2 one.
        """
        if not self._migrated:
            await self.check_schema()

    async def _write_blobs(self, staged: Staged) -> None:
        if staged.blobs:
            await self._blobs.insert_many(staged.blobs)

    async def _drop_blobs(self, staged: Staged) -> None:
        """Remove blobs no committed message refers to; a failure only leaves garbage."""
        if staged.blobs:
            with suppress(PyMongoError):
                await self._blobs.delete_many({"_id": {"$in": staged.blob_ids}})
