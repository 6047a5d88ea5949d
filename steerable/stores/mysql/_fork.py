"""The MySQL store's :class:`steerable.store.Forkable` verb: a session started from another's
transcript, through a message.

One transaction (:meth:`Transactions._atomic`), which takes the new session's two locks as
a first write to it does, the service's row and then the core's:

1. The new session's ``steerable_service`` row, made if missing and locked ``FOR UPDATE``:
   an enqueue, a metadata write, a cut or a delete of it waits, and so does a second fork
   into it (its insert of that row waits for this one's). The row gets a new ``mark``, as
   under a cut. It is removed again before the commit, as a cut removes a row it made, when
   nothing else came to live in it.
2. Its ``steerable_sessions`` row, which every save and service step takes first: no
   save writes to it before the commit.

Both locks come before the transaction's first plain read, so that read sees every write
that committed before them. It is one statement, which answers whether the new session
has anything (messages, steers waiting or taken, inputs of any state; metadata came with
the lock) and where ``through`` is; a refusal rolls back whole, the made row included.
The copy is then one ``INSERT ... SELECT`` run by the server: each message row of the old
session through ``through``'s position, with its id, body (the codec text: parts and
``steered`` mark), position and stored time, none of them through the client. Whatever
the number of messages, a fork is the same eight statements: the two locks (three), the
check, the copy, the removal of an empty service row, and the ``START TRANSACTION`` and
``COMMIT`` around them.

The old session is not locked: the copy reads its rows as of one moment (under REPEATABLE
READ the ``INSERT ... SELECT`` share-locks them, so a save to the old session waits for
the commit; under READ COMMITTED it reads them as committed), and a save never commits
half a batch, so the copy is a transcript the old session had. It is bounded by
``through``'s position as the copy itself reads it, and copying nothing through a
``through`` is refused as :class:`MessageNotFound`, so a cut of the old session between
the check and the copy cannot yield a fork of other messages.

A steer left for the new session is one insert (:meth:`MySQLStore.steer`), whose trigger
(schema step 8) takes the core's lock first: one left while the fork runs either committed
before the fork's lock, and is seen by the check (refused), or waits for the fork's commit
and lands after it, waiting in the new session.
"""

from __future__ import annotations

from steerable.errors import MessageNotFound, SessionExists
from steerable.stores.mysql._driver import check_id
from steerable.stores.mysql._schema import NEW_MARK
from steerable.stores.mysql._transaction import CORE_LOCK, Transactions, Tx, locked

__all__ = ["MySQLForkable"]

# made with a new mark (the column's default), or given one: the transcript it holds is cut,
# changed or forked into
_MAKE = (
    f"INSERT INTO steerable_service (session) VALUES (%s) ON DUPLICATE KEY UPDATE mark = {NEW_MARK}"
)

_UNMADE = (
    "DELETE FROM steerable_service WHERE session = %s AND epoch = 0 AND events = 0 AND inputs = 0"
    " AND metadata IS NULL"
)

# whether the new session has any row of its own (a steer's row stays when it is taken, and
# is what a delete removes), and the position of `through` in the old one (NULL: none)
_CHECK = (
    "SELECT EXISTS (SELECT 1 FROM steerable_messages WHERE session = %s)"
    " OR EXISTS (SELECT 1 FROM steerable_steers WHERE session = %s)"
    " OR EXISTS (SELECT 1 FROM steerable_inputs WHERE session = %s),"
    " (SELECT position FROM steerable_messages WHERE session = %s AND id = %s)"
)

_COPY = (
    "INSERT INTO steerable_messages (session, position, id, body, at)"
    " SELECT %s, position, id, body, at FROM steerable_messages WHERE session = %s"
)
_THROUGH = (
    " AND position <= (SELECT position FROM steerable_messages AS t"
    " WHERE t.session = %s AND t.id = %s)"
)

_MAX_ID = 255  # characters of a stored id (see ._driver)


class MySQLForkable(Transactions):
    """The :class:`steerable.store.Forkable` verb of :class:`MySQLStore`."""

    async def fork(self, session: str, new: str, *, through: str | None = None) -> int:
        """Start ``new`` with ``session``'s transcript through message ``through`` (all of
        it when None); how many messages it copied.

        :class:`MessageNotFound` when ``through`` is not in the transcript,
        :class:`SessionExists` when ``new`` has messages, steers, inputs or metadata;
        either writes nothing.
        """
        check_id(session, "session id")
        check_id(new, "session id")
        if through is not None and len(through) > _MAX_ID:
            raise MessageNotFound(session, through)  # no stored id is that long

        async def copy(tx: Tx) -> int:
            await tx.run(_MAKE, (new,))
            svc = await locked(tx, new)
            await tx.run(CORE_LOCK, (new,))
            (taken, position), *_ = await tx.rows(_CHECK, (new, new, new, session, through))
            if through is not None and position is None:
                raise MessageNotFound(session, through)
            if taken or (svc is not None and svc.metadata):
                raise SessionExists(new)
            if through is None:
                count = await tx.run(_COPY, (new, session))
            else:
                count = await tx.run(_COPY + _THROUGH, (new, session, session, through))
                if count == 0:  # cut away since the check
                    raise MessageNotFound(session, through)
            await tx.run(_UNMADE, (new,))
            return count

        return await self._atomic(new, copy)
