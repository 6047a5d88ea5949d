"""The MongoDB store's :class:`~steerable.store.Repairable` verb: ``replace``.

A swap of a transcript's tail is one multi-document transaction (a replica set, like the cut)
under the cut's lock (:meth:`MongoRewritable._holding`: the session's service document
written first, its transcript mark made new), without the cut's busy check: the orphan
repair writes it at a turn's start. It is a cut and a save, built from theirs, in that one
transaction:

1. the head is read; unless it holds ``at + len(old)`` messages (``at`` not past the end)
   it is a :class:`~steerable.errors.TranscriptConflict` and nothing is written;
2. the cut's own code (:meth:`MongoRewritable._cut_from`) removes positions ``at`` and
   after: the tail's end, or the chunks and id lists from ``at`` (the one ``at`` falls in
   shortened); a flush it reaches is finished first, as a cut's is; the removed steered
   messages' ids go to ``seen``; their blobs go. The ids removed are compared with
   ``old``: another list is a conflict, and the abort undoes the cut;
3. the save's own command (``findAndModify`` with :func:`~._layout.append_filter` and
   :func:`~._layout.append_pipeline`, ``at`` as the position) appends the new messages
   after what is kept: entries stamped with the server's clock, big bodies in blobs
   inserted in the transaction, ``k`` their ids (so the unique index refuses an id a kept
   chunk holds), the filter refusing an id the kept tail holds (either is an
   :class:`~steerable.errors.InvalidMessage`, and the abort undoes the cut), and a waiting
   steer whose id is now a message's leaves the box, as on a save. Steers otherwise,
   inputs, turns, events and the journal are not touched.

A save, a step or a steer that writes the head after the transaction read it conflicts with
the transaction's write, which then runs again on a fresh snapshot (and, the tail having
changed, is a conflict): so of a swap and a racing save exactly one wins, and of two swaps
of one tail too. A claim, a step, a cut or a fork of the session conflicts on the service
document. After the commit a tail past 32 KiB is flushed, as after a save.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pymongo import ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.errors import DuplicateKeyError

from steerable import codec
from steerable.errors import InvalidMessage, StoreError, TranscriptConflict
from steerable.messages import Message
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._documents import Doc
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._layout import Staged
from steerable.stores.mongodb._rewrite import MongoRewritable, _Moving
from steerable.stores.mongodb._transactions import RETRIES, Raced

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection


class MongoRepairable(MongoRewritable):
    """:meth:`replace` of :class:`MongoStore`; see the module docstring."""

    if TYPE_CHECKING:  # provided by MongoStore
        _blobs: AsyncCollection[Any]

    async def replace(
        self, session: str, *, at: int, old: Sequence[str], messages: Sequence[Message]
    ) -> None:
        """Put ``messages`` at positions ``at`` and after, in place of the stored ones, if
        their ids are exactly ``old`` (in order, none after); atomic.

        :class:`TranscriptConflict` otherwise, :class:`InvalidMessage` for an id of a kept
        message or one twice among ``messages``; either way nothing changes.
        """
        ids = [m.id for m in messages]
        if len(set(ids)) != len(ids):
            raise InvalidMessage(f"session {session!r}: one message id appears twice in a swap")
        staged = layout.stage(session, [(m.id, codec.encode(m)) for m in messages])
        swap = functools.partial(self._swap, session=session, at=at, old=list(old))
        with reaching(f"replace the tail of session {session!r}"):
            for attempt in range(RETRIES):
                last = attempt == RETRIES - 1  # a flush that will not finish is called off
                body = functools.partial(swap, staged=staged, ids=ids, call_off=last)
                try:
                    head = await self._holding(session, body)
                except _Moving as moving:
                    await self._flush(session, moving.marked)
                    continue
                except Raced:
                    continue  # a first save made the head meanwhile: it is read next
                if head is not None and (head["tb"] >= layout.FLUSH_BYTES or head.get("mv")):
                    await self._flush(session, int(head.get("mv") or 0))
                return
        raise StoreError(f"session {session!r}: the swap kept meeting a flush or a first save")

    async def _swap(
        self,
        s: AsyncClientSession,
        service: Doc,
        *,
        session: str,
        at: int,
        old: list[str],
        staged: Staged,
        ids: list[str],
        call_off: bool,
    ) -> Doc | None:
        """The transaction's body: compare, cut, append. The head after (``tb``, ``mv``),
        or None when nothing was appended."""
        head = await self._heads.find_one(
            {"_id": session}, {"n": 1, "base": 1, "tail": 1, "mv": 1}, session=s
        )
        stored = int(head["n"]) if head else 0
        if at > stored or stored - at != len(old):
            raise TranscriptConflict(session, at + len(old), stored)
        if head is not None and at < stored:
            removed = await self._cut_from(s, session, head, at, call_off=call_off)
            if [m.id for m in removed] != old:
                raise TranscriptConflict(session, at + len(old), stored)  # aborts the cut
        if not staged.entries:
            return None
        if staged.blobs:
            await self._blobs.insert_many(staged.blobs, session=s)
        try:
            after: Doc | None = await self._heads.find_one_and_update(
                layout.append_filter(session, ids, at),
                layout.append_pipeline(session, staged, ids, 0, create=head is None),
                projection={"tb": 1, "mv": 1},
                upsert=head is None,
                return_document=ReturnDocument.AFTER,
                session=s,
            )
        except DuplicateKeyError:
            if head is None:
                raise Raced from None  # the head was created since this snapshot
            after = None  # a kept chunk's id list holds one of the ids: the unique index
        if after is None:
            raise InvalidMessage(
                f"session {session!r}: a message id of the swap is one the transcript keeps"
            )
        return after
