"""The documents of the MongoDB store and the update pipelines that change them.

See the package docstring for why the documents look like this. Field names are short
because the head document is rewritten by every save.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from bson import ObjectId
from bson.max_key import MaxKey

SESSIONS: Final = "steerable_sessions"  # heads (_id the session), id lists (_id {s, p})
CHUNKS: Final = "steerable_chunks"  # flushed runs of the transcript, _id {s, p}
BLOBS: Final = "steerable_blobs"  # out-of-line message bodies, _id ObjectId
CORE_COLLECTIONS: Final = (SESSIONS, CHUNKS, BLOBS)  # step 1 makes these

# The service's (step 3): one document per session, inputs, turns and durable events
SERVICE: Final = "steerable_service"  # _id the session: lease, running turn, counters
INPUTS: Final = "steerable_inputs"  # _id {s, i}: one input per (session, id)
TURNS: Final = "steerable_turns"  # _id {s, i}: a turn, named by its prompt's id
EVENTS: Final = "steerable_events"  # _id {s, n}: the session's events 1, 2, ...
SERVICE_COLLECTIONS: Final = (SERVICE, INPUTS, TURNS, EVENTS)
JOURNAL: Final = "steerable_journal"  # _id {s, k}: the tool journal's calls (step 5)
COLLECTIONS: Final = (*CORE_COLLECTIONS, *SERVICE_COLLECTIONS, JOURNAL)

SERVICE_INDEXES: Final[tuple[tuple[str, str, tuple[tuple[str, int], ...], bool], ...]] = (
    # (collection, name, keys, unique)
    (SERVICE, "steerable_service_work", (("w", 1), ("x", 1)), False),  # the claim's scan
    (INPUTS, "steerable_inputs_order", (("s", 1), ("n", 1)), True),
    (INPUTS, "steerable_inputs_fate", (("s", 1), ("st", 1), ("t", 1), ("n", 1)), False),
    (TURNS, "steerable_turns_order", (("s", 1), ("o", 1)), True),
    (EVENTS, "steerable_events_order", (("s", 1), ("n", 1)), True),
)
"""The service collections' indexes, made by step 3."""

QUEUE_INDEXES: Final[tuple[tuple[str, str, tuple[tuple[str, int], ...], bool], ...]] = (
    (INPUTS, "steerable_inputs_waiting", (("s", 1), ("st", 1), ("n", 1)), False),  # status
    (TURNS, "steerable_turns_seq", (("s", 1), ("n", 1)), False),  # turns(), by prompt seq
    (SERVICE, "steerable_service_stops", (("h", 1), ("sr", 1)), False),  # stopping()
)
"""The indexes step 4 adds: the waiting inputs in order, the turns by their prompts' seq,
and the stop poll's sessions by holder."""

IDS_INDEX: Final = "steerable_session_ids"  # unique on (s, k): an id in one document only
IDS_KEY: Final = (("s", 1), ("k", 1))

INLINE_MAX: Final = 64 * 1024  # a body over this many bytes goes to a blob
SAVE_INLINE_MAX: Final = 512 * 1024  # inline bytes (with framing) one save may add
FLUSH_BYTES: Final = 32 * 1024  # a tail this big is moved to a chunk after the save
PIECE_CHARS: Final = 2 * 1024 * 1024  # a blob piece: at most 8 MiB of UTF-8
_ENTRY_OVERHEAD: Final = 24  # BSON framing of one tail entry, roughly
_MAX_INT32: Final = 2**31 - 1

Entry = dict[str, Any]
"""One stored message: ``{"i": id, "b": body, "z": size}``, or ``"r": [blob ids]`` for ``b``.

``z`` is the entry's approximate size in the head document, so the head knows its bytes.
Once stored, ``"a"`` is the server's clock when it was, in milliseconds (absent on entries
stored before migration step 4).
"""


@dataclass
class Staged:
    """Messages made ready for a save: head entries, and the blobs to write before it."""

    entries: list[Entry] = field(default_factory=list)
    blobs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        """What the entries add to the head document, roughly."""
        return sum(int(e["z"]) for e in self.entries)

    @property
    def blob_ids(self) -> list[ObjectId]:
        """The ids of the blobs to write."""
        return [b["_id"] for b in self.blobs]


def stage(session: str, items: list[tuple[str, str]]) -> Staged:
    """Entries for ``(id, body)`` pairs: small bodies inline, the rest split into blobs.

    A save may add at most :data:`SAVE_INLINE_MAX` bytes inline, so the head document stays
    far below MongoDB's 16 MiB limit whatever one save holds.
    """
    staged = Staged()
    inline = 0
    for message_id, body in items:
        size = len(body.encode("utf-8"))
        entry_size = size + _overhead(message_id)
        if size <= INLINE_MAX and inline + entry_size <= SAVE_INLINE_MAX:
            inline += entry_size
            staged.entries.append({"i": message_id, "b": body, "z": entry_size})
            continue
        refs: list[ObjectId] = []
        for start in range(0, len(body), PIECE_CHARS):
            blob_id = ObjectId()
            refs.append(blob_id)
            staged.blobs.append(
                {"_id": blob_id, "s": session, "d": body[start : start + PIECE_CHARS]}
            )
        staged.entries.append(
            {"i": message_id, "r": refs, "z": 16 * len(refs) + _overhead(message_id)}
        )
    return staged


def _overhead(message_id: str) -> int:
    return len(message_id.encode("utf-8")) + _ENTRY_OVERHEAD


def append_filter(session: str, ids: list[str], at: int | None) -> dict[str, Any]:
    """The filter of a save: the head holds ``at`` messages and none of ``ids`` in its tail.

    Ids kept in chunks are the unique index's to refuse (see :func:`append_pipeline`).
    """
    query: dict[str, Any] = {"_id": session}
    if at is None:
        query["box.0"] = {"$exists": True}  # nothing waiting: no match and no write
    else:
        query["n"] = at
    if ids:
        query["tail.i"] = {"$nin": ids}
    return query


def append_pipeline(
    session: str, staged: Staged, ids: list[str], take: int, *, create: bool
) -> list[dict[str, Any]]:
    """The update that appends ``staged`` to a head, then moves up to ``take`` steers after it.

    ``k`` becomes ``ids``: the index is updated with the new ids, and refuses the whole
    update if a chunk of the session holds one. The ids of earlier saves leave ``k`` (their
    entries' ``i`` in the tail keep them unique, by the save's filter), so the head holds
    as few index keys as a save brings. The steers taken are left in the head's ``took``
    (the caller reads them from the returned document). Every entry appended, a taken
    steer too, gets ``a``, the server's clock in milliseconds: the time it was stored. A
    waiting steer whose id is among the saved messages' ids is dropped, not taken: the run
    recorded it already (from its in-memory box, say), and an id is recorded once. Values
    from the caller are wrapped in ``$literal``: an id like ``"$x"`` is data here.
    ``create``: the update may create the head (the first save), so every field gets a
    default.
    """
    take = min(take, _MAX_INT32)

    def field(name: str, default: Any) -> Any:
        return {"$ifNull": [f"${name}", default]} if create else f"${name}"

    box: Any = field("box", [])
    if ids:  # a waiting steer saved as a message is recorded already: it leaves the box
        fresh = {"$not": [{"$in": ["$$this.i", {"$literal": ids}]}]}
        box = {"$filter": {"input": box, "cond": fresh}}
    took: Any = {"$slice": [box, take]} if take else {"$literal": []}
    added: list[Any] = [{"$literal": staged.entries}]
    count: list[Any] = [len(staged.entries)]
    size: list[Any] = [staged.bytes]
    if take:
        added.append("$took")
        count.append({"$size": "$took"})
        size.append({"$sum": {"$map": {"input": "$took", "in": "$$this.z"}}})
    stamped = {"$mergeObjects": ["$$this", {"a": {"$toLong": "$$NOW"}}]}
    added = [{"$map": {"input": {"$concatArrays": added}, "in": stamped}}]
    update: dict[str, Any] = {
        "box": {"$slice": [box, take, _MAX_INT32]} if take else box,
        "tail": {"$concatArrays": [field("tail", []), *added]},
        "k": {"$literal": ids},
        "n": {"$add": [field("n", 0), *count]},
        "tb": {"$add": [field("tb", 0), *size]},
    }
    if create:
        update |= {"s": {"$literal": session}, "base": field("base", 0), "mv": field("mv", 0)}
    return [{"$set": {"took": took}}, {"$set": update}]


def steer_filter(session: str, steer_id: str) -> dict[str, Any]:
    """A head that neither waits on ``steer_id`` nor holds it in its tail (chunks: the index),
    nor in ``seen`` (the taken steers a cut removed from the transcript)."""
    unseen = {"$ne": steer_id}
    return {"_id": session, "box.i": unseen, "tail.i": unseen, "seen": unseen}


def steer_update(session: str, entry: Entry) -> dict[str, Any]:
    """Leave ``entry`` in the box; its id goes into ``k``, where the index checks the chunks."""
    return {
        "$push": {"box": entry},
        "$set": {"k": [entry["i"]]},
        "$setOnInsert": {"s": session, "n": 0, "base": 0, "tb": 0, "mv": 0, "tail": [], "took": []},
    }


MARK_PIPELINE: Final[list[dict[str, Any]]] = [
    {"$set": {"mv": {"$size": "$tail"}, "k": {"$literal": []}}}
]
"""The first step of a flush: the whole tail is to move; the head gives up its index keys.

Until the flush commits, those entries stay in the tail: readers read them there and the
filters of saves and steers (``tail.i``) keep their ids unique, so the chunk's id list may
take the ids into the index without colliding with the head.
"""


def commit_pipeline(moved: int) -> list[dict[str, Any]]:
    """The last step of a flush: drop the first ``moved`` tail entries, now kept in a chunk."""
    return [
        {
            "$set": {
                "base": {"$add": ["$base", moved]},
                "tail": {"$slice": ["$tail", moved, _MAX_INT32]},
                "mv": 0,
            }
        },
        {"$set": {"tb": {"$sum": {"$map": {"input": "$tail", "in": "$$this.z"}}}}},
    ]


def chunk(session: str, base: int, moved: list[Entry]) -> dict[str, Any]:
    """The chunk of ``moved``, the entries at positions ``base, base+1, ...``."""
    return {"_id": {"s": session, "p": base}, "e": base + len(moved), "m": moved}


def id_list(session: str, base: int, moved: list[Entry]) -> dict[str, Any]:
    """The id list of a chunk: its message ids, in the sessions collection's unique index."""
    return {
        "_id": {"s": session, "p": base},
        "s": session,
        "k": [entry["i"] for entry in moved],
        "e": base + len(moved),
    }


def same_run(found: dict[str, Any], doc: dict[str, Any]) -> bool:
    """Whether two chunks, or two id lists, hold the same ids up to the same end."""

    def ids(d: dict[str, Any]) -> list[Any]:
        return [entry["i"] for entry in d["m"]] if "m" in d else list(d.get("k", ()))

    return found.get("e") == doc["e"] and ids(found) == ids(doc)


def chunk_range(session: str, end: int) -> dict[str, Any]:
    """The filter for the chunks of ``session`` that start before position ``end``.

    A range over the compound ``_id`` uses the ``_id`` index: ``{s, p}`` documents compare
    by ``s`` first, then by ``p``, so no other session's chunk (and no head, whose ``_id``
    is a string) falls inside it.
    """
    return {"_id": {"$gte": {"s": session, "p": 0}, "$lt": {"s": session, "p": end}}}


def call(session: str, key: str) -> dict[str, str]:
    """The ``_id`` of call ``key``'s entry in the session's tool journal."""
    return {"s": session, "k": key}


def journal_of(session: str) -> dict[str, Any]:
    """The filter of every entry of the session's tool journal, a range of the ``_id`` index.

    ``{s, k}`` documents compare by ``s``, then by ``k``: every key (a non-empty string)
    lies between the empty string and ``MaxKey``.
    """
    return {"_id": {"$gte": call(session, ""), "$lt": {"s": session, "k": MaxKey()}}}
