"""Each public module's names are exactly what it defines or imports from itself.

Derived from the module, not from a list kept by hand: a name added to a package without
``__all__`` (or the other way round) fails here. A name counts as the module's own when it
comes from the module or a module below it, or (for a package) from steerable's public
modules; a helper it imports from elsewhere (``typing.Protocol``, the extras check) is not.
"""

from __future__ import annotations
import __future__

import importlib
import types

import pytest

import steerable

MODULES = [
    "steerable",
    "steerable.models",
    "steerable.testing",
    "steerable.service",
    "steerable.stores.migrations",
    "steerable.stores.postgres",
    "steerable.stores.mysql",
    "steerable.stores.mongodb",
]

# Classes and functions say where they come from; constants and type aliases do not, and a
# package's are its own.
_FUNCTIONS = types.FunctionType | types.BuiltinFunctionType


def _own_public_names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)  # `from __future__ import ...`
        and (not isinstance(value, type | _FUNCTIONS) or _its_own(module, value.__module__))
    }


def _its_own(module: types.ModuleType, origin: str) -> bool:
    """Whether a name from ``origin`` is one of ``module``'s: a plain module's names are
    those it defines; a package's, also what it takes from steerable's public modules."""
    if origin == module.__name__ or origin.startswith(module.__name__ + "."):
        return True
    public = origin.split(".")[0] == "steerable" and not any(
        part.startswith("_") for part in origin.split(".")
    )
    return hasattr(module, "__path__") and public


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_of_the_module_is_exported_and_nothing_else(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == sorted(_own_public_names(module))
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize("name", MODULES)
def test_every_exported_class_and_function_has_a_docstring(name: str) -> None:
    module = importlib.import_module(name)
    for exported in module.__all__:
        value = getattr(module, exported)
        if isinstance(value, type | types.FunctionType):
            assert value.__doc__, f"{name}.{exported} has no docstring"


def test_the_server_stores_export_the_same_kinds_of_names() -> None:
    shared = {"MIGRATIONS", "SCHEMA_VERSION", "migrate"}
    for name in ("postgres", "mysql", "mongodb"):
        assert shared <= set(importlib.import_module(f"steerable.stores.{name}").__all__)
    for name in ("postgres", "mysql"):  # over the application's pool: its Protocol
        assert "Pool" in importlib.import_module(f"steerable.stores.{name}").__all__


def test_what_a_model_or_store_implementer_needs_is_exported() -> None:
    for name in ("Model", "ModelRequest", "ModelEvent", "Reply", "TextDelta", "ToolSpec"):
        assert name in steerable.__all__
    for name in ("FinishReason", "Usage", "Store", "Steer", "Message", "TranscriptConflict"):
        assert name in steerable.__all__
