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
import statistics
import time
from typing import Any

from bench._servers import MONGO_URL, driver, mongodb_database, steerable_mongodb
from steerable.messages import new_id
from steerable.service_store import Input

_KINDS = ("claim", "claim + step", "claim(first=True)")


async def _one(store: Any, kind: str, session: str) -> None:
    claim = await store.claim("bench", seconds=60, cap=16, session=session, first=kind == _KINDS[2])
    assert claim is not None
    if kind == _KINDS[1]:
        message = claim.prompt.message(steered=False)
        await store.step(claim.lease, [message], at=claim.start, take=claim.cap)


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
            times: dict[str, list[float]] = {kind: [] for kind in _KINDS}
            sent: dict[str, int] = {}
            for round in range(rounds):
                order = _KINDS[round % 3 :] + _KINDS[: round % 3]
                for kind in order:
                    session = f"bench-{new_id()}"
                    await store.enqueue(session, Input("send", "go"))
                    for _ in range(steers):
                        await store.enqueue(session, Input("steer", "and"))
                    before = commands.sent
                    started = time.perf_counter()
                    await _one(store, kind, session)
                    times[kind].append(time.perf_counter() - started)
                    sent[kind] = commands.sent - before
            alone = statistics.median(times[_KINDS[0]])
            print(server)
            for kind in _KINDS:
                median = statistics.median(times[kind])
                print(
                    f"steers {steers}  {kind:18s} {median * 1e3:6.2f} ms"
                    f"  {median / alone:4.2f}x  commands {sent[kind]}"
                )
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
