"""A pool reset that sends nothing when nothing needs resetting: one round trip less per call.

An asyncpg pool resets each connection as it goes back. The default sends a query of its
own, ``SELECT pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``, one more round
trip after every store call, whatever the call did. A pool created with
``reset=reset_when_needed`` sends it only for a connection that was marked
(:func:`mark_for_reset`) or is somehow still in a transaction, and sends nothing otherwise.

What asyncpg does on every release either way, before it calls a custom reset, is kept:
it drops the connection's notification and log listeners (Python callbacks) and rolls back
a transaction left open (so a connection given back mid-transaction loses what that
transaction did: its ``SET``, ``LISTEN``, cursors and temporary tables). Termination
listeners and query loggers stay with the connection under the default reset too.

What the skip gives up: session state made outside a transaction, or kept past its end
(session ``SET``, ``LISTEN``, ``DECLARE ... WITH HOLD``, session advisory locks, even one
taken in a transaction rolled back), survives into the connection's next user unless the
code that made it undoes it or marks the connection. The store's own code does: it makes
session state in two places, ``LISTEN`` on the connection it holds for hints and live
events and the advisory lock :func:`~steerable.stores.postgres.migrate` holds for its run,
marks the connection while that state exists, and unmarks it only once it has undone it;
a connection whose undoing was interrupted (a cancel, a lost reply) gets the full reset.
An application whose own code shares the pool and leaves session state must do the same,
or keep asyncpg's default reset.
"""

from __future__ import annotations

from typing import Any

__all__ = ["mark_for_reset", "reset_when_needed", "unmark"]

# The connections to reset fully, by the identity of their protocol settings (the one object
# a pooled connection and the proxy an acquirer holds both answer with, from public API).
# A connection lost while marked leaves its number here: if another connection later gets
# that number, it is reset fully once, which is only a round trip.
_MARKED: set[int] = set()


def _key(connection: Any) -> int | None:
    if connection.is_closed():
        return None  # it is not going back to a pool: nothing to reset
    return id(connection.get_settings())


def mark_for_reset(connection: Any) -> None:
    """Have :func:`reset_when_needed` reset ``connection`` fully when it next goes back.

    ``connection`` is a pooled connection (the proxy ``pool.acquire()`` gives). Call it
    before leaving session state on the connection (a session ``SET``, ``LISTEN``, an
    advisory lock); under asyncpg's default reset it changes nothing.
    """
    key = _key(connection)
    if key is not None:
        _MARKED.add(key)


def unmark(connection: Any) -> None:
    """The session state ``connection`` was marked for is undone: release it quietly again."""
    key = _key(connection)
    if key is not None:
        _MARKED.discard(key)


async def reset_when_needed(connection: Any) -> None:
    """A ``reset`` for ``asyncpg.create_pool``: ``Connection.reset()`` only where needed.

    Runs as a connection goes back to its pool, after asyncpg has dropped its listeners
    and rolled back an open transaction. A connection marked by :func:`mark_for_reset`
    (or still in a transaction, which asyncpg's own step should have ended) gets the full
    default reset, one round trip; any other gets none. See the module's docstring for
    the session state that then survives.
    """
    key = id(connection.get_settings())
    if key in _MARKED or connection.is_in_transaction():
        _MARKED.discard(key)
        await connection.reset()
