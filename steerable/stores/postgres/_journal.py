"""The Postgres store's :class:`~steerable.store.Journaling` verbs: the tool journal.

A call is a row of ``steerable_journal`` keyed by (session, call key); its ``result`` is the
recorded result's text (:func:`steerable.journal.encode_result`), NULL while it is started
and not ended. The key is the arbiter, so neither verb takes a lock of the session (the
journal is not fenced by the service's lease: see :mod:`steerable.journal`).

``begin_calls`` is one statement: ``INSERT ... ON CONFLICT DO NOTHING RETURNING key`` makes
the rows of the keys the table lacks, and those the statement inserted, and no other
caller's, are new (of many racing inserts of one key the unique key lets exactly one in).
The keys it did not insert are answered from the statement's snapshot. A key that is in
neither (another caller's insert committed after the snapshot was taken, and this one's
waited for it and then did nothing) is read again by a second query on a fresh snapshot,
which sees the row and whatever result was recorded in it since; one the second read does
not find either (a ``delete`` forgot it meanwhile) is begun again. The keys are inserted
in one order, so two begins of overlapping keys cannot deadlock.

``end_call`` is one statement: an upsert whose update keeps the result the row has
(``coalesce``) and returns it, so the first result recorded wins and every caller is told
which, waiting on the row's lock when another end is in flight. Under a pool whose
transactions are REPEATABLE READ the server refuses either statement when a row it
meets changed after its snapshot; it is run again.

``delete`` removes the session's rows in its transaction (see :mod:`._rewrite`); ``fork``
copies none and ``truncate`` touches none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg  # type: ignore[import-untyped]

from steerable.errors import StoreUnavailable
from steerable.journal import decode_result, encode_result
from steerable.messages import ToolResult
from steerable.stores.postgres._statements import RETRIES
from steerable.stores.postgres._translate import translated

__all__ = ["PostgresJournal"]

# $1 session, $2 the keys. One row per key this statement did not insert: `seen` when the
# snapshot has it (with its result, NULL while not ended). The main query reads `began`, so
# the insert runs whole before it; it cannot see the insert's rows, only the snapshot's.
_BEGIN = """
WITH began AS (
    INSERT INTO steerable_journal (session, key)
    SELECT $1, k.key FROM unnest($2::text[]) AS k (key) ORDER BY k.key COLLATE "C"
    ON CONFLICT ON CONSTRAINT steerable_journal_key DO NOTHING
    RETURNING key
)
SELECT k.key, j.result, j.key IS NOT NULL AS seen
FROM unnest($2::text[]) AS k (key)
LEFT JOIN steerable_journal j ON j.session = $1 AND j.key = k.key
WHERE k.key NOT IN (SELECT key FROM began)
"""

_KNOWN = "SELECT key, result FROM steerable_journal WHERE session = $1 AND key = ANY($2::text[])"

# $1 session, $2 key, $3 the result's text
_END = """
INSERT INTO steerable_journal AS j (session, key, result, ended_at) VALUES ($1, $2, $3, now())
ON CONFLICT ON CONSTRAINT steerable_journal_key
DO UPDATE SET result = coalesce(j.result, excluded.result),
    ended_at = coalesce(j.ended_at, excluded.ended_at)
RETURNING result
"""


class PostgresJournal:
    """The :class:`steerable.store.Journaling` verbs of :class:`PostgresStore`."""

    __slots__ = ()

    pool: Any  # the store's pool (see PostgresStore)

    async def _check_once(self) -> None:
        raise NotImplementedError  # provided by PostgresStore

    async def begin_calls(self, session: str, keys: Sequence[str]) -> dict[str, ToolResult | None]:
        """Mark each call of ``keys`` started unless the journal knows it; atomic per key.

        The answer holds the keys the journal knew: ``None`` for a call started and not
        ended, its result for one that ended. A key not in it was started by this call.
        One statement, one round trip, unless a racing begin of a key committed during it.
        """
        await self._check_once()
        known: dict[str, ToolResult | None] = {}
        todo = list(dict.fromkeys(keys))
        doing = f"begin calls in the journal of session {session!r}"
        for _ in range(RETRIES):
            if not todo:
                return known
            rows = await self._run(doing, _BEGIN, session, todo)
            unseen = [key for key, _, seen in rows if not seen]
            known.update((key, self._decoded(key, result)) for key, result, seen in rows if seen)
            if not unseen:
                return known
            rows = await self._run(doing, _KNOWN, session, unseen)
            known.update((key, self._decoded(key, result)) for key, result in rows)
            todo = [key for key in unseen if key not in known]
        raise StoreUnavailable(
            f"cannot {doing}: its keys were forgotten under each of {RETRIES} attempts"
        )

    async def end_call(self, session: str, key: str, result: ToolResult) -> ToolResult:
        """Record ``result`` as call ``key``'s (begun or not); the first recorded wins and
        is returned. One statement."""
        text = encode_result(key, result)  # InvalidMessage (a lone surrogate): nothing sent
        await self._check_once()
        doing = f"end call {key!r} in the journal of session {session!r}"
        rows = await self._run(doing, _END, session, key, text)
        return decode_result(key, rows[0][0])  # the upsert keeps a result or writes this one

    async def _run(self, doing: str, query: str, *args: Any) -> list[Any]:
        """The rows of ``query``, run again when the server rolled it back for a race."""
        for _ in range(RETRIES):
            with translated(doing):
                try:
                    rows: list[Any] = await self.pool.fetch(query, *args)
                    return rows
                except (asyncpg.DeadlockDetectedError, asyncpg.SerializationError):
                    continue  # rolled back whole (REPEATABLE READ: a row changed since)
        raise StoreUnavailable(f"cannot {doing}: it was rolled back in each of {RETRIES} attempts")

    @staticmethod
    def _decoded(key: str, text: str | None) -> ToolResult | None:
        return None if text is None else decode_result(key, text)
