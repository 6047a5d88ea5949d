"""The model protocol, and the models that need nothing installed.

A :class:`Model` turns a :class:`ModelRequest` into a stream of :class:`ModelEvent`: text
deltas as they arrive, then exactly one :class:`Reply` holding the whole message. A model
that does not stream yields only the reply. Provider adapters live in their own modules
(``steerable.models.openai``, ``steerable.models.anthropic``) behind their extras.
"""

from steerable.models.base import (
    FinishReason,
    Model,
    ModelEvent,
    ModelRequest,
    ModelSettings,
    Reply,
    TextDelta,
    ToolSpec,
    Usage,
)
from steerable.models.scripted import ScriptedModel

__all__ = [
    "FinishReason",
    "Model",
    "ModelEvent",
    "ModelRequest",
    "ModelSettings",
    "Reply",
    "ScriptedModel",
    "TextDelta",
    "ToolSpec",
    "Usage",
]
