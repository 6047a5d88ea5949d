"""steerable: agent conversations that outlive the process running them.

A person steers a running agent turn from anywhere and the message joins the turn at its
next step; a turn whose process died is carried on by another process from the stored
transcript; every steer is answered exactly once.
"""

from steerable.errors import (
    CorruptRecord,
    InvalidMessage,
    ModelError,
    ProviderError,
    ScriptExhausted,
    SteerableError,
    StoreError,
    StoreUnavailable,
    TranscriptConflict,
    UsageError,
)
from steerable.events import Event
from steerable.messages import (
    Message,
    Part,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    assistant,
    transcript_problems,
    user,
)
from steerable.models.base import Model, ModelRequest, ModelSettings, Usage
from steerable.models.scripted import ScriptedModel
from steerable.runner import EndReason, Result, Run, Runner, Spec
from steerable.session import Session, open_session
from steerable.store import Steer, Store
from steerable.tools import Tool, tool

__all__ = [
    "CorruptRecord",
    "EndReason",
    "Event",
    "InvalidMessage",
    "Message",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelSettings",
    "Part",
    "ProviderError",
    "Reasoning",
    "Result",
    "Run",
    "Runner",
    "ScriptExhausted",
    "ScriptedModel",
    "Session",
    "Spec",
    "Steer",
    "SteerableError",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "Text",
    "Tool",
    "ToolCall",
    "ToolResult",
    "TranscriptConflict",
    "Usage",
    "UsageError",
    "assistant",
    "open_session",
    "tool",
    "transcript_problems",
    "user",
]
