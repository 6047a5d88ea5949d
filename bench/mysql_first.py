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
from typing import Any

from bench._first_claim import run_rounds
from bench._servers import close_mysql_pool, mysql_database, mysql_pool, steerable_mysql


async def _questions(pool: Any) -> int:
    async with pool.acquire() as conn, conn.cursor() as cursor:
        await cursor.execute("SHOW SESSION STATUS LIKE 'Questions'")
        (_, count), *_ = await cursor.fetchall()
        return int(count)


async def _run(rounds: int, steers: int) -> None:
    async with mysql_database("first") as db:
        pool = await mysql_pool(db, 1)
        try:
            store = await steerable_mysql(pool)
            await store.check_schema()
            # the statements: less the count's own SHOW
            lines = await run_rounds(store, rounds, steers, lambda: _questions(pool), overhead=1)
            print("\n".join(lines))
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
