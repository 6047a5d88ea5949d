"""The A2A request handler: the SDK's :class:`RequestHandler` over the :class:`Service`.

Not the SDK's ``DefaultRequestHandler``: that one runs an ``AgentExecutor`` in the process
that took the request and keeps the task in a ``TaskStore`` it writes itself, while a turn
here runs on whichever replica claims it and its state is the service's. So each method
is one or two of the service's verbs, and every answer is built from its views.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import contextmanager

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.requests import Request

from steerable.errors import QueueFull, StoreUnavailable, TurnMismatch, UsageError
from steerable.messages import new_id
from steerable.service.http._context import MAX_WAIT, Context
from steerable.service.http._problems import ProblemError, tenant_of
from steerable.service.http._sse import last_event
from steerable.service.http.a2a._follow import follow
from steerable.service.http.a2a._tasks import OVER, decode_task, task_of
from steerable.service_store import Accepted

__all__ = ["RequestKeeper", "TurnHandler"]


class RequestKeeper(DefaultServerCallContextBuilder):
    """The SDK's context builder, keeping the request: its tenant names the sessions."""

    def build(self, request: Request) -> ServerCallContext:
        """The SDK's call context, with ``state["request"]``."""
        call = super().build(request)
        call.state["request"] = request
        return call


@contextmanager
def _answered() -> Iterator[None]:
    """The service's refusals as A2A errors."""
    try:
        yield
    except ProblemError as exc:
        if exc.status == 404:
            raise TaskNotFoundError(message=exc.detail) from None
        if exc.status == 422:
            raise InvalidParamsError(message=exc.detail) from None
        raise InternalError(message=f"{exc.code}: {exc.detail}") from None
    except (QueueFull, StoreUnavailable) as exc:
        raise InternalError(message=str(exc)) from None
    except UsageError as exc:
        raise InvalidParamsError(message=str(exc)) from None


class TurnHandler(RequestHandler):
    """A2A over the service: a context is a session, a task a turn (module docstring of
    :mod:`steerable.service.http.a2a`)."""

    def __init__(self, context: Context, card: AgentCard) -> None:
        self.context = context
        self.card = card

    # -- the parts of a request ---------------------------------------------------------

    def _session(self, call: ServerCallContext, context_id: str) -> str:
        request = call.state.get("request")
        if not isinstance(request, Request):
            raise InternalError(message="no request in the call context")
        with _answered():
            return self.context.session(request, context_id)

    def _task(self, call: ServerCallContext, task_id: str) -> tuple[str, str, str]:
        """The context id, the session and the turn a task id names."""
        named = decode_task(task_id)
        if named is None:
            raise TaskNotFoundError(message=f"no task {task_id!r}")
        context_id, turn = named
        return context_id, self._session(call, context_id), turn

    async def _view(self, call: ServerCallContext, task_id: str) -> Task:
        context_id, session, turn = self._task(call, task_id)
        with _answered():
            task = await task_of(self.context.service, session, context_id, turn)
        if task is None:
            raise TaskNotFoundError(message=f"no task {task_id!r}")
        return task

    @staticmethod
    def _text(message: Message) -> str:
        if not message.parts:
            raise InvalidParamsError(message="a message has at least one part")
        for part in message.parts:
            if part.WhichOneof("content") != "text":
                raise ContentTypeNotSupportedError(message="only text parts are taken")
        text = "\n".join(part.text for part in message.parts)
        if not text.strip():
            raise InvalidParamsError(message="a message has some text")
        return text

    async def _accept(
        self, params: SendMessageRequest, call: ServerCallContext
    ) -> tuple[str, str, str, Accepted, int]:
        """Send or steer the message: its context id, session, target turn, what the service
        answered, and the last event id before it (where a stream of it starts)."""
        message = params.message
        text = self._text(message)
        id = message.message_id or None
        service = self.context.service
        if message.task_id:
            context_id, session, turn = self._task(call, message.task_id)
            if message.context_id and message.context_id != context_id:
                raise InvalidParamsError(
                    message=f"context {message.context_id} is not the task's ({context_id})"
                )
        else:
            context_id = message.context_id or new_id()
            session, turn = self._session(call, context_id), ""
        request = call.state["request"]
        with _answered():
            after = await last_event(service, session)
            if turn:
                await self._steerable(session, turn, message.task_id)
            self.context.limits.spend(tenant_of(request))
            if not turn:
                accepted = await service.send(session, text, id=id)
                turn = accepted.id
            else:
                try:
                    accepted = await service.steer(session, text, id=id, expected_turn=turn)
                except TurnMismatch:
                    raise self._finished(message.task_id, "is not working") from None
            if accepted.duplicate:
                first = await service.input(session, accepted.id)
                kind = "steer" if message.task_id else "send"
                if accepted.kind != kind or (first is not None and first.text != text):
                    raise InvalidParamsError(message="this message id was used with another body")
        return context_id, session, turn, accepted, after

    async def _steerable(self, session: str, turn: str, task_id: str) -> None:
        """Refuse a message to a task that is over (or was never one)."""
        view = await self.context.service.turn(session, turn)
        if view is None:
            waiting = await self.context.service.input(session, turn)
            if waiting is None or waiting.state == "taken":
                raise TaskNotFoundError(message=f"no task {task_id!r}")
            raise self._finished(task_id, f"is {waiting.state}, not working")
        if view.state in OVER:
            raise self._finished(task_id, f"is in a terminal state: {view.state}")
        if view.state != "running":
            raise self._finished(task_id, "is submitted, not working yet")

    @staticmethod
    def _finished(task_id: str, why: str) -> UnsupportedOperationError:
        # the SDK's own answer to a message for a task in a terminal state
        return UnsupportedOperationError(message=f"Task {task_id} {why}")

    # -- the methods ----------------------------------------------------------------------

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Send (a new task) or steer (a message to a working task); the task after.

        A send waits for its turn to end unless ``returnImmediately``; a steer waits for
        its fate: taken (the same task, its status message saying at which step) or, when
        the turn ended first, a turn of its own (that task).
        """
        context_id, session, turn, accepted, _ = await self._accept(params, context)
        service = self.context.service
        immediate = params.configuration.return_immediately
        length = params.configuration.history_length or None
        with _answered():
            if params.message.task_id:
                note = f"steer {accepted.id} offered: taken at the turn's next step"
                if not immediate:
                    note, turn = await self._fate(session, turn, accepted.id)
                task = await task_of(
                    service, session, context_id, turn, history_length=length, note=note
                )
            else:
                while not immediate:
                    view = await service.wait(session, turn, seconds=MAX_WAIT)
                    if view is None or view.state in OVER:
                        break
                task = await task_of(service, session, context_id, turn, history_length=length)
        if task is None:
            raise InternalError(message=f"the task of {accepted.id!r} is gone")
        return task

    async def _fate(self, session: str, turn: str, steer: str) -> tuple[str, str]:
        """Wait for a steer's fate: the status message, and the task it belongs to now."""
        while True:
            view = await self.context.service.fate(session, steer, seconds=MAX_WAIT)
            if view is None:
                raise InternalError(message=f"the steer {steer!r} is gone")
            if view.state == "taken" and view.turn is not None:
                return f"steer {steer} taken at step {view.step}", view.turn
            if view.state == "prompt" or (view.state == "waiting" and view.turn is None):
                return f"the turn ended first: {steer} is a task of its own", steer
            if view.state == "cancelled":
                return f"steer {steer} cancelled", turn

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task, then its updates until its turn ends (a steer's shows it taken)."""
        context_id, session, turn, accepted, after = await self._accept(params, context)
        note = None
        if params.message.task_id:
            note = f"steer {accepted.id} offered: taken at the turn's next step"
        async for event in self._stream(session, context_id, turn, after, note):
            yield event

    async def _stream(
        self, session: str, context_id: str, turn: str, after: int, note: str | None
    ) -> AsyncIterator[Event]:
        with _answered():
            task = await task_of(self.context.service, session, context_id, turn, note=note)
        if task is None:
            raise TaskNotFoundError(message=f"no task of turn {turn!r}")
        yield task
        if task.status.state in _TERMINAL:
            return
        with _answered():
            async for update in follow(self.context, session, context_id, turn, after):
                yield update

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task now, then its updates until it ends, from any replica."""
        context_id, session, turn = self._task(context, params.id)
        with _answered():
            after = await last_event(self.context.service, session)
        task = await self._view(context, params.id)
        if task.status.state in _TERMINAL:
            raise self._finished(params.id, "is in a terminal state: nothing to follow")
        async for event in self._stream(session, context_id, turn, after, None):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """The task of the turn."""
        context_id, session, turn = self._task(context, params.id)
        length = params.history_length or None
        with _answered():
            return await task_of(
                self.context.service, session, context_id, turn, history_length=length
            )

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """Stop the turn (or take back its prompt while it waits); the task once it ended."""
        context_id, session, turn = self._task(context, params.id)
        task = await self._view(context, params.id)
        if task.status.state in _TERMINAL:
            raise TaskNotCancelableError(message=f"Task {params.id} is over")
        service = self.context.service
        with _answered():
            status = await service.status(session, limit=1)
            if status.turn is not None and status.turn.id == turn:
                await service.stop(session)
                await service.wait(session, turn, seconds=MAX_WAIT)
            else:
                await service.cancel(session, turn)
            return await task_of(service, session, context_id, turn)

    # -- what is not offered --------------------------------------------------------------

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """Not offered: a session's turns are listed by the HTTP API."""
        raise UnsupportedOperationError(message="ListTasks is not offered")

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """No push notifications."""
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """No push notifications."""
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """No push notifications."""
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        """No push notifications."""
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        """The public card is the whole card."""
        return self.card


_TERMINAL = (
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
)
