"""The service's documents in MongoDB: their fields, and the views built from them.

Collections made by migration step 3, fields added by step 4:

- ``steerable_service``, one per session, ``_id`` the session: ``ep`` the epoch, ``h`` the
  holder (None), ``ph`` the holder before the last claim (written by every claim in the
  stage that writes ``h``, so a takeover's answer names it with no read of its own; absent
  before issue 21 and read nowhere else: no step), ``x`` the lease's expiry in
  milliseconds since the Unix epoch on the server's clock (0 when nobody holds it), ``run``
  the running turn (None), ``sr`` whether its stop was asked, counters ``seq`` (inputs),
  ``ev`` (events), ``tn`` (turns claimed), ``q`` (inputs waiting to be turns), ``wt``
  (inputs waiting, offered or not), ``w`` (work: a running turn or ``q`` > 0), ``now`` (the
  server's clock at the last write that appended an event), ``rw`` (cuts, deletes and forks
  into it: :mod:`._rewrite`, :mod:`._fork`), ``mk`` the transcript's mark (a random id,
  its own from the document's making, new at every cut, delete, replace and fork into it,
  kept by appends; given to the documents of before by step 6), ``md`` the session's
  metadata (JSON text; absent: none). The index ``(w, x)`` lets a claim that names no
  session look at sessions with work and no live lease; ``(h, sr)`` is the stop poll's.
- ``steerable_inputs``, ``_id {s, i}`` (so one id is one input, however many replicas race
  to write it): ``n`` seq, ``kd`` kind, ``tx`` the text as JSON text (NUL and any unicode
  round-trip), ``of``/``ah`` the first answer, ``st`` state, ``t`` turn, ``sp`` step, ``at``
  its arrival (milliseconds, server clock), ``md`` its metadata (JSON text; absent: none),
  ``tc`` its trace context (JSON text; absent: none, as on every input written before
  issue 21, so no step converts them). Indexes ``(s, n)``, ``(s, st, t, n)`` (the queue's
  head, a turn's offered steers) and ``(s, st, n)`` (the waiting inputs in order, whatever
  they were offered to).
- ``steerable_turns``, ``_id {s, i}``: ``o`` claim order, ``n`` its prompt's seq,
  ``start``, ``cap``, ``st``, ``ep``, ``steps``, ``tk`` steers taken, ``of`` offered,
  ``stop``, ``end``, ``tx``/``er`` the outcome's text and error (JSON text), ``us`` its usage
  (JSON text), ``sa``/``ea`` the times of its first claim and of its end (milliseconds).
- ``steerable_events``, ``_id {s, n}``: ``k`` kind, ``t`` turn, ``d`` data (JSON text),
  ``at`` milliseconds on the server's clock, and ``hint`` on the events that make a hint.

A message entry of the core's layout (:mod:`._layout`) carries ``a``, the server's clock
when it was stored, in milliseconds (absent on entries stored before step 4).

Counters and the waiting inputs: an input offered to a turn points at the one turn that
can take steers, the running turn or, when none runs, the head of the queue; so when no
turn runs, ``wt - q`` counts the steers offered to the head, and while one runs, those
offered to it. The writes use that to skip reads that would find nothing.
"""

from __future__ import annotations

import json
from typing import Any, Final

from steerable.messages import new_id
from steerable.service_store import Input, InputView, TurnView

Doc = dict[str, Any]

NOW: Final[Any] = {"$toLong": "$$NOW"}
"""The server's clock, in milliseconds, in a pipeline update."""

NEW_SESSION: Final[Doc] = {
    "ep": 0,
    "h": None,
    "x": 0,
    "run": None,
    "sr": False,
    "seq": 0,
    "ev": 0,
    "tn": 0,
    "q": 0,
    "wt": 0,
    "w": False,
    "now": 0,
}
"""A session's service document before its first write, but its mark
(:func:`new_session`)."""


def new_session() -> Doc:
    """A new service document's fields: :data:`NEW_SESSION` and a mark of its own."""
    return NEW_SESSION | {"mk": new_id()}


def key(session: str, name: str) -> Doc:
    """The ``_id`` of an input or a turn of ``session``."""
    return {"s": session, "i": name}


def metadata_of(doc: Doc) -> dict[str, Any]:
    """The metadata kept in ``doc``'s ``md`` (``{}`` when none)."""
    text = doc.get("md")
    found: dict[str, Any] = json.loads(text) if text else {}
    return found


def trace_of(doc: Doc) -> dict[str, str]:
    """The trace context kept in an input document's ``tc`` (``{}`` when none)."""
    text = doc.get("tc")
    found: dict[str, str] = json.loads(text) if text else {}
    return found


def input_of(doc: Doc) -> Input:
    """The :class:`Input` an input document records."""
    return Input(doc["kd"], json.loads(doc["tx"]), doc["i"], metadata_of(doc), trace_of(doc))


def input_view(doc: Doc) -> InputView:
    """The view of an input document (``at`` 0.0 for an input stored before step 4)."""
    return InputView(
        doc["i"],
        doc["kd"],
        json.loads(doc["tx"]),
        int(doc["n"]),
        doc["st"],
        doc["t"],
        doc["sp"],
        at=int(doc.get("at", 0)) / 1000,
        metadata=metadata_of(doc),
        trace=trace_of(doc),
    )


def _seconds(milliseconds: Any) -> float | None:
    return int(milliseconds) / 1000 if milliseconds is not None else None


def turn_view(service: Doc | None, doc: Doc) -> TurnView:
    """The view of a turn document; ``service`` gives the lease while it runs."""
    live = service is not None and service["run"] == doc["i"]
    holder = service["h"] if live and service else None
    usage = doc.get("us")
    return TurnView(
        doc["i"],
        doc["st"],
        holder=holder,
        epoch=int(doc["ep"]),
        lease_expires_at=int(service["x"]) / 1000 if service and holder else None,
        steps=int(doc["steps"]),
        steers_taken=int(doc["tk"]),
        stop_requested=bool(doc["stop"]),
        start=int(doc["start"]),
        end=doc["end"],
        text=json.loads(doc["tx"]),
        error=json.loads(doc["er"]) if doc["er"] is not None else None,
        seq=int(doc.get("n", 0)),
        started_at=_seconds(doc.get("sa")),
        ended_at=_seconds(doc.get("ea")),
        usage=json.loads(usage) if usage else {},
    )


def new_input(
    session: str, input: Input, *, seq: int, offered: str | None, ahead: int, at: int
) -> Doc:
    """The document of ``input``, waiting, recorded at ``at`` (server milliseconds)."""
    doc: Doc = {"_id": key(session, input.id), "s": session, "i": input.id, "n": seq, "at": at}
    doc |= {"kd": input.kind, "tx": json.dumps(input.text), "of": offered, "ah": ahead}
    doc |= {"st": "waiting", "t": offered, "sp": None}
    if input.metadata:
        doc["md"] = json.dumps(input.metadata)
    if input.trace:
        doc["tc"] = json.dumps(input.trace)
    return doc
