"""The three figures of ``bench.http`` for each system, over its HTTP API.

A *system* is something answering one API at one or more base URLs (three replicas without
nginx: the bench takes them in turn). Times are ``time.time()`` here against the time the
server recorded: for steerable, an event's ``at`` (the database clock: a ``step`` event is
written by the save just before each model request, a ``steers_taken`` event by the one
that takes the steer into the next request); for LangGraph, the fake model's own log line.
Both run on this machine, so the clocks are one.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

END = ("completed", "stopped", "failed", "max_steps")
STRATEGIES = ("reject", "rollback", "interrupt", "enqueue")
LIMIT = 60.0


@dataclass
class Figures:
    """One system's samples: send -> first request, steer -> request, rounds' turns/s."""

    name: str
    wake: list[float] = field(default_factory=list)
    steer: list[float] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    fates: dict[str, list[str]] = field(default_factory=dict)
    carried: dict[str, list[float]] = field(default_factory=dict)
    failed: str | None = None


class Ours:
    """steerable serve at ``urls`` (taken round robin)."""

    def __init__(self, name: str, urls: list[str], client: httpx.AsyncClient) -> None:
        self.figures = Figures(name)
        self._urls = itertools.cycle(urls)
        self._client = client

    def url(self, path: str) -> str:
        """The next replica's URL for ``path``."""
        return next(self._urls) + path

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body``; the answer's JSON (a 4xx/5xx raises)."""
        answer = await self._client.post(self.url(path), json=body)
        answer.raise_for_status()
        found: dict[str, Any] = answer.json()
        return found

    async def event(self, sid: str, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first durable event of ``sid`` that ``wanted`` accepts, read over SSE."""
        path = f"/v1/sessions/{sid}/events?after=0"
        async with self._client.stream("GET", self.url(path), timeout=LIMIT) as stream:
            stream.raise_for_status()
            async for line in stream.aiter_lines():
                if line.startswith("data:"):
                    data: dict[str, Any] = json.loads(line[5:])
                    if "kind" in data and wanted(data):
                        return data
        raise AssertionError(f"{sid}: the event stream ended first")

    async def wake(self) -> None:
        """One send to a new (idle) session, to its turn's first model request."""
        sid = f"wake-{uuid.uuid4().hex[:10]}"
        sent = time.time()
        await self.post(f"/v1/sessions/{sid}/messages", {"text": "hello"})
        step = await self.event(sid, lambda e: e["kind"] == "step")
        self.figures.wake.append(step["at"] - sent)

    async def steer(self, lead: float) -> None:
        """A steer ``lead`` s after the turn's first request, to the request carrying it."""
        sid = f"steer-{uuid.uuid4().hex[:10]}"
        turn = (await self.post(f"/v1/sessions/{sid}/messages", {"text": "first"}))["turn"]
        await self.event(sid, lambda e: e["kind"] == "step")
        await asyncio.sleep(lead)
        sent = time.time()
        steered = await self.post(f"/v1/sessions/{sid}/steers", {"text": "and this"})
        sid_steer = steered["id"]
        taken = await self.event(
            sid, lambda e: e["kind"] == "steers_taken" and sid_steer in e["data"]["ids"]
        )
        self.figures.steer.append(taken["at"] - sent)
        self.figures.carried.setdefault("steer", []).append(taken["at"] - sent)
        view = await self._turn(sid, turn)
        fate = f"taken at step {taken['data']['step']}; the turn {view['state']}"
        if "and this" in (view.get("output") or ""):
            fate += ", its answer heard both"
        self.figures.fates.setdefault("steer", []).append(fate)

    async def _turn(self, sid: str, turn: str) -> dict[str, Any]:
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline:
            path = f"/v1/sessions/{sid}/turns/{turn}?wait=30"
            answer = await self._client.get(self.url(path), timeout=LIMIT)
            answer.raise_for_status()
            view: dict[str, Any] = answer.json()
            if view["state"] in END:
                return view
        raise AssertionError(f"{sid}: turn {turn} did not end in {LIMIT:g} s")

    async def throughput(self, sessions: int, sends: int) -> None:
        """``sessions`` sessions x ``sends`` sends at once; turns/s until all ended."""
        tag = uuid.uuid4().hex[:8]

        async def one(sid: str) -> None:
            last = ""
            for index in range(sends):
                body = {"text": f"job {index}"}
                last = (await self.post(f"/v1/sessions/{sid}/messages", body))["turn"]
            await self._turn(sid, last)

        started = time.perf_counter()
        await asyncio.gather(*(one(f"tp-{tag}-{s}") for s in range(sessions)))
        self.figures.rate.append(sessions * sends / (time.perf_counter() - started))


class LangGraph:
    """LangGraph's Agent Server at ``url``; its fake model logs each request to ``log``."""

    def __init__(self, url: str, log: Path, client: httpx.AsyncClient) -> None:
        self.figures = Figures("LangGraph dev (in-memory), 1 process")
        self._url = url
        self._log = log
        self._client = client

    def requests(self, thread: str) -> list[dict[str, Any]]:
        """The model requests logged for ``thread`` so far, in order."""
        if not self._log.exists():
            return []
        lines = self._log.read_text().splitlines()
        return [r for r in map(json.loads, lines) if r["thread"] == thread]

    async def request(self, thread: str, wanted: Callable[[dict[str, Any]], bool]) -> float:
        """The time of the first request of ``thread`` that ``wanted`` accepts (polled)."""
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline:
            for request in self.requests(thread):
                if wanted(request):
                    at: float = request["at"]
                    return at
            await asyncio.sleep(0.005)
        raise AssertionError(f"{thread}: no such model request in {LIMIT:g} s")

    async def thread(self) -> str:
        """A new thread's id."""
        answer = await self._client.post(self._url + "/threads", json={})
        answer.raise_for_status()
        found: str = answer.json()["thread_id"]
        return found

    async def run(self, thread: str, text: str, strategy: str | None = None) -> httpx.Response:
        """POST a background run of ``text`` on ``thread``."""
        body: dict[str, Any] = {
            "assistant_id": "agent",
            "input": {"messages": [{"role": "user", "content": text}]},
        }
        if strategy is not None:
            body["multitask_strategy"] = strategy
        return await self._client.post(f"{self._url}/threads/{thread}/runs", json=body)

    async def join(self, thread: str, run: str) -> str:
        """Wait for ``run`` to end: its status (``deleted`` if it is gone)."""
        path = f"{self._url}/threads/{thread}/runs/{run}"
        answer = await self._client.get(path + "/join", timeout=LIMIT)
        status = await self._client.get(path)
        if status.status_code == 404:
            return "deleted"
        if answer.status_code >= 400:
            return f"join {answer.status_code}"
        found: str = status.json()["status"]
        return found

    async def wake(self) -> None:
        """One run on a new thread, to its first model request."""
        thread = await self.thread()
        sent = time.time()
        answer = await self.run(thread, "hello")
        answer.raise_for_status()
        self.figures.wake.append(await self.request(thread, lambda r: True) - sent)
        await self.join(thread, answer.json()["run_id"])

    async def steer(self, lead: float, strategy: str) -> None:
        """A second message ``lead`` s after the first run's first request, under ``strategy``."""
        thread = await self.thread()
        first = await self.run(thread, "first")
        first.raise_for_status()
        await self.request(thread, lambda r: True)
        await asyncio.sleep(lead)
        sent = time.time()
        second = await self.run(thread, "and this", strategy)
        fate = f"POST {second.status_code}"
        if second.status_code < 400:
            at = await self.request(thread, lambda r: "and this" in r["heard"])
            if strategy == "interrupt":  # the interrupt strategy is the closest to a steer
                self.figures.steer.append(at - sent)
            self.figures.carried.setdefault(strategy, []).append(at - sent)
            fate += f"; 2nd run {await self.join(thread, second.json()['run_id'])}"
        fate += f"; 1st run {await self.join(thread, first.json()['run_id'])}"
        heard = [r["heard"] for r in self.requests(thread)]
        fate += f"; requests heard {heard}"
        self.figures.fates.setdefault(strategy, []).append(fate)

    async def throughput(self, sessions: int, sends: int) -> None:
        """``sessions`` threads x ``sends`` runs (enqueued) at once; runs/s until all ended."""
        threads = [await self.thread() for _ in range(sessions)]

        async def one(thread: str) -> None:
            last = ""
            for index in range(sends):
                answer = await self.run(thread, f"job {index}", "enqueue")
                answer.raise_for_status()
                last = answer.json()["run_id"]
            status = await self.join(thread, last)
            assert status == "success", f"{thread}: the last run is {status}"

        started = time.perf_counter()
        await asyncio.gather(*(one(t) for t in threads))
        self.figures.rate.append(sessions * sends / (time.perf_counter() - started))
