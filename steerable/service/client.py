"""A Python client of the service's HTTP API (``steerable serve``), async, over httpx.

::

    from steerable.service.client import Client

    async with Client("http://127.0.0.1:8000", token=None) as service:
        sent = await service.send("trip-42", "plan my week")      # Sent(id, turn, state)
        steer = await service.steer("trip-42", "skip friday")     # Steered(id, turn)
        async for event in service.events("trip-42"):             # resumes after a drop
            print(event.kind, event.data)
            if event.kind == "turn_ended" and event.turn == sent.id:
                break

The verbs are the HTTP API's (see docs/http.md). ``send`` and ``steer`` take an ``id``; the
client makes one when none is given and sends it as the body's ``id`` and as the
``Idempotency-Key``, so a POST retried after a dropped connection or a 503 is the same input,
never a second one. Every request is retried ``retries`` times on a connection failure or a
503, with a growing pause. :meth:`Client.events` reconnects the same way, with
``Last-Event-ID``: across drops it yields every durable event once, in order.

A problem answer raises a :class:`ServiceError` of the tree below, with the answer's
``status`` and stable ``code``::

    SteerableError
    └── ServiceError     a problem answer, or no answer at all (status None)
        ├── Unauthorized 401: a wrong or missing token
        ├── NotFound     404: the session, turn or input does not exist (for this tenant)
        ├── Conflict     409: the same id again with another text or kind; a condition
        │                     refused (session_not_idle, turn_mismatch), a busy session
        └── TooMany      429: a full queue, a tenant's rate or streams (``retry_after``)

A 429 is not retried here: the input was not recorded, and sending it again (the same id)
after ``retry_after`` seconds is safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

from steerable.errors import SteerableError, UsageError
from steerable.messages import new_id

try:
    import httpx
except ImportError as exc:  # pragma: no cover - the extra's own message
    from steerable._extras import missing_extra

    raise missing_extra("steerable.service.client", "serve", "httpx", exc) from None

__all__ = [
    "Client",
    "check_session",
    "check_token",
    "Conflict",
    "Event",
    "NotFound",
    "Sent",
    "ServiceError",
    "Steered",
    "TooMany",
    "Unauthorized",
]


class ServiceError(SteerableError):
    """The service answered with a problem, or could not be reached (``status`` None).

    ``code`` is the problem's stable code (``invalid_request``, ``store_unavailable``, ...;
    ``unreachable`` when no answer came), ``detail`` its sentence.
    """

    def __init__(self, status: int | None, code: str, detail: str) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        where = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"{where} {code}: {detail}")


class Unauthorized(ServiceError):
    """401: the token is wrong or missing."""


class NotFound(ServiceError):
    """404: no such session, turn or input for this tenant (another tenant's is not found)."""


class Conflict(ServiceError):
    """409: an id the session has seen, sent again with another text or kind; a send "if
    idle" to a busy session, a steer for a turn it would not join, a delete while a turn
    runs, a cancel of an input already answered (the ``code`` says which)."""


class TooMany(ServiceError):
    """429: the session's queue is full, or the tenant is over its rate or streams; nothing
    was recorded. ``retry_after`` is the server's advice, in seconds (None if it gave none)."""

    def __init__(
        self, status: int | None, code: str, detail: str, retry_after: float | None = None
    ) -> None:
        super().__init__(status, code, detail)
        self.retry_after = retry_after


_ERRORS: dict[int, type[ServiceError]] = {
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    429: TooMany,
}


@dataclass(frozen=True, slots=True)
class Sent:
    """A send's answer: the input's ``id``, its ``turn`` (its own id) and whether it
    ``started`` now or is ``queued`` behind a running turn."""

    id: str
    turn: str
    state: Literal["started", "queued"]
    ahead: int = 0


@dataclass(frozen=True, slots=True)
class Steered:
    """A steer's answer: ``turn`` is the started turn it was offered to (its next step
    takes it, unless it ends first), or None when it will be a turn of its own; ``fate``
    (with ``wait``): ``{state: taken|turn|cancelled|pending, turn, step}``."""

    id: str
    turn: str | None
    fate: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a session's stream.

    Durable events (``input``, ``turn_started``, ``holder``, ``step``, ``steers_taken``,
    ``message``, ``stop``, ``turn_ended``) have the store's ``id`` (1, 2, ... per session,
    the same from every replica). ``delta`` (live text, ``data`` {turn, text}) and ``tool``
    (a tool call starting or ending, ``data`` {turn, phase, call, name, arguments or result
    and error, truncated}) have ``id`` None and are never replayed; ``refetch`` (``data``
    {last}) says the id resumed from is beyond the session's last: read the views again,
    the stream goes on after ``last``.
    (The server's ``unavailable``, sent as a stream ends because the store failed, is not
    yielded: :meth:`Client.events` reconnects, as after a drop.)
    """

    kind: str
    id: int | None = None
    turn: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    at: float | None = None


_TRANSIENT = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)
"""Failures a retry may get past: the connection, not the request."""


class Client:
    """The service at ``base_url`` (``http://host:port``), for ``async with``.

    ``token`` is the tenant's bearer token (None: a server without tokens). ``timeout``
    bounds each request (a turn's ``wait`` adds its own seconds). ``retries`` is how many
    times a request is tried again after a connection failure or a 503. ``transport`` is
    an httpx transport to use instead of the network (tests, ASGI apps).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
        backoff: float = 0.1,
    ) -> None:
        if type(retries) is not int or retries < 0:
            raise ValueError(f"retries is an int >= 0, not {retries!r}")
        headers = {"Authorization": f"Bearer {check_token(token)}"} if token is not None else {}
        self.retries = retries
        self.timeout = timeout
        self.backoff = backoff
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections."""
        await self._http.aclose()

    # -- the requests -------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        seconds: float | None = None,
    ) -> Any:
        """The answer's JSON; retried on a dropped connection or a 503, the same each time."""
        query = {k: v for k, v in (params or {}).items() if v is not None}
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    method,
                    path,
                    json=body,
                    params=query,
                    headers=headers,
                    timeout=self.timeout if seconds is None else seconds,
                )
            except _TRANSIENT as exc:
                if attempt >= self.retries:
                    raise ServiceError(None, "unreachable", f"{type(exc).__name__}: {exc}") from exc
            except httpx.TransportError as exc:  # refused before it was sent: no retry helps
                raise ServiceError(None, "not_sent", f"{type(exc).__name__}: {exc}") from exc
            else:
                if response.status_code != 503 or attempt >= self.retries:
                    return _answer(response)
            await asyncio.sleep(self.backoff * 2**attempt)
            attempt += 1

    async def _post_input(
        self,
        route: str,
        session: str,
        text: str,
        id: str | None,
        fields: Mapping[str, Any],
        params: Mapping[str, Any] | None = None,
        seconds: float | None = None,
    ) -> dict[str, Any]:
        id = new_id() if id is None else id
        # The body's id is the input's; the key repeats it where a header can carry it.
        key = isinstance(id, str) and id.isascii() and id.isprintable() and id.strip() == id
        body = {"text": text, "id": id, **{k: v for k, v in fields.items() if v is not None}}
        answer: dict[str, Any] = await self._request(
            "POST",
            f"{_session(session)}/{route}",
            body=body,
            params=params,
            headers={"Idempotency-Key": id} if key else None,
            seconds=seconds,
        )
        return answer

    async def send(
        self,
        session: str,
        text: str,
        *,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
        if_idle: bool = False,
    ) -> Sent:
        """Queue ``text`` as a turn of its own (it starts now when no turn runs).

        ``if_idle``: only if no turn runs and no input waits, else :class:`Conflict`
        (``session_not_idle``) and nothing is sent.
        """
        fields = {"metadata": metadata, "if_idle": if_idle or None}
        answer = await self._post_input("messages", session, text, id, fields)
        return Sent(answer["id"], answer["turn"], answer["state"], answer.get("ahead", 0))

    async def steer(
        self,
        session: str,
        text: str,
        *,
        id: str | None = None,
        metadata: dict[str, Any] | None = None,
        expected_turn: str | None = None,
        wait: float | None = None,
    ) -> Steered:
        """Offer ``text`` to the started turn's next step; ``turn`` None: a turn of its own.

        ``expected_turn``: only if it joins that turn, else :class:`Conflict`
        (``turn_mismatch``). ``wait``: the answer waits (up to 60 s) for the steer's fate.
        """
        fields = {"metadata": metadata, "expected_turn": expected_turn}
        answer = await self._post_input(
            "steers",
            session,
            text,
            id,
            fields,
            params={"wait": wait},
            seconds=self.timeout + (wait or 0),
        )
        return Steered(answer["id"], answer.get("turn"), answer.get("fate"))

    async def cancel(self, session: str, id: str) -> dict[str, Any]:
        """Take back the waiting input ``id``; its view (``state`` cancelled). One already
        taken, or a turn of its own, is :class:`Conflict` (``input_not_waiting``)."""
        answer: dict[str, Any] = await self._request(
            "DELETE", f"{_session(session)}/inputs/{quote(id, safe='')}"
        )
        return answer

    async def set_metadata(self, session: str, metadata: dict[str, Any]) -> None:
        """Replace the session's metadata (a JSON object of at most 16 KB)."""
        await self._request("PUT", f"{_session(session)}/metadata", body={"metadata": metadata})

    async def fork(
        self,
        session: str,
        new: str,
        *,
        at: str | None = None,
        text: str | None = None,
        id: str | None = None,
    ) -> dict[str, Any]:
        """Start ``new`` from ``session``'s transcript through message ``at`` (all of it when
        None); with ``text``, send it there (resume at a message): ``{session, messages,
        sent}``. :class:`NotFound` (``message_not_found``), :class:`Conflict`
        (``session_exists``)."""
        body = {"session": new, "at": at, "text": text}
        if text is not None:
            body["id"] = new_id() if id is None else id  # a retried fork sends the text once
        answer: dict[str, Any] = await self._request(
            "POST", f"{_session(session)}/fork", body={k: v for k, v in body.items() if v}
        )
        return answer

    async def delete(self, session: str) -> None:
        """Delete the session and all it holds; :class:`Conflict` (``session_busy``) while
        a turn runs (stop it first), :class:`NotFound` when there is no such session."""
        await self._request("DELETE", _session(session))

    async def stop(self, session: str) -> str | None:
        """Stop the session's running turn; its id, or None when none runs."""
        answer = await self._request(
            "POST", f"{_session(session)}/stop", body={}, headers={"Idempotency-Key": new_id()}
        )
        turn: str | None = answer.get("turn")
        return turn

    async def status(self, session: str) -> dict[str, Any]:
        """``{session, turn, waiting, waiting_total, waiting_next, queued, metadata}``: the
        running turn, the first waiting inputs (page the rest with :meth:`inputs`), counts."""
        answer: dict[str, Any] = await self._request("GET", _session(session))
        return answer

    async def inputs(
        self,
        session: str,
        *,
        after: int | None = None,
        limit: int | None = None,
        state: str | None = None,
    ) -> dict[str, Any]:
        """One page of the session's inputs by seq: ``{inputs: [...], next}``."""
        answer: dict[str, Any] = await self._request(
            "GET",
            f"{_session(session)}/inputs",
            params={"after": after, "limit": limit, "state": state},
        )
        return answer

    async def turns(
        self, session: str, *, after: int | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """One page of the turns that started, in order: ``{turns: [...], next}``."""
        answer: dict[str, Any] = await self._request(
            "GET", f"{_session(session)}/turns", params={"after": after, "limit": limit}
        )
        return answer

    async def sessions(
        self, *, state: str | None = None, after: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """One page of the tenant's sessions: ``{sessions: [...], next}``."""
        answer: dict[str, Any] = await self._request(
            "GET", "/v1/sessions", params={"state": state, "after": after, "limit": limit}
        )
        return answer

    async def transcript(
        self, session: str, *, after: int | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """One page of the transcript: ``{messages: [{position, id, turn, ...}], next}``."""
        answer: dict[str, Any] = await self._request(
            "GET", f"{_session(session)}/transcript", params={"after": after, "limit": limit}
        )
        return answer

    async def turn(self, session: str, turn: str, *, wait: float | None = None) -> dict[str, Any]:
        """The turn ``turn`` and its output; with ``wait``, once it ended or after that long."""
        answer: dict[str, Any] = await self._request(
            "GET",
            f"{_session(session)}/turns/{quote(turn, safe='')}",
            params={"wait": wait},
            seconds=self.timeout + (wait or 0),
        )
        return answer

    async def input(self, session: str, id: str) -> dict[str, Any]:
        """The input ``id`` and its fate: ``waiting``, ``taken`` (turn, step) or ``turn``."""
        answer: dict[str, Any] = await self._request(
            "GET", f"{_session(session)}/inputs/{quote(id, safe='')}"
        )
        return answer

    # -- the stream ---------------------------------------------------------------------

    async def events(
        self, session: str, *, after: int | None = None, read_timeout: float = 45.0
    ) -> AsyncGenerator[Event, None]:
        """The session's events after the durable id ``after`` (None: from the first), live.

        A dropped connection (or no byte for ``read_timeout`` seconds: the server sends a
        keep-alive comment every 15 s) is reconnected with ``Last-Event-ID``, pausing a
        little longer each time it fails in a row: the durable events come once each, in
        order. The iterator ends only when the caller stops it.
        """
        last = after
        failures = 0
        while True:
            try:
                async for event in self._stream(session, last, read_timeout):
                    failures = 0
                    if event.kind == "unavailable":  # the store failed: the stream ends
                        continue  # and is reconnected, as after a drop
                    if event.kind == "refetch":  # we were beyond the last: go on from it
                        stored = event.data.get("last", event.id)
                        last = stored if isinstance(stored, int) else event.id
                    elif event.id is not None:
                        if last is not None and event.id <= last:
                            continue  # already yielded: a replay after a reconnect
                        last = event.id
                    yield event
            except (*_TRANSIENT, _Ended):
                pass
            except httpx.TransportError as exc:  # refused before it was sent
                raise ServiceError(None, "not_sent", f"{type(exc).__name__}: {exc}") from exc
            await asyncio.sleep(min(self.backoff * 2**failures, 2.0))
            failures += 1

    async def last_event(self, session: str) -> int:
        """The id of the session's last durable event (0 for none): where to follow from.

        Asked of the stream itself: an id beyond the last is answered with ``refetch``.
        """
        async with contextlib.aclosing(self._stream(session, _BEYOND, 30.0)) as events:
            async for event in events:
                if event.kind == "refetch":
                    last = event.data.get("last", event.id)
                    return last if isinstance(last, int) else 0
        raise ServiceError(None, "no_refetch", "the stream did not say where it ends")

    async def _stream(
        self, session: str, last: int | None, read: float
    ) -> AsyncGenerator[Event, None]:
        headers = {"Accept": "text/event-stream"}
        if last is not None:
            headers["Last-Event-ID"] = str(last)
        timeout = httpx.Timeout(self.timeout, read=read)
        url = f"{_session(session)}/events"
        async with self._http.stream("GET", url, headers=headers, timeout=timeout) as response:
            if response.status_code == 503:
                raise _Ended
            if response.status_code >= 400:
                await response.aread()
                _answer(response)
            fields: dict[str, str] = {}
            async for line in _lines(response.aiter_text()):
                if line:
                    _field(fields, line)
                    continue
                event = _event(fields)
                fields = {}
                if event is not None:
                    yield event
        raise _Ended  # the server ended the stream: reconnect, as after a drop


_BEYOND = 2**62 - 1  # an event id no session reaches


class _Ended(Exception):
    """The stream ended without an error of the transport."""


_LINE_END = re.compile(r"\r\n|\r|\n")


async def _lines(chunks: AsyncIterator[str]) -> AsyncIterator[str]:
    """The lines of an event stream, ended where the SSE spec ends them: CRLF, LF or CR.

    Not ``str.splitlines`` (nor httpx's ``aiter_lines``), which also ends a line at U+2028,
    U+2029, U+0085, \\x0b, \\x0c, \\x1c-\\x1e: JSON may hold those raw, in an id or a text,
    and a split there would let the text forge an event. A last line with no end is dropped,
    as the spec drops an event the stream did not finish.
    """
    pending = ""
    after_cr = False  # the last chunk ended with CR: a LF opening this one ends no line
    async for chunk in chunks:
        if after_cr and chunk.startswith("\n"):
            chunk = chunk[1:]
        after_cr = chunk.endswith("\r")
        *lines, pending = _LINE_END.split(pending + chunk)
        for line in lines:
            yield line


def _field(fields: dict[str, str], line: str) -> None:
    if line.startswith(":"):
        return  # a comment: the keep-alive
    name, _, value = line.partition(":")
    value = value.removeprefix(" ")
    if name == "data" and "data" in fields:
        fields["data"] += "\n" + value
    else:
        fields[name] = value


def _event(fields: dict[str, str]) -> Event | None:
    if "data" not in fields and "event" not in fields:
        return None
    kind = fields.get("event", "message")
    try:
        data = json.loads(fields.get("data") or "{}")
    except ValueError:
        data = {"raw": fields.get("data")}
    id = int(fields["id"]) if fields.get("id", "").isdigit() else None
    if id is not None and isinstance(data, dict) and isinstance(data.get("data"), dict):
        # a durable event: {id, kind, turn, data, at}
        return Event(kind, id, data.get("turn"), data["data"], data.get("at"))
    if not isinstance(data, dict):
        data = {"value": data}
    return Event(kind, id, data.get("turn"), data)


def check_token(token: object) -> str:
    """``token`` if it can be a bearer token: printable ASCII without spaces, else UsageError.

    The one rule of a token, for the client and for ``steerable serve --tokens``: an HTTP
    header carries ASCII only, and a space would end the token.
    """
    if not isinstance(token, str) or not token or not _printable_ascii(token) or " " in token:
        raise UsageError("a token is printable ASCII text without spaces")
    return token


def _printable_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable()


def check_session(session: object) -> str:
    """``session`` if the API can route it, else UsageError.

    A ``/`` (quoted or not: proxies and routers decode it) or a dot path (``.``, ``..``)
    never reaches the session's routes.
    """
    if not isinstance(session, str) or not session or "/" in session or session in (".", ".."):
        raise UsageError(
            f"a session id is a non-empty text without '/' and not '.' or '..', not {session!r:.80}"
        )
    return session


def _session(session: str) -> str:
    return f"/v1/sessions/{quote(check_session(session), safe='')}"


def _answer(response: httpx.Response) -> Any:
    if response.status_code < 400:
        return response.json() if response.content else {}
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    code = str(problem.get("code") or "http_error")
    detail = str(problem.get("detail") or problem.get("title") or response.reason_phrase)
    error = _ERRORS.get(response.status_code, ServiceError)
    if error is TooMany:
        raise TooMany(response.status_code, code, detail, _seconds(response))
    raise error(response.status_code, code, detail)


def _seconds(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
