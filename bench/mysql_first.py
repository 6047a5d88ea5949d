"""MySQL/MariaDB: a claim that makes the turn's first step against a claim and a step apart.

Each round claims three new sessions, each with one send waiting (and ``--steers`` steers
offered to it), on one held connection of the store's pool (autocommit, as ``steerable
serve`` makes it), in a rotating order: a claim alone, a claim then ``step(lease, [prompt's
message], at=start, take=cap)``, and ``claim(..., first=True)``, which makes that step in the
claim's transaction. Each is timed from the claim's call to its last answer; the figure is
the median over rounds, and the ratios are to the claim alone. The statements each sent are
counted by the server (``Questions``).

    python -m bench.mysql_first --rounds 400 --steers 0
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from bench._servers import close_mysql_pool, mysql_database, mysql_pool, steerable_mysql
from steerable.messages import new_id
from steerable.service_store import Input

_KINDS = ("claim", "claim + step", "claim(first=True)")


async def _questions(pool: Any) -> int:
    async with pool.acquire() as conn, conn.cursor() as cursor:
        await cursor.execute("SHOW SESSION STATUS LIKE 'Questions'")
        (_, count), *_ = await cursor.fetchall()
        return int(count)


async def _one(store: Any, kind: str, session: str) -> None:
    claim = await store.claim("bench", seconds=60, cap=16, session=session, first=kind == _KINDS[2])
    assert claim is not None
    if kind == _KINDS[1]:
        message = claim.prompt.message(steered=False)
        await store.step(claim.lease, [message], at=claim.start, take=claim.cap)


async def _run(rounds: int, steers: int) -> None:
    async with mysql_database("first") as db:
        pool = await mysql_pool(db, 1)
        try:
            store = await steerable_mysql(pool)
            await store.check_schema()
            times: dict[str, list[float]] = {kind: [] for kind in _KINDS}
            statements: dict[str, int] = {}
            for round in range(rounds):
                order = _KINDS[round % 3 :] + _KINDS[: round % 3]
                for kind in order:
                    session = f"bench-{new_id()}"
                    await store.enqueue(session, Input("send", "go"))
                    for _ in range(steers):
                        await store.enqueue(session, Input("steer", "and"))
                    before = await _questions(pool)
                    started = time.perf_counter()
                    await _one(store, kind, session)
                    times[kind].append(time.perf_counter() - started)
                    statements[kind] = await _questions(pool) - before - 1
            alone = statistics.median(times[_KINDS[0]])
            for kind in _KINDS:
                median = statistics.median(times[kind])
                print(
                    f"steers {steers}  {kind:18s} {median * 1e3:6.2f} ms"
                    f"  {median / alone:4.2f}x  statements {statements[kind]}"
                )
        finally:
            await close_mysql_pool(pool)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--steers", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(_run(args.rounds, args.steers))


if __name__ == "__main__":
    main()
