"""The MongoDB store's tool journal (:class:`~steerable.store.Journaling`): ``begin_calls``
and ``end_call``.

``steerable_journal`` (migration step 5) holds one document per call, ``_id {s: session, k:
call key}``: ``{}`` once the call is begun, ``{r: text}`` once it has ended, ``r`` the
result as :func:`steerable.journal.encode_result` wrote it, a BSON string never parsed.
Every verb is atomic per key because the ``_id`` index is unique, not because of a lock:

- ``begin_calls`` is one unordered ``insert`` of an entry per key. The server inserts
  each one that is missing and refuses each one the journal holds with a duplicate key:
  exactly one of many racing callers (tasks, processes, replicas) inserts a key, and only
  it is told the call is new. The refused keys are then read (one ``find``) for their
  results. An entry can only go from begun to ended, so what the read finds is what the
  journal held when the insert was refused, or an end recorded since (either is an
  answer the call could have had); an entry a ``delete`` removed in between is inserted
  again, as if the begin came after the delete.
- ``end_call`` is one ``findAndModify``, an upsert whose pipeline sets ``r`` only where it
  is missing (``$ifNull``) and returns the document after: the first result recorded wins,
  and every caller gets it back. Two upserts racing to create the entry collide on the
  ``_id``; the loser runs again and finds the winner's.

Neither is a transaction nor takes the session's service document: the journal is not
fenced by the service's lease (:mod:`steerable.journal` says why), and a journal write
does not conflict with a running turn's steps. ``delete`` removes the session's entries
in its own transaction (:mod:`._rewrite`); ``fork`` copies none; ``truncate`` and
``replace`` leave them. A result's text is kept inline: one over 15 MiB (MongoDB's
documents stop at 16) is a :class:`~steerable.errors.StoreError`, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, DuplicateKeyError

from steerable.errors import StoreError
from steerable.journal import decode_result, encode_result
from steerable.messages import ToolResult
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._errors import reaching

if TYPE_CHECKING:
    from pymongo.asynchronous.collection import AsyncCollection
    from pymongo.asynchronous.database import AsyncDatabase

_DUPLICATE_KEY: Final = 11000
_RESULT_MAX: Final = 15 * 1024 * 1024  # bytes of a result's text: a document stays < 16 MiB
_RETRIES: Final = 5  # rounds of a begin or end whose entry a delete or a racer moved


class MongoJournaling:
    """:meth:`begin_calls` and :meth:`end_call` of :class:`MongoStore`; see the module
    docstring."""

    if TYPE_CHECKING:  # provided by MongoStore
        db: AsyncDatabase[Any]

        async def _check_migrated(self) -> None: ...

    @property
    def _journal(self) -> AsyncCollection[Any]:
        return self.db[layout.JOURNAL]

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark each call of ``keys`` started unless the journal knows it; atomic per key.

        Returns what the journal knew before, by key: None for a call begun and not ended,
        its result for one that ended. A key missing from it is new, begun by this call.
        """
        known: dict[str, ToolResult | None] = {}
        with reaching(f"begin calls in the journal of session {session!r}"):
            if not keys:
                return known
            await self._check_migrated()
            pending = list(keys)
            for _ in range(_RETRIES):
                refused = await self._insert_begun(session, pending)
                if not refused:
                    return known
                entries = [layout.call(session, key) for key in refused]
                async for entry in self._journal.find({"_id": {"$in": entries}}):
                    key = entry["_id"]["k"]
                    known[key] = decode_result(key, entry["r"]) if "r" in entry else None
                pending = [key for key in refused if key not in known]  # deleted meanwhile
                if not pending:
                    return known
        raise StoreError(f"session {session!r}: the journal's entries kept vanishing")

    async def _insert_begun(self, session: str, keys: list[str]) -> list[str]:
        """Insert a begun entry for each key; the keys whose entry was there already."""
        try:
            await self._journal.insert_many(
                [{"_id": layout.call(session, key)} for key in keys], ordered=False
            )
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if any(error.get("code") != _DUPLICATE_KEY for error in errors) or not errors:
                raise
            return [keys[int(error["index"])] for error in errors]
        return []

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record ``result`` as call ``key``'s (begun or not); the first recorded wins and is
        returned."""
        text = encode_result(key, result)  # InvalidMessage for what no store can keep
        if len(text.encode("utf-8")) > _RESULT_MAX:
            raise StoreError(
                f"session {session!r}: the result of call {key!r} is over"
                f" {_RESULT_MAX // 2**20} MiB, more than a MongoDB journal entry keeps"
            )
        kept = {"r": {"$ifNull": ["$r", {"$literal": text}]}}
        with reaching(f"end a call in the journal of session {session!r}"):
            await self._check_migrated()
            for _ in range(_RETRIES):
                try:
                    entry: dict[str, Any] | None = await self._journal.find_one_and_update(
                        {"_id": layout.call(session, key)},
                        [{"$set": kept}],
                        upsert=True,
                        return_document=ReturnDocument.AFTER,
                    )
                except DuplicateKeyError:
                    continue  # another end (or a begin) created the entry first: update it
                if entry is not None:
                    return decode_result(key, entry["r"])
        raise StoreError(f"session {session!r}: the journal entry of call {key!r} kept racing")
