"""The app index: what ADK's session verbs need and the store contract has no verb for.

The contract has no listing, no delete and no state shared across sessions. With a store,
:class:`~._sessions.SteerableSessionService` keeps one index session per app
(``adk-index:<app>``), a log of records, each a :class:`~steerable.Native` part of its own:

- ``{"created": id, "user_id": ..., "time": ...}``: a session the service created;
- ``{"deleted": id, "user_id": ...}``: a session deleted since (its transcript stays);
- ``{"state": {"app": {...}, "user": {...}}, "user_id": ...}``: ``app:``/``user:`` writes.

Each record is appended with a save that must extend the index as it was read: concurrent
writers conflict, and each retries on a fresh read after a jittered pause (without one, 30
creators at once kept colliding until their tries ran out).
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from google.adk.sessions.state import State

from steerable.errors import StoreError, TranscriptConflict
from steerable.integrations.adk._records import FRAMEWORK
from steerable.messages import Message, Native
from steerable.session import Session
from steerable.store import Store

__all__ = ["AppIndex", "deleted", "listed", "scoped_state", "split_state"]

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


def listed(records: list[dict[str, Any]]) -> dict[str, tuple[str, float]]:
    """The sessions an index lists: created and not deleted since, with user and time."""
    live: dict[str, tuple[str, float]] = {}
    for record in records:
        if "created" in record:
            live[record["created"]] = (record["user_id"], float(record["time"]))
        elif "deleted" in record:
            live.pop(record["deleted"], None)
    return live


def deleted(records: list[dict[str, Any]]) -> set[str]:
    """The sessions an index records as deleted."""
    return {record["deleted"] for record in records if "deleted" in record}


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
