"""The MongoDB store's :class:`~steerable.store.Forkable` verb: ``fork``.

A fork is one multi-document transaction (a replica set, like the cut and the service), with
the same lock as a cut's (:meth:`MongoRewritable._holding`): it first writes the new
session's service document (``rw`` up by one and a new ``mk``, the transcript's mark, a
document made first if it has none and removed again if the service never used it), so a
fork conflicts with a racing fork into the same id (from any store object or process: one
commits, the other runs again and finds the head it wrote), and with an enqueue or a claim
of that session. It then writes the new head: an insert, which collides with a first save
or steer made meanwhile (the core's first-write lock) and is run again. In that snapshot:

- the old session's head, and its chunks below the end of the copy, are read (the
  message ``through`` found in the head's tail, or by the unique index ``(s, k)`` on the id
  lists: :class:`~steerable.errors.MessageNotFound` if neither has it);
- the new session must be free: no service document with inputs (``seq``) or metadata,
  and no head holding messages, waiting steers or the ids of cut steers (``seen``): else
  :class:`~steerable.errors.SessionExists`. A deleted session is free; a head cut to
  nothing is replaced;
- what a dead flusher may have left at the new session's positions is removed, then the
  copies are written: each chunk below the end (the one the end falls in, shortened; no
  chunk past it), an id list of each, the head with the rest of the tail, and a copy of
  every blob the copies refer to (a new id each: a cut or delete of either session
  removes its own blobs only). Entries are copied as stored: id, codec text, size and
  ``a`` (the time it was stored).

Nothing else comes along: no steers, ``seen``, inputs, turns, events or metadata. A
running turn on the old session does not stop the fork: the snapshot holds what was
committed, and a flush of the old session under way (four commands outside any
transaction) is read as readers read it: chunks below ``base``, the rest from the tail.

The cost: MongoDB has no server-side copy a transaction may run (``$out`` and ``$merge``
are refused there), so the transcript passes through the client once, as documents, not
message by message: one ``find`` of the old head, one of its chunks (and one of the id
lists when ``through`` has left the tail, one of its blobs when it has any), and one insert
each of the head, the chunks, the id lists and the blobs: into a new id, eleven commands
with the lock and the commit, whatever the length (three more when the session has no
service document: the lock that finds none, the abort, the document made). 1,000 messages
of 200 bytes (five chunks) fork in about 90 ms on SecantusDB, half of it the unique index
taking the copies' 1,000 ids (every id of a session is in it: a flush puts them there too),
a fifth reading the chunks. A transcript of many megabytes is one big transaction, bounded
by the server's transaction limits (mongod's 60 s lifetime and its cache).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from bson import ObjectId
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError

from steerable.errors import CorruptRecord, MessageNotFound, SessionExists, StoreError
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._documents import Doc
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._layout import Entry
from steerable.stores.mongodb._rewrite import MongoRewritable
from steerable.stores.mongodb._transactions import RETRIES, Raced

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

Run = tuple[int, list[Entry]]
"""A run of the copy kept in a chunk: its first position and its entries."""


class MongoForkable(MongoRewritable):
    """:meth:`fork` of :class:`MongoStore`; see the module docstring."""

    if TYPE_CHECKING:  # provided by MongoStore
        _chunks: AsyncCollection[Any]

    async def fork(self, session: str, new: str, *, through: str | None = None) -> int:
        """Start ``new`` with ``session``'s transcript through message ``through`` (all of it
        when None); how many messages it copied.

        Refused whole with :class:`MessageNotFound` or :class:`SessionExists`.
        """
        copy = functools.partial(self._fork, session=session, new=new, through=through)
        with reaching(f"fork session {session!r} into {new!r}"):
            for _ in range(RETRIES):
                try:
                    return await self._holding(new, copy)
                except Raced:
                    pass  # a first save or steer made the head meanwhile: it is read next
        raise StoreError(f"session {new!r}: a fork into it kept racing")

    async def _fork(
        self, s: AsyncClientSession, service: Doc, *, session: str, new: str, through: str | None
    ) -> int:
        old = await self._heads.find_one(
            {"_id": session}, {"n": 1, "base": 1, "tail": 1}, session=s
        )
        count = await self._end(s, session, old, through)
        if int(service["seq"]) or "md" in service:
            raise SessionExists(new)  # it has inputs, or metadata
        target = await self._heads.find_one({"_id": new}, {"n": 1, "box": 1, "seen": 1}, session=s)
        if target is not None and (target["n"] or target.get("box") or target.get("seen")):
            raise SessionExists(new)  # a transcript, or steers waiting or ever taken
        if old is None or not count:
            return 0
        base = min(int(old["base"]), count)
        runs = await self._runs(s, session, base)
        tail: list[Entry] = old["tail"][: count - base]
        runs, tail = await self._own_blobs(s, session, new, runs, tail)
        head: Doc = {"_id": new, "s": new, "n": count, "base": base, "tail": tail}
        head |= {"tb": sum(int(e["z"]) for e in tail), "mv": 0, "k": [], "box": [], "took": []}
        await self._drop_from(s, new, 0)  # a dead flusher's documents, if any
        try:
            if target is None:
                await self._heads.insert_one(head, session=s)
            else:
                await self._heads.replace_one({"_id": new}, head, session=s)
        except DuplicateKeyError:
            raise Raced from None
        if runs:
            await self._chunks.insert_many([layout.chunk(new, p, m) for p, m in runs], session=s)
            ids = [layout.id_list(new, p, m) for p, m in runs]
            await self._heads.insert_many(ids, session=s)
        return count

    async def _end(
        self, s: AsyncClientSession, session: str, old: Doc | None, through: str | None
    ) -> int:
        """How many messages the copy holds: all, or those through message ``through``."""
        stored = int(old["n"]) if old else 0
        if through is None:
            return stored
        if old is not None:
            base = int(old["base"])
            for index, entry in enumerate(old["tail"]):
                if entry["i"] == through:
                    return base + index + 1
            # the id lists below base (the head's own k may name a steer; one past base is
            # a flush's, whose ids are in the tail, or a dead flusher's)
            listed = {"s": session, "k": through, "_id": {"$ne": session}}
            found = await self._heads.find_one(listed, {"k": 1}, session=s) if base else None
            if found is not None and int(found["_id"]["p"]) < base:
                return int(found["_id"]["p"]) + list(found["k"]).index(through) + 1
        raise MessageNotFound(session, through)

    async def _runs(self, s: AsyncClientSession, session: str, end: int) -> list[Run]:
        """The old session's chunked entries at positions ``[0, end)``, chunk by chunk (the
        last one shortened to end there)."""
        if not end:
            return []
        query = layout.chunk_range(session, end)
        chunks = await self._chunks.find(query, {"m": 1}, session=s).to_list(None)
        chunks.sort(key=lambda c: c["_id"]["p"])
        runs: list[Run] = []
        position = 0
        for chunk in chunks:
            if chunk["_id"]["p"] != position:
                break  # a hole: reported below
            runs.append((position, chunk["m"][: end - position]))
            position += len(chunk["m"])
        if position < end:
            raise CorruptRecord(
                f"session {session!r}: the chunks hold {position} of its first {end} messages"
            )
        return runs

    async def _own_blobs(
        self, s: AsyncClientSession, session: str, new: str, runs: list[Run], tail: list[Entry]
    ) -> tuple[list[Run], list[Entry]]:
        """The entries with their out-of-line bodies copied into blobs of ``new``'s own."""
        refs = [
            ref
            for entries in [*(m for _, m in runs), tail]
            for e in entries
            for ref in e.get("r", ())
        ]
        if not refs:
            return runs, tail
        renamed: dict[Any, ObjectId] = {}
        copies: list[Doc] = []
        async for blob in self._blobs.find({"_id": {"$in": refs}}, session=s):
            renamed[blob["_id"]] = ObjectId()
            copies.append({"_id": renamed[blob["_id"]], "s": new, "d": blob["d"]})
        if missing := [ref for ref in refs if ref not in renamed]:
            raise CorruptRecord(f"session {session!r}: blob {missing[0]} of a message is missing")
        await self._blobs.insert_many(copies, session=s)

        def own(entries: list[Entry]) -> list[Entry]:
            return [e | {"r": [renamed[r] for r in e["r"]]} if "r" in e else e for e in entries]

        return [(p, own(m)) for p, m in runs], own(tail)
