"""steerable: agent conversations that outlive the process running them.

A person steers a running agent turn from anywhere and the message joins the turn at its
next step; a turn whose process died is carried on by another process from the stored
transcript; every steer is answered exactly once.
"""

from steerable.errors import (
    CorruptRecord,
    Fenced,
    InvalidMessage,
    MessageNotFound,
    ModelError,
    ProviderError,
    QueueFull,
    ScriptExhausted,
    SessionBusy,
    SessionExists,
    SessionNotIdle,
    SteerableError,
    StoreError,
    StoreUnavailable,
    TranscriptConflict,
    TurnMismatch,
    UsageError,
)
from steerable.events import Event
from steerable.journal import ToolContext
from steerable.messages import (
    Message,
    Native,
    Part,
    Reasoning,
    Text,
    ToolCall,
    ToolResult,
    assistant,
    transcript_problems,
    user,
)
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
from steerable.runner import Run, Runner
from steerable.session import Session, open_session
from steerable.spec import EndReason, Result, Spec
from steerable.store import CheckedStore, Steer, Store
from steerable.tools import Tool, tool

__all__ = [
    "CheckedStore",
    "CorruptRecord",
    "EndReason",
    "Event",
    "FinishReason",
    "InvalidMessage",
    "MessageNotFound",
    "Message",
    "Model",
    "ModelError",
    "ModelEvent",
    "ModelRequest",
    "ModelSettings",
    "Part",
    "ProviderError",
    "Native",
    "Reasoning",
    "Reply",
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
    "TextDelta",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolResult",
    "ToolSpec",
    "TranscriptConflict",
    "TurnMismatch",
    "Fenced",
    "QueueFull",
    "SessionBusy",
    "SessionExists",
    "SessionNotIdle",
    "Usage",
    "UsageError",
    "assistant",
    "open_session",
    "tool",
    "transcript_problems",
    "user",
]
