"""The exceptions steerable raises.

Every exception of the library derives from :class:`SteerableError`::

    SteerableError
    ├── UsageError             the caller misused the API (bad argument, wrong type)
    │   └── InvalidMessage     a message that cannot be stored or sent as it is
    ├── StoreError             a store could not do what was asked
    │   ├── StoreUnavailable   the backend cannot be reached, opened or written
    │   ├── TranscriptConflict a save that does not extend what is stored
    │   └── CorruptRecord      a stored row that cannot be read back
    └── ModelError             a model failed or refused a request
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


class CorruptRecord(StoreError):
    """A stored row that cannot be decoded back into a message or steer."""


class ModelError(SteerableError):
    """A model failed, refused the request or returned something unusable."""


class ScriptExhausted(ModelError):
    """A ScriptedModel was asked for a reply past the end of its script."""
