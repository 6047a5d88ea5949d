"""Agent frameworks on steerable: their loop, our session and our steers.

Each framework lives in its own subpackage behind its own extra, and importing this package
loads none of them:

- :mod:`steerable.integrations.openai_agents` (``pip install 'steerable[openai-agents]'``)
- :mod:`steerable.integrations.pydantic_ai` (``pip install 'steerable[pydantic-ai]'``)
- :mod:`steerable.integrations.langgraph` (``pip install 'steerable[langgraph]'``)
- :mod:`steerable.integrations.adk` (``pip install 'steerable[adk]'``)

Every integration takes a session's steers at the framework's own step (as a model request
goes out, after every tool call has its result), records each in place with one atomic
save-and-take (:class:`Steps`), keeps the framework's own records verbatim in
:class:`~steerable.Native` parts, and is an :class:`~steerable.service.Agent` the service
can run. ``docs/integrations.md`` says where each framework has no step to take a steer at.
"""

from steerable.integrations._steps import Steps, answer_text, until_stopped

__all__ = ["Steps", "answer_text", "until_stopped"]
