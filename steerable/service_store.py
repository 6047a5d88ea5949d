"""The service's side of a store: inputs, turns, leases and durable events, one async Protocol.

The service (:mod:`steerable.service`) makes a session a queue of *turns* answered by any
number of replicas that share one database. Everything it must agree on lives in the
store, behind :class:`ServiceStore`, next to the transcript of :class:`steerable.Store`
(a backend implements both, over one database):

- **Inputs.** ``enqueue`` records a *send* or a *steer* with an id (and its metadata), in
  one per-session order of arrival (``seq`` 1, 2, ...). An id the session has seen is the
  same input: nothing changes, no condition is checked again, and the first answer is
  given again (``Accepted.duplicate``). A steer is *offered* (``Accepted.turn``) to the
  turn that has *started*: the running turn when one runs (unless it is stopping or has
  been offered its ``cap``), else the turn of the first input waiting to be a turn (it is
  at the head of the queue: the next claim starts it, and its first step takes the
  steer). Any other input waits to be a turn of its own (``turn`` None). Conditions, each
  checked in the same atomic operation and refused whole: ``if_idle`` refuses
  (:class:`~steerable.errors.SessionNotIdle`) unless no turn runs and no input waits;
  ``expected_turn`` refuses (:class:`~steerable.errors.TurnMismatch`) unless the steer is
  offered to that turn; ``max_waiting`` refuses (:class:`~steerable.errors.QueueFull`)
  when that many inputs wait already. ``cancel`` takes back a waiting input: it is never
  a turn and never taken.
- **Turns.** A turn is named by its prompt: the turn whose prompt is input ``x`` has id
  ``x``. ``claim`` starts the next turn of a session that has work and no live lease: its
  prompt is the waiting input that came first and no running turn was offered. A claim of
  a session whose running turn's lease expired takes that turn over instead (``resumed``).
- **What a claimer knows.** A claim returns the session's transcript, and the transcript's
  ``mark``: a token the store gives a session anew whenever a write removes or changes a
  stored message (``truncate``, ``replace``, ``delete``, a fork into it) or makes its service
  row, and keeps while writes only append. A claimer that holds the first ``length``
  messages it read under a mark passes ``known={session: Known(length, mark)}``; when the
  mark is still the session's (and the transcript at least that long) the claim returns only
  the messages after them (``Claim.known`` says how many it left out), else the whole
  transcript. So a replica that served a session's last turn reads only what came since.
- **Leases and fencing.** A claim makes the claimer the session's holder until
  ``expires_at``, on the database's clock, and grows the session's ``epoch`` by one. Every
  write of a holder (``step``, ``end_turn``, ``renew``) carries its :class:`Lease` and is
  refused whole with :class:`steerable.errors.Fenced` when the session's epoch is no
  longer the lease's (another replica claimed it since). An expired lease nobody claimed
  since still writes: fencing is by epoch, and nobody else holds the session.
- **Renewals together.** ``renew_many`` renews many leases in one call (a replica renews
  every lease it holds with one call per interval, not one per turn): each lease is judged
  on its own, as ``renew`` would judge it, and a stale one (``None`` in its place, where
  ``renew`` raises :class:`~steerable.errors.Fenced`) never stops the others. A session
  named twice is judged twice against the same state: the same lease twice is renewed
  twice, and of two epochs of one session only the current one renews.
- **Steps.** ``step`` is the core's save-and-take, fenced: it appends messages at ``at``
  (a :class:`~steerable.errors.TranscriptConflict` otherwise), then takes up to ``take``
  of the steers offered to the turn, in order, and records each as a steered user message
  after them; one atomic operation. A turn whose stop was asked takes none.
- **Ends.** ``end_turn`` records the turn's outcome (and its usage) once, frees the steers
  offered to it that it never took (each is then a turn of its own, in its place in the
  order: before anything sent after it; the ``turn_ended`` event lists them as
  ``released``) and releases the lease, in one atomic operation. Given ``last`` messages
  (the turn's last save: its answer), it first appends them at ``at`` as a ``final`` step
  would (no step, no steer taken, their ``message`` events), in the same operation and
  refused whole with it (:class:`~steerable.errors.TranscriptConflict`, ``Fenced``): a turn
  nobody steered ends in one call fewer.
- **Stop.** ``stop`` marks the running turn; its holder learns it from ``stopping`` (a
  cheap read it polls), ``renew``, or a :class:`Hint` where the store notifies, and ends
  the turn ``stopped``.
- **Views and events.** ``status``, ``input``, ``inputs``, ``turn``, ``turns``,
  ``transcript`` read what the writes above recorded, each bounded by a ``limit``; every
  write also appends durable :class:`ServiceEvent` rows with per-session ids 1, 2, ...
  that are the same read from any replica. Inputs, turns and messages carry the database
  clock's time they were recorded (seconds since the Unix epoch).
- **Metadata.** An input's ``metadata`` and a session's (``set_metadata``) are small JSON
  objects kept as they were given and returned by the views.

A session nobody wrote to has an empty status, no inputs, no events: not an error. The
store trusts its arguments' types; :class:`steerable.service.Service` checks them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from steerable.errors import UsageError
from steerable.messages import Message, Text, new_id

InputKind = Literal["send", "steer"]
"""A *send* waits to be a turn of its own; a *steer* joins the running turn if it can."""

EndState = Literal["completed", "stopped", "failed", "max_steps"]
"""How a turn ended."""

TurnState = Literal["queued", "running", "completed", "stopped", "failed", "max_steps"]
"""A turn's state: ``queued`` (its prompt waits), ``running``, then how it ended."""

InputState = Literal["waiting", "taken", "prompt", "cancelled"]
"""An input's fate: still waiting, taken by a turn at a step, the prompt of a turn, or
cancelled while it waited."""

EventKind = Literal[
    "input",
    "turn_started",
    "holder",
    "step",
    "steers_taken",
    "message",
    "stop",
    "turn_ended",
    "cancelled",
]
"""The kinds of durable events (see :class:`ServiceEvent`)."""

END_STATES: tuple[EndState, ...] = ("completed", "stopped", "failed", "max_steps")
INPUT_STATES: tuple[InputState, ...] = ("waiting", "taken", "prompt", "cancelled")


TRACE_FIELDS = 4
TRACE_CHARS = 512
"""The bounds of an input's trace context: a ``traceparent`` is 55 characters, and W3C
``tracestate`` at most 512."""


def _carrier(value: object) -> bool:
    """Whether ``value`` is a trace context an input may keep."""
    return (
        isinstance(value, dict)
        and len(value) <= TRACE_FIELDS
        and all(
            isinstance(k, str)
            and isinstance(v, str)
            and 0 < len(k) <= 64
            and len(v) <= TRACE_CHARS
            and "\x00" not in k + v
            for k, v in value.items()
        )
    )


@dataclass(frozen=True, slots=True)
class Input:
    """A message sent to a session: a send or a steer, with an id (a new one by default)."""

    kind: InputKind
    text: str
    id: str = field(default_factory=new_id)
    metadata: dict[str, Any] = field(default_factory=dict)
    """A small JSON object kept with the input and returned by the views (``{}``: none)."""
    trace: dict[str, str] = field(default_factory=dict)
    """The trace context of the span that sent it, as W3C Trace Context carries it
    (``traceparent``, ``tracestate``; ``{}``: none), kept with the input so that the turn
    it starts, or the step that takes it, can be tied to that span on any replica."""

    def __post_init__(self) -> None:
        if self.kind not in ("send", "steer"):
            raise UsageError(f"an input is a 'send' or a 'steer', not {self.kind!r}")
        if not isinstance(self.text, str) or not self.text.strip():
            raise UsageError(f"an input's text is a non-empty str, not {self.text!r}")
        if not isinstance(self.id, str) or not self.id or "\x00" in self.id:
            raise UsageError(f"an input id is a non-empty str without NUL, not {self.id!r}")
        if not isinstance(self.metadata, dict):
            raise UsageError(f"an input's metadata is a dict, not {type(self.metadata).__name__}")
        if not _carrier(self.trace):
            raise UsageError(
                f"an input's trace is at most {TRACE_FIELDS} str fields of at most"
                f" {TRACE_CHARS} characters each, not {self.trace!r}"[:300]
            )

    def message(self, *, steered: bool) -> Message:
        """The user message that records this input in the transcript, under its id."""
        return Message("user", (Text(self.text),), id=self.id, steered=steered)


@dataclass(frozen=True, slots=True)
class Accepted:
    """What ``enqueue`` recorded: the input's place and where it is going.

    ``turn`` is the running turn a steer was offered to (None for a send, and for a steer
    that will be a turn of its own). ``ahead`` counts the turns that come before the one
    this input would start: the running turn, if any, and the inputs waiting before it
    that no turn was offered; 0 for a send means it starts now. ``duplicate`` is True when
    the id had been seen: nothing changed, and the fields are the first answer's.
    """

    id: str
    kind: InputKind
    seq: int
    turn: str | None
    ahead: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class Lease:
    """A replica's hold on a session: ``holder``, ``epoch`` and the database-clock expiry."""

    session: str
    holder: str
    epoch: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class Known:
    """The first ``length`` messages of a session's transcript, as a claimer read them under
    the transcript's ``mark`` (see :class:`Claim`)."""

    length: int
    mark: str


@dataclass(frozen=True, slots=True)
class Claim:
    """A turn a replica is now to run under ``lease``.

    ``prompt`` is the input that is the turn's prompt (its id is the turn's id), ``start``
    the transcript position the turn starts at, ``messages`` the session's transcript at
    the claim. ``resumed`` says another holder ran this turn before (a takeover): carry it
    on from ``messages``; ``steps`` and ``steers_taken`` are what it did so far, ``cap``
    the steers it may take in all, ``stop_requested`` whether a stop is waiting for it.
    """

    lease: Lease
    turn: str
    prompt: Input
    start: int
    messages: list[Message]
    resumed: bool
    steps: int
    steers_taken: int
    cap: int
    stop_requested: bool
    previous_holder: str | None = None
    """On a takeover (``resumed``), the replica that held the turn before this claim (None
    on a fresh claim, or where a store does not know it)."""
    mark: str = ""
    """The transcript's mark at the claim: kept while writes only append to it, new after any
    write that removed or changed a stored message ("": the store keeps none)."""
    known: int = 0
    """How many of the transcript's first messages ``messages`` leaves out because the claimer
    said it knew them under ``mark`` (``messages`` starts at that position; 0: whole)."""
    taken: list[Message] | None = None
    """Where the claim made the turn's first step (``claim(first=True)``): the steered messages
    it took, stored after the prompt's message at ``start`` (``[]``: none waited); None where
    it made no step. ``messages`` is the transcript before that step, and ``steps`` and
    ``steers_taken`` count it."""


@dataclass(frozen=True, slots=True)
class Renewal:
    """A renewed lease, and whether a stop was asked for its turn."""

    lease: Lease
    stop_requested: bool


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a turn ended: its state, the final answer's text, and an error's description."""

    state: EndState
    text: str = ""
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    """The turn's token usage, summed over its model requests (``input_tokens``,
    ``output_tokens``...; ``{}``: not known)."""

    def __post_init__(self) -> None:
        if self.state not in END_STATES:
            raise UsageError(f"a turn ends in one of {END_STATES}, not {self.state!r}")


@dataclass(frozen=True, slots=True)
class TurnView:
    """A turn as the store has it.

    ``holder``, ``epoch`` and ``lease_expires_at`` describe the lease while it runs (None
    otherwise); ``start`` and ``end`` bound its messages in the transcript (``end`` None
    until it ended); ``text``, ``error`` and ``usage`` are its outcome's. ``seq`` is its
    prompt's place in the order of arrival (turns start in that order: the key that pages
    :meth:`ServiceStore.turns`); ``started_at`` and ``ended_at`` the database clock's times
    of its first claim and of its end. A ``queued`` turn has only its id, state and seq.
    """

    id: str
    state: TurnState
    holder: str | None = None
    epoch: int | None = None
    lease_expires_at: float | None = None
    steps: int = 0
    steers_taken: int = 0
    stop_requested: bool = False
    start: int | None = None
    end: int | None = None
    text: str = ""
    error: str | None = None
    seq: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    usage: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InputView:
    """An input and its fate.

    ``state`` ``waiting``: ``turn`` is the running turn it was offered to, or None (it will be
    a turn of its own). ``taken``: taken by ``turn`` at its step ``step``. ``prompt``: it is the
    prompt of ``turn`` (its own id). ``cancelled``: taken back while it waited (``turn``
    None). ``at`` is the database clock's time it arrived; ``metadata`` is what it was sent
    with.
    """

    id: str
    kind: InputKind
    text: str
    seq: int
    state: InputState
    turn: str | None = None
    step: int | None = None
    at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, str] = field(default_factory=dict)
    """The trace context it was sent with (:attr:`Input.trace`)."""


@dataclass(frozen=True, slots=True)
class Status:
    """A session now: its running turn, the first inputs waiting (up to the view's limit,
    in their order), how many inputs wait in all (``waiting_total``) and how many of them
    wait to be turns (``queued``), and the session's metadata."""

    session: str
    turn: TurnView | None
    waiting: list[InputView]
    queued: int
    waiting_total: int
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Entry:
    """A transcript message at ``position``, with the turn it belongs to (None before any)."""

    position: int
    message: Message
    turn: str | None
    at: float | None = None
    """The database clock's time the message was stored (None where a store kept none)."""


@dataclass(frozen=True, slots=True)
class ServiceEvent:
    """A durable event of a session; ``id`` is its per-session sequence number, from 1.

    ``data`` is small JSON-ready values (ids, positions, counts, states), never whole
    messages: read those from the transcript. The kinds and their ``data``:
    ``input`` {id, kind, turn}; ``turn_started`` {epoch, holder, resumed};
    ``holder`` {holder, epoch}; ``step`` {step, length}; ``steers_taken`` {ids, step};
    ``message`` {position, id, role, steered}; ``stop`` {}; ``turn_ended`` {state,
    released}: ``released`` the ids of the steers offered to the turn that it never took,
    now each waiting to be a turn of its own; ``cancelled`` {id, released}: the steers
    offered to a cancelled head of the queue, freed with it.
    ``turn`` is the turn the event is about (None for an input that waits to be one).
    """

    id: int
    kind: EventKind
    turn: str | None
    data: dict[str, Any]
    at: float


SessionState = Literal["idle", "running", "queued"]
"""A session now: a turn ``running``; inputs ``queued`` and no turn running; else ``idle``."""


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """A session in a listing: its state, its running turn, how many inputs wait to be turns,
    the time of its last event (database clock, seconds since the Unix epoch) and its
    metadata."""

    session: str
    state: SessionState
    turn: str | None
    queued: int
    updated_at: float
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Hint:
    """A notification that something changed: new ``work`` for a session, or a ``stop``.

    Hints make replicas react at once; they are never the source of truth (a missed one is
    caught by the poll and the lease renewal).
    """

    kind: Literal["work", "stop"]
    session: str


@runtime_checkable
class ServiceStore(Protocol):
    """The service's tables of a backend; see the module docstring for the promises."""

    async def enqueue(
        self,
        session: str,
        input: Input,
        *,
        if_idle: bool = False,
        expected_turn: str | None = None,
        max_waiting: int | None = None,
    ) -> Accepted:
        """Record ``input`` in the session's order of arrival; an id seen before is a no-op.

        Refused whole, nothing recorded: :class:`~steerable.errors.SessionNotIdle` when
        ``if_idle`` and a turn runs or an input waits; :class:`~steerable.errors.TurnMismatch`
        when ``expected_turn`` is given and the steer would not be offered to that turn;
        :class:`~steerable.errors.QueueFull` when ``max_waiting`` inputs wait already.
        """
        ...

    async def cancel(self, session: str, id: str) -> InputView | None:
        """Take back the waiting input ``id`` (it becomes ``cancelled``); its view after.

        An input that was taken or became a prompt is unchanged (its view says so); a
        cancelled one stays so; None if the session never had it.
        """
        ...

    async def stopping(self, holder: str) -> list[str]:
        """The sessions ``holder`` holds whose running turn was asked to stop: a cheap read
        a replica polls, so a stop reaches it well within a second without notifications."""
        ...

    async def claim(
        self,
        holder: str,
        *,
        seconds: float,
        cap: int,
        session: str | None = None,
        known: Mapping[str, Known] | None = None,
        first: bool = False,
    ) -> Claim | None:
        """Claim one session with work and no live lease (``session`` only, if given).

        The lease lasts ``seconds`` on the database's clock and the epoch grows by one. A new
        turn may take ``cap`` steers in all. None when there is nothing to claim. ``known``:
        what the claimer holds of sessions' transcripts; the claimed session's messages it
        still holds under the current mark are left out (:attr:`Claim.known`).

        ``first``: a new turn's claim also makes the turn's first step, in the same atomic
        operation, as ``step(lease, [prompt.message(steered=False)], at=start, take=cap)``
        would right after it: the prompt's message stored at ``start``, then up to ``cap``
        steers offered to the turn taken after it, with that step's events after
        ``turn_started`` (:attr:`Claim.taken`). A takeover makes no step, nor does a claim
        whose prompt's id is already a message of the transcript (its first save is refused
        as ever, and the turn fails rather than the claim).
        """
        ...

    async def renew(self, lease: Lease, *, seconds: float) -> Renewal:
        """Extend ``lease`` by ``seconds`` from now; :class:`Fenced` if it is stale."""
        ...

    async def renew_many(self, leases: Sequence[Lease], *, seconds: float) -> list[Renewal | None]:
        """Extend each of ``leases`` by ``seconds`` from now, each fenced on its own.

        The answers are in the order of ``leases``: each lease's :class:`Renewal` (with its
        turn's ``stop_requested``), or None where that lease is stale (``renew`` would raise
        :class:`Fenced`). One round trip or transaction for them all where the database
        allows; an empty ``leases`` is ``[]`` without reaching the database.
        """
        ...

    async def step(
        self,
        lease: Lease,
        messages: Sequence[Message],
        *,
        at: int,
        take: int,
        final: bool = False,
    ) -> list[Message]:
        """The turn's save-and-take, fenced by ``lease``; returns the steered messages taken.

        ``final``: no model request follows (the save of a turn that reached ``max_steps``):
        not counted as a step, whatever it ends with."""
        ...

    async def end_turn(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        last: Sequence[Message] = (),
        at: int | None = None,
    ) -> str | None:
        """Record the turn's end and release the lease; the next turn's prompt id, if any.

        ``last``: messages to append at ``at`` first, as ``step(lease, last, at=at, take=0,
        final=True)`` would, in the same atomic operation (both refused whole together)."""
        ...

    async def stop(self, session: str) -> str | None:
        """Ask the running turn to stop; its id, or None when no turn runs."""
        ...

    async def status(self, session: str, *, limit: int = 100) -> Status:
        """The session's running turn, its first ``limit`` waiting inputs, and the counts."""
        ...

    async def inputs(
        self, session: str, *, after: int, limit: int, state: InputState | None = None
    ) -> list[InputView]:
        """Up to ``limit`` inputs with ``seq`` > ``after`` in order (only ``state``, if given)."""
        ...

    async def turns(self, session: str, *, after: int, limit: int) -> list[TurnView]:
        """Up to ``limit`` turns that started (running or ended), prompt ``seq`` > ``after``."""
        ...

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata (the session need not have had an input)."""
        ...

    async def input(self, session: str, id: str) -> InputView | None:
        """The input ``id`` and its fate, or None if the session never had it."""
        ...

    async def turn(self, session: str, id: str) -> TurnView | None:
        """The turn ``id`` (``queued`` while its prompt waits), or None if there is none."""
        ...

    async def transcript(self, session: str, *, after: int, limit: int) -> list[Entry]:
        """Up to ``limit`` messages at positions > ``after`` (-1: from the start), with turns."""
        ...

    async def events(self, session: str, *, after: int, limit: int) -> list[ServiceEvent]:
        """Up to ``limit`` durable events with ids > ``after``, in id order."""
        ...

    async def sessions(
        self, *, prefix: str, after: str | None, limit: int, state: SessionState | None = None
    ) -> list[SessionSummary]:
        """Up to ``limit`` sessions whose id starts with ``prefix`` and sorts after ``after``.

        Only sessions that had an input; in code-point order of their ids (keyset paging:
        pass the last id of a page as the next ``after``); ``state`` keeps only those in it.
        """
        ...


@runtime_checkable
class Notifying(Protocol):
    """A store whose database notifies (Postgres ``LISTEN``, MongoDB change streams).

    ``hints()`` is entered once per replica and yields :class:`Hint` objects as other
    replicas (or this one) enqueue work, end turns and stop turns.
    """

    def hints(self) -> AbstractAsyncContextManager[AsyncIterator[Hint]]:
        """An async context whose value iterates over hints until the context is left."""
        ...


def counts_as_step(messages: Sequence[Message], take: int, *, final: bool = False) -> bool:
    """Whether a save is a step (it precedes a model request) rather than the answer's save.

    A save before a model request ends in a user message (the prompt, tool results) or
    takes steers; the save once a turn's pattern returns ends in the assistant's answer
    and takes none; so does a ``final`` save (a turn that reached ``max_steps`` stores its
    last results, and no request follows). The stores count a turn's steps with this rule.
    """
    if final:
        return False
    return take > 0 or (bool(messages) and messages[-1].role == "user")


def known_length(known: Mapping[str, Known] | None, session: str, mark: str, stored: int) -> int:
    """How many of ``session``'s first messages a claim may leave out: the length the claimer
    knows when it read them under ``mark`` (the transcript's mark now) and no more are
    stored than that; else 0 (the whole transcript)."""
    if not known or not mark:
        return 0
    held = known.get(session)
    if held is None or held.mark != mark or not 0 < held.length <= stored:
        return 0
    return held.length


def turn_of(position: int, starts: Sequence[tuple[int, str]]) -> str | None:
    """The turn of the message at ``position``, given the turns' ``(start, id)`` by start."""
    owner: str | None = None
    for start, turn in starts:
        if start > position:
            break
        owner = turn
    return owner


def message_event(message: Message, position: int) -> dict[str, Any]:
    """The ``data`` of the ``message`` event of ``message`` stored at ``position``."""
    return {
        "position": position,
        "id": message.id,
        "role": message.role,
        "steered": message.steered,
    }


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``; None if none is.

    So ``prefix <= id < prefix_end(prefix)`` is "``id`` starts with ``prefix``" as a range
    of code points, which an index scans. The last code point below U+10FFFF grows by one
    (the U+10FFFF after it dropped); a surrogate, which no stored id holds, is skipped.
    """
    kept = prefix.rstrip("\U0010ffff")
    if not kept:
        return None
    last = ord(kept[-1]) + 1
    return kept[:-1] + chr(0xE000 if 0xD800 <= last <= 0xDFFF else last)


def listing(prefix: str, after: str | None) -> tuple[str, bool, str | None]:
    """A listing's range of ids: its lower bound, whether that is included, its upper bound.

    The range starts after ``after`` when that is at or above ``prefix`` (keyset paging),
    else at ``prefix`` itself; it ends below :func:`prefix_end` (None: no end).
    """
    if after is not None and after >= prefix:
        return after, False, prefix_end(prefix)
    return prefix, True, prefix_end(prefix)
