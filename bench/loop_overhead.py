"""Loop overhead per step: steerable's ReAct loop, and its peers', with a scripted model.

Every run is the same ReAct conversation: a prompt, ``--steps`` replies that each call a
trivial async tool (``echo(x) -> "ok"``, a few bytes each way), then a final answer. A
step is one model request, so a run has ``steps + 1``; the figure is the run's wall time
over that. Nothing waits on a network or a real model: what is left is the loop itself,
its tools machinery and, with a session, its persistence.

Each system runs three ways: without persistence, with an in-memory session or
checkpointer, and with one in a SQLite file (WAL, ``synchronous=NORMAL`` for all):

- steerable: ``Runner.run`` with ``ScriptedModel``; no session / ``MemoryStore`` /
  ``SQLiteStore``; the ``Spec`` built once, a new session per run.
- LangGraph: a ReAct ``StateGraph`` (scripted model node, tool node, ``add_messages``),
  compiled once, without ``bench.persist``'s byte counting in its model node; no
  checkpointer / ``InMemorySaver`` / ``AsyncSqliteSaver``; ``durability="sync"``.
- OpenAI Agents SDK: ``Runner.run`` with ``agents.testing.ScriptedModel`` and a
  ``function_tool``, tracing off; no session / ``SQLiteSession(":memory:")`` /
  ``SQLiteSession(file)``.

Repetitions are interleaved (every configuration once per repetition, in a rotating
order) after one warm-up run each; figures are medians. Run: ``python -m bench.loop_overhead``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench._common import machine, median, micros, ratio, table
from steerable import Runner, ScriptedModel, Spec, Store, open_session
from steerable.models.scripted import call
from steerable.stores.memory import MemoryStore
from steerable.stores.sqlite import SQLiteStore

NONE, MEMORY, SQLITE = "none", "memory", "SQLite file"


async def echo(x: int) -> str:
    """Answer ok."""
    return "ok"


@dataclass
class Config:
    """One system with one kind of persistence: ``run(steps)`` does one whole run."""

    system: str
    persistence: str
    run: Callable[[int], Awaitable[None]]
    seconds: list[float] = field(default_factory=list)


def steerable_run(store: Store | None) -> Callable[[int], Awaitable[None]]:
    """A steerable run of ``steps`` tool steps, on a new session of ``store`` (if any).

    The spec (its tools' schemas) is built once, outside the timed part, as LangGraph's
    graph and the Agents SDK's tool are; a run only adds its new session, as the peers
    add their thread or session.
    """
    specs: dict[int, Spec] = {}

    async def run(steps: int) -> None:
        spec = specs.get(steps)
        if spec is None:  # the first run is the untimed warm-up
            spec = specs[steps] = Spec(tools=[echo], max_steps=steps + 1)
        if store is not None:
            spec = dataclasses.replace(spec, session=open_session(uuid.uuid4().hex, store))
        script = [call("echo", '{"x": 1}') for _ in range(steps)]
        result = await Runner.run(spec, "go", ScriptedModel([*script, "done"]))
        assert result.reason == "completed", result.error

    return run


def langgraph_run(checkpointer: Any) -> Callable[[int], Awaitable[None]]:
    """A LangGraph ReAct run of ``steps`` tool steps, on a new thread of ``checkpointer``."""
    from langchain_core.messages import AIMessage, HumanMessage

    from bench._langgraph import ReActGraph

    graph = ReActGraph(checkpointer, lambda call: "ok", marks=False)

    async def run(steps: int) -> None:
        graph.script = iter(
            [
                *(
                    AIMessage("", tool_calls=[{"name": "echo", "args": {"x": 1}, "id": f"c{i}"}])
                    for i in range(steps)
                ),
                AIMessage("done"),
            ]
        )
        thread = uuid.uuid4().hex if checkpointer is not None else None
        state = await graph.run([HumanMessage("go")], thread, steps)
        assert state["messages"][-1].content == "done"

    return run


def agents_run(session: Callable[[], Any] | None) -> Callable[[int], Awaitable[None]]:
    """An Agents SDK run of ``steps`` tool steps, on a new session (if any)."""
    from agents import Agent, RunConfig, function_tool
    from agents import Runner as AgentsRunner
    from agents.testing import ScriptedModel as AgentsScriptedModel
    from agents.testing import assistant_message, function_call

    tool = function_tool(echo)

    async def run(steps: int) -> None:
        replies = [[function_call("echo", '{"x": 1}', call_id=f"c{i}")] for i in range(steps)]
        model = AgentsScriptedModel([*replies, [assistant_message("done")]])
        agent = Agent(name="bench", model=model, tools=[tool])
        result = await AgentsRunner.run(
            agent,
            "go",
            max_turns=steps + 2,
            session=session() if session is not None else None,
            run_config=RunConfig(tracing_disabled=True),
        )
        assert result.final_output == "done"

    return run


@contextlib.asynccontextmanager
async def configs(root: Path) -> AsyncIterator[tuple[list[Config], list[str]]]:
    """Every configuration that can run here, and notes on the ones that cannot."""
    notes: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        sqlite = await stack.enter_async_context(SQLiteStore(root / "steerable.db"))
        found = [
            Config("steerable", NONE, steerable_run(None)),
            Config("steerable", MEMORY, steerable_run(MemoryStore())),
            Config("steerable", SQLITE, steerable_run(sqlite)),
        ]
        try:
            import aiosqlite
            from langgraph.checkpoint.memory import InMemorySaver
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            conn = await aiosqlite.connect(root / "langgraph.db")
            stack.push_async_callback(conn.close)
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute("PRAGMA synchronous = NORMAL")
            found += [
                Config("LangGraph", NONE, langgraph_run(None)),
                Config("LangGraph", MEMORY, langgraph_run(InMemorySaver())),
                Config("LangGraph", SQLITE, langgraph_run(AsyncSqliteSaver(conn))),
            ]
        except ImportError as exc:
            notes.append(f"LangGraph skipped: {exc} (pip install -e '.[bench]')")
        try:
            from agents import SQLiteSession

            def file_session() -> Any:
                session = SQLiteSession(uuid.uuid4().hex, root / "agents.db")
                configure = session._configure_connection

                def configured(conn: Any) -> None:  # the same durability as the others
                    configure(conn)
                    conn.execute("PRAGMA synchronous = NORMAL")

                vars(session)["_configure_connection"] = configured
                return session

            found += [
                Config("Agents SDK", NONE, agents_run(None)),
                Config("Agents SDK", MEMORY, agents_run(lambda: SQLiteSession(uuid.uuid4().hex))),
                Config("Agents SDK", SQLITE, agents_run(file_session)),
            ]
        except ImportError as exc:
            notes.append(f"Agents SDK skipped: {exc} (pip install -e '.[bench]')")
        yield found, notes


async def measure(found: list[Config], steps: int, reps: int) -> None:
    """One warm-up run of each, then ``reps`` interleaved, rotating repetitions."""
    for config in found:
        await config.run(steps)
    for rep in range(reps):
        shift = rep % len(found)
        for config in found[shift:] + found[:shift]:
            start = time.perf_counter()
            await config.run(steps)
            config.seconds.append((time.perf_counter() - start) / (steps + 1))


def report(found: list[Config]) -> str:
    """µs per step, the cost a session adds, and ratios."""
    per_step = {(c.system, c.persistence): median(c.seconds) for c in found}
    ours = per_step[("steerable", NONE)]
    rows = []
    for config in found:
        t = per_step[(config.system, config.persistence)]
        bare = per_step.get((config.system, NONE), float("nan"))
        added = micros(t - bare) if config.persistence != NONE else "-"
        rows.append(
            [config.system, config.persistence, micros(t), added, ratio(t, bare), ratio(t, ours)]
        )
    headers = [
        "system",
        "persistence",
        "µs/step",
        "+µs vs none",
        "vs own none",
        "vs steerable none",
    ]
    return table(headers, rows)


def arguments(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=50, help="tool steps per run")
    parser.add_argument("--reps", type=int, default=7, help="interleaved repetitions")
    return parser.parse_args(argv)


async def main(argv: Sequence[str] | None = None) -> None:
    args = arguments(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as root:
        async with configs(Path(root)) as (found, notes):
            await measure(found, args.steps, args.reps)
    print("# Loop overhead per step\n")
    print(machine([f"- {args.reps} repetitions of a run of {args.steps} tool steps + answer"]))
    print()
    print(report(found))
    for note in notes:
        print(f"\n- {note}")
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
