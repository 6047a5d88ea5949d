"""The OpenAI Agents SDK on steerable: the SDK's run, a steerable session, our steers.

- :class:`SteerableSession` is the SDK's ``Session`` over any steerable store: the run's
  items kept verbatim, the steers in place among them.
- :func:`steering` gives the ``RunConfig`` whose ``call_model_input_filter`` takes the
  session's steers at each step (as a model request goes out), so the run goes on with
  them instead of being restarted::

      session = SteerableSession(open_session("chat-1", store))
      result = await Runner.run(agent, "hi", run_config=steering(session), session=session)

- :class:`OpenAIAgentsAgent` is an SDK agent as a :class:`~steerable.service.Agent`.

``docs/integrations.md`` says where the SDK has no step to take a steer at.
"""

try:
    import agents  # noqa: F401
except ImportError as exc:
    from steerable._extras import missing_extra

    raise missing_extra(
        "steerable.integrations.openai_agents", "openai-agents", "openai-agents", exc
    ) from None

from steerable.integrations.openai_agents._agent import OpenAIAgentsAgent
from steerable.integrations.openai_agents._session import SteerableSession, steering

__all__ = ["OpenAIAgentsAgent", "SteerableSession", "steering"]
