"""LangGraph on steerable: ``create_agent``'s loop, our session, our steers.

- :class:`SteeringMiddleware` (a ``create_agent`` middleware over a store): before each
  model call, one atomic store call stores what the graph added and takes the waiting
  steers of the run's session (its ``thread_id``), which join the graph's state in place
  (after every tool result) under their own ids. One compiled graph serves every session.
- :class:`LangGraphAgent`: a service agent that builds ``create_agent`` once and runs each
  turn over the turn's session; a ``graph=`` agent of your own takes no steer.
- :class:`SteerableSaver`: a LangGraph checkpointer over any steerable store.
- :func:`journaled`: a tool function whose calls run once per model call id, across
  crashes and replicas (the tool journal of :mod:`steerable.journal`).

The transcript keeps the prompt and each steer as steerable user messages and the graph's
other messages verbatim, as langchain serialises them, in ``Native("langgraph", ...)``
parts. Needs ``pip install 'steerable[langgraph]'``.
"""

try:
    import langchain
    import langgraph
except ImportError as exc:
    from steerable._extras import missing_extra

    raise missing_extra(
        "steerable.integrations.langgraph", "langgraph", "langgraph and langchain", exc
    ) from None

from steerable.integrations.langgraph._agent import LangGraphAgent
from steerable.integrations.langgraph._journaled import journaled
from steerable.integrations.langgraph._middleware import SteeringMiddleware
from steerable.integrations.langgraph._records import FRAMEWORK, from_stored, to_stored
from steerable.integrations.langgraph._saver import SteerableSaver

__all__ = [
    "FRAMEWORK",
    "LangGraphAgent",
    "SteerableSaver",
    "SteeringMiddleware",
    "from_stored",
    "journaled",
    "to_stored",
]

del langchain, langgraph
