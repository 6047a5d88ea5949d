"""MongoDB: a claim that makes the turn's first step against a claim and a step apart.

Each round claims three new sessions, each with one send waiting (and ``--steers`` steers
offered to it), in a rotating order: a claim alone, a claim then ``step(lease, [prompt's
message], at=start, take=cap)``, and ``claim(..., first=True)``, which makes that step in the
claim's transaction. Each is timed from the claim's call to its last answer; the figure is
the median over rounds, and the ratios are to the claim alone. The commands each sent are
counted by the driver (a command listener). The server is ``BENCH_MONGODB_URL``'s (a replica
set: the service's writes are transactions); SecantusDB, the tests' server, is written in
Python, so its times are not MongoDB's, but its command counts are.

    python -m bench.mongodb_first --rounds 100 --steers 0
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from bench._first_claim import run_rounds
from bench._servers import MONGO_URL, driver, mongodb_database, steerable_mongodb


async def _run(rounds: int, steers: int) -> None:
    pymongo = driver("pymongo", "mongodb")
    listening: Any = driver("pymongo.monitoring", "mongodb").CommandListener

    class Commands(listening):  # type: ignore[misc]
        """Counts the commands the driver sends."""

        sent = 0

        def started(self, event: Any) -> None:
            Commands.sent += 1

        def succeeded(self, event: Any) -> None:
            pass

        def failed(self, event: Any) -> None:
            pass

    async with mongodb_database("first") as (_, db, server):
        await steerable_mongodb(db)  # migrated, on the client of mongodb_database
        commands = Commands()
        counted = pymongo.AsyncMongoClient(MONGO_URL, event_listeners=[commands])
        try:
            store = await steerable_mongodb(counted[db.name])
            await store.check_schema()

            async def count() -> int:
                return Commands.sent

            lines = await run_rounds(store, rounds, steers, count)
            print(server)
            print("\n".join(lines))
        finally:
            await counted.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--steers", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(_run(args.rounds, args.steers))


if __name__ == "__main__":
    main()
