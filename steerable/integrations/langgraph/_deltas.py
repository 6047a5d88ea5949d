"""Live text deltas from a LangGraph run: a callback handler on the model's own tokens.

The run itself stays ``ainvoke`` (its state, its interrupts, its errors are what they are
without deltas); :class:`TextDeltas` rides in its config's ``callbacks``, which every chat
model call in the graph inherits. A chat model streams only when a streaming handler is
attached (langchain-core's ``BaseChatModel._should_stream``: a handler with
``tap_output_aiter`` and ``tap_output_iter``, the protocol LangGraph's own
``stream_mode="messages"`` handler meets), so this handler has both. Then each token's
chunk arrives in :meth:`TextDeltas.on_llm_new_token`; a model that cannot stream gives its
whole reply once, at ``on_llm_end``.

Which calls are the reply's: those of the graph itself (not of a subgraph, such as an
agent run inside a tool) not tagged ``"nostream"`` (langchain's summarisation middleware
tags its own calls so) -- LangGraph's own rule for ``stream_mode="messages"``. Only text
blocks count (``message.text``): no tool-call arguments, no reasoning. Node outputs (the
steers, the tool results) are never model tokens, so they never reach the sink as text.

The tool calls' :class:`~steerable.events.ToolStarted` and :class:`~steerable.events.ToolEnded`
go through the same handler (:meth:`TextDeltas.send`), sent by :class:`SteeringMiddleware`'s
``awrap_tool_call``, so one failing sink stops both.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, LLMResult
from langgraph.constants import TAG_NOSTREAM

from steerable.events import Event, EventSink
from steerable.models.base import TextDelta

__all__ = ["TextDeltas"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# How LangGraph joins the namespaces of nested graphs in ``langgraph_checkpoint_ns``
# (its private ``NS_SEP``): a call whose namespace has one is a subgraph's.
_NS_SEP = "|"


class TextDeltas(AsyncCallbackHandler):
    """Sends each piece of the graph's model text to ``sink`` as a :class:`TextDelta`.

    A sink that raises does not fail the turn: the first failure is logged and the sink
    is called no more for this run (the stored transcript, not the live stream, is the
    truth, and a client that missed deltas gets the answer when the turn ends).
    """

    # awaited in the loop, in order, rather than in an executor: deltas keep their order
    run_inline = True

    def __init__(self, sink: EventSink, *, session: str = "", turn: str = "") -> None:
        self._sink: EventSink | None = sink
        self._where = f"session {session!r}, turn {turn!r}"
        self._listened: set[UUID] = set()  # the model calls whose text is the reply's
        self._streamed: set[UUID] = set()  # of those, the ones that sent a token

    # -- langchain's streaming-handler protocol: its presence makes chat models stream --

    def tap_output_aiter(self, run_id: UUID, output: AsyncIterator[T]) -> AsyncIterator[T]:
        """Leave a streamed output as it is (the protocol asks for the method only)."""
        return output

    def tap_output_iter(self, run_id: UUID, output: Iterator[T]) -> Iterator[T]:
        """Leave a streamed output as it is (the protocol asks for the method only)."""
        return output

    # -- the model calls -----------------------------------------------------------------

    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Note the call if its text is the reply's (see the module docstring)."""
        if tags and TAG_NOSTREAM in tags:
            return
        namespace = str((metadata or {}).get("langgraph_checkpoint_ns", ""))
        if _NS_SEP in namespace:
            return
        self._listened.add(run_id)

    async def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Send the text of a streamed chunk (a tool call's chunk has none)."""
        if run_id not in self._listened or not isinstance(chunk, ChatGenerationChunk):
            return
        self._streamed.add(run_id)
        await self._send(chunk.message.text)

    async def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Send a reply that did not stream, whole; forget the call."""
        listened = run_id in self._listened and run_id not in self._streamed
        self._listened.discard(run_id)
        self._streamed.discard(run_id)
        if listened and response.generations and response.generations[0]:
            first = response.generations[0][0]
            if isinstance(first, ChatGeneration):
                await self._send(first.message.text)

    async def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Forget a call that failed."""
        self._listened.discard(run_id)
        self._streamed.discard(run_id)

    async def _send(self, text: str) -> None:
        if text:
            await self.send(TextDelta(text))

    async def send(self, event: Event) -> None:
        """Send ``event`` to the sink (nothing once the sink has failed)."""
        if self._sink is None:
            return
        try:
            produced = self._sink(event)
            if inspect.isawaitable(produced):
                await produced
        except Exception:  # CancelledError is not an Exception: a stop still stops the run
            log.exception("%s: the live event sink failed; no more events for it", self._where)
            self._sink = None
