"""The documents of the MongoDB store and the update pipelines that change them.

See the package docstring for why the documents look like this. Field names are short
because the head document is rewritten by every save.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from bson import ObjectId
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure

SCHEMA_VERSION: Final = 1

SESSIONS: Final = "steerable_sessions"  # one head document per session
CHUNKS: Final = "steerable_chunks"  # flushed runs of the transcript, _id {s, p}
BLOBS: Final = "steerable_blobs"  # out-of-line message bodies, _id ObjectId
COLLECTIONS: Final = (SESSIONS, CHUNKS, BLOBS)

INLINE_MAX: Final = 64 * 1024  # a body over this many bytes goes to a blob
SAVE_INLINE_MAX: Final = 512 * 1024  # inline bytes (with framing) one save may add
FLUSH_BYTES: Final = 256 * 1024  # a tail this big is moved to a chunk after the save
CHUNK_MAX: Final = 1024 * 1024  # bytes one flush moves into one chunk document
PIECE_CHARS: Final = 2 * 1024 * 1024  # a blob piece: at most 8 MiB of UTF-8
_ENTRY_OVERHEAD: Final = 24  # BSON framing of one tail entry, roughly
_MAX_INT32: Final = 2**31 - 1
_NAMESPACE_EXISTS: Final = 48

Entry = dict[str, Any]
"""One stored message: ``{"i": id, "b": body, "z": size}``, or ``"r": [blob ids]`` for ``b``.

``z`` is the entry's approximate size in the head document, so the head knows its bytes.
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


def append_pipeline(staged: Staged, ids: list[str], take: int) -> list[dict[str, Any]]:
    """The update that appends ``staged`` to a head, then moves up to ``take`` steers after it.

    The steers taken are left in the head's ``took`` (the caller reads them from the
    returned document) and their ids join ``ids``, so a taken steer id stays known. A
    waiting steer whose id is among the saved messages' ids is dropped, not taken: the
    run recorded it already (from its in-memory box, say), and an id is recorded once.
    Values from the caller are wrapped in ``$literal``: an id like ``"$x"`` is data here.
    """
    take = min(take, _MAX_INT32)
    box: Any = {"$ifNull": ["$box", []]}
    if ids:  # a waiting steer saved as a message is recorded already: it leaves the box
        fresh = {"$not": [{"$in": ["$$this.i", {"$literal": ids}]}]}
        box = {"$filter": {"input": box, "cond": fresh}}
    took: Any = {"$slice": [box, take]} if take else {"$literal": []}
    return [
        {"$set": {"took": took}},
        {
            "$set": {
                "box": {"$slice": [box, take, _MAX_INT32]} if take else box,
                "tail": {
                    "$concatArrays": [
                        {"$ifNull": ["$tail", []]},
                        {"$literal": staged.entries},
                        "$took",
                    ]
                },
                # $map rather than "$took.i": some mongod look-alikes do not walk arrays
                "ids": {
                    "$concatArrays": [
                        {"$ifNull": ["$ids", []]},
                        {"$literal": ids},
                        {"$map": {"input": "$took", "in": "$$this.i"}},
                    ]
                },
                "n": {"$add": [{"$ifNull": ["$n", 0]}, len(staged.entries), {"$size": "$took"}]},
                "tb": {
                    "$add": [
                        {"$ifNull": ["$tb", 0]},
                        staged.bytes,
                        {"$sum": {"$map": {"input": "$took", "in": "$$this.z"}}},
                    ]
                },
                "base": {"$ifNull": ["$base", 0]},
            }
        },
    ]


def flush_pipeline(moved: int) -> list[dict[str, Any]]:
    """The update that drops the first ``moved`` tail entries, now kept in a chunk."""
    return [
        {
            "$set": {
                "base": {"$add": ["$base", moved]},
                "tail": {"$slice": ["$tail", moved, _MAX_INT32]},
            }
        },
        {"$set": {"tb": {"$sum": {"$map": {"input": "$tail", "in": "$$this.z"}}}}},
    ]


def chunk_entries(tail: list[Entry]) -> list[Entry]:
    """The oldest entries of ``tail`` that fill one chunk (at least one entry)."""
    size = 0
    for count, entry in enumerate(tail):
        size += int(entry["z"])
        if count and size > CHUNK_MAX:
            return tail[:count]
    return tail


def new_head() -> dict[str, Any]:
    """The fields of a head created by a steer (a save's upsert fills them in itself)."""
    return {"n": 0, "base": 0, "tb": 0, "tail": [], "ids": [], "took": []}


def chunk_range(session: str, end: int) -> dict[str, Any]:
    """The filter for the chunks of ``session`` that start before position ``end``.

    A range over the compound ``_id`` uses the ``_id`` index: ``{s, p}`` documents compare
    by ``s`` first, then by ``p``, so no other session's chunk falls inside it.
    """
    return {"_id": {"$gte": {"s": session, "p": 0}, "$lt": {"s": session, "p": end}}}


async def create_indexes(db: AsyncDatabase[Any]) -> None:
    """Create the store's collections in ``db``; idempotent. The store never calls it.

    Every lookup the store makes is by ``_id``, so schema version 1 needs no secondary
    index. Run this where you run your migrations anyway: it is the one place a later
    version will add what it needs, so deploying a new steerable stays one step.
    """
    existing = set(await db.list_collection_names())
    for name in COLLECTIONS:
        if name not in existing:
            try:
                await db.create_collection(name, check_exists=False)
            except OperationFailure as exc:
                if exc.code != _NAMESPACE_EXISTS:  # created meanwhile: what we wanted
                    raise
