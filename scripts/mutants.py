"""Durability mutants: small, plausible bugs in the stores, the session, the loop and the
framework integrations.

Each mutant replaces one snippet of one file (or a few that make one bug together) in a
scratch copy of the working tree, runs the tests that guard that promise against the copy,
and counts as *caught* when they fail. A guard is a test file or one test's node id
(``file::test``: the narrowest test of a slow file). A mutant whose snippet is not found
exactly once is an error of this script, not a pass: the code moved and the mutant must be
rewritten. The table goes in docs/testing.md.

    python scripts/mutants.py            # every mutant (several minutes)
    python scripts/mutants.py --list     # names only
    python scripts/mutants.py NAME ...   # only these

Not part of CI (too slow); the servers of ``.ci/run`` must be up for the server stores' mutants.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutant:
    """One bug: in ``path``, ``old`` (found exactly once) becomes ``new``; ``tests`` guard it
    (test files, or node ids ``file::test``). ``more``: further edits of the same file that
    make one bug together, each ``(old, new)`` found exactly once too."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    more: tuple[tuple[str, str], ...] = ()


def _m(name: str, path: str, old: str, new: str, *tests: str) -> Mutant:
    return Mutant(name, path, old, new, tests)


MUTANTS: list[Mutant] = []  # filled below the helpers; see the end of this file


def _scratch() -> Path:
    """A copy of the tracked files of the working tree (uncommitted edits included)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    scratch = Path(tempfile.mkdtemp(prefix="steerable-mutants-"))
    for name in filter(None, listed):
        source = ROOT / name.decode()
        if source.is_file():
            target = scratch / name.decode()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return scratch


def _guarded(test: str, guards: tuple[str, ...]) -> bool:
    """Whether the failed test ``test`` (a node id) is one of ``guards`` or in one of them."""
    return any(test == g or test.startswith((f"{g}::", f"{g}[")) for g in guards)


def _all_guards(mutants: list[Mutant]) -> tuple[str, ...]:
    """Every guard of ``mutants`` once; a node id whose file is a guard too is left out."""
    guards = {t for m in mutants for t in m.tests}
    return tuple(sorted(g for g in guards if "::" not in g or g.split("::")[0] not in guards))


def _pytest(scratch: Path, tests: tuple[str, ...]) -> tuple[int, float, list[str], str]:
    """Run ``tests`` against the copy: exit code, seconds, the tests that failed, last line."""
    env = {**os.environ, "PYTHONPATH": str(scratch), "STEERABLE_REQUIRE_SERVERS": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    started = time.monotonic()
    done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True)
    lines = (done.stdout + done.stderr).splitlines()
    failed = [line.split(" ")[1] for line in lines if line.startswith("FAILED ")]
    return done.returncode, time.monotonic() - started, failed, lines[-1] if lines else ""


def _apply(scratch: Path, mutant: Mutant) -> str:
    path = scratch / mutant.path
    text = path.read_text()
    mutated = text
    for old, new in ((mutant.old, mutant.new), *mutant.more):
        found = mutated.count(old)
        if found != 1:
            raise SystemExit(f"mutant {mutant.name}: a snippet is in {mutant.path} {found} times")
        mutated = mutated.replace(old, new)
    path.write_text(mutated)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only these mutants")
    parser.add_argument("--list", action="store_true", help="print the mutants' names")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:48} {mutant.path}")
        return 0
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        raise SystemExit(f"no mutant named {', '.join(sorted(unknown))}")

    scratch = _scratch()
    try:
        code, seconds, _, last = _pytest(scratch, _all_guards(chosen))
        if code != 0:
            raise SystemExit(f"the unmutated tests fail ({last}); fix them first")
        print(f"unmutated: the guarding tests pass ({seconds:.0f} s)\n")
        print("| mutant | file | caught | by | s |")
        print("| --- | --- | --- | --- | --- |")
        missed = 0
        for mutant in chosen:
            original = _apply(scratch, mutant)
            try:
                code, seconds, failed, last = _pytest(scratch, mutant.tests)
            finally:
                (scratch / mutant.path).write_text(original)
            # caught only by a test of its own failing, not by an error collecting or
            # setting up the tests (a mutant that breaks an import proves nothing)
            own = [t for t in failed if _guarded(t, mutant.tests)]
            missed += not own
            if own:
                mark, by = "yes", f"`{own[0]}`"
            else:
                mark, by = ("**MISSED**", "-") if code == 0 else ("**ERROR**", last)
            print(f"| {mutant.name} | {mutant.path} | {mark} | {by} | {seconds:.0f} |", flush=True)
        print(f"\n{len(chosen) - missed} of {len(chosen)} mutants caught")
        return 1 if missed else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- the loop and its control --------------------------------------------------------------
_LOOP, _CONTROL = "steerable/loop.py", "steerable/_control.py"
_STEERING, _FAILED = "tests/core/test_steering.py", "tests/core/test_failed_saves.py"
MUTANTS += [
    _m(
        "loop-saves-then-takes",
        _LOOP,
        "taken = await session.save(self.transcript, take=room - len(mine))",
        "taken = await session.save(self.transcript)\n"
        "            taken += await session.take_steers(limit=room - len(mine))",
        _FAILED,
        "tests/core/test_crash.py",
    ),
    _m(
        "loop-box-steer-kept-after-failed-save",
        _LOOP,
        "del self.transcript[at:]  # not recorded",
        "pass  # not recorded",
        _FAILED,
    ),
    _m(
        "loop-unsaved-steers-forgotten",
        _LOOP,
        "self._left = (*self._unsaved, *self._control.close())",
        "self._left = tuple(self._control.close())",
        _FAILED,
    ),
    _m(
        "loop-unapplied-not-left-in-store",
        _LOOP,
        "for steer in unapplied:",
        "for steer in ():",
        _STEERING,
        _FAILED,
    ),
    _m(
        "loop-cap-ignores-steers-taken",
        _LOOP,
        "room = self._spec.steers_per_turn - len(self._taken)",
        "room = self._spec.steers_per_turn",
        _STEERING,
    ),
    _m(
        "loop-no-save-at-the-end",
        _LOOP,
        "if stored is None or stored < len(self.transcript):",
        "if False:",
        "tests/core/test_loop.py",
    ),
    _m(
        "loop-result-calls-unanswered-on-failure",
        _LOOP,
        "if self._calls:  # a failure during the tool calls",
        "if False:  # a failure during the tool calls",
        "tests/core/test_ending.py",
        "tests/core/test_loop.py",
    ),
    _m(
        "control-box-forgets-seen-ids",
        _CONTROL,
        "first = self._seen.setdefault(steer.id, steer)",
        "first = steer",
        _STEERING,
    ),
    _m(
        "control-ids-from-the-store-not-seen",
        _CONTROL,
        "for message in messages:\n            if message.steered",
        "for message in ():\n            if message.steered",
        _STEERING,
    ),
    _m(
        "control-stop-swallows-an-outside-cancel",
        _CONTROL,
        "return task.uncancel() == 0",
        "task.uncancel()\n        return True",
        "tests/core/test_ending.py",
        "tests/core/test_loop.py",
    ),
    _m(
        "runner-cancelled-run-never-ends-streams",
        "steerable/runner.py",
        "if self._control.ended is None:",
        "if False:",
        "tests/core/test_ending.py",
    ),
    _m(
        "tools-own-timeout-error-taken-for-the-deadline",
        "steerable/tools.py",
        "if isinstance(exc, TimeoutError) and deadline.expired():",
        "if isinstance(exc, TimeoutError):",
        "tests/core/test_tools.py",
    ),
]

# -- the session ---------------------------------------------------------------------------
_SESSION = "steerable/session.py"
MUTANTS += [
    _m(
        "session-keeps-its-position-after-a-failed-save",
        _SESSION,
        "            self._stored = None\n            raise",
        "            raise",
        "tests/core/test_session.py",
    ),
    _m(
        "session-compares-lengths-only",
        _SESSION,
        "a.id != b.id for a, b in zip(stored, transcript, strict=False)",
        "False for a, b in zip(stored, transcript, strict=False)",
        "tests/core/test_session.py",
        "tests/core/test_loop.py",
    ),
]

# -- memory and SQLite ---------------------------------------------------------------------
_MEMORY, _SQLITE = "steerable/stores/memory.py", "steerable/stores/sqlite.py"
_MEMORY_SUITE, _SQLITE_SUITE = (
    "tests/stores/test_memory_contract.py",
    "tests/stores/test_sqlite_contract.py",
)
MUTANTS += [
    _m(
        "memory-a-save-past-the-end-is-accepted",
        _MEMORY,
        "if at is not None and at != len(state.transcript):",
        "if at is not None and at < len(state.transcript):",
        _MEMORY_SUITE,
    ),
    _m(
        "memory-a-taken-steer-id-is-taken-again",
        _MEMORY,
        "if steer.id not in state.seen:",
        "if steer.id not in state.waiting:",
        _MEMORY_SUITE,
    ),
    _m(
        "memory-a-steer-in-the-transcript-is-recorded-again",
        _MEMORY,
        "if steer_id not in state.ids and steer_id not in ids:",
        "if True:",
        _MEMORY_SUITE,
    ),
    _m(
        "sqlite-a-deferred-write-transaction",
        _SQLITE,
        'db.execute("BEGIN IMMEDIATE")\n    (count,)',
        'db.execute("BEGIN")\n    (count,)',
        _SQLITE_SUITE,
    ),
    _m(
        "sqlite-newest-steer-first",
        _SQLITE,
        "AND taken = 0 ORDER BY seq LIMIT ?",
        "AND taken = 0 ORDER BY seq DESC LIMIT ?",
        _SQLITE_SUITE,
    ),
    _m(
        "sqlite-a-take-does-not-mark-the-steer",
        _SQLITE,
        "UPDATE steerable_steers SET taken = 1 WHERE",
        "UPDATE steerable_steers SET taken = taken WHERE",
        _SQLITE_SUITE,
    ),
    _m(
        "sqlite-synchronous-option-ignored",
        _SQLITE,
        'db.execute(f"PRAGMA synchronous = {self._synchronous}")',
        'db.execute("PRAGMA synchronous = NORMAL")',
        "tests/stores/test_sqlite.py",
    ),
    _m(
        "codec-nul-dropped",
        "steerable/codec.py",
        '{"t": "text", "text": part.text}',
        '{"t": "text", "text": part.text.replace("\\x00", "")}',
        _SQLITE_SUITE,
        "tests/core/test_codec.py",
    ),
]


# -- the server stores (their servers must be up) -------------------------------------------
_PG, _MY = "steerable/stores/postgres/_store.py", "steerable/stores/mysql/_schema.py"
_MONGO = "steerable/stores/mongodb/_layout.py"
_PG_SUITE, _MY_SUITE = (
    "tests/stores/postgres/test_contract.py",
    "tests/stores/mysql/test_contract.py",
)
_MONGO_SUITE = "tests/stores/mongodb/test_mongodb_contract.py"
MUTANTS += [
    _m(
        "postgres-take-skips-a-locked-older-steer",
        _PG,
        "    ORDER BY seq\n    FOR UPDATE\n), moved",
        "    ORDER BY seq\n    FOR UPDATE SKIP LOCKED\n), moved",
        "tests/stores/postgres/test_races.py",
    ),
    _m(
        "postgres-race-loser-reads-its-old-snapshot",
        _PG,
        # the locked rows re-checked for NOT taken after the wait: a steer taken meanwhile
        # drops out, nothing is written, no key collides, and the stale length is returned
        "    SELECT seq, taken FROM steerable_steers\n    WHERE seq IN (",
        "    SELECT seq, taken FROM steerable_steers\n    WHERE NOT taken AND seq IN (",
        _PG_SUITE,
    ),
    _m(
        "postgres-a-save-at-any-position-is-accepted",
        _PG,
        "SELECT n FROM stored WHERE $2::bigint IS NULL OR n = $2::bigint",
        "SELECT n FROM stored",
        _PG_SUITE,
    ),
    _m(
        "postgres-a-steer-recorded-twice",
        _PG,
        "    WHERE id <> ALL($3::text[]) AND NOT EXISTS (",
        "    WHERE true OR NOT EXISTS (",
        _PG_SUITE,
    ),
    _m(
        "mysql-length-read-without-the-session-lock",
        _MY,
        # the save's lock (the service's step takes the same one, further on)
        "-- of the session holds until it commits\n"
        "    INSERT INTO steerable_sessions (session) VALUES (p_session)\n"
        "        ON DUPLICATE KEY UPDATE session = session;",
        "-- of the session holds until it commits\n    DO 0;",
        _MY_SUITE,
    ),
    _m(
        "mysql-a-save-past-the-end-is-accepted",
        _MY,
        "IF p_at IS NOT NULL AND p_at <> v_end THEN",
        "IF p_at IS NOT NULL AND p_at < v_end THEN",
        _MY_SUITE,
    ),
    _m(
        "mongodb-a-save-at-any-position-is-accepted",
        _MONGO,
        '        query["n"] = at\n',
        "        pass\n",
        _MONGO_SUITE,
    ),
    _m(
        "mongodb-a-taken-steer-stays-in-the-box",
        _MONGO,
        '"box": {"$slice": [box, take, _MAX_INT32]} if take else box,',
        '"box": box,',
        _MONGO_SUITE,
    ),
]


# -- the service: its stores' fencing, caps and ends, and the engine ----------------------
_MEM_SVC, _SQL_SVC = "steerable/stores/_memory_service.py", "steerable/stores/_sqlite_service.py"
_PG_SVC, _REPLICA = "steerable/stores/postgres/_service.py", "steerable/service/_replica.py"
_MEM_SVC_SUITE = "tests/stores/test_memory_service_contract.py"
_ENGINE = "tests/service/test_engine.py"
MUTANTS += [
    _m(
        "memory-service-an-older-epoch-still-writes",
        _MEM_SVC,
        "svc.epoch != lease.epoch or svc.holder != lease.holder",
        "svc.holder != lease.holder",
        _MEM_SVC_SUITE,
    ),
    _m(
        "memory-service-no-cap-on-offers",
        _MEM_SVC,
        "if running.stop_requested or running.offered >= running.cap:",
        "if running.stop_requested:",
        _MEM_SVC_SUITE,
    ),
    _m(
        "memory-service-a-live-lease-is-claimed",
        _MEM_SVC,
        "if svc is None or (svc.holder is not None and svc.expires > now):",
        "if svc is None:",
        _MEM_SVC_SUITE,
    ),
    _m(
        "memory-service-untaken-steers-die-with-the-turn",
        _MEM_SVC,
        "row.turn = None  # a turn of its own, in its place",
        'row.state = "taken"',
        _MEM_SVC_SUITE,
    ),
    _m(
        "sqlite-service-an-older-epoch-still-writes",
        _SQL_SVC,
        "if not tx.found or svc.epoch != lease.epoch or svc.holder != lease.holder:",
        "if not tx.found or svc.holder != lease.holder:",
        "tests/stores/test_sqlite_contract.py",
    ),
    _m(
        "sqlite-service-untaken-steers-stay-offered",
        _SQL_SVC,
        "\"UPDATE steerable_inputs SET turn = NULL WHERE session = ? AND state = 'waiting'\"",
        "\"UPDATE steerable_inputs SET turn = turn WHERE session = ? AND state = 'waiting'\"",
        "tests/stores/test_sqlite_contract.py",
    ),
    _m(
        "postgres-service-a-stale-lease-writes",
        _PG_SVC,
        "    WHERE fresh.epoch = $2 AND fresh.holder = $3\n",
        "    WHERE fresh.holder = $3\n",
        "tests/stores/postgres/test_service_contract.py",
    ),
    _m(
        # (the step's own bound on the cap is a second guard: offers never pass the cap, so
        # a mutant of it alone is equivalent; the offer is where the cap holds)
        "postgres-service-no-cap-on-offers",
        _PG_SVC,
        "AND run.offered < run.cap",
        "AND true",
        "tests/stores/postgres/test_service_contract.py",
    ),
    _m(
        "engine-a-stop-seen-at-renewal-is-ignored",
        _REPLICA,
        "        if renewal.stop_requested:\n            serving.stop_turn()",
        "        if False:\n            serving.stop_turn()",
        "tests/service/test_replicas.py",
    ),
    _m(
        "engine-the-prompt-is-appended-again-on-resume",
        _REPLICA,
        "if claim.prompt.id not in {m.id for m in messages[claim.start :]}:",
        "if True:",
        _ENGINE,
    ),
    _m(
        "engine-an-answered-turn-is-run-again",
        _REPLICA,
        "    answered = _answer(claim, claim.messages)\n",
        "    answered = None\n",
        _ENGINE,
    ),
]


# -- the framework integrations -------------------------------------------------------------
_STEPS, _STEPS_SUITE = "steerable/integrations/_steps.py", "tests/integrations/test_steps.py"
MUTANTS += [
    _m(
        "steps-taken-steers-not-kept-as-stored",
        _STEPS,
        "        self.stored.extend(taken)\n",
        "",
        _STEPS_SUITE,
    ),
    _m(
        "steps-the-cap-not-counted-down",
        _STEPS,
        "self.steers_left -= len(taken)",
        "self.steers_left -= 0",
        _STEPS_SUITE,
    ),
]

_OA = "steerable/integrations/openai_agents/_session.py"
_OA_STEERING = "tests/integrations/openai_agents/test_steering.py"
MUTANTS += [
    _m(
        # only the steers of this step spliced in: the SDK rebuilds each request without them
        "openai-a-steer-not-put-back-in-later-requests",
        _OA,
        "steered = iter(self._steered)",
        "steered = iter([s for s in self._steered if s[0] == len(self._view)])",
        f"{_OA_STEERING}::test_a_steer_from_another_process_during_a_tool_call_is_in_place_once",
    ),
    _m(
        # the items a step stored are appended again when the runner hands them over
        "openai-a-step-s-items-stored-again-by-add-items",
        _OA,
        "            if self._given == len(self._view):",
        "            if True:",
        # the streamed runner hands its items over after the step stored them
        "tests/integrations/openai_agents/test_runs.py"
        "::test_a_streamed_run_takes_steers_in_place_like_a_run",
    ),
    _m(
        # every request taken for the run's own: an agent used as a tool takes the steers
        "openai-a-nested-as-tool-run-takes-steers",
        _OA,
        "return len(items) >= len(view) and all(map(same_item, items, view))",
        "return True",
        f"{_OA_STEERING}::test_an_agent_used_as_a_tool_gets_no_steer_and_its_items_are_not_stored",
    ),
    _m(
        "openai-the-prompt-passed-again-on-a-takeover",
        "steerable/integrations/openai_agents/_agent.py",
        "            Runner.run(self.agent, [], **options)",
        "            Runner.run(self.agent, turn.prompt.text if turn.resumed else [], **options)",
        "tests/integrations/openai_agents/test_takeover.py",
    ),
]

_PA = "steerable/integrations/pydantic_ai/_steering.py"
MUTANTS += [
    _m(
        "pydantic-ai-a-steer-taken-at-the-end-of-a-run",
        _PA,
        "        await self.steps.save(new)",
        "        await self.steps.step(new)",
        "tests/integrations/pydantic_ai/test_final_answer.py"
        "::test_standalone_it_waits_for_the_next_run_and_is_taken_at_its_first_request",
    ),
    _m(
        # the enqueued steer request stored again as a record of the run's own
        "pydantic-ai-a-taken-steer-stored-again",
        _PA,
        "continue  # stored already, by the take",
        "pass  # stored already, by the take",
        "tests/integrations/pydantic_ai/test_steering.py",
    ),
    _m(
        "pydantic-ai-the-prompt-passed-again-on-a-takeover",
        "steerable/integrations/pydantic_ai/_agent.py",
        "prompt = turn.prompt.text if len(turn.messages) > len(stored) else None",
        "prompt = turn.prompt.text",
        "tests/integrations/pydantic_ai/test_replicas.py"
        "::test_the_holder_killed_in_its_second_call_is_carried_on_with_the_steer_once_in_place",
    ),
]

_LG = "steerable/integrations/langgraph/_middleware.py"
_LG_CATCH_UP = "steerable/integrations/langgraph/_catch_up.py"
_LG_MIDDLEWARE = "tests/integrations/langgraph/test_middleware.py"
_SAVER = "steerable/integrations/langgraph/_saver.py"
MUTANTS += [
    _m(
        "langgraph-a-steer-taken-at-the-end-of-a-run",
        _LG,
        "        await steps.save(_new(",
        "        await steps.step(_new(",
        f"{_LG_MIDDLEWARE}::test_a_steer_during_the_final_answer_waits_for_the_next_run",
    ),
    _m(
        # the steer given back to the graph is not known as stored: the next step stores it
        "langgraph-a-taken-steer-stored-again",
        _LG,
        "run.ids.update(m.id for m in [*new, *taken])",
        "run.ids.update(m.id for m in new)",
        f"{_LG_MIDDLEWARE}::test_a_steer_from_another_process_during_a_tool_call_joins_the_next"
        "_request_in_place",
    ),
    _m(
        # after a lost checkpoint the step the graph ran again stays beside the stored one
        "langgraph-a-step-run-again-kept-beside-the-stored-one",
        _LG_CATCH_UP,
        "dropped = [m.id for m in messages[anchor + 1 :] if m.id is not None]",
        "dropped: list[str] = []",
        f"{_LG_MIDDLEWARE}::test_a_step_the_graph_ran_again_after_a_lost_checkpoint_is_replaced"
        "_by_the_stored_one",
    ),
    Mutant(
        # one run state for the middleware, not one per session: a run on another thread
        # takes it over
        "langgraph-one-run-per-middleware-not-per-session",
        _LG,
        "self._runs[session.id] = run",
        'self._runs[""] = run',
        ("tests/integrations/langgraph/test_threads.py",),
        more=(("run = self._runs.get(session.id)", 'run = self._runs.get("")'),),
    ),
    _m(
        # no checkpointer, a prompt without an id: the retry appended as a new turn
        "langgraph-a-retry-without-a-checkpointer-appended",
        _LG_CATCH_UP,
        "        return _retried(stored, messages)",
        "        return [], []",
        "tests/integrations/langgraph/test_retry.py",
    ),
    _m(
        "saver-stores-the-whole-list-not-the-delta",
        _SAVER,
        "if isinstance(value, list) and base is not None:",
        "if False:",
        "tests/integrations/langgraph_saver/test_growth.py"
        "::test_the_bytes_a_step_writes_do_not_grow_with_the_thread",
    ),
    _m(
        # the checkpoint first, then again with its values: a kill between leaves it torn
        "saver-a-put-split-into-two-saves",
        _SAVER,
        "        await self._threads.write(thread, build)\n",
        "        await self._threads.write(\n"
        '            thread, lambda log: ([record({**head, "values": {}}, text)], [])\n'
        "        )\n"
        "        await self._threads.write(thread, build)\n",
        "tests/integrations/langgraph_saver/test_crash.py",
    ),
]

_ADK_STEERING = "tests/integrations/adk/test_steering.py"
_ADK_RECORDS = "steerable/integrations/adk/_records.py"
_ADK_IN_PLACE = (
    f"{_ADK_STEERING}::test_a_steer_sent_during_a_tool_call_is_in_the_next_request_once_in_place"
)
MUTANTS += [
    _m(
        "adk-the-plugin-takes-under-a-workflow-root",
        "steerable/integrations/adk/_plugin.py",
        "return isinstance(agent, BaseAgent) and isinstance(agent.root_agent, LlmAgent)",
        "return isinstance(agent, BaseAgent)",
        f"{_ADK_STEERING}::test_under_a_workflow_root_the_plugin_takes_no_steer_and_stores_the"
        "_steps",
    ),
    _m(
        # in this request only: ADK builds every later one from the session's events
        "adk-a-steer-not-put-back-in-later-requests",
        "steerable/integrations/adk/_plugin.py",
        "            session.events.append(event)\n",
        "",
        _ADK_IN_PLACE,
    ),
    # (sorting alone is an equivalent mutant: a steer's event has the timestamp of the event
    # before it, so the append order of an LlmAgent's run is its timestamp order; the bug is
    # a steer stamped when it is taken, read back by timestamp as ADK's database services do)
    Mutant(
        "adk-steers-stamped-when-taken-events-read-by-timestamp",
        _ADK_RECORDS,
        "timestamp=before.timestamp if before is not None else 0.0,\n"
        '        content=types.Content(role="user", parts=[types.Part(text=message.text)]),',
        "timestamp=__import__('time').time(),\n"
        '        content=types.Content(role="user", parts=[types.Part(text=message.text)]),',
        (_ADK_IN_PLACE,),
        more=(("    return events\n", "    return sorted(events, key=lambda e: e.timestamp)\n"),),
    ),
    _m(
        # a new invocation with the prompt again, not the stored prompt's resumed (giving the
        # prompt as well as the invocation is an equivalent mutant: ADK's resume of an
        # invocation that has its user message drops the new message)
        "adk-the-prompt-passed-again-on-a-takeover",
        "steerable/integrations/adk/_agent.py",
        "invocation = _invocation_of(stored, turn.prompt.id, self.agent.name)",
        "invocation = None",
        "tests/integrations/adk/test_replicas.py"
        "::test_sigkill_after_the_step_that_took_a_steer_retries_with_it_once",
    ),
]


if __name__ == "__main__":
    sys.exit(main())
