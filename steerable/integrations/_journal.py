"""A framework's own tool function, journaled: run once per call, across crashes and replicas.

Each integration runs its framework's turn with a steerable session; while it does, that
session is :func:`journal_session`'s (a context variable, so the framework's tool code, in
its tasks and worker threads, finds it). An integration's ``journaled`` decorator wraps a
tool function of its framework so that a call of it goes through :func:`run_once`:

- the call is marked started in the session's journal under a key made of the session,
  the framework's name, the id of the stored reply that made the call, and the framework's
  own call id (the model's, which the framework kept with the call it persisted before
  running it). The reply's id is there because models do not all make call ids unique
  (some servers number each reply's calls from ``call_0``): keyed by the call id alone, a
  later reply's call would be answered with an earlier one's recorded result;
- a call whose result was recorded is not run: the recorded output is returned;
- a call that started and never ended is run again only when marked idempotent; otherwise
  the tool returns :data:`steerable.journal.UNKNOWN` (the model reads that its outcome is
  unknown) without running;
- the output (text) is recorded as the call ends. A tool that raises records nothing: the
  call stays started, so a retry of it is told its outcome is unknown (or re-runs it, if
  idempotent), and the exception goes to the framework as before.

With no session running (the framework used without steerable's session) the function just
runs: there is nowhere to journal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from steerable.journal import UNKNOWN, ToolContext, call_key
from steerable.messages import ToolCall, ToolResult
from steerable.session import Session

__all__ = ["current_session", "journal_session", "run_once"]

_SESSION: ContextVar[Session | None] = ContextVar("steerable_journal_session", default=None)


@contextmanager
def journal_session(session: Session | None) -> Iterator[None]:
    """Make ``session`` the journal of the tool calls run inside the block."""
    token = _SESSION.set(session)
    try:
        yield
    finally:
        _SESSION.reset(token)


def current_session() -> Session | None:
    """The session whose turn runs here, if an integration set one."""
    return _SESSION.get()


async def run_once(
    framework: str,
    call: ToolCall,
    run: Callable[[ToolContext], Awaitable[str]],
    *,
    reply: str | None = None,
    idempotent: bool = False,
    session: Session | None = None,
) -> str:
    """The output of ``call`` (the framework's own call id, name and arguments), run by
    ``run`` at most once for the session (:func:`current_session` if not given).

    ``reply`` is the id of the stored message whose call it is; an integration that cannot
    know it passes None, and then a call id the model gives twice in a session is one call.
    """
    session = session or current_session()
    where = framework if reply is None else f"{framework}/{reply}"
    if session is None:
        return await run(ToolContext(call, call_key(None, where, call.id)))
    key = call_key(session.id, where, call.id)
    known = await session.begin_calls([key])
    started = key in known
    recorded = known.get(key)
    if recorded is not None:
        return recorded.content
    if started and not idempotent:
        await session.end_call(key, ToolResult(call.id, call.name, UNKNOWN, True))
        return UNKNOWN
    output = await run(ToolContext(call, key, session.id, retried=started))
    kept = await session.end_call(key, ToolResult(call.id, call.name, output))
    return kept.content
