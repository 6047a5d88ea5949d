"""The console's files as ``create_app`` serves them: with no token (the page holds no
data; its script calls the API with the user's), their media types, a policy that allows
only this origin's own script, and never in the API's schema."""

from __future__ import annotations

import httpx

from steerable.service import Service
from steerable.service.http import create_app
from steerable.service.http._console import CONSOLE_FILES
from steerable.stores.memory import MemoryStore


async def test_the_console_is_served_without_a_token_and_kept_out_of_the_schema() -> None:
    app = create_app(Service(MemoryStore()), tokens={"t0ken": "acme"})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        page = await http.get("/console")
        assert page.status_code == 200
        assert page.headers["content-type"] == CONSOLE_FILES["index.html"]
        assert 'src="console/console.js"' in page.text  # relative: works under a mount
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff"
        for name in ("console.js", "console.css"):
            answer = await http.get(f"/console/{name}")
            assert answer.status_code == 200, name
            assert answer.headers["content-type"] == CONSOLE_FILES[name]
            assert answer.content
        assert (await http.get("/console/nosuch.js")).status_code == 404
        assert (await http.get("/v1/sessions")).status_code == 401  # the data needs a token
        schema = (await http.get("/openapi.json")).json()
    assert not [p for p in schema["paths"] if "console" in p]
