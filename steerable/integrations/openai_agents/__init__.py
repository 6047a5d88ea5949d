"""The OpenAI Agents SDK on steerable: the SDK's run, a steerable session, our steers.

- :class:`SteerableSession` is the SDK's ``Session`` over any steerable store: the run's
  items kept verbatim (each ``add_items`` stored before it returns, as ``SQLiteSession``
  does), the steers in place among them; ``pop_item`` and ``clear_session`` as the SDK's.
- :func:`steering` gives the ``RunConfig`` whose ``call_model_input_filter`` takes the
  session's steers at each step (as a model request goes out), so the run goes on with
  them instead of being restarted; a retry after a crash passes no new input::

      session = SteerableSession(open_session("chat-1", store))
      result = await Runner.run(agent, "hi", session=session, run_config=steering(session))
      result = await Runner.run(agent, [], session=session, run_config=steering(session))

  Either half alone is refused at once (see :mod:`._session`), never silent.
- :class:`OpenAIAgentsAgent` is an SDK agent as a :class:`~steerable.service.Agent`.
- :func:`journaled` (under ``@function_tool``) makes a tool's calls run once across crashes,
  journaled in the session; a steered run with such tools passes
  ``hooks=journal_hooks(session)`` too (the service's agent does it itself).

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
from steerable.integrations.openai_agents._journaled import journal_hooks, journaled
from steerable.integrations.openai_agents._session import SteerableSession, steering

__all__ = ["OpenAIAgentsAgent", "SteerableSession", "journal_hooks", "journaled", "steering"]
