"""A store in MongoDB, over the ``pymongo.AsyncMongoClient`` the application already has.

Install it with ``pip install 'steerable[mongodb]'`` (pymongo >= 4.10, its native async
API; MongoDB 4.2 or later, for pipeline updates). The store runs nothing on its own: the
application calls :func:`create_indexes` where it runs its migrations, then hands over a
database::

    client = pymongo.AsyncMongoClient(uri)
    await create_indexes(client.agents)  # once per database; safe to repeat
    store = MongoStore(client.agents)

Documents
---------
``steerable_sessions``, one *head* per session, ``_id`` the session id::

    {n: messages stored, base: messages kept in chunks, tail: [entries at base..n-1],
     tb: bytes of tail, ids: [every message id of the transcript],
     box: [waiting steers, oldest first], took: [the steers the last take moved]}

An entry is ``{i: id, b: codec text, z: size}``; a body over 64 KiB (or past 512 KiB
added by one save) is kept out of line instead, as ``r: [blob ids]``. The codec's JSON text
is stored as a BSON string and never parsed, so raw tool arguments come back byte for byte.

``steerable_chunks``, ``_id {s: session, p: first position}``: ``{e: end, m: [entries]}``,
runs of the transcript the head no longer holds. ``steerable_blobs``, ``_id`` an ObjectId:
``{s: session, d: text}``, pieces of at most 8 MiB of the bodies too big for the head.

Why a save is atomic with one command and no transaction
--------------------------------------------------------
What a reader sees is decided by the head alone: positions ``[0, base)`` come from chunks,
``[base, n)`` from the head's tail. A save (with or without a take) is one
``findAndModify`` of the head, a pipeline update that matches only if the head holds
exactly ``at`` messages and none of the new ids: it appends the entries, moves up to
``take`` steers from ``box`` to the tail after them, and returns them. One document, one
command: a crash leaves the save whole or absent; two takers never get one steer.
MongoDB's 16 MiB document limit is kept far away by two moves outside that command:

- *Before* it, bodies too big for the head are written as blobs. Until the head names them
  no reader can reach them; if the process dies in between they stay as garbage (a known
  failed save deletes its own).
- *After* it, when the tail passes 256 KiB, its oldest entries are copied into a chunk
  (at most 1 MiB, ``_id`` its first position) and then dropped from the head, conditional
  on ``base`` still being that position. The entries are committed and never change, so
  any two flushers of a position write the same chunk; a flusher that dies between the
  two writes leaves a chunk the next flush adopts, and a reader never reads past ``base``.

Command count, when nobody steers and nothing is big: ``save`` (with ``take``),
``take_steers``, ``steer`` and ``steers`` are one command each; ``messages`` is one, or
two once chunks exist. A message over 64 KiB adds one insert; every ~256 KiB of
transcript adds a flush of three commands; a save that does not match adds one read to say
why (:class:`~steerable.errors.TranscriptConflict` or
:class:`~steerable.errors.InvalidMessage`, and nothing is written).

Trade-offs
----------
- The head keeps every message id (about 45 bytes each) so that a duplicate id, or a
  steer taken long ago sent again, is caught by that one command. A session therefore
  holds some 300,000 messages at most, and every save rewrites a head that grows by
  those ids; a head that would pass 16 MiB is a :class:`~steerable.errors.StoreError`.
- Waiting steers live in the head too; steers are messages people type, not bulk data.
- A steer sent twice with one id is one steer, also after it was taken: its id is then
  among the message ids. A waiting steer whose id a save brings as a message (a run
  recorded it from its own box) leaves the box in that same command, not taken again.
- A lost connection mid-save raises :class:`~steerable.errors.StoreUnavailable`; the save
  may have been stored. Load the transcript to learn which; a retry at the same position
  is a TranscriptConflict if it was.
- Read from the primary (the default): the store reads what it has just written.
"""

from __future__ import annotations

try:
    import pymongo
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"steerable.stores.mongodb needs pymongo >= 4.10 ({exc}): pip install 'steerable[mongodb]'"
    ) from None

if pymongo.version_tuple < (4, 10):  # pragma: no cover - the extra asks for 4.10
    raise ImportError(
        f"steerable.stores.mongodb needs pymongo >= 4.10, not {pymongo.version}:"
        " pip install 'steerable[mongodb]'"
    )

from steerable.stores.mongodb._layout import COLLECTIONS, SCHEMA_VERSION, create_indexes
from steerable.stores.mongodb._store import MongoStore

__all__ = ["COLLECTIONS", "SCHEMA_VERSION", "MongoStore", "create_indexes"]
