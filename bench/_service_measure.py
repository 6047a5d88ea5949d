"""The service benchmarks' measurements: wake-ups, steers at a step, and the calls of a turn.

Each function takes the :class:`~bench._service_stores.Target` objects and returns samples;
``bench.service`` interleaves the configurations, reports medians and ratios. Throughput
over one and three replicas is in ``bench._service_replicas``.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from bench._service_counting import Counting, counting, notifies
from bench._service_probe import Probe, TimedWork, agent
from bench._service_stores import Target
from steerable import Runner, Session, Spec
from steerable.messages import new_id
from steerable.service import Service
from steerable.service.demo import DemoModel, work_tool

TIMEOUT = 30.0
SETTLE = 0.2  # after serving starts: the listener is up, the first claim made


def _sid(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:10]}"


# -- 1. idle wake-up ----------------------------------------------------------------------------


@dataclass
class Wake:
    """One store, with hints or polling, at one poll interval: send -> first request."""

    store: str
    hints: bool
    poll: float
    service: Service
    probe: Probe
    seconds: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)  # of which ``send`` itself
    failed: str | None = None


async def wake_configs(targets: list[Target], polls: tuple[float, ...]) -> list[Wake]:
    """Every store at every poll interval; a store that notifies also without its hints."""
    found = []
    for target in targets:
        inner = await target.open()
        for hints in (True, False) if notifies(inner) else (False,):
            for poll in polls:
                probe = Probe()
                store = counting(inner, hints=hints)
                service = Service(
                    store, agent(probe, TimedWork(0.0), calls=0), poll=poll, replica="wake"
                )
                found.append(Wake(target.name, hints, poll, service, probe))
    return found


async def wake_round(config: Wake, samples: int) -> None:
    """``samples`` wake-ups of idle sessions, each at a random phase of the replica's poll."""
    async with config.service.serving():
        await asyncio.sleep(SETTLE)
        for _ in range(samples):
            # The replica went idle when the previous turn ended; a random pause puts the
            # send at a uniform phase of its poll, as a user's send would be.
            await asyncio.sleep(random.uniform(0, config.poll))
            session, prompt = _sid("wake"), new_id()
            start = time.perf_counter()
            await config.service.send(session, "wake up", id=prompt)
            sent = time.perf_counter()
            # a replica that sees the send finds it within one poll: waiting longer is a fault
            carried = await config.probe.carried(prompt, within=10 + 5 * config.poll)
            config.seconds.append(carried - start)
            config.sent.append(sent - start)
            await config.service.wait(session, prompt, seconds=TIMEOUT)


# -- 2. a steer at a step -----------------------------------------------------------------------


@dataclass
class SteerAtStep:
    """One store: a steer while the tool runs, until the request that carries it.

    ``to_request`` is from the ``steer`` call; ``step`` from the tool's end to that request
    (the step: the result saved, the steer taken, the request built); ``plain_step`` the
    same for a turn nobody steered.
    """

    store: str
    service: Service
    probe: Probe
    work: TimedWork
    to_request: list[float] = field(default_factory=list)
    step: list[float] = field(default_factory=list)
    plain_step: list[float] = field(default_factory=list)
    failed: str | None = None


async def steer_configs(targets: list[Target], tool: float) -> list[SteerAtStep]:
    """Every store, as it is (with its hints if it has them), a tool of ``tool`` seconds."""
    found = []
    for target in targets:
        probe, work = Probe(), TimedWork(tool)
        store = counting(await target.open())
        service = Service(store, agent(probe, work, calls=1), poll=0.1, replica="steer")
        found.append(SteerAtStep(target.name, service, probe, work))
    return found


async def steer_round(config: SteerAtStep, samples: int) -> None:
    """``samples`` steered turns and as many plain ones, alternating."""
    service, probe, work = config.service, config.probe, config.work
    async with service.serving():
        await asyncio.sleep(SETTLE)
        for _ in range(samples):
            for steered in (True, False):
                session, prompt = _sid("steer"), new_id()
                await service.send(session, "plan my week", id=prompt)
                await probe.carried(prompt, within=TIMEOUT)
                await asyncio.sleep(work.seconds / 2)  # the tool is running
                if steered:
                    steer = new_id()
                    start = time.perf_counter()
                    accepted = await service.steer(session, "skip friday", id=steer)
                    assert accepted.turn == prompt, "the steer was not offered to the turn"
                    carried = await probe.carried(steer, within=TIMEOUT)
                    config.to_request.append(carried - start)
                    config.step.append(carried - work.ended[-1])
                done = await service.wait(session, prompt, seconds=TIMEOUT)
                assert done is not None and done.state == "completed", done
                if not steered:
                    config.plain_step.append(probe.requests[prompt][1] - work.ended[-1])


# -- 4. the calls of a turn against a bare run --------------------------------------------------


@dataclass
class TurnCalls:
    """One store: the calls of a bare ``Runner.run`` and of one service turn, by verb."""

    store: str
    hints: bool
    bare: Counter[str] = field(default_factory=Counter)
    turn: Counter[str] = field(default_factory=Counter)
    turn_seconds: float = 0.0  # from the turn's first model request to its last


async def turn_calls(
    target: Target, *, calls: int, tool: float, lease: float, renew_every: float
) -> TurnCalls:
    """One unsteered turn of ``calls`` tool calls served, and the same run bare, counted.

    The send is made before the replica starts (through an uncounted store), and the
    replica's poll (5 s) is longer than the turn, so nothing idle is counted: what is left
    is the turn's own calls, plus the replica's look for more work once the turn is claimed
    and once it ends. A first claim that misses the send is caught by the next poll, and
    shows as one more ``claim (none)``.
    """
    inner = await target.open()
    bare = counting(inner)
    spec = Spec(tools=[work_tool(tool)], max_steps=calls + 4, session=Session(_sid("bare"), bare))
    result = await Runner.run(spec, "plan my week", DemoModel(calls=calls))
    assert result.reason == "completed", result.error
    store: Counting = counting(inner)
    front, probe = Service(counting(inner)), Probe()  # its counts are not read
    service = Service(
        store,
        agent(probe, TimedWork(tool), calls=calls),
        poll=5.0,
        lease=lease,
        renew_every=renew_every,
        replica="calls",
    )
    session = _sid("turn")
    accepted = await front.send(session, "plan my week")
    async with service.serving():
        done = await front.wait(session, accepted.id, seconds=TIMEOUT)
        await asyncio.sleep(SETTLE)  # the replica's look for more work after the end
    assert done is not None and done.state == "completed", done
    times = probe.requests[accepted.id]
    return TurnCalls(target.name, notifies(store), bare.calls, store.calls, times[-1] - times[0])
