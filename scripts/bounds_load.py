"""What ``steerable serve``'s bounds hold under load (issue 18): big queues, many clients,
slow clients. Each part runs against a ``steerable serve`` process of its own over a fresh
database, serving a demo agent whose turn never ends within the run.

    python scripts/bounds_load.py [--store sqlite|postgres|mysql|mongodb] [--short]
        [--parts status,queue,slow] [--seconds S] [--clients N] [--sessions N]

- **status**: one short send starts a turn that never ends, then 100 inputs of 900 KB
  queue behind it; the session's status is read, then every waiting input is paged with
  ``GET .../inputs?state=waiting``. Figures: the largest answer's bytes, and the server's
  resident memory before, at its peak (``VmHWM``) and after.
- **queue**: in a few sessions whose turns never end, ``--clients`` clients (50) send as
  fast as they can for ``--seconds`` (60; ``--short``: 10). Figures: the 202s, the 429s by
  code (``rate_limited``, ``queue_full``), any 5xx, the most inputs seen waiting in one
  session, the memory. ``--short`` also sets ``--max-waiting 200`` so that ten seconds
  reach the queue's bound as the minute reaches the default's (1000).
- **slow**: 200 connections that send half a request head and then nothing, counted still
  open after ``--head-timeout`` and a margin; then 200 requests whose body stalls half way,
  their answers counted (408 expected); a plain request is timed meanwhile. The timeouts are
  serve's defaults (10 s and 30 s), 2 s each with ``--short``.

It prints one JSON line of figures at the end (progress goes to stderr), and exits 1 if any
answer was a 5xx.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helper beside this script

import httpx
from _serve_procs import (
    STORES,
    Memory,
    Serve,
    emit,
    median,
    note,
    scratch_store,
    serving,
)

INPUT_BYTES = 900_000


def _arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--store", choices=STORES, default="sqlite")
    add("--short", action="store_true", help="a quick run (under a minute)")
    add("--parts", default="status,queue,slow", help="which parts, comma separated")
    add("--inputs", type=int, default=100, help="status: the inputs of 900 KB queued")
    add("--seconds", type=float, default=None, help="queue: seconds of load (60; short: 10)")
    add("--clients", type=int, default=50, help="queue: clients sending at once")
    add("--sessions", type=int, default=3, help="queue: sessions they send to")
    add("--max-waiting", type=int, default=None, help="queue: serve's --max-waiting")
    add("--connections", type=int, default=200, help="slow: slow connections of each kind")
    add("--head-timeout", type=float, default=None, help="slow: serve's (10; short: 2)")
    add("--body-timeout", type=float, default=None, help="slow: serve's (30; short: 2)")
    args = parser.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    if unknown := set(args.parts) - {"status", "queue", "slow"}:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    if args.seconds is None:
        args.seconds = 10.0 if args.short else 60.0
    if args.max_waiting is None:
        args.max_waiting = 200 if args.short else 1000
    if args.head_timeout is None:
        args.head_timeout = 2.0 if args.short else 10.0
    if args.body_timeout is None:
        args.body_timeout = 2.0 if args.short else 30.0
    return args


def _memory(before: Memory, server: Serve) -> dict[str, float]:
    after = server.memory()
    return {
        "rss_before_mb": before.rss_mb,
        "rss_peak_mb": after.peak_mb,
        "rss_after_mb": after.rss_mb,
    }


async def _running(http: httpx.AsyncClient, sid: str) -> None:
    """Until the session's turn runs its tool."""
    for _ in range(1200):
        answer = await http.get(f"/v1/sessions/{sid}")
        if answer.status_code == 200:
            turn = answer.json()["turn"]
            if turn is not None and turn["state"] == "running" and turn["steps"] >= 1:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"the turn of {sid} never ran")


# -- status: a queue of 90 MB -------------------------------------------------------------


async def _post(http: httpx.AsyncClient, sid: str, text: str, codes: Counter[int]) -> None:
    codes[(await http.post(f"/v1/sessions/{sid}/messages", json={"text": text})).status_code] += 1


async def _pages(http: httpx.AsyncClient, sid: str, codes: Counter[int]) -> tuple[list[int], int]:
    """Every waiting input of ``sid``, page by page: the pages' bytes, the inputs paged."""
    sizes, paged, after = [], 0, 0
    while True:
        page = await http.get(
            f"/v1/sessions/{sid}/inputs", params={"state": "waiting", "after": after}
        )
        codes[page.status_code] += 1
        sizes.append(len(page.content))
        body = page.json()
        paged += len(body["inputs"])
        if body["next"] is None:
            return sizes, paged
        after = body["next"]


async def status_part(args: argparse.Namespace, scratch_dir: Path) -> dict[str, Any]:
    """100 inputs of 900 KB behind a turn that never ends: the status and the pages."""
    codes: Counter[int] = Counter()
    async with (
        scratch_store(args.store, scratch_dir) as scratch,
        serving(scratch, scratch_dir, tag="status") as server,
        httpx.AsyncClient(base_url=server.url, timeout=120) as http,
    ):
        before = server.memory()
        await _post(http, "big", "start", codes)
        await _running(http, "big")
        started = time.monotonic()
        for n in range(args.inputs):
            await _post(
                http,
                "big",
                (f"input {n} " + "abcdefghij" * (INPUT_BYTES // 10))[:INPUT_BYTES],
                codes,
            )
        sent = time.monotonic() - started
        note(f"status: {args.inputs} inputs of {INPUT_BYTES:,} bytes sent in {sent:.1f} s")
        status = await http.get("/v1/sessions/big")
        codes[status.status_code] += 1
        body = status.json()
        sizes, paged = await _pages(http, "big", codes)
        figures = {
            "inputs": args.inputs,
            "input_bytes": INPUT_BYTES,
            "send_seconds": round(sent, 2),
            "status_bytes": len(status.content),
            "status_waiting_listed": len(body["waiting"]),
            "status_waiting_total": body["waiting_total"],
            "pages": len(sizes),
            "paged_inputs": paged,
            "largest_page_bytes": max(sizes),
            "largest_answer_bytes": max([*sizes, len(status.content)]),
            **_memory(before, server),
            "answers": dict(sorted(codes.items())),
        }
    note(f"status: {figures}")
    return figures


# -- queue: 50 clients as fast as they can ------------------------------------------------


async def _client(
    http: httpx.AsyncClient, sessions: list[str], until: float, tally: Counter[str]
) -> None:
    while time.monotonic() < until:
        sid = random.choice(sessions)
        try:
            answer = await http.post(f"/v1/sessions/{sid}/messages", json={"text": "more work"})
        except httpx.HTTPError as exc:
            tally[f"error {type(exc).__name__}"] += 1
            continue
        if answer.status_code == 429:
            tally[f"429 {answer.json().get('code')}"] += 1
            await asyncio.sleep(0)
        else:
            tally[str(answer.status_code)] += 1


async def _watch_queue(
    http: httpx.AsyncClient, sessions: list[str], until: float, seen: dict[str, int]
) -> None:
    while time.monotonic() < until:
        for sid in sessions:
            with contextlib.suppress(httpx.HTTPError):
                answer = await http.get(f"/v1/sessions/{sid}")
                if answer.status_code == 200:
                    seen[sid] = max(seen.get(sid, 0), answer.json()["waiting_total"])
        await asyncio.sleep(0.5)


async def queue_part(args: argparse.Namespace, scratch_dir: Path) -> dict[str, Any]:
    """``--clients`` senders for ``--seconds`` into ``--sessions`` sessions."""
    sessions = [f"q{n}" for n in range(args.sessions)]
    flags = ("--max-waiting", str(args.max_waiting))
    limits = httpx.Limits(
        max_connections=args.clients + 5, max_keepalive_connections=args.clients + 5
    )
    async with (
        scratch_store(args.store, scratch_dir) as scratch,
        serving(scratch, scratch_dir, *flags, tag="queue") as server,
        httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as http,
    ):
        before = server.memory()
        for sid in sessions:
            await http.post(f"/v1/sessions/{sid}/messages", json={"text": "start"})
        for sid in sessions:
            await _running(http, sid)
        await asyncio.sleep(2.1)  # the tenant's burst refilled after the starts
        tally: Counter[str] = Counter()
        seen: dict[str, int] = {}
        started = time.monotonic()
        until = started + args.seconds
        await asyncio.gather(
            *(_client(http, sessions, until, tally) for _ in range(args.clients)),
            _watch_queue(http, sessions, until, seen),
        )
        spent = time.monotonic() - started
        final = [
            (await http.get(f"/v1/sessions/{sid}")).json()["waiting_total"] for sid in sessions
        ]
        figures = {
            "clients": args.clients,
            "sessions": args.sessions,
            "seconds": round(spent, 1),
            "max_waiting": args.max_waiting,
            "accepted_202": tally["202"],
            "rate_limited_429": tally["429 rate_limited"],
            "queue_full_429": tally["429 queue_full"],
            "server_errors": sum(n for k, n in tally.items() if k.startswith("5")),
            "requests_per_second": round(sum(tally.values()) / spent),
            "most_waiting_seen": max([*seen.values(), *final]),
            "waiting_at_end": sum(final),
            **_memory(before, server),
            "answers": dict(sorted(tally.items())),
        }
    note(f"queue: {figures}")
    return figures


# -- slow clients -------------------------------------------------------------------------


async def _held(host: str, port: int, sending: bytes, closed: list[float]) -> None:
    """Send ``sending``, then nothing; note when the server closes the connection."""
    opened = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(sending)
        await writer.drain()
        while await reader.read(65536):
            pass
        closed.append(time.monotonic() - opened)
    except OSError:
        closed.append(time.monotonic() - opened)
    finally:
        writer.close()


async def _stalled(host: str, port: int, n: int, limit: float) -> tuple[str, float]:
    """A POST whose body stops half way: the answer's status line, and when it came."""
    body = b'{"text": "this body never ends ' + b"x" * 40
    head = (
        f"POST /v1/sessions/slow{n}/messages HTTP/1.1\r\nHost: bounds\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body) * 2}\r\n\r\n"
    ).encode()
    opened = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head + body)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), limit)
        status = line.decode(errors="replace").split(" ")[1] if line else "closed"
    except TimeoutError:
        status = "no answer"
    except (OSError, IndexError):
        status = "closed"
    finally:
        writer.close()
    return status, time.monotonic() - opened


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


async def _heads(args: argparse.Namespace, server: Serve) -> dict[str, Any]:
    half = b"POST /v1/sessions/s/messages HTTP/1.1\r\nHost: bounds\r\nContent-"
    closed: list[float] = []
    tasks = [
        asyncio.create_task(_held("127.0.0.1", server.port, half, closed))
        for _ in range(args.connections)
    ]
    await asyncio.sleep(0.5)
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        began = time.monotonic()
        plain = (await http.get("/healthz")).status_code
        plain_ms = (time.monotonic() - began) * 1000
    await asyncio.sleep(args.head_timeout + 2.0 - 0.5)
    still_open = sum(not t.done() for t in tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "half_heads": args.connections,
        "head_timeout": args.head_timeout,
        "heads_open_after_timeout_and_2s": still_open,
        "heads_closed_median_s": _rounded(median(closed)),
        "plain_request_meanwhile": plain,
        "plain_request_meanwhile_ms": round(plain_ms, 1),
    }


async def slow_part(args: argparse.Namespace, scratch_dir: Path) -> dict[str, Any]:
    """Half heads, then stalled bodies, against one serve."""
    flags = ("--head-timeout", str(args.head_timeout), "--body-timeout", str(args.body_timeout))
    async with (
        scratch_store(args.store, scratch_dir) as scratch,
        serving(scratch, scratch_dir, *flags, tag="slow") as server,
    ):
        before = server.memory()
        heads = await _heads(args, server)
        limit = args.body_timeout + 15
        answers = await asyncio.gather(
            *(_stalled("127.0.0.1", server.port, n, limit) for n in range(args.connections))
        )
        statuses = Counter(status for status, _ in answers)
        figures = {
            **heads,
            "stalled_bodies": args.connections,
            "body_timeout": args.body_timeout,
            "stalled_408": statuses["408"],
            "stalled_answered_median_s": _rounded(median([t for s, t in answers if s == "408"])),
            "stalled_answers": dict(sorted(statuses.items())),
            **_memory(before, server),
        }
    note(f"slow: {figures}")
    return figures


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    parts = {"status": status_part, "queue": queue_part, "slow": slow_part}
    figures: dict[str, Any] = {"store": args.store, "short": args.short}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="steerable-bounds-") as scratch:
        for name in args.parts:
            figures[name] = await parts[name](args, Path(scratch))
    figures["run_seconds"] = round(time.monotonic() - started, 1)
    figures["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return figures


def _server_errors(figures: dict[str, Any]) -> int:
    """The 5xx answers of every part."""
    status = figures.get("status", {}).get("answers", {})
    slow = figures.get("slow", {}).get("stalled_answers", {})
    errors = figures.get("queue", {}).get("server_errors", 0)
    errors += sum(n for code, n in status.items() if code >= 500)
    errors += sum(n for code, n in slow.items() if code.startswith("5"))
    return int(errors)


def main(argv: list[str] | None = None) -> int:
    """Run the parts asked for; print their figures as one JSON line."""
    args = _arguments(argv)
    figures = asyncio.run(_main(args))
    figures["server_errors"] = _server_errors(figures)
    emit(figures)
    return 1 if figures["server_errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
