"""Pydantic AI on steerable: its loop, our session and our steers.

- :class:`Steering`: a capability that takes a session's steers as each model request goes
  out (through Pydantic AI's own ``RunContext.enqueue``) and stores the run at each step.
- :class:`PydanticAIAgent`: a Pydantic AI agent as an agent of the service.
- :class:`SteerableConversationStore`: Pydantic AI's ``ConversationStore`` over any
  steerable store.
- :func:`history`: a stored transcript as Pydantic AI messages (what a run starts from).
- :func:`journaled`: a tool function whose calls run at most once per call, across crashes
  (the tool journal, keyed by the stored reply and the model's call id).

Install with ``pip install 'steerable[pydantic-ai]'``. ``docs/integrations.md`` says where
Pydantic AI has no step to take a steer at.
"""

try:
    import pydantic_ai  # noqa: F401
except ImportError as exc:
    from steerable._extras import missing_extra

    raise missing_extra(
        "steerable.integrations.pydantic_ai", "pydantic-ai", "pydantic-ai-slim", exc
    ) from None

from steerable.integrations.pydantic_ai._agent import PydanticAIAgent
from steerable.integrations.pydantic_ai._conversations import SteerableConversationStore
from steerable.integrations.pydantic_ai._journaled import journaled
from steerable.integrations.pydantic_ai._records import history
from steerable.integrations.pydantic_ai._steering import Steering

__all__ = ["PydanticAIAgent", "SteerableConversationStore", "Steering", "history", "journaled"]
