"""What the MCP tests share: an ``mcp`` ClientSession over streamable HTTP with a token."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, ReadResourceResult

__all__ = ["answer", "connected", "read_json", "steered_ids", "text_of"]


@asynccontextmanager
async def connected(
    base: str, token: str | None = None, **session: Any
) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with the server at ``base``/v1/mcp, as ``token``'s tenant."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        streamable_http_client(f"{base}/v1/mcp", http_client=http) as (read, write),
        ClientSession(read, write, **session) as client,
    ):
        await client.initialize()
        yield client


def answer(result: CallToolResult) -> dict[str, Any]:
    """A tool's structured answer; its text is the same JSON."""
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    assert json.loads(text_of(result)) == data
    return data


def steered_ids(messages: list[dict[str, Any]]) -> list[str]:
    """The ids of the steered messages of a transcript."""
    return [m["id"] for m in messages if m["steered"]]


def text_of(result: CallToolResult) -> str:
    """A tool result's text."""
    first = result.content[0]
    assert first.type == "text"
    return first.text


def read_json(result: ReadResourceResult) -> Any:
    """A resource's JSON."""
    first = result.contents[0]
    assert hasattr(first, "text")
    return json.loads(first.text)
