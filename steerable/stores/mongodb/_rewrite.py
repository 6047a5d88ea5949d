"""The MongoDB store's :class:`~steerable.store.Rewritable` verbs: truncate and delete.

Each is one multi-document transaction (so, like the service, they need a replica set; one
node will do). It first writes the session's service document (``rw``, a count of cuts,
deletes and forks, goes up by one, and ``mk``, the transcript's mark, is new: no claimer
takes what it held of the transcript for it after the commit): that is the lock every
service write takes, so a concurrent claim, step or enqueue conflicts with it and one of
the two runs again on a fresh snapshot (:meth:`ServiceTransactions._transaction`). In that
snapshot a running turn (``run``) refuses the verb with
:class:`~steerable.errors.SessionBusy` and nothing is written. A session that has no
service document gets one first (outside, as an enqueue does: a claim could otherwise start
a turn that the cut never saw), which the transaction removes again if the service never
used it (no claim, no event, no metadata): a cut of a session the service never saw leaves
no document of it (the next one made has a mark of its own). A session with no head and no
service document has nothing to cut or forget, and is answered without a write.

A cut writes the head (a save, which writes it too, then conflicts with it, or waits for it
and finds a length it did not expect), and:

- a cut that reaches the entries a flush is moving (``mv``) first finishes that flush (a
  dead flusher's, or one under way: every flusher of a mark writes the same documents), then
  runs again; only a flush that will not finish after a few tries is called off in the cut
  (``mv`` 0, and what it wrote at ``base`` removed) so it cannot commit messages that are
  gone;
- cutting inside the head's tail drops the tail's end;
- cutting inside the chunks shortens the chunk the cut falls in (and its id list) and
  removes every chunk and id list after it; ``base`` becomes the cut and the tail empty;
- the removed messages' blobs go, and the ids of removed steered messages are kept in the
  head's ``seen``, which :meth:`MongoStore.steer` checks: a steer id seen before stays seen
  (its other home, the transcript, has just lost it). Every other removed id may be saved
  again: no tail entry and no id list holds it any more.

A delete removes the head, every chunk, id list and blob of the transcript, the entries of
the session's tool journal (:mod:`._journal`; a session with nothing else is deleted too,
though it had nothing to report), and the session's inputs, turns and events, resets the
service document's counts (inputs, queued, waiting, turns, work) and drops its metadata,
but keeps its epoch (``ep``) and its event count (``ev``): a stale holder stays fenced and
the next event id is the one after the last. With no inputs (``seq`` 0)
it is not listed.

A limit: a flush is four commands outside any transaction (see the package docstring). A
flusher stalled between two of them while the cut finished its flush and committed (or
while the cut called it off) can still write its chunk or id list after the cut, at a
position the cut emptied: a stale document past ``base``. A later flush at that very
position replaces it (:meth:`MongoStore._placed`); one that starts elsewhere does not see
it, and a stale id list keeps its ids from being saved again (``InvalidMessage``; a flush
of one stops, its entries staying readable in the head). Cut a session no one is saving
to at that moment, as the busy check ensures under the service.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError

from steerable import codec
from steerable.errors import CorruptRecord, SessionBusy, StoreError, TranscriptConflict
from steerable.messages import Message, new_id
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._documents import Doc, new_session
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._journal import MongoJournaling
from steerable.stores.mongodb._layout import Entry
from steerable.stores.mongodb._service import MongoServiceTables
from steerable.stores.mongodb._transactions import RETRIES, Missing

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection

_T = TypeVar("_T")
_END = 2**62  # past every position: the upper bound of a range of {s, p} documents
_RESET: Doc = {
    "$set": {"seq": 0, "q": 0, "wt": 0, "w": False, "tn": 0, "h": None, "x": 0, "sr": False},
    "$unset": {"md": ""},
}


def _from(session: str, position: int) -> Doc:
    """The filter of the ``{s, p}`` documents (chunks, id lists) at ``position`` and after."""
    return {"_id": {"$gte": {"s": session, "p": position}, "$lt": {"s": session, "p": _END}}}


def _refs(entries: list[Entry]) -> list[Any]:
    return [ref for entry in entries for ref in entry.get("r", ())]


class _Moving(Exception):
    """A flush is moving entries the cut removes; it is finished, then the cut runs again."""

    def __init__(self, marked: int) -> None:
        self.marked = marked


class MongoRewritable(MongoJournaling, MongoServiceTables):
    """:meth:`truncate` and :meth:`delete` of :class:`MongoStore`; see the module docstring.

    On the journal's class: a delete forgets the session's journal too."""

    if TYPE_CHECKING:  # provided by MongoStore
        _blobs: AsyncCollection[Any]

    async def truncate(self, session: str, *, at: int, length: int | None = None) -> list[Message]:
        """Remove the messages at positions ``at`` and after; returns them, in order.

        With ``length``, :class:`TranscriptConflict` unless exactly ``length`` are stored;
        :class:`SessionBusy` while a service turn runs. Either way nothing changes.
        """
        with reaching(f"cut the transcript of session {session!r}"):
            if not await self._exists(session):
                if length is not None and length != 0:
                    raise TranscriptConflict(session, length, 0)
                return []
            for attempt in range(RETRIES):
                last = attempt == RETRIES - 1  # a flush that will not finish is called off
                cut = functools.partial(self._cut, session=session, at=at, length=length)
                try:
                    return await self._locked(session, "cut", functools.partial(cut, call_off=last))
                except _Moving as moving:
                    await self._flush(session, moving.marked)
            raise StoreError(f"session {session!r}: the cut kept meeting a flush")  # not reached

    async def delete(self, session: str) -> bool:
        """Forget the session's transcript, steers and service records; True if it had any.

        :class:`SessionBusy` while a service turn runs on it, and nothing changes.
        """
        with reaching(f"delete session {session!r}"):
            if not await self._exists(session):
                return False
            return await self._locked(session, "deleted", lambda s: self._forget(s, session))

    async def _exists(self, session: str) -> bool:
        """Whether the session has a head, a service document or a journal entry (outside a
        transaction)."""
        if await self._heads.find_one({"_id": session}, {"_id": 1}) is not None:
            return True
        if await self._service.find_one({"_id": session}, {"_id": 1}) is not None:
            return True
        return await self._journal.find_one(layout.journal_of(session), {"_id": 1}) is not None

    async def _locked(
        self, session: str, what: str, body: Callable[[AsyncClientSession], Awaitable[_T]]
    ) -> _T:
        """``body`` in one transaction that first locks the session's service document.

        A running turn there is :class:`SessionBusy` (``what`` the session cannot be).
        """

        async def unless_busy(s: AsyncClientSession, service: Doc) -> _T:
            if service["run"] is not None:
                raise SessionBusy(session, service["run"], what)
            return await body(s)

        return await self._holding(session, unless_busy)

    async def _holding(
        self, session: str, body: Callable[[AsyncClientSession, Doc], Awaitable[_T]]
    ) -> _T:
        """``body`` in one transaction that first locks the session's service document,
        which it is given (``run``, ``seq``, ``md``, as locked).

        A session with no service document gets one first, outside (a racing writer's
        counts as well); the transaction removes it again if the service never used it.
        """

        async def locked(s: AsyncClientSession) -> _T:
            service: Doc | None = await self._service.find_one_and_update(
                {"_id": session},
                {"$inc": {"rw": 1}, "$set": {"mk": new_id()}},
                projection={"run": 1, "ep": 1, "ev": 1, "seq": 1, "md": 1},
                return_document=ReturnDocument.AFTER,
                session=s,
            )
            if service is None:
                raise Missing
            result = await body(s, service)
            if service["ep"] == service["ev"] == 0 and "md" not in service:  # no trace
                await self._service.delete_one({"_id": session}, session=s)
            return result

        for _ in range(RETRIES):
            try:
                return await self._transaction(locked)
            except Missing:
                with suppress(DuplicateKeyError):  # made by a racing writer meanwhile
                    new = {"$setOnInsert": new_session()}
                    await self._service.update_one({"_id": session}, new, upsert=True)
        raise StoreError(f"session {session!r}: its service document kept vanishing")

    # -- truncate ----------------------------------------------------------------------------

    async def _cut(
        self, s: AsyncClientSession, *, session: str, at: int, length: int | None, call_off: bool
    ) -> list[Message]:
        head = await self._heads.find_one(
            {"_id": session}, {"n": 1, "base": 1, "tail": 1, "mv": 1}, session=s
        )
        stored = int(head["n"]) if head else 0
        if length is not None and length != stored:
            raise TranscriptConflict(session, length, stored)
        if head is None or at >= stored:
            return []
        return await self._cut_from(s, session, head, at, call_off=call_off)

    async def _cut_from(
        self, s: AsyncClientSession, session: str, head: Doc, at: int, *, call_off: bool
    ) -> list[Message]:
        """Remove the messages at ``at`` (< ``n``) and after from ``head``, as read in the
        transaction ``s``; returns them. Also :meth:`MongoRepairable.replace`'s first half."""
        base, marked = int(head["base"]), int(head.get("mv") or 0)
        if marked and at < base + marked and not call_off:
            raise _Moving(marked)  # the cut reaches entries a flush is moving: finish it first
        if at >= base:
            removed, change = await self._cut_tail(s, session, head, at)
        else:
            removed, change = await self._cut_chunks(s, session, head, at)
        messages = await self._removed(s, session, at, removed)
        steers = [m.id for m in messages if m.steered]
        update: Doc = {"$set": change}
        if steers:
            update["$addToSet"] = {"seen": {"$each": steers}}
        await self._heads.update_one({"_id": session}, update, session=s)
        if refs := _refs(removed):
            await self._blobs.delete_many({"_id": {"$in": refs}}, session=s)
        return messages

    async def _cut_tail(
        self, s: AsyncClientSession, session: str, head: Doc, at: int
    ) -> tuple[list[Entry], Doc]:
        """A cut at or past ``base``: the tail's end goes; a flush it reaches is called off."""
        base, tail, moving = int(head["base"]), head["tail"], int(head.get("mv") or 0)
        keep = at - base
        change: Doc = {"n": at, "tail": tail[:keep], "k": []}
        change["tb"] = sum(int(entry["z"]) for entry in tail[:keep])
        if moving > keep:
            change["mv"] = moving = 0
        if not moving:  # nothing is moving: whatever lies at base and after is a dead flush's
            await self._drop_from(s, session, base)
        return tail[keep:], change

    async def _cut_chunks(
        self, s: AsyncClientSession, session: str, head: Doc, at: int
    ) -> tuple[list[Entry], Doc]:
        """A cut below ``base``: the chunk it falls in is shortened, every later one goes."""
        base = int(head["base"])
        query = layout.chunk_range(session, base) | {"e": {"$gt": at}}
        chunks = sorted(
            await self._chunks.find(query, session=s).to_list(None), key=lambda c: c["_id"]["p"]
        )
        first = int(chunks[0]["_id"]["p"]) if chunks else at + 1
        entries: list[Entry] = [e for chunk in chunks for e in chunk["m"]]
        if first > at or first + len(entries) != base:
            raise CorruptRecord(f"session {session!r}: its chunks do not hold positions {at}..")
        kept = entries[: at - first]
        if kept:
            chunk = layout.chunk(session, first, kept)
            await self._chunks.replace_one({"_id": chunk["_id"]}, chunk, session=s)
            ids = layout.id_list(session, first, kept)
            await self._heads.replace_one({"_id": ids["_id"]}, ids, session=s)
        await self._drop_from(s, session, at)
        change: Doc = {"n": at, "base": at, "tail": [], "tb": 0, "mv": 0, "k": []}
        return entries[at - first :] + head["tail"], change

    async def _drop_from(self, s: AsyncClientSession, session: str, position: int) -> None:
        """Remove the chunks and id lists that start at ``position`` or after."""
        await self._chunks.delete_many(_from(session, position), session=s)
        await self._heads.delete_many(_from(session, position), session=s)

    async def _removed(
        self, s: AsyncClientSession, session: str, at: int, removed: list[Entry]
    ) -> list[Message]:
        """The removed entries as messages, read before their blobs go.

        In the transaction: a message that cannot be read back is a CorruptRecord and the
        cut is not made (delete the session to get rid of it).
        """
        pieces: dict[Any, str] = {}
        if refs := _refs(removed):
            async for blob in self._blobs.find({"_id": {"$in": refs}}, session=s):
                pieces[blob["_id"]] = blob["d"]
        messages: list[Message] = []
        for position, entry in enumerate(removed, at):
            where = f"session {session!r}, position {position}"
            try:
                body = entry["b"] if "b" in entry else "".join(pieces[r] for r in entry["r"])
            except KeyError:
                raise CorruptRecord(f"{where}: part of its body is missing") from None
            messages.append(codec.decode(entry["i"], body, where=where))
        return messages

    # -- delete ------------------------------------------------------------------------------

    async def _forget(self, s: AsyncClientSession, session: str) -> bool:
        head = await self._heads.find_one(
            {"_id": session}, {"n": 1, "tail": 1, "box": 1, "seen": 1}, session=s
        )
        chunks = await self._chunks.find(_from(session, 0), {"m": 1}, session=s).to_list(None)
        refs = _refs([e for chunk in chunks for e in chunk["m"]])
        had = False
        if head is not None:
            refs += _refs(head["tail"]) + _refs(head.get("box", []))
            had = int(head["n"]) > 0 or bool(head.get("box") or head.get("seen"))
        await self._drop_from(s, session, 0)
        await self._heads.delete_one({"_id": session}, session=s)
        if refs:
            await self._blobs.delete_many({"_id": {"$in": refs}}, session=s)
        await self._journal.delete_many(layout.journal_of(session), session=s)
        inputs = await self._inputs.delete_many({"s": session}, session=s)
        await self._turns.delete_many({"s": session}, session=s)
        await self._events.delete_many({"s": session}, session=s)
        # the document stays for its epoch (a stale holder stays fenced) and its event count
        # (ids go on); with no inputs it is not listed
        before: Doc | None = await self._service.find_one_and_update(
            {"_id": session}, _RESET, projection={"md": 1}, session=s
        )
        return had or inputs.deleted_count > 0 or (before is not None and "md" in before)
