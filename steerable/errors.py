"""The exceptions steerable raises.

Every exception of the library derives from :class:`SteerableError`::

    SteerableError
    ├── UsageError             the caller misused the API (bad argument, wrong type)
    │   └── InvalidMessage     a message that cannot be stored or sent as it is
    ├── StoreError             a store could not do what was asked
    │   ├── StoreUnavailable   the backend cannot be reached, opened or written
    │   ├── TranscriptConflict a save that does not extend what is stored
    │   ├── Fenced             a write of a lease another replica has since claimed
    │   ├── SessionBusy        a cut or delete of a session a service turn is running on
    │   ├── SessionNotIdle     a send refused "if idle": a turn runs or an input waits
    │   ├── TurnMismatch       a steer refused: it would not join the turn it expected
    │   ├── QueueFull          an input refused: the session has its most inputs waiting
    │   ├── MessageNotFound    a fork through a message the transcript does not hold
    │   ├── SessionExists      a fork into a session that already has something
    │   └── CorruptRecord      a stored row that cannot be read back
    └── ModelError             a model failed or refused a request
        ├── ProviderError      a provider refused the request or failed after retries
        └── ScriptExhausted    a ScriptedModel was asked for more replies than it has

Misuse errors (``UsageError``) are apart from runtime failures (``StoreError``,
``ModelError``): the first means fix the calling code, the second means the world
failed and a retry, or an operator, may help. A tool that raises never surfaces here:
the model gets an error result and the run goes on.
"""

from __future__ import annotations


class SteerableError(Exception):
    """The root of every exception steerable raises."""


class UsageError(SteerableError, ValueError):
    """The API was called with something it cannot take."""


class InvalidMessage(UsageError):
    """A message or content part that cannot be stored or sent as it is."""


class StoreError(SteerableError):
    """A store could not do what was asked; what was stored before is intact."""


class StoreUnavailable(StoreError):
    """The store's backend cannot be reached, opened or written."""


class TranscriptConflict(StoreError):
    """A save that does not extend the stored transcript: another writer got there first.

    Nothing was written. Load the transcript again to see what the other writer stored.
    """

    def __init__(self, session: str, expected: int, stored: int) -> None:
        self.session = session
        self.expected = expected
        self.stored = stored
        super().__init__(
            f"session {session!r}: the save expected {expected} stored messages but the store"
            f" has {stored}; another writer extended the transcript first"
        )


class Fenced(StoreError):
    """A write under a lease whose epoch is stale: another replica claimed the session since.

    Nothing was written. The holder that gets it has lost the session and must stop its turn
    without recording anything more; the new holder carries the turn on.
    """

    def __init__(self, session: str, epoch: int, current: int | None) -> None:
        self.session = session
        self.epoch = epoch
        self.current = current
        super().__init__(
            f"session {session!r}: the lease of epoch {epoch} is stale (the session is at"
            f" epoch {current}); another replica claimed it, and this write was refused"
        )


class SessionBusy(StoreError):
    """A cut or delete refused because a turn of the service is running on the session.

    Nothing was changed. Stop the turn (or wait for it to end) and try again.
    """

    def __init__(self, session: str, turn: str | None, what: str) -> None:
        self.session = session
        self.turn = turn
        running = f"turn {turn!r}" if turn else "a turn"
        super().__init__(
            f"session {session!r}: {running} of the service is running on it, so it cannot be"
            f" {what}; stop the turn or wait for it to end, then try again"
        )


class SessionNotIdle(StoreError):
    """A send made only if the session is idle, refused: a turn runs or an input waits.

    Nothing was recorded. ``turn`` is the running turn (None if none runs), ``waiting``
    how many inputs wait.
    """

    def __init__(self, session: str, turn: str | None, waiting: int) -> None:
        self.session = session
        self.turn = turn
        self.waiting = waiting
        what = f"turn {turn!r} is running" if turn else f"{waiting} input(s) wait"
        super().__init__(f"session {session!r} is not idle ({what}); nothing was sent")


class TurnMismatch(StoreError):
    """A steer meant for turn ``expected``, refused: it would not join that turn.

    Nothing was recorded. ``offered`` is the turn it would have joined (None: it would be a
    turn of its own, because no turn takes steers now).
    """

    def __init__(self, session: str, expected: str, offered: str | None) -> None:
        self.session = session
        self.expected = expected
        self.offered = offered
        now = f"turn {offered!r} takes steers now" if offered else "no turn takes steers now"
        super().__init__(
            f"session {session!r}: the steer was for turn {expected!r}, but {now};"
            " nothing was recorded"
        )


class QueueFull(StoreError):
    """An input refused because ``limit`` inputs wait in the session already.

    Nothing was recorded. Try again once some of them have been answered.
    """

    def __init__(self, session: str, limit: int) -> None:
        self.session = session
        self.limit = limit
        super().__init__(
            f"session {session!r} has {limit} inputs waiting, its most; nothing was recorded"
        )


class MessageNotFound(StoreError):
    """A fork through message ``message``, which session ``session``'s transcript lacks.

    Nothing was written.
    """

    def __init__(self, session: str, message: str) -> None:
        self.session = session
        self.message = message
        super().__init__(f"session {session!r} has no message {message!r}; nothing was forked")


class SessionExists(StoreError):
    """A fork into ``session``, which has a transcript, steers, inputs or metadata already.

    Nothing was written. Fork into a new id, or delete that session first.
    """

    def __init__(self, session: str) -> None:
        self.session = session
        super().__init__(f"session {session!r} exists already; nothing was forked into it")


class CorruptRecord(StoreError):
    """A stored row that cannot be decoded back into a message or steer."""


class ModelError(SteerableError):
    """A model failed, refused the request or returned something unusable."""


class ProviderError(ModelError):
    """A model provider refused the request, or failed after the retries it was worth.

    ``provider`` names the wire format (``"openai-chat"``, ``"anthropic"``...), ``status``
    is the HTTP status the provider answered (None when no answer came: a dropped
    connection, a timeout, a stream that broke off) and ``message`` is the provider's own
    explanation. ``retryable`` says whether trying again later may help (rate limits,
    overload, 5xx, network) or not (400, 401, 403, 404: fix the request or the key).
    """

    def __init__(
        self, provider: str, message: str, *, status: int | None = None, retryable: bool = False
    ) -> None:
        self.provider = provider
        self.message = message
        self.status = status
        self.retryable = retryable
        where = f"{provider} answered {status}" if status is not None else provider
        super().__init__(f"{where}: {message}")


class ScriptExhausted(ModelError):
    """A ScriptedModel was asked for a reply past the end of its script."""
