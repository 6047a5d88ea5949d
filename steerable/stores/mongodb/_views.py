"""What the MongoDB store's service reads (status, inputs, turns, the transcript with its
turns and times, events, the listing of sessions), and the session's metadata.

Reads are plain queries outside any transaction, each bounded by its ``limit`` on an index
that gives its order: a status returns its first ``limit`` waiting inputs from
``(s, st, n)`` and the counts from the service document's counters (``wt``, ``q``), so it
never reads the texts of the others. ``set_metadata`` is one upsert of the service document
(its ``md``), a single-document write: a transaction of the session that wrote the
document meanwhile conflicts with it and runs again, and one that holds it makes the
upsert wait.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.cursor import AsyncCursor
from pymongo.errors import DuplicateKeyError

from steerable import codec
from steerable.errors import StoreError
from steerable.messages import Message
from steerable.service_store import (
    Entry,
    InputState,
    InputView,
    ServiceEvent,
    SessionState,
    SessionSummary,
    Status,
    TurnView,
    listing,
    turn_of,
)
from steerable.stores.mongodb import _layout as layout
from steerable.stores.mongodb._documents import (
    Doc,
    input_view,
    key,
    metadata_of,
    new_session,
    turn_view,
)
from steerable.stores.mongodb._errors import reaching
from steerable.stores.mongodb._transactions import RETRIES, ServiceTransactions

# A listing's filter on the state, on the service document's fields
_STATE_FILTER: dict[SessionState | None, Doc] = {
    None: {},
    "running": {"run": {"$ne": None}},
    "queued": {"run": None, "q": {"$gt": 0}},
    "idle": {"run": None, "q": 0},
}


def listing_filter(prefix: str, after: str | None, state: SessionState | None) -> Doc:
    """The filter of a listing: a range of ``_id`` (the index every collection has; strings
    compare by their UTF-8 bytes, so in code-point order), the sessions that had an input,
    and the state, so the limit counts matching sessions only."""
    lower, included, upper = listing(prefix, after)
    ids: Doc = {"$gte" if included else "$gt": lower}
    if upper is not None:
        ids["$lt"] = upper
    return {"_id": ids, "seq": {"$gt": 0}} | _STATE_FILTER[state]


def listing_cursor(service: AsyncCollection[Any], query: Doc, limit: int) -> AsyncCursor[Any]:
    """The find of a listing, on the ``_id`` index by hint: a planner may prefer reading
    the collection and sorting it (SecantusDB does), which reads every session."""
    found = service.find(query, {"run": 1, "q": 1, "now": 1, "md": 1}).hint([("_id", 1)])
    return found.sort("_id", 1).limit(limit)


class MongoServiceViews(ServiceTransactions):
    """The reads of :class:`MongoStore`'s service tables, and ``set_metadata``."""

    if TYPE_CHECKING:  # provided by MongoStore
        _chunks: AsyncCollection[Any]

        async def _bodies(self, entries: list[layout.Entry]) -> list[str]: ...

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """The session's running turn, its first ``limit`` waiting inputs, and the counts."""
        with reaching(f"read the status of session {session!r}"):
            service = await self._service.find_one({"_id": session})
            if service is None:
                return Status(session, None, [], 0, 0)
            running = None
            if service["run"] is not None:
                doc = await self._turns.find_one({"_id": key(session, service["run"])})
                running = turn_view(service, doc) if doc else None
            waiting: list[InputView] = []
            if limit > 0:  # (a limit of 0 is no limit to MongoDB)
                rows = self._inputs.find({"s": session, "st": "waiting"}).sort("n", 1)
                waiting = [input_view(row) for row in await rows.limit(limit).to_list(None)]
        queued, total = int(service["q"]), int(service.get("wt", 0))
        return Status(session, running, waiting, queued, total, metadata_of(service))

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        with reaching(f"read an input of session {session!r}"):
            doc = await self._inputs.find_one({"_id": key(session, id)})
        return input_view(doc) if doc else None

    async def inputs(
        self, session: str, *, after: int, limit: int, state: InputState | None = None
    ) -> list[InputView]:
        """Up to ``limit`` inputs with ``seq`` > ``after`` in order (only ``state``, if given)."""
        if limit <= 0:
            return []
        query: Doc = {"s": session, "n": {"$gt": after}}
        if state is not None:
            query["st"] = state
        with reaching(f"read the inputs of session {session!r}"):
            rows = await self._inputs.find(query).sort("n", 1).limit(limit).to_list(None)
        return [input_view(row) for row in rows]

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        with reaching(f"read a turn of session {session!r}"):
            doc = await self._turns.find_one({"_id": key(session, id)})
            if doc is not None:
                return turn_view(await self._service.find_one({"_id": session}), doc)
            row = await self._inputs.find_one({"_id": key(session, id)})
        if row is not None and row["st"] == "waiting" and row["t"] is None:
            return TurnView(id, "queued", seq=int(row["n"]))
        return None

    async def turns(self, session: str, *, after: int, limit: int) -> list[TurnView]:
        """Up to ``limit`` turns that started (running or ended), prompt ``seq`` > ``after``."""
        if limit <= 0:
            return []
        with reaching(f"read the turns of session {session!r}"):
            found = self._turns.find({"s": session, "n": {"$gt": after}}).sort("n", 1)
            docs = await found.limit(limit).to_list(None)
            service = await self._service.find_one({"_id": session}) if docs else None
        return [turn_view(service, doc) for doc in docs]

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after``, with the turn and time of each."""
        first = max(after + 1, 0)
        if limit <= 0:
            return []
        with reaching(f"read the transcript of session {session!r}"):
            page = await self._page(session, first, first + limit)
            if not page:
                return []
            last = page[-1][0]
            owner = self._turns.find({"s": session, "start": {"$lte": first}}, {"start": 1, "i": 1})
            starts = await owner.sort("o", -1).limit(1).to_list(None)
            later = {"s": session, "start": {"$gt": first, "$lte": last}}
            starts += await self._turns.find(later, {"start": 1, "i": 1}).sort("o", 1).to_list(None)
        pairs = [(int(t["start"]), str(t["i"])) for t in starts]
        return [
            Entry(position, message, turn_of(position, pairs), at) for position, message, at in page
        ]

    async def _page(
        self, session: str, first: int, end: int
    ) -> list[tuple[int, Message, float | None]]:
        """The messages at positions ``[first, end)`` and their times, from the chunks and
        the head's tail."""
        head = await self._heads.find_one({"_id": session}, {"n": 1, "base": 1, "tail": 1})
        if head is None:
            return []
        base, end = int(head["base"]), min(end, int(head["n"]))
        if first >= end:
            return []
        found: list[tuple[int, layout.Entry]] = []
        if first < base:
            query = layout.chunk_range(session, min(end, base)) | {"e": {"$gt": first}}
            chunks = await self._chunks.find(query).to_list(None)
            for chunk in sorted(chunks, key=lambda c: int(c["_id"]["p"])):
                start = int(chunk["_id"]["p"])
                found += [(start + k, e) for k, e in enumerate(chunk["m"]) if start + k >= first]
        found += [(base + k, e) for k, e in enumerate(head["tail"]) if first <= base + k]
        found = [(p, e) for p, e in found if p < end]
        bodies = await self._bodies([entry for _, entry in found])
        return [
            (
                p,
                codec.decode(e["i"], body, where=f"session {session!r}, position {p}"),
                int(e["a"]) / 1000 if "a" in e else None,
            )
            for (p, e), body in zip(found, bodies, strict=True)
        ]

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        if limit <= 0:
            return []
        with reaching(f"read the events of session {session!r}"):
            found = self._events.find({"s": session, "n": {"$gt": max(after, 0)}})
            docs = await found.sort("n", 1).limit(limit).to_list(None)
        return [
            ServiceEvent(int(d["n"]), d["k"], d["t"], json.loads(d["d"]), int(d["at"]) / 1000)
            for d in docs
        ]

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``.

        One query on the service documents by ``_id``; ``updated_at`` is their ``now``,
        the server's clock at the write that appended the last event (every write that
        appends one sets it, and only those).
        """
        if limit <= 0:
            return []  # (a limit of 0 is no limit to MongoDB)
        query = listing_filter(prefix, after, state)
        with reaching(f"list the sessions under {prefix!r}"):
            await self._check_migrated()
            docs = await listing_cursor(self._service, query, limit).to_list(None)
        return [
            SessionSummary(
                d["_id"],
                "running" if d["run"] is not None else "queued" if d["q"] else "idle",
                d["run"],
                int(d["q"]),
                int(d["now"]) / 1000,
                metadata_of(d),
            )
            for d in docs
        ]

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata (the session need not have had an input).

        ``{}`` removes it. No event: the session's ``updated_at`` stays its last event's.
        """
        change: Doc = {"$setOnInsert": new_session()}
        if metadata:
            change["$set"] = {"md": json.dumps(metadata)}
        else:
            change["$unset"] = {"md": ""}
        with reaching(f"set the metadata of session {session!r}"):
            await self._check_migrated()
            for _ in range(RETRIES):
                try:
                    await self._service.update_one({"_id": session}, change, upsert=True)
                    return
                except DuplicateKeyError:  # made by a racing writer meanwhile: it exists now
                    continue
        raise StoreError(f"session {session!r}: setting its metadata kept racing")
