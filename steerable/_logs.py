"""Log lines a machine reads: one JSON object a line, and the request each line was written for.

:class:`JsonFormatter` writes a record as one line of JSON: ``time``, ``level``,
``logger``, ``message``, then every field the call passed as ``extra`` (the turn's end of
:class:`~steerable.service._observe.LogObserver`, a failed turn's tenant, session and turn)
and the traceback as the string ``exc_info``. Every non-ASCII character is escaped, so no
reader finds a line end inside a value (U+2028 and U+0085 end a line for some).

:data:`request_id` holds the id of the HTTP request being served (the app's middleware sets
it: ``X-Request-Id``); :class:`RequestIdFilter`, on a handler, copies it onto each record
written meanwhile as ``request_id``. The stdlib only: ``steerable serve --log-format json``
needs no extra.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "RequestIdFilter", "request_id"]

request_id: ContextVar[str | None] = ContextVar("steerable_request_id", default=None)
"""The id of the HTTP request this code runs for, or None (a replica's turn is no request)."""

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",  # Python 3.12 adds it to every record
    "color_message",  # uvicorn's: the message again, with terminal colours
}
"""A record's own attributes: what is left of its ``__dict__`` came as ``extra``."""


class RequestIdFilter(logging.Filter):
    """Puts the id of the request being served on each record as ``request_id`` (none when
    no request is: a record passes either way). Add it to a handler: a logger's filters do
    not see the records of the loggers below it."""

    def filter(self, record: logging.LogRecord) -> bool:
        current = request_id.get()
        if current is not None and not hasattr(record, "request_id"):
            record.request_id = current
        return True


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON; see the module docstring."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        try:
            return _dumps(entry)
        except (TypeError, ValueError):  # a key that is no str, a NaN: that field as text
            return _dumps({key: _plain(value) for key, value in entry.items()})


def _dumps(entry: dict[str, Any]) -> str:
    return json.dumps(entry, ensure_ascii=True, allow_nan=False, default=str)


def _plain(value: Any) -> Any:
    try:
        _dumps({"v": value})
    except (TypeError, ValueError):
        return str(value)
    return value


def _utc(seconds: float) -> str:
    """``2026-01-31T12:00:00.123Z``: ISO 8601, UTC, to the millisecond."""
    stamp = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
