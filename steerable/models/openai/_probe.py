"""Whether a compatible server's chat template takes tools, where the server says.

llama.cpp's ``llama-server`` renders a request with the model's chat template; a template
that knows no tools drops them without a word, so the model never sees them and answers
as if it had none. Its ``GET /props`` says so (``chat_template_caps.supports_tools``).
Other servers have no ``/props``: a 404, a refusal or anything else is no answer, and
nothing is said.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import openai

PROBE_SECONDS = 2.0


def props_url(base_url: str) -> str | None:
    """``/props`` at the root of a compatible server's base URL; None for OpenAI's own."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme not in ("http", "https") or (parts.hostname or "").endswith("openai.com"):
        return None
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, f"{path}/props", "", ""))


async def ignores_tools(client: openai.AsyncOpenAI) -> bool:
    """Whether the server says its chat template takes no tools (one short GET)."""
    url = props_url(str(client.base_url))
    if url is None:
        return False
    headers = {"Authorization": f"Bearer {client.api_key}"} if client.api_key else {}
    props = await asyncio.to_thread(_get_json, url, headers)
    caps = props.get("chat_template_caps") if isinstance(props, dict) else None
    return isinstance(caps, dict) and caps.get("supports_tools") is False


def _get_json(url: str, headers: dict[str, str]) -> Any:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=PROBE_SECONDS) as response:
            return json.loads(response.read(1_000_000))
    except (OSError, ValueError):  # no /props (a 404), no server, not JSON: no answer
        return None


def ignored_tools_notice(model: str) -> str:
    """What the chat says once when the server drops the tools."""
    return (
        f"{model}: the server's chat template takes no tools (its /props says"
        " supports_tools: false), so the model never sees them and cannot call one;"
        " llama-server: start it with --jinja and a chat template that takes tools"
        " (--chat-template-file FILE), or use a model whose template does"
    )
