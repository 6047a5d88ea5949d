"""The request bodies of the HTTP API, as pydantic models: each refuses an unknown field."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from steerable.service._service import MAX_ID, MAX_METADATA, MAX_TEXT

__all__ = ["NO_NUL", "TEXT", "ForkBody", "MetadataBody", "SendBody", "SteerBody", "StopBody"]

NO_NUL = r"^[^\x00]+$"
"""The pattern of an id in the schema: no NUL (the stores cannot all hold it)."""
TEXT = r"^[^\x00]*[^\x00\s][^\x00]*$"
"""The pattern of an input's text in the schema: no NUL, and not only whitespace (``\\s`` as
Python's ``re`` reads it: what ``str.strip`` removes, which is what the service checks)."""

_BODY = ConfigDict(extra="forbid")  # an unknown field is refused, never dropped unread

IdField = Annotated[
    str, Field(min_length=1, max_length=MAX_ID, json_schema_extra={"pattern": NO_NUL})
]

_METADATA = f"a JSON object of at most {MAX_METADATA:,} bytes, kept and returned as it is"


def _checked_metadata(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    except (TypeError, ValueError, UnicodeEncodeError):
        raise PydanticCustomError("not_json", "is not plain JSON") from None
    if size > MAX_METADATA:
        raise PydanticCustomError("too_long", f"is over {MAX_METADATA:,} bytes as JSON")
    return value


class _InputBody(BaseModel):
    """An input: its text, its id if the client names it, and its metadata."""

    model_config = _BODY
    text: Annotated[
        str,
        Field(
            min_length=1,
            description="at most 1,000,000 bytes of UTF-8; no NUL; not only whitespace",
            json_schema_extra={"pattern": TEXT},
        ),
    ]
    id: IdField | None = None
    metadata: Annotated[dict[str, Any] | None, Field(description=_METADATA)] = None

    @field_validator("text")
    @classmethod
    def _text(cls, text: str) -> str:
        # the service's own rules, checked here so the answer names the field and the rule
        if "\x00" in text:
            raise PydanticCustomError("nul", "holds NUL, which no input may")
        if not text.strip():
            raise PydanticCustomError("blank", "is only whitespace")
        if len(text.encode("utf-8")) > MAX_TEXT:
            raise PydanticCustomError("too_long", f"is over {MAX_TEXT:,} bytes of UTF-8")
        return text

    @field_validator("id")
    @classmethod
    def _id(cls, id: str | None) -> str | None:
        if id is not None and "\x00" in id:
            raise PydanticCustomError("nul", "holds NUL, which no id may")
        return id

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _checked_metadata(value)


class SendBody(_InputBody):
    """A message to send; ``if_idle``: only if no turn runs and no input waits (else 409)."""

    if_idle: Annotated[
        bool, Field(description="refuse (409 session_not_idle) unless the session is idle")
    ] = False


class SteerBody(_InputBody):
    """A steer; ``expected_turn``: only if it joins that turn (else 409)."""

    expected_turn: Annotated[
        IdField | None,
        Field(description="refuse (409 turn_mismatch) unless the steer joins this turn"),
    ] = None

    @field_validator("expected_turn")
    @classmethod
    def _expected(cls, id: str | None) -> str | None:
        if id is not None and "\x00" in id:
            raise PydanticCustomError("nul", "holds NUL, which no id may")
        return id


class StopBody(BaseModel):
    """Stop takes no fields."""

    model_config = _BODY


class MetadataBody(BaseModel):
    """A session's metadata, replacing what it had."""

    model_config = _BODY
    metadata: Annotated[dict[str, Any], Field(description=_METADATA)]

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        checked = _checked_metadata(value)
        assert checked is not None
        return checked


class ForkBody(BaseModel):
    """A fork: the new session's id, the message it goes through (all of the transcript
    when absent) and, to resume there, a first message to send it (with its id)."""

    model_config = _BODY
    session: Annotated[IdField, Field(description="the new session's id (this tenant's)")]
    at: Annotated[
        IdField | None, Field(description="the last message copied (its id); all when absent")
    ] = None
    text: Annotated[
        str | None,
        Field(
            min_length=1,
            description="sent to the new session once forked (as POST .../messages)",
            json_schema_extra={"pattern": TEXT},
        ),
    ] = None
    id: IdField | None = None

    @field_validator("session", "at", "id")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise PydanticCustomError("nul", "holds NUL, which no id may")
        return value

    @field_validator("text")
    @classmethod
    def _text(cls, text: str | None) -> str | None:
        return None if text is None else _InputBody._text(text)
