"""The first step a Postgres claim makes with a new turn (``claim(first=True)``).

:data:`FIRST` holds the pieces :mod:`._service` formats into its claim statement, so the
claim and the turn's first step are one statement (one round trip, one atomic step, fenced
by the same lock): the prompt's message stored at the turn's start, then up to ``cap`` steers
offered to the turn taken after it, as ``_STEP`` would take them right after the claim.

Every CTE of one statement reads the snapshot taken when it starts, so none of them sees
another's writes: the step is computed from that snapshot, which is the state the claim
leaves but for the claim's own writes. The transcript's length is the claim's ``stored``,
the steers offered to the new turn are those waiting with ``turn`` = the prompt's id (the
turn's row is inserted already counting the step: ``steps`` 1, ``steers_taken`` the steers
taken), and the prompt's message is its input's body (kept as the steered message a steer
becomes) with the ``steered`` key cut out of the codec's fixed prefix, so the stored text is
byte for byte ``codec.encode(prompt.message(steered=False))``. A body that does not start
with that prefix (none that this codec wrote) loses the key through ``jsonb``, which
decodes to the same message.

No step when the prompt's id is a message of the transcript already (``first`` is empty and
so is every CTE after it): the turn is claimed, and its own first save is refused as ever.
A message a plain save committed after the snapshot collides on a key of the transcript:
the statement fails whole, and the claim runs it again on a fresh snapshot.
"""

from __future__ import annotations

from typing import Final

from steerable import codec
from steerable.messages import Message

__all__ = ["FIRST", "NO_FIRST"]


def _prefix(*, steered: bool) -> str:
    """The text a user message's body starts with, up to its parts, as an SQL literal."""
    text = codec.encode(Message("user", (), steered=steered)).removesuffix("[]}")
    return "'" + text.replace("'", "''") + "'"


_STEERED: Final = _prefix(steered=True)
_PLAIN: Final = _prefix(steered=False)

_PROMPT_BODY: Final = f"""CASE WHEN starts_with(first.body, {_STEERED})
        THEN {_PLAIN} || substr(first.body, length({_STEERED}) + 1)
        ELSE (first.body::jsonb - 'steered')::text END"""

# After `skip` (`prompt`, `stored` and `fresh` known): the step's CTEs.
_CTES: Final = f""", first AS (
    SELECT fresh.session, prompt.id, prompt.body, stored.n FROM fresh, prompt, stored
    WHERE NOT EXISTS (
        SELECT FROM steerable_messages m WHERE m.session = fresh.session AND m.id = prompt.id
    )
), offered AS (
    SELECT i.seq, i.id, i.body FROM first JOIN steerable_inputs i
        ON i.session = first.session AND i.state = 'waiting' AND i.turn = first.id
    ORDER BY i.seq LIMIT greatest(0, $3::bigint)
), took AS (
    UPDATE steerable_inputs i SET state = 'taken', step = 1
    FROM first WHERE i.session = first.session AND i.seq IN (SELECT seq FROM offered)
), recorded AS (
    SELECT o.seq, o.id, o.body, row_number() OVER (ORDER BY o.seq) AS k FROM first, offered o
    WHERE NOT EXISTS (
        SELECT FROM steerable_messages m WHERE m.session = first.session AND m.id = o.id
    )
), written AS (
    INSERT INTO steerable_messages (session, position, id, body)
    SELECT first.session, first.n, first.id, {_PROMPT_BODY} FROM first
    UNION ALL
    SELECT first.session, first.n + r.k, r.id, r.body FROM first, recorded r
)"""

# The step's events after `turn_started` (k 2), in the step's order: the prompt's message,
# `steers_taken`, the steers' messages, `step`.
_EVENTS: Final = """
    UNION ALL
    SELECT 3, 0, 'message', json_build_object('position', first.n, 'id', first.id,
        'role', 'user'::text, 'steered', false)::text
    FROM first
    UNION ALL
    SELECT 4, 0, 'steers_taken', json_build_object(
        'ids', (SELECT json_agg(id ORDER BY seq) FROM offered), 'step', 1)::text
    FROM first WHERE EXISTS (SELECT FROM offered)
    UNION ALL
    SELECT 5, r.k, 'message', json_build_object('position', first.n + r.k, 'id', r.id,
        'role', 'user'::text, 'steered', true)::text
    FROM first, recorded r
    UNION ALL
    SELECT 6, 0, 'step', json_build_object(
        'step', 1, 'length', first.n + 1 + (SELECT count(*) FROM recorded))::text
    FROM first"""

FIRST: Final = {
    "first": _CTES,
    "steps": "(SELECT count(*) FROM first)",
    "steers": "(SELECT count(*) FROM offered)",
    "events": _EVENTS,
    "taken": """, EXISTS (SELECT FROM first) AS stepped,
    (SELECT array_agg(id ORDER BY seq) FROM recorded) AS taken_ids,
    (SELECT array_agg(body ORDER BY seq) FROM recorded) AS taken_bodies""",
}
"""The claim statement's slots for a claim that makes a new turn's first step."""

NO_FIRST: Final = {"first": "", "steps": "0", "steers": "0", "events": "", "taken": ""}
"""The same slots for a claim alone: no step's CTE, and the writes of before ``first``."""
