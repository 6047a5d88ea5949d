"""The OpenAPI schema, refined to say what the server does.

FastAPI's schema is close; these are where it is not: errors are ``application/problem+json``;
the bearer scheme (only when the app has tokens); a parameter that may be left out is not
also ``null`` (a query or a header cannot carry null: a generated client would send the word
``null``); a session id's bound leaves room for the longest tenant's prefix, so an id the
schema allows fits every tenant.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from steerable.service._service import MAX_ID
from steerable.service.http._problems import PROBLEM

__all__ = ["refine_schema", "sid_room"]


def sid_room(tenants: list[str]) -> int:
    """The longest public session id every tenant can have (the store's id is ``t/sid``)."""
    return MAX_ID - max((len(t) for t in tenants), default=len("default")) - 1


def refine_schema(app: FastAPI, *, bearer: bool, room: int) -> None:
    """Make ``app.openapi()`` the refined schema (built once, on the first call)."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        for name, path in schema.get("paths", {}).items():
            for operation in path.values():
                _problems(operation)
                for parameter in operation.get("parameters", ()):
                    _parameter(parameter, room)
                if bearer and name.startswith("/v1/"):
                    operation["security"] = [{"bearer": []}]
        if bearer:
            components = schema.setdefault("components", {})
            components.setdefault("securitySchemes", {})["bearer"] = {
                "type": "http",
                "scheme": "bearer",
            }
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _problems(operation: dict[str, Any]) -> None:
    for status, response in operation.get("responses", {}).items():
        content = response.get("content", {})
        if status[:1] in "45" and "application/json" in content:
            content[PROBLEM] = content.pop("application/json")


def _parameter(parameter: dict[str, Any], room: int) -> None:
    schema: dict[str, Any] = parameter.get("schema", {})
    choices = schema.get("anyOf")
    if not parameter.get("required") and isinstance(choices, list):
        kept = [c for c in choices if c != {"type": "null"}]
        if len(kept) == 1:  # optional, not nullable: the one real schema, its title kept
            del schema["anyOf"]
            schema.update(kept[0])
    where = (parameter.get("in"), parameter.get("name"))
    if where in (("path", "sid"), ("query", "after")) and schema.get("type") == "string":
        schema["maxLength"] = min(schema.get("maxLength", room), room)
