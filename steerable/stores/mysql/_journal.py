"""The MySQL store's tool journal (:class:`steerable.store.Journaling`): one row per call.

A call is a row of ``steerable_journal`` (schema step 4) keyed by ``(session, call_key)``:
``result`` NULL while it is started and not ended, then the stored text of its result
(:func:`steerable.journal.encode_result`, kept as LONGTEXT so no byte of it is rewritten).

Each verb is one transaction (:meth:`Transactions._atomic`) that first takes the session's
core lock, its ``steerable_sessions`` row (as every save does), and only then reads:

- ``begin_calls``: the lock, one ``SELECT`` of the keys' rows, one ``INSERT`` of a started
  row for each key it did not find. Because every journal write of the session holds the
  lock from before its read to its commit, no other writer can insert a key between this
  read and this insert: of many begins of one key (tasks, processes, replicas), the first
  to get the lock inserts the row and every later one reads it. The read is the
  transaction's first plain one, after the lock, so under REPEATABLE READ its snapshot
  already holds every earlier begin's row. Without the lock the insert of a key another
  begin made meanwhile would be a duplicate key, and its read a stale snapshot.
- ``end_call``: the lock, one ``INSERT ... ON DUPLICATE KEY UPDATE result =
  COALESCE(result, ...)`` (the first result recorded stays, a key never begun is inserted
  ended), and one ``SELECT`` of the kept result.

The journal is not the service's: no verb here reads or writes the session's service row,
so it is not fenced by the lease and runs while a turn does (see :mod:`steerable.journal`).
``delete`` removes the session's rows in its own transaction, under the same core lock, so
a begin is wholly before or wholly after it; ``fork`` copies none; ``truncate`` leaves them.
"""

from __future__ import annotations

from collections.abc import Sequence

from steerable.errors import UsageError
from steerable.journal import decode_result, encode_result
from steerable.messages import ToolResult
from steerable.stores.mysql._driver import check_id, text_of
from steerable.stores.mysql._transaction import CORE_LOCK, Transactions, Tx

__all__ = ["MySQLJournaling"]

_KNOWN = "SELECT call_key, result FROM steerable_journal WHERE session = %s AND call_key IN ({})"

_BEGIN = "INSERT INTO steerable_journal (session, call_key) VALUES {}"

# COALESCE keeps a result recorded before; a row never begun is inserted ended
_END = (
    "INSERT INTO steerable_journal (session, call_key, result) VALUES (%s, %s, %s)"
    " ON DUPLICATE KEY UPDATE result = COALESCE(result, %s)"
)

_KEPT = "SELECT result FROM steerable_journal WHERE session = %s AND call_key = %s"


def _check_key(key: str) -> None:
    check_id(key, "call key")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"a call key is text MySQL can store, not {key!r}") from None


class MySQLJournaling(Transactions):
    """The :class:`steerable.store.Journaling` verbs of :class:`MySQLStore`."""

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark each call of ``keys`` started unless the journal knows it; atomic per key.

        The answer holds the keys the journal knew before: None for a call started and not
        ended, its result for one that ended. A key not in it is new, started now.
        """
        check_id(session, "session id")
        for key in keys:
            _check_key(key)
        if not keys:
            return {}

        async def begin(tx: Tx) -> dict[str, ToolResult | None]:
            await tx.run(CORE_LOCK, (session,))  # before the read: see the module docstring
            marks = ", ".join(["%s"] * len(keys))
            rows = await tx.rows(_KNOWN.format(marks), (session, *keys))
            known: dict[str, ToolResult | None] = {}
            for raw, text in rows:
                key = text_of(raw)
                known[key] = None if text is None else decode_result(key, text)
            new = [key for key in keys if key not in known]
            if new:
                values = ", ".join(["(%s, %s)"] * len(new))
                await tx.run(_BEGIN.format(values), [v for key in new for v in (session, key)])
            return known

        return await self._atomic(session, begin)

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record ``result`` as call ``key``'s (begun or not); the first recorded wins and is
        returned."""
        check_id(session, "session id")
        _check_key(key)
        text = encode_result(key, result)  # InvalidMessage before anything is written

        async def end(tx: Tx) -> ToolResult:
            await tx.run(CORE_LOCK, (session,))
            await tx.run(_END, (session, key, text, text))
            ((kept,),) = await tx.rows(_KEPT, (session, key))
            return result if text_of(kept) == text else decode_result(key, kept)

        return await self._atomic(session, end)
