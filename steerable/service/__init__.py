"""The service: a session as a queue of turns, served by any number of replicas over one store.

::

    from steerable.service import ReActAgent, Service

    service = Service(store, ReActAgent(Spec(tools=[...]), model))
    async with service.serving():  # this process is a replica too
        accepted = await service.send("s1", "plan my week")
        await service.steer("s1", "skip friday")  # -> {id, turn}: offered to the started turn
        done = await service.wait("s1", accepted.id, seconds=60)

See ``docs/service.md`` for the semantics (inputs, turns, leases, fencing, stop) and
:mod:`steerable.service_store` for what each store keeps.
"""

from steerable.errors import Fenced
from steerable.service._observe import LogObserver, Observer, TurnReport
from steerable.service._replica import Counters, LiveSink, Replica
from steerable.service._service import Service
from steerable.service.agent import Agent, ReActAgent, Turn, outcome_of
from steerable.service_store import (
    Accepted,
    Claim,
    Entry,
    Hint,
    Input,
    InputView,
    Lease,
    Notifying,
    Outcome,
    ServiceEvent,
    ServiceStore,
    Status,
    TurnView,
)

__all__ = [
    "Accepted",
    "Agent",
    "Claim",
    "Counters",
    "Entry",
    "Fenced",
    "Hint",
    "Input",
    "InputView",
    "Lease",
    "LiveSink",
    "LogObserver",
    "Notifying",
    "Observer",
    "Outcome",
    "ReActAgent",
    "Replica",
    "Service",
    "ServiceEvent",
    "ServiceStore",
    "Status",
    "Turn",
    "TurnReport",
    "TurnView",
    "outcome_of",
]
