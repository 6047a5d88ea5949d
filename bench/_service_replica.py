"""``scripts/service_replica.py`` with its store calls counted, for ``bench.service``.

    python -m bench._service_replica --store URL --replica NAME [replica.py's options]

It runs the script's ``main`` unchanged, but the store it opens is wrapped in
:func:`bench._service_counting.counting` (hints kept where the store has them), and when the
process ends (its stdin closed) the counts are written as JSON to the file named by the
environment variable ``BENCH_SERVICE_COUNTS``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from bench._service_counting import counting
from steerable.stores.url import open_url

COUNTS = "BENCH_SERVICE_COUNTS"
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "service_replica.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("steerable_replica_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@asynccontextmanager
async def counted_url(url: str) -> AsyncIterator[Any]:
    """The store ``url`` names, counted; the counts are written when the block ends."""
    async with open_url(url) as store:
        wrapped = counting(store)
        try:
            yield wrapped
        finally:
            target = os.environ.get(COUNTS)
            if target:
                wrapped.dump(target)


def main() -> None:
    """Run ``scripts/service_replica.py`` over a counted store."""
    script = _script()
    vars(script)["open_url"] = counted_url  # the name the script calls: nothing else changes
    asyncio.run(script.main())


if __name__ == "__main__":
    main()
