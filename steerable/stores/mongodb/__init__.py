"""A store in MongoDB, over the ``pymongo.AsyncMongoClient`` the application already has.

Install it with ``pip install 'steerable[mongodb]'`` (pymongo >= 4.10, its native async
API; MongoDB 4.2 or later, for pipeline updates). The store runs nothing on its own: its
schema is :data:`MIGRATIONS`, an ordered list of versioned steps (collections, the unique
index, document conversions), which the application applies with :func:`migrate` where it
runs its own migrations, then hands over a database::

    client = pymongo.AsyncMongoClient(uri)
    await migrate(client.agents)  # applies what is missing; safe to repeat, and to race
    store = MongoStore(client.agents)

Each version applied is a document of ``steerable_schema``. A store object reads the
version once, before its first write, and until it is :data:`SCHEMA_VERSION` every write
raises :class:`~steerable.errors.StoreUnavailable` naming the step to apply (or asking for
a newer steerable): without step 2's unique index, a message id or a steer id that has
moved into a chunk would no longer be recognised, so a steer sent again could be answered
twice. Reads never need it. :meth:`MongoStore.check_schema` (the
:class:`steerable.stores.migrations.SchemaVersioned` ability) checks at start-up.

Upgrading: a database set up with ``create_indexes`` (the releases before the migrations)
has the layout of version 2 and records nothing; :func:`migrate` finds its collections and
index made and records versions 1 and 2. A database of layout 1 (heads without ``s`` that
keep every id in ``ids``) is converted by step 2: each chunk below a head's ``base`` gets
its id list, then the head gets ``s``, an empty ``k`` and ``mv`` and loses ``ids``. Stop
the writers of the older steerable before running it.

The same store is the service's (:class:`steerable.service_store.ServiceStore`, with
hints over a change stream): its collections come with step 3 (and step 4's indexes and
counts, and step 6's transcript marks), and its writes are multi-document transactions (an
end that carries the turn's last save is one, the save's part first), so the service needs
a replica set (one node will do), where the transcript's verbs below run on a standalone
``mongod`` too. How it keeps leases, inputs, turns and events (and how a
claim reads only what the claimer does not hold): :mod:`steerable.stores.mongodb._service`
(and the modules it names). The :class:`~steerable.store.Rewritable` verbs (``truncate``,
``delete``) are transactions too, which check the service's running turn:
:mod:`steerable.stores.mongodb._rewrite`; so is the :class:`~steerable.store.Forkable` verb
(``fork``), which copies a transcript's documents into a new session's:
:mod:`steerable.stores.mongodb._fork`.

Documents
---------
``steerable_sessions`` holds two kinds of documents, and one unique index on ``(s, k)``:

- one *head* per session, ``_id`` the session id::

    {s: session, n: messages stored, base: messages kept in chunks, tail: [entries at
     base..n-1], tb: bytes of tail, mv: tail entries a flush is moving (0 when none),
     k: [the ids the last write brought], box: [waiting steers, oldest first],
     took: [the steers the last take moved], seen: [ids of taken steers a cut removed]}

- one *id list* per chunk, ``_id {s: session, p: first position}``:
  ``{s: session, k: [the chunk's message ids], e: end}``.

An entry is ``{i: id, b: codec text, z: size, a: stored at}`` (``a`` the server's clock in
milliseconds, set by the save's own update; entries stored before migration step 4 have
none); a body over 64 KiB (or past 512 KiB added by one save) is kept out of line instead,
as ``r: [blob ids]``. The codec's JSON text is stored as a BSON string and never parsed, so
raw tool arguments come back byte for byte.

``steerable_chunks``, ``_id {s, p}``: ``{e: end, m: [entries]}``, the runs of the
transcript the head no longer holds. ``steerable_blobs``, ``_id`` an ObjectId: ``{s:
session, d: text}``, pieces of at most 8 MiB of the bodies too big for the head.

Why a save is atomic with one command and no transaction
--------------------------------------------------------
What a reader sees is decided by the head alone: positions ``[0, base)`` come from chunks,
``[base, n)`` from the head's tail. A save (with or without a take) is one
``findAndModify`` of the head, a pipeline update that matches only if the head holds
exactly ``at`` messages and its tail none of the new ids: it appends the entries, moves up
to ``take`` steers from ``box`` to the tail after them, sets ``k`` to the new ids, and
returns the steers. One document, one command: a crash leaves the save whole or absent; two
takers never get one steer.

Why a duplicate id is refused across the whole transcript, in that same command
---------------------------------------------------------------------------------
Every message id of a session is in exactly one place that the save checks: the head's
tail (the filter, ``tail.i $nin``: bounded, the tail is small) or a chunk's id list (the
unique index). The save writes its new ids into the head's ``k``; MongoDB enforces a
unique multikey index *across* documents (one document may repeat a value, two may not),
so if an id list of the session already holds one of them the whole ``findAndModify``
fails with a duplicate key error and nothing is written
(:class:`~steerable.errors.InvalidMessage`). The head keeps in ``k`` only the ids of its
last write: an index key does its work when it is added, and the ids of earlier saves are
in the tail, where the filter sees them. So every save touches two or three index keys,
whatever the transcript holds. Steers follow the same rule: ``steer`` matches only a head
whose box and tail lack the id and writes the id into ``k``, so a steer id already in the
transcript (a taken steer, or a message recorded some other way) is refused wherever it
is, and a waiting steer is never in the transcript: taking it cannot collide. A waiting
steer whose id a save brings as a message leaves the box in that same command, not taken.

The flush, and why a crash at any point of it loses nothing
-----------------------------------------------------------
After a save that leaves more than 32 KiB in the tail, four commands move it to a chunk:

1. *mark*: the head records ``mv`` (the whole tail) and empties ``k``. The entries stay in
   the tail: readers read them there, and the filters keep their ids unique.
2. insert the chunk (``steerable_chunks``): nobody reads past ``base``, so it is unseen.
3. insert its id list: the ids enter the index. The head holds none of them in ``k`` any
   more (step 1, and no later write can bring a tail id back), so they cannot collide;
   while the head still holds the entries both the filter and the index refuse them.
4. *commit*: if ``base`` and ``mv`` are unchanged, the head drops the entries, ``base``
   moves past the chunk and ``mv`` returns to 0.

Any id is in the tail or in an id list at every instant (both between steps 3 and 4), and a
reader sees every message exactly once (from the tail until step 4, from the chunk after).
A flusher killed after step 1 leaves ``mv`` set; the next save sees it and carries the
flush on from step 2. The entries are committed and ``mv`` fixes how many move, so every
flusher of a position writes the same documents: a duplicate key on step 2 or 3 is a dead
(or concurrent) flusher's work, adopted. Only a cut (``truncate``) ever makes a position
hold other messages, and a flusher stalled across one may write a stale document there
after it; a flusher that finds a different document at its position replaces it if the
head is still marked with its entries, and otherwise (it is the stale one) writes nothing
more. Saves go on meanwhile: they append after the marked entries.

No multi-document transaction is needed: this order works on a standalone ``mongod`` too,
where transactions are not available.

Why the id lists are not the chunks
-----------------------------------
The index must sit in the heads' collection, so the chunks' ids live there; their bodies
do not. On MongoDB a ``findAndModify`` by ``_id`` is a point lookup whatever the collection
holds. On SecantusDB (the MongoDB wire-protocol server the tests use) it is not: it re-runs
its write with the filter ``{_id, $and: [query]}``, which misses its ``_id`` fast path, and
BSON-decodes every document of the collection. Keeping bodies out (about 50 bytes an id in
the collection instead of 1 KB a message) keeps that scan small.

Command count, when nobody steers and nothing is big: ``save`` (with ``take``),
``take_steers``, ``steer`` and ``steers`` are one command each; ``messages`` is one, or
two once chunks exist. A store object's first write adds one ``find`` (the version). A message
over 64 KiB adds one insert; every ~32 KiB of transcript adds a flush of four commands
(about 0.27 a step at 2 KB a step); a save that does not match adds one or two reads to
say why (:class:`~steerable.errors.TranscriptConflict` or
:class:`~steerable.errors.InvalidMessage`, and nothing is written).

Trade-offs
----------
- The head holds at most ~32 KiB of tail plus one save's inline messages (512 KiB at most)
  and the waiting steers, so a save's cost does not grow with the transcript. Waiting
  steers live in the head; steers are messages people type, not bulk data. A head that
  would pass 16 MiB is a :class:`~steerable.errors.StoreError`.
- A steer sent twice with one id is one steer, also after it was taken: its id is then a
  message id, in the tail or an id list (or, once a cut removed it, in the head's ``seen``).
- A lost connection mid-save raises :class:`~steerable.errors.StoreUnavailable`; the save
  may have been stored. Load the transcript to learn which; a retry at the same position
  is a TranscriptConflict if it was.
- An index dropped after a store object has seen the latest version is not noticed by
  that object.
- Read from the primary (the default): the store reads what it has just written.
"""

from __future__ import annotations

from steerable._extras import missing_extra

try:
    import pymongo
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise missing_extra("steerable.stores.mongodb", "mongodb", "pymongo >= 4.10", exc) from None

if pymongo.version_tuple < (4, 10):  # pragma: no cover - the extra asks for 4.10
    raise missing_extra(
        "steerable.stores.mongodb", "mongodb", "pymongo >= 4.10", f"{pymongo.version} is installed"
    )

from steerable.stores.mongodb._layout import COLLECTIONS
from steerable.stores.mongodb._migrate import MIGRATIONS, SCHEMA_VERSION, migrate
from steerable.stores.mongodb._store import MongoStore

__all__ = ["COLLECTIONS", "MIGRATIONS", "SCHEMA_VERSION", "MongoStore", "migrate"]
