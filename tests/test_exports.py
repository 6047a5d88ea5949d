"""steerable's public names are exactly what its ``__init__`` defines or imports.

Derived from the module, not from a list kept by hand: a name added to the package without
``__all__`` (or the other way round) fails here.
"""

from __future__ import annotations

import types

import steerable


def test_every_public_name_of_the_package_is_exported_and_nothing_else() -> None:
    public = {
        name
        for name, value in vars(steerable).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert sorted(steerable.__all__) == sorted(public)
    assert len(set(steerable.__all__)) == len(steerable.__all__)


def test_every_exported_class_and_function_has_a_docstring() -> None:
    for name in steerable.__all__:
        value = getattr(steerable, name)
        if isinstance(value, type | types.FunctionType):
            assert value.__doc__, f"{name} has no docstring"


def test_what_a_model_or_store_implementer_needs_is_exported() -> None:
    for name in ("Model", "ModelRequest", "ModelEvent", "Reply", "TextDelta", "ToolSpec"):
        assert name in steerable.__all__
    for name in ("FinishReason", "Usage", "Store", "Steer", "Message", "TranscriptConflict"):
        assert name in steerable.__all__
