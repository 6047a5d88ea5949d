"""The driver-free part of the migrations: the order, what is pending, and what is said."""

from __future__ import annotations

import subprocess
import sys

import pytest

from steerable.errors import StoreUnavailable, UsageError
from steerable.stores.memory import MemoryStore
from steerable.stores.migrations import (
    Migration,
    check_schema,
    pending,
    refusal,
    require,
    validated,
)

STEPS = validated(
    [Migration(1, "the tables", ("a",)), Migration(2, "the service's tables", ("b", "c"))]
)
APPLY = "await x.migrate(pool)"


def test_versions_run_from_1_in_order() -> None:
    with pytest.raises(UsageError, match=r"\[1, 3\]"):
        validated([Migration(1, "one", ()), Migration(3, "three", ())])
    with pytest.raises(UsageError, match=r"\[2, 1\]"):
        validated([Migration(2, "two", ()), Migration(1, "one", ())])
    assert [m.version for m in pending(STEPS, 0)] == [1, 2]
    assert [m.version for m in pending(STEPS, 1)] == [2]
    assert pending(STEPS, 2) == []


def test_the_refusal_names_the_next_step_and_how_to_apply_it() -> None:
    assert refusal(2, STEPS, store="X", apply=APPLY) is None
    older = str(refusal(1, STEPS, store="X", apply=APPLY))
    assert older == (
        "the X database has version 1; this steerable needs version 2: apply migration"
        " step 2 (the service's tables) with `await x.migrate(pool)` (the store runs no"
        " migrations)"
    )
    empty = str(refusal(0, STEPS, store="X", apply=APPLY))
    assert "has no steerable schema" in empty and "step 1 (the tables) and 1 after it" in empty
    newer = str(refusal(3, STEPS, store="X", apply=APPLY))
    assert newer == (
        "the X database has steerable schema version 3; this steerable knows versions up"
        " to 2: upgrade steerable"
    )


def test_require_raises_the_refusal_and_passes_the_latest() -> None:
    require(2, STEPS, store="X", apply=APPLY)
    with pytest.raises(StoreUnavailable, match=r"step 2 \(the service's tables\)"):
        require(1, STEPS, store="X", apply=APPLY)
    with pytest.raises(StoreUnavailable, match="upgrade steerable"):
        require(3, STEPS, store="X", apply=APPLY)


async def test_a_store_without_a_schema_passes_the_check() -> None:
    await check_schema(MemoryStore())


def test_the_module_loads_no_driver() -> None:
    code = (
        "import sys, steerable.stores.migrations\n"
        "print(sorted(m for m in ('asyncpg', 'aiomysql', 'pymongo') if m in sys.modules))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "[]", run.stderr
