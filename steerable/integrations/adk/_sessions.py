"""ADK's session service over steerable stores: events in append order, steers in place.

An ADK session is the steerable session of the same id. Its events are kept in the order
they were appended (their position in the transcript), never sorted by timestamp: a steer
joins after the tool results it follows although the model's reply, stamped earlier, comes
after it. See :mod:`._records` for how each event is stored.

While a run of :class:`SteeringPlugin` works on a session its events are held in memory and
stored at the run's next step, together with the steers it takes, in one atomic store call
(:meth:`Steps.step`); the rest at the run's end. Without the plugin each event is stored as
it is appended.

The store contract has no listing and no delete. With a ``store`` the service keeps an
index session per app (:mod:`._index`): the sessions created and deleted, and the ``app:``
and ``user:`` state. A deleted session's transcript stays in the store, and its id cannot
be created again. A session is hidden only when the index records it deleted: one whose
creation was stored but not yet indexed (or whose index write failed) is still read. With
only ``session_for`` (one steerable session per id, as under the service) there is no
index: listing and deleting are a :class:`UsageError`, and ``app:``/``user:`` state lives
in the session's own events.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession

from steerable.errors import StoreError, TranscriptConflict, UsageError
from steerable.integrations._steps import Steps
from steerable.integrations.adk import _records
from steerable.integrations.adk._index import (
    AppIndex,
    deleted,
    listed,
    scoped_state,
    split_state,
)
from steerable.messages import Message
from steerable.session import Session
from steerable.store import Store, check_count

__all__ = ["SteerableSessionService"]


class _Open:
    """A session this service has open: what is stored, and a run's held events."""

    __slots__ = ("holding", "invocation", "pending", "prompt", "steps", "task")

    def __init__(self, steps: Steps, prompt: str | None = None) -> None:
        self.steps = steps
        self.prompt = prompt  # the id the next user message is stored under
        self.holding = False
        self.invocation: str | None = None  # the holding run's, and its task
        self.task: asyncio.Task[Any] | None = None
        self.pending: list[tuple[Event, Message]] = []

    @property
    def live(self) -> bool:
        """Whether a run holds the session and has not ended (a cancelled run calls no
        callback: its task being done is how its hold is known to be over)."""
        return self.holding and self.task is not None and not self.task.done()


class SteerableSessionService(BaseSessionService):
    """ADK sessions in a steerable ``store`` (or the sessions ``session_for`` gives).

    ``steers`` is how many steers one run takes at most; ``author`` names the agent that
    plain assistant messages (from a turn another agent answered) are shown as.
    """

    def __init__(
        self,
        store: Store | None = None,
        *,
        session_for: Callable[[str], Session] | None = None,
        steers: int = 16,
        author: str = "model",
    ) -> None:
        if (store is None) == (session_for is None):
            raise UsageError("SteerableSessionService takes a store or session_for, not both")
        if store is not None and not isinstance(store, Store):
            raise UsageError(f"SteerableSessionService takes a Store, not {type(store).__name__}")
        self.store = store
        self._session_for = session_for
        self.steers = check_count(steers, "steers")
        self.author = author
        self._open: dict[str, _Open] = {}
        self._adopted: dict[str, AdkSession] = {}

    def __repr__(self) -> str:
        return f"SteerableSessionService({self.store!r})"

    def session(self, session_id: str) -> Session:
        """The steerable session that keeps the ADK session ``session_id`` (steer it there)."""
        if self._session_for is not None:
            return self._session_for(session_id)
        assert self.store is not None
        return Session(session_id, self.store)

    # -- the ADK verbs ------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """A new session, its header stored first; an id already used is AlreadyExistsError."""
        session_id = (session_id or "").strip() or uuid.uuid4().hex
        own, app, user = split_state(state or {})
        created = time.time()
        session = self.session(session_id)
        try:
            await session.save([_records.header_message(app_name, user_id, own, created)])
        except TranscriptConflict:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        await self._index(app_name, {"created": session_id, "user_id": user_id, "time": created})
        if app or user:
            await self._index(app_name, {"state": {"app": app, "user": user}, "user_id": user_id})
        return await self._load(app_name, user_id, session_id, None) or _missing(session_id)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        """The session with its events in append order, or None when there is none."""
        adopted = self._adopted.pop(session_id, None)
        if adopted is not None:
            return adopted
        return await self._load(app_name, user_id, session_id, config)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions this service created (of ``user_id``), oldest first, no events."""
        live = listed(await self._index_records(app_name, needed="list sessions"))
        return ListSessionsResponse(
            sessions=[
                AdkSession(id=sid, app_name=app_name, user_id=uid, last_update_time=created)
                for sid, (uid, created) in live.items()
                if user_id is None or uid == user_id
            ]
        )

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Mark ``user_id``'s session deleted in the app's index (its transcript stays in
        the store). A session of another app or user, or one this service did not create
        (no header: it has no owner), is left alone, as ADK's own services do."""
        await self._index_records(app_name, needed="delete sessions")
        stored = await self.session(session_id).messages()
        header = _records.header_of(stored[0]) if stored else None
        if header is None or (header["app_name"], header["user_id"]) != (app_name, user_id):
            return
        await self._index(app_name, {"deleted": session_id, "user_id": user_id})
        self._open.pop(session_id, None)

    async def append_event(self, session: AdkSession, event: Event) -> Event:
        """Apply ``event`` to ``session``; store it now, or at a steering run's next step."""
        if event.partial:
            return event
        event = await super().append_event(session, event)
        session.last_update_time = event.timestamp
        opened = self._open.get(session.id)
        if opened is None:
            await self._load(session.app_name, session.user_id, session.id, None)
            opened = self._open[session.id]
        prompt = None
        if _records.user_text(event) is not None:
            prompt, opened.prompt = opened.prompt or event.id, None
        message = _records.event_message(event, prompt_id=prompt)
        _, app, user = split_state(event.actions.state_delta if event.actions else {})
        if (app or user) and self.store is not None:
            await self._index(
                session.app_name, {"state": {"app": app, "user": user}, "user_id": session.user_id}
            )
        if opened.holding:
            opened.pending.append((event, message))
        else:
            await opened.steps.save([message])
        return event

    # -- what the plugin and the agent use -------------------------------------------------

    def adopt(
        self,
        app_name: str,
        user_id: str,
        session_id: str,
        stored: Sequence[Message],
        *,
        prompt: str | None = None,
    ) -> AdkSession:
        """Open ``session_id`` from its stored transcript without reading it (a service turn
        carries it); the next ``get_session`` returns it. ``prompt`` is the id the run's
        user message is stored under."""
        events = _records.events_of(stored, self.author)
        header = _records.header_of(stored[0]) if stored else None
        self._open[session_id] = _Open(
            Steps(self.session(session_id), stored, steers=self.steers), prompt
        )
        adopted = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_records.session_state(header, events),
            events=events,
            last_update_time=events[-1].timestamp if events else 0.0,
        )
        self._adopted[session_id] = adopted
        return adopted

    def hold(self, session_id: str, invocation: str | None = None) -> None:
        """A steering run starts: keep the session's events until its next step.

        A second run of a session while one holds it is a :class:`UsageError` (their
        events would interleave in one transcript); runs of other sessions are fine."""
        opened = self._open.get(session_id)
        if opened is None:
            return
        if opened.live:
            raise UsageError(
                f"session {session_id!r} has a run already (invocation {opened.invocation}):"
                " one run of a session at a time"
            )
        opened.holding, opened.invocation, opened.pending = True, invocation, []
        opened.task = asyncio.current_task()

    async def step(self, session_id: str, *, take: bool) -> list[Message]:
        """Store the held events and (when ``take``) take the waiting steers, atomically."""
        opened = self._open.get(session_id)
        if opened is None:
            return []
        new = [message for _, message in opened.pending]
        taken = await (opened.steps.step(new) if take else _saved(opened.steps, new))
        opened.pending.clear()
        return taken

    async def release(
        self, session_id: str, *, finished: bool, invocation: str | None = None
    ) -> None:
        """A run ended: store what it held (when it did not finish, up to the last event
        after which no function call is open) and store events as they come again.
        With ``invocation``, only that run's hold is released."""
        opened = self._open.get(session_id)
        if opened is None or not opened.holding:
            return
        if invocation is not None and opened.invocation not in (None, invocation):
            return  # another run holds it (this one was refused at its start)
        opened.holding, opened.invocation, opened.task = False, None, None
        pending = opened.pending if finished else opened.pending[: _settled(opened.pending)]
        opened.pending = []
        await opened.steps.save([message for _, message in pending])

    # -- reading -----------------------------------------------------------------------------

    async def _load(
        self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
    ) -> AdkSession | None:
        session = self.session(session_id)
        stored = await session.messages()
        if not stored:
            return None
        header = _records.header_of(stored[0])
        if header is not None and (header["app_name"], header["user_id"]) != (app_name, user_id):
            return None
        scoped: dict[str, Any] = {}
        if self.store is not None:
            records = await self._index_records(app_name, needed=None)
            if session_id in deleted(records):
                return None
            scoped = scoped_state(records, user_id)
        events = _records.events_of(stored, self.author)
        state = _records.session_state(header, events) | scoped
        held = self._open.get(session_id)
        if held is None or not held.live:
            # a run that holds its events keeps its own record of what is stored: a reader
            # (a UI polling the session) must not drop the events it has not stored yet
            self._open[session_id] = _Open(Steps(session, stored, steers=self.steers))
        created = float(header["created"]) if header else 0.0
        return AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=state,
            events=_recent(events, config),
            last_update_time=events[-1].timestamp if events else created,
        )

    # -- the app index -------------------------------------------------------------------------

    async def _index_records(self, app_name: str, *, needed: str | None) -> list[dict[str, Any]]:
        if self.store is None:
            if needed is None:
                return []
            raise UsageError(f"a SteerableSessionService over session_for cannot {needed}")
        return await AppIndex(self.store, app_name).records()

    async def _index(self, app_name: str, record: dict[str, Any]) -> None:
        if self.store is not None:
            await AppIndex(self.store, app_name).append(record)


def _recent(events: list[Event], config: GetSessionConfig | None) -> list[Event]:
    """``events`` as ``config`` asks: the last ``num_recent_events``, those after a time."""
    if config is None:
        return events
    if config.num_recent_events is not None:
        events = events[-config.num_recent_events :] if config.num_recent_events else []
    if config.after_timestamp is not None:
        after = config.after_timestamp
        events = [e for e in events if e.timestamp >= after]
    return events


def _settled(pending: list[tuple[Event, Message]]) -> int:
    """How many of ``pending`` end where no function call is waiting for its response."""
    open_calls: set[str] = set()
    settled = 0
    for index, (event, _) in enumerate(pending, 1):
        open_calls.update(c.id or "" for c in event.get_function_calls())
        open_calls.difference_update(r.id or "" for r in event.get_function_responses())
        if not open_calls:
            settled = index
    return settled


async def _saved(steps: Steps, new: list[Message]) -> list[Message]:
    await steps.save(new)
    return []


def _missing(session_id: str) -> AdkSession:
    # the header was stored and its save returned, yet the read back found no session of
    # this app and user: the store failed (or another writer deleted it meanwhile)
    raise StoreError(f"session {session_id!r} was created but cannot be read back")
