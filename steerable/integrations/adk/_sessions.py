"""ADK's session service over steerable stores: events in append order, steers in place.

An ADK session is named by its app, its user and its id, as in ADK's own services (two
users may each have an ``"s1"``). With a ``store`` it is kept in the steerable session
:func:`~._index.session_key` names (``adk:<len>:<app>:<len>:<user>:<id>``, one-to-one);
with ``session_for`` (as under the service) in ``session_for(session_id)``. Its events are
kept in the order they were appended (their position in the transcript), never sorted by
timestamp: a steer joins after the tool results it follows although the model's reply,
stamped earlier, comes after it. See :mod:`._records` for how each event is stored.

While a run of :class:`SteeringPlugin` works on a session its events are held in memory and
stored at the run's next step, together with the steers it takes, in one atomic store call
(:meth:`Steps.step`); the rest at the run's end, and before a journaled tool runs
(:meth:`SteerableSessionService.store_held`). Without the plugin each event is stored as
it is appended.

Each session object this service returns carries its revision (how many messages its
transcript had, ADK's ``_storage_update_marker``): an append to an object older than what
is stored is a :class:`~._errors.StaleSession` (ADK's ``StaleSessionError`` as well), and
so is an append that the store refuses because another writer appended first. An event
appended again (the same id and the same content) is stored once.

The store contract has no listing. With a ``store`` the service keeps an index session per
app (:mod:`._index`): the sessions created and deleted, and the ``app:`` and ``user:``
state. A delete records it there and, where the store can delete
(:class:`~steerable.store.Rewritable`), forgets the session's transcript and steers; its id
can then be created again. A session is hidden only when the index records it deleted: one
whose creation was stored but not yet indexed (or whose index write failed) is still read.
With only ``session_for`` there is no index: listing, deleting and ``get_user_state`` are a
:class:`UsageError`, and ``app:``/``user:`` state lives in the session's own events.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Self

from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.state import State

from steerable.errors import StoreError, TranscriptConflict, UsageError
from steerable.integrations._steps import Steps
from steerable.integrations.adk import _records
from steerable.integrations.adk._errors import NoUserState, SessionNotFound, StaleSession
from steerable.integrations.adk._index import (
    AppIndex,
    Entry,
    entries,
    scoped_state,
    session_key,
    split_state,
    user_state,
)
from steerable.messages import Message, new_id
from steerable.session import Session
from steerable.store import Store, check_count, rewritable

__all__ = ["SteerableSessionService"]

Address = tuple[str, str, str]  # an ADK session's app, user and id

LIST_READS = 16  # transcripts list_sessions reads at once


class _Open:
    """A session this service has open: what is stored, and a run's held events."""

    __slots__ = (
        "holder",
        "holding",
        "ids",
        "invocation",
        "lock",
        "pending",
        "prompt",
        "steps",
        "task",
    )

    def __init__(
        self, steps: Steps, events: Sequence[Event] = (), prompt: str | None = None
    ) -> None:
        self.steps = steps
        self.prompt = prompt  # the id the next user message is stored under
        self.holding = False
        self.invocation: str | None = None  # the holding run's, its task and its session
        self.task: asyncio.Task[Any] | None = None
        self.holder: AdkSession | None = None
        self.pending: list[tuple[Event, Message]] = []
        # every message id and event id of the transcript: an event whose id is among them
        # may be one appended again, and is never stored under a message id already used
        self.ids = {m.id for m in steps.stored} | {e.id for e in events}
        self.lock = asyncio.Lock()  # one append at a time: its check and its save together

    @property
    def live(self) -> bool:
        """Whether a run holds the session and has not ended (a cancelled run calls no
        callback: its task being done is how its hold is known to be over)."""
        return self.holding and self.task is not None and not self.task.done()

    @property
    def revision(self) -> int:
        """How many messages the transcript has, the held ones counted."""
        return len(self.steps.stored) + len(self.pending)

    def mark(self, session: AdkSession) -> None:
        """Give ``session`` this transcript's revision: it is up to date."""
        session._storage_update_marker = str(self.revision)


class SteerableSessionService(BaseSessionService):
    """ADK sessions in a steerable ``store`` (or the sessions ``session_for`` gives).

    ``steers`` is how many steers one run takes at most; ``author`` names the agent that
    plain assistant messages (from a turn another agent answered) are shown as. Session ids
    are stripped of surrounding whitespace in every verb, as ``InMemorySessionService``
    does. ``async with`` gives the service itself and closes nothing: the store is yours.
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
        self._open: dict[Address, _Open] = {}
        self._adopted: dict[Address, AdkSession] = {}

    def __repr__(self) -> str:
        return f"SteerableSessionService({self.store!r})"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        """Nothing to close: the store (or ``session_for``'s sessions) is the caller's."""

    def session(self, *, app_name: str, user_id: str, session_id: str) -> Session:
        """The steerable session that keeps ADK's session ``session_id`` (steer it there).

        No I/O: a session this service has open (read, created or run) is where it is kept;
        any other is where a new one is, so a session stored before ids were per app and
        user (see :mod:`._index`) is found here once this service has read it."""
        session_id = _clean(session_id)
        if self._session_for is not None:
            return self._session_for(session_id)
        opened = self._open.get((app_name, user_id, session_id))
        if opened is not None:
            return opened.steps.session
        return Session(session_key(app_name, user_id, session_id), self._store())

    # -- the ADK verbs ------------------------------------------------------------------

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """A new session, its header stored first; an id the user has already is
        ADK's AlreadyExistsError."""
        session_id = _clean(session_id or "") or uuid.uuid4().hex
        own, app, user = split_state(state or {})
        created = time.time()
        header = _records.header_message(app_name, user_id, own, created)
        if self._session_for is not None:
            await _save_header(self._session_for(session_id), header)
        else:
            key = await self._create(app_name, user_id, session_id, header)
            record = {"created": session_id, "user_id": user_id, "time": created, "key": key}
            await self._index(app_name, record)
            if app or user:
                state_record = {"state": {"app": app, "user": user}, "user_id": user_id}
                await self._index(app_name, state_record)
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
        session_id = _clean(session_id)
        adopted = self._adopted.pop((app_name, user_id, session_id), None)
        if adopted is not None:
            return adopted
        return await self._load(app_name, user_id, session_id, config)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """The app's sessions this service created (of ``user_id``), without their events,
        each with its state, the least recently updated first (as ADK's services order them).

        Each listed session's transcript is read (at most :data:`LIST_READS` at once): the
        contract has no column to read a state or an update time from."""
        records = await self._index_records(app_name, needed="list sessions")
        named = [
            (uid, sid, entry)
            for (uid, sid), entry in entries(records).items()
            if entry.live and (user_id is None or uid == user_id)
        ]
        gate = asyncio.Semaphore(LIST_READS)

        async def read(uid: str, sid: str, entry: Entry) -> AdkSession | None:
            async with gate:
                return await self._listed(app_name, uid, sid, entry.key, records)

        async with asyncio.TaskGroup() as group:
            reads = [group.create_task(read(*one)) for one in named]
        sessions = [s for s in (r.result() for r in reads) if s is not None]
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Record ``user_id``'s session deleted in the app's index, then forget its
        transcript and steers where the store can (else they stay, and the id cannot be
        created again). A session of another app or user, or one this service did not
        create (no header: it has no owner), is left alone, as ADK's own services do."""
        session_id = _clean(session_id)
        records = await self._index_records(app_name, needed="delete sessions")
        entry = entries(records).get((user_id, session_id))
        if entry is not None and not entry.live:
            return
        key = entry.key if entry is not None else session_key(app_name, user_id, session_id)
        session = Session(key, self._store())
        stored = await session.messages()
        header = _records.header_of(stored[0]) if stored else None
        if header is None or (header["app_name"], header["user_id"]) != (app_name, user_id):
            return
        await self._index(app_name, {"deleted": session_id, "user_id": user_id, "key": key})
        self._open.pop((app_name, user_id, session_id), None)
        self._adopted.pop((app_name, user_id, session_id), None)
        if _can_delete(self._store()):
            await session.delete()

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """``user_id``'s ``user:`` state in the app, its keys without the prefix ({} if none)."""
        if self.store is None:
            raise NoUserState(
                "a SteerableSessionService over session_for keeps no state across sessions:"
                " get_user_state needs a store"
            )
        return user_state(await AppIndex(self.store, app_name).records(), user_id)

    async def append_event(self, session: AdkSession, event: Event) -> Event:
        """Apply ``event`` to ``session``; store it now, or at a steering run's next step.

        An event already stored (the same id and content: a retry) is not stored again.
        :class:`~._errors.StaleSession` when ``session`` is older than what is stored, and
        :class:`~._errors.SessionNotFound` when the session is not stored (or was deleted);
        either way nothing was stored and ``session`` is unchanged."""
        if event.partial:
            return event
        opened = await self._opened(session)
        async with opened.lock:
            if _appended_already(opened, event):
                return event
            _check_fresh(opened, session)
            self._apply_temp_state(session, event)
            event = self._trim_temp_delta_state(event)
            message = _message_of(opened, event)
            _, app, user = split_state(event.actions.state_delta if event.actions else {})
            if (app or user) and self.store is not None:
                record = {"state": {"app": app, "user": user}, "user_id": session.user_id}
                await self._index(session.app_name, record)
            if opened.holding:
                opened.pending.append((event, message))
            else:
                await self._store_event(opened, session, message)
            opened.ids.update((event.id, message.id))
            self._commit_event_to_session(session, event)
            session.last_update_time = event.timestamp
            opened.mark(session)
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
        steps = Steps(
            self.session(app_name=app_name, user_id=user_id, session_id=session_id),
            stored,
            steers=self.steers,
        )
        opened = self._open[app_name, user_id, session_id] = _Open(steps, events, prompt)
        adopted = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_records.session_state(header, events),
            events=events,
            last_update_time=events[-1].timestamp if events else 0.0,
        )
        opened.mark(adopted)
        self._adopted[app_name, user_id, session_id] = adopted
        return adopted

    def hold(self, session: AdkSession, invocation: str | None = None) -> None:
        """A steering run of ``session`` starts: keep its events until its next step.

        A second run of a session while one holds it is a :class:`UsageError` (their
        events would interleave in one transcript); runs of other sessions are fine."""
        opened = self._open.get(_address(session))
        if opened is None:
            return
        if opened.live:
            raise UsageError(
                f"session {session.id!r} has a run already (invocation {opened.invocation}):"
                " one run of a session at a time"
            )
        opened.holding, opened.invocation, opened.pending = True, invocation, []
        opened.task, opened.holder = asyncio.current_task(), session
        opened.mark(session)

    async def step(self, session: AdkSession, *, take: bool) -> list[Message]:
        """Store the held events and (when ``take``) take the waiting steers, atomically.

        ``session`` is the running session object: the caller appends the steers taken to
        its events, and its revision here counts them already."""
        opened = self._open.get(_address(session))
        if opened is None:
            return []
        new = [message for _, message in opened.pending]
        taken = await (opened.steps.step(new) if take else _saved(opened.steps, new))
        opened.pending.clear()
        opened.ids.update(message.id for message in taken)
        opened.mark(session)
        return taken

    async def store_held(self, session: AdkSession) -> None:
        """Store the events a run holds now, taking no steer: before a journaled tool runs,
        the reply that called it is stored (a run carried on after a crash then runs that
        same call, under its id, rather than asking the model again)."""
        opened = self._open.get(_address(session))
        if opened is None or not opened.holding:
            return
        async with opened.lock:  # parallel calls each ask: the first stores, once
            if not opened.pending:
                return
            await opened.steps.save([message for _, message in opened.pending])
            opened.pending.clear()
            opened.mark(session)

    def stored_reply(self, session: AdkSession, call_id: str) -> str | None:
        """The id of the message that stores ``session``'s last reply with function calls,
        when ``call_id`` is among them (the reply whose call a journaled tool runs), else
        None. No I/O: what this service stored (or holds, under the id it will be stored
        under) of the session. The same id on a run carried on from the stored transcript."""
        opened = self._open.get(_address(session))
        if opened is None:
            return None
        kept = [*opened.steps.stored, *(message for _, message in opened.pending)]
        for message in reversed(kept):
            calls = message.tool_calls
            if calls:
                return message.id if any(call.id == call_id for call in calls) else None
        return None

    async def release(
        self, session: AdkSession, *, finished: bool, invocation: str | None = None
    ) -> None:
        """A run ended: store what it held (when it did not finish, up to the last event
        after which no function call is open) and store events as they come again.
        With ``invocation``, only that run's hold is released."""
        opened = self._open.get(_address(session))
        if opened is None or not opened.holding:
            return
        if invocation is not None and opened.invocation not in (None, invocation):
            return  # another run holds it (this one was refused at its start)
        opened.holding, opened.invocation, opened.task, opened.holder = False, None, None, None
        pending = opened.pending if finished else opened.pending[: _settled(opened.pending)]
        opened.pending = []
        await opened.steps.save([message for _, message in pending])
        opened.mark(session)

    # -- reading and writing -------------------------------------------------------------

    async def _load(
        self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
    ) -> AdkSession | None:
        records = await self._index_records(app_name, needed=None)
        session = self._kept_in(app_name, user_id, session_id, records)
        if session is None:
            return None
        stored = await session.messages()
        header = _records.header_of(stored[0]) if stored else None
        if not stored or not _owned(header, app_name, user_id):
            return None
        events = _records.events_of(stored, self.author)
        state = _records.session_state(header, events) | scoped_state(records, user_id)
        held = self._open.get((app_name, user_id, session_id))
        if held is None or not held.live:
            # a run that holds its events keeps its own record of what is stored: a reader
            # (a UI polling the session) must not drop the events it has not stored yet
            steps = Steps(session, stored, steers=self.steers)
            self._open[app_name, user_id, session_id] = _Open(steps, events)
        created = float(header["created"]) if header else 0.0
        loaded = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=state,
            events=_recent(events, config),
            last_update_time=events[-1].timestamp if events else created,
        )
        loaded._storage_update_marker = str(len(stored))
        return loaded

    async def _listed(
        self, app_name: str, user_id: str, session_id: str, key: str, records: list[Any]
    ) -> AdkSession | None:
        """The session kept in ``key`` as ``list_sessions`` shows it (no events), or None
        when it is gone (deleted, or its creation failed, since the index was read)."""
        stored = await Session(key, self._store()).messages()
        header = _records.header_of(stored[0]) if stored else None
        if not stored or not _owned(header, app_name, user_id):
            return None
        events = _records.events_of(stored, self.author)
        created = float(header["created"]) if header else 0.0
        return AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_records.session_state(header, events) | scoped_state(records, user_id),
            last_update_time=events[-1].timestamp if events else created,
        )

    def _kept_in(
        self, app_name: str, user_id: str, session_id: str, records: list[dict[str, Any]]
    ) -> Session | None:
        """The steerable session that keeps the ADK session, or None when it was deleted."""
        if not session_id:
            return None
        if self._session_for is not None:
            return self._session_for(session_id)
        entry = entries(records).get((user_id, session_id))
        if entry is not None and not entry.live:
            return None
        key = entry.key if entry is not None else session_key(app_name, user_id, session_id)
        return Session(key, self._store())

    async def _opened(self, session: AdkSession) -> _Open:
        """The open record of ``session``, read first if this service has none."""
        opened = self._open.get(_address(session))
        if opened is None:
            if await self._load(session.app_name, session.user_id, session.id, None) is None:
                raise SessionNotFound(session.id)
            opened = self._open[_address(session)]
        return opened

    async def _store_event(self, opened: _Open, session: AdkSession, message: Message) -> None:
        """Store ``message``; another writer's append first is ADK's stale-session error."""
        try:
            await opened.steps.save([message])
        except TranscriptConflict as conflict:
            if self._open.get(_address(session)) is opened:
                del self._open[_address(session)]  # read the session again next time
            if conflict.stored == 0:
                raise SessionNotFound(session.id) from conflict
            raise StaleSession(session.id, conflict.expected, conflict.stored) from conflict

    async def _create(self, app_name: str, user_id: str, session_id: str, header: Message) -> str:
        """Store the header of a new session; returns the key it is kept under."""
        records = await AppIndex(self._store(), app_name).records()
        entry = entries(records).get((user_id, session_id))
        if entry is not None and entry.live:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.")
        key = session_key(app_name, user_id, session_id)
        session = Session(key, self._store())
        if entry is not None and entry.key == key and _can_delete(self._store()):
            # deleted in the index; a delete that stopped before the transcript was forgotten
            # leaves it behind, and it is forgotten now
            await session.delete()
        await _save_header(session, header)
        return key

    # -- the app index -------------------------------------------------------------------------

    def _store(self) -> Store:
        if self.store is None:
            raise UsageError("this SteerableSessionService has no store (it has session_for)")
        return self.store

    async def _index_records(self, app_name: str, *, needed: str | None) -> list[dict[str, Any]]:
        if self.store is None:
            if needed is None:
                return []
            raise UsageError(f"a SteerableSessionService over session_for cannot {needed}")
        return await AppIndex(self.store, app_name).records()

    async def _index(self, app_name: str, record: dict[str, Any]) -> None:
        if self.store is not None:
            await AppIndex(self.store, app_name).append(record)


def _clean(session_id: str) -> str:
    """A session id as every verb reads it: without surrounding whitespace."""
    return session_id.strip() if isinstance(session_id, str) else session_id


def _address(session: AdkSession) -> Address:
    return (session.app_name, session.user_id, session.id)


def _owned(header: dict[str, Any] | None, app_name: str, user_id: str) -> bool:
    """Whether a session with ``header`` is the app's and the user's (one with no header,
    which the steerable service made, is whoever's asks)."""
    return header is None or (header["app_name"], header["user_id"]) == (app_name, user_id)


def _can_delete(store: Store) -> bool:
    try:
        rewritable(store)
    except UsageError:
        return False
    return True


async def _save_header(session: Session, header: Message) -> None:
    try:
        await session.save([header])
    except TranscriptConflict:
        raise AlreadyExistsError(f"Session with id {session.id} already exists.") from None


def _appended_already(opened: _Open, event: Event) -> bool:
    """Whether ``event`` (its id and content) is stored or held already: a retried append."""
    if event.id not in opened.ids:
        return False
    probe = event.model_copy(deep=True)
    if probe.actions and probe.actions.state_delta:
        probe.actions.state_delta = {
            k: v
            for k, v in probe.actions.state_delta.items()
            if not k.startswith(State.TEMP_PREFIX)
        }
    data = _records.event_json(probe)
    kept = [*opened.steps.stored, *(message for _, message in opened.pending)]
    return data in _records.stored_json(kept, event.id)


def _check_fresh(opened: _Open, session: AdkSession) -> None:
    """Refuse ``session`` when it is older than the transcript this service has of it."""
    marker = session._storage_update_marker
    held = opened.live and session is not opened.holder
    if held or (marker is not None and marker != str(opened.revision)):
        seen = int(marker) if marker is not None and marker.isdigit() else -1
        stale = StaleSession(session.id, seen, opened.revision)
        if held:  # a reader's object, or a second run's, of a session a run holds
            stale.args = (
                f"{stale.args[0]}: session {session.id!r} has a run already (invocation"
                f" {opened.invocation}), one run of a session at a time",
            )
        raise stale


def _message_of(opened: _Open, event: Event) -> Message:
    """The message that stores ``event``: under its id, or a fresh one when another message
    or event has it already; a user's message under the run's prompt id when it has one."""
    message_id = event.id if event.id not in opened.ids else new_id()
    if _records.user_text(event) is not None:
        message_id, opened.prompt = opened.prompt or message_id, None
        return _records.event_message(event, message_id=message_id, prompt=True)
    return _records.event_message(event, message_id=message_id)


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
