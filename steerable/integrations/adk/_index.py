"""The app index: what ADK's session verbs need and the store contract has no verb for.

The contract has no listing, no delete and no state shared across sessions. With a store,
:class:`~._sessions.SteerableSessionService` keeps one index session per app
(``adk-index:<app>``), a log of records, each a :class:`~steerable.Native` part of its own:

- ``{"created": id, "user_id": ..., "time": ..., "key": ...}``: a session the service
  created, and the steerable session that keeps it (see :func:`session_key`);
- ``{"deleted": id, "user_id": ..., "key": ...}``: a session deleted since;
- ``{"state": {"app": {...}, "user": {...}}, "user_id": ...}``: ``app:``/``user:`` writes.

A session is named by its user and id together (ADK's ids are per app and user), and the
last of its ``created``/``deleted`` records says whether it is there now: an id deleted can
be created again. A ``created`` record without ``"key"`` was written before the key named
the app and user: its session is kept under the ADK id itself, and is read there still.

Each record is appended with a save that must extend the index as it was read: concurrent
writers conflict, and each retries on a fresh read after a jittered pause (without one, 30
creators at once kept colliding until their tries ran out).
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any, NamedTuple

from google.adk.sessions.state import State

from steerable.errors import StoreError, TranscriptConflict
from steerable.integrations.adk._records import FRAMEWORK
from steerable.messages import Message, Native
from steerable.session import Session
from steerable.store import Store

__all__ = [
    "AppIndex",
    "Entry",
    "entries",
    "scoped_state",
    "session_key",
    "split_state",
    "user_state",
]

TRIES = 12  # concurrent writers of one index: each retry re-reads it
PAUSE = 0.005  # the first retry's longest pause (s); it doubles per retry, up to MAX_PAUSE
MAX_PAUSE = 0.25


class AppIndex:
    """The index session of ``app_name`` in ``store``."""

    __slots__ = ("app_name", "store")

    def __init__(self, store: Store, app_name: str) -> None:
        self.store = store
        self.app_name = app_name

    def __repr__(self) -> str:
        return f"AppIndex({self.app_name!r})"

    def _session(self) -> Session:
        return Session(f"adk-index:{self.app_name}", self.store)

    async def records(self) -> list[dict[str, Any]]:
        """Every record of the index, oldest first."""
        stored = await self._session().messages()
        return [json.loads(p.data) for m in stored for p in m.parts if isinstance(p, Native)]

    async def append(self, record: dict[str, Any]) -> None:
        """Append ``record``; a :class:`StoreError` when other writers won every try."""
        message = Message("user", (Native(FRAMEWORK, json.dumps(record), ""),))
        for attempt in range(TRIES):
            index = self._session()
            stored = await index.messages()
            try:
                await index.save([*stored, message])
                return
            except TranscriptConflict as conflict:
                if attempt == TRIES - 1:
                    raise StoreError(
                        f"the ADK index of app {self.app_name!r} could not be written: other"
                        f" writers appended first {TRIES} times"
                    ) from conflict
            # another writer appended first: wait a random while (so the writers spread
            # out rather than collide again), then read the index again
            await asyncio.sleep(random.uniform(0, min(MAX_PAUSE, PAUSE * 2**attempt)))


def split_state(state: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``state`` as the session's own keys, the ``app:`` ones and the ``user:`` ones."""
    own: dict[str, Any] = {}
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            app[key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            user[key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            own[key] = value
    return own, app, user


def session_key(app_name: str, user_id: str, session_id: str) -> str:
    """The steerable session id that keeps ADK's session ``session_id`` of that app and user.

    The app and the user are length-prefixed, so the key is one-to-one whatever the names
    hold (``:`` included): ``adk:5:myapp:3:ada:s1``. The index sessions (``adk-index:``)
    never take this form."""
    return f"adk:{len(app_name)}:{app_name}:{len(user_id)}:{user_id}:{session_id}"


class Entry(NamedTuple):
    """What the index says of one session: where it is kept, when it was made, whether it
    is there now (created, and not deleted since)."""

    key: str
    created: float
    live: bool


def entries(records: list[dict[str, Any]]) -> dict[tuple[str, str], Entry]:
    """Each session the index names, by ``(user_id, session_id)``, as its last record says."""
    found: dict[tuple[str, str], Entry] = {}
    for record in records:
        if "created" in record:
            sid = record["created"]
            found[record["user_id"], sid] = Entry(
                record.get("key", sid), float(record["time"]), live=True
            )
        elif "deleted" in record:
            sid = record["deleted"]
            known = found.get((record["user_id"], sid))
            created = known.created if known else 0.0
            found[record["user_id"], sid] = Entry(record.get("key", sid), created, live=False)
    return found


def user_state(records: list[dict[str, Any]], user_id: str) -> dict[str, Any]:
    """``user_id``'s ``user:`` state as the index has it now, its keys without the prefix."""
    user: dict[str, Any] = {}
    for record in records:
        if "state" in record and record["user_id"] == user_id:
            user.update(record["state"]["user"])
    return user


def scoped_state(records: list[dict[str, Any]], user_id: str) -> dict[str, Any]:
    """The ``app:`` state, and ``user_id``'s ``user:`` state, as the index has them now."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    for record in records:
        if "state" in record:
            app.update(record["state"]["app"])
            if record["user_id"] == user_id:
                user.update(record["state"]["user"])
    return {State.APP_PREFIX + k: v for k, v in app.items()} | {
        State.USER_PREFIX + k: v for k, v in user.items()
    }
