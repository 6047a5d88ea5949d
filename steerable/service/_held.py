"""The transcripts a replica holds of the sessions it served, so a claim reads only what is new.

A turn ends with its whole transcript in the replica's memory: what its claim returned and
what each of its saves stored. Kept here under the mark the claim returned, it lets the next
claim of that session say ``known`` and read only the messages stored since (another
replica's turns, a plain save); a write that cut or changed a message gave the session a
new mark, and the claim then returns the whole transcript (see
:mod:`steerable.service_store`). The replica holds at most ``limit`` messages in all, the
sessions served longest ago let go first; a session whose turn is running is not held here
(its turn holds it).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import OrderedDict

from steerable.messages import Message
from steerable.service_store import Claim, Known

__all__ = ["ANY", "Held"]

ANY = 64
"""How many held sessions a claim of any session names as known."""


class Held:
    """Transcripts by session, with the mark each was read under; least recently kept first."""

    __slots__ = ("_count", "_held", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: OrderedDict[str, tuple[str, list[Message]]] = OrderedDict()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def known(self, session: str | None) -> dict[str, Known]:
        """What a claim of ``session`` may say it knows; of any session (None): the
        ``ANY`` sessions kept last, so the claim's arguments stay small."""
        if session is not None:
            held = self._held.get(session)
            return {} if held is None else {session: Known(len(held[1]), held[0])}
        last = itertools.islice(reversed(self._held.items()), ANY)
        return {name: Known(len(messages), mark) for name, (mark, messages) in last}

    def whole(self, claim: Claim) -> Claim | None:
        """``claim`` with the whole transcript: the held messages it left out, then its own
        (None if it left out messages not held here: read the transcript then).

        The session is no longer held: its turn holds it now (:meth:`keep` at its end)."""
        held = self._forget(claim.lease.session)
        if not claim.known:
            return claim
        if held is None or held[0] != claim.mark or len(held[1]) < claim.known:
            return None
        messages = held[1][: claim.known] + claim.messages
        return dataclasses.replace(claim, messages=messages, known=0)

    def keep(self, session: str, mark: str, messages: list[Message]) -> None:
        """Hold ``messages``, the session's whole stored transcript under ``mark``."""
        self._forget(session)
        if not mark or not messages or len(messages) > self.limit:
            return
        self._held[session] = (mark, messages)
        self._count += len(messages)
        while self._count > self.limit:
            _, (_, dropped) = self._held.popitem(last=False)
            self._count -= len(dropped)

    def _forget(self, session: str) -> tuple[str, list[Message]] | None:
        held = self._held.pop(session, None)
        if held is not None:
            self._count -= len(held[1])
        return held
