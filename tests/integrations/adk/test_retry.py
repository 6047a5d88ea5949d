"""The retry after a crash outside the service: SIGKILL mid-tool, the docs' retry in a third
process, and what each part of that retry does in ADK 2.13.

``crashing_run.py`` runs an ADK ``Runner`` over :class:`SteerableSessionService` in a child
process: the model calls ``fetch`` (while it runs, this process steers), then ``book``, in
which the test SIGKILLs the child. With :class:`SteeringPlugin` the kill leaves the
transcript at the step that took the steer (the prompt, ``fetch``'s call and result, the
steer): ``book``'s call was held for the next step and is lost with the process.

What ADK does with ``run_async(invocation_id=..., new_message=None)`` (``runners.py`` and
``workflow/_node_runner_utils.py``: a root ``LlmAgent`` always runs as a node): it appends no
user event, builds every request from the session's stored events, and stamps the id on the
events it makes; the id also names the prompt it shows callbacks (``user_content``). It does
not check the id: another one, or none, asks the model the same requests and stores the same
content, only under another invocation, and a new message given with the crashed id is
ignored (that invocation has its user message); the prompt given again without the id is a
new invocation that stores and answers it twice (``test_a_broken_retry_fails_the_checks``). The one
place the id changes what runs is a resumable App (``ResumabilityConfig``), whose flow looks
only at the current invocation's events: a tool call stored without its result (the service
without the plugin stores each event as it is appended) is run again by ADK from the stored
call, with the crashed invocation's id only
(``test_without_the_plugin_only_a_resumable_app_with_the_crashed_id_reruns_the_stored_call``).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steerable.integrations.adk import SteerableSessionService
from steerable.stores.url import open_url
from tests.integrations.adk.crashing_run import ADDRESS, PROMPT, retry
from tests.integrations.adk.scripted import problems, recorded, texts_of

ROOT = Path(__file__).resolve().parents[3]
STEER = "skip friday"
FINAL = f"answered: {PROMPT} | {STEER}"
CARRIED_ON = [PROMPT, "call:fetch-1", "result:fetch-1", STEER, "call:book-1", "result:book-1"]
SHOWN = "user_content:"
RESUMABLE_WARNING = r"ignore:\[EXPERIMENTAL\] ResumabilityConfig:UserWarning"


@dataclass
class Story:
    """What a killed run and its retry left: in the store, in the model's requests, in the
    tools' journal."""

    words: list[str]  # the stored events, each content as texts_of's words
    contents: list[dict[str, Any]]  # the stored events' contents
    invocations: set[str]  # the stored events' invocation ids
    prompts: int  # stored user messages with the prompt's text
    steered: list[str]  # stored steers
    waiting: int  # steers still in the box
    first: list[list[str]]  # the killed run's requests, as words
    retried: list[list[str]]  # the retry's requests, as words
    ran: list[str]  # the tools' starts and ends
    shown: list[str]  # at each model call, the prompt ADK showed callbacks ("-": none)
    final: str  # the retry's final text


def _files(where: Path) -> tuple[str, str]:
    return str(where / "requests.jsonl"), str(where / "ran.txt")


async def _line(child: asyncio.subprocess.Process) -> str:
    assert child.stdout is not None
    return (await child.stdout.readline()).decode().strip()


async def _kill_mid_book(url: str, where: Path, *flags: str) -> None:
    """Run crashing_run's first run; steer during ``fetch`` (with the plugin) and SIGKILL
    the child in ``book``."""
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tests.integrations.adk.crashing_run", url, *_files(where)),
        *("first", *flags),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdin is not None
    try:
        assert await _line(child) == "in-fetch"
        if "plain" not in flags:  # this process is the other one the steer comes from
            async with open_url(url) as store:
                await SteerableSessionService(store).session(**ADDRESS).steer(STEER, id="k")
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        assert await _line(child) == "in-book"
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGKILL)
        await child.wait()
    assert child.returncode == -signal.SIGKILL


async def _retry_in_a_process(url: str, where: Path, mode: str) -> str:
    """The retry in a third process; its final text."""
    child = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "tests.integrations.adk.crashing_run", url, *_files(where)),
        mode,
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await child.communicate()
    assert child.returncode == 0, out.decode()
    final: str = json.loads(out.decode().splitlines()[-1])["final"]
    return final


async def _story(url: str, where: Path, final: str) -> Story:
    async with open_url(url) as store:
        service = SteerableSessionService(store)
        session = await service.get_session(**ADDRESS)
        assert session is not None
        box = service.session(**ADDRESS)
        messages, waiting = await box.messages(), await box.steers()
    events = [e for e in session.events if e.content is not None]
    contents = [e.content.model_dump(mode="json", exclude_none=True) for e in events if e.content]
    said = [m for m in messages if m.role == "user"]
    requests = recorded(where / "requests.jsonl")
    journal = (where / "ran.txt").read_text(encoding="utf-8").splitlines()
    return Story(
        words=texts_of(contents),
        contents=contents,
        invocations={e.invocation_id for e in session.events},
        prompts=sum(1 for m in said if not m.steered and m.text == PROMPT),
        steered=[m.text for m in said if m.steered],
        waiting=len(waiting),
        first=[texts_of(c) for replica, c in requests if replica == "first"],
        retried=[texts_of(c) for replica, c in requests if replica == "retry"],
        ran=[line for line in journal if not line.startswith(SHOWN)],
        shown=[line.removeprefix(SHOWN) for line in journal if line.startswith(SHOWN)],
        final=final,
    )


def _failures(story: Story) -> list[str]:
    """Which of the docs' promises for the retry ``story`` breaks (none, for the docs' own)."""
    checks = {
        "the prompt stored once": story.prompts == 1,
        "fetch, which finished before the kill, not run again": story.ran.count("fetch:start") == 1,
        "the steer seen once by each request after its take, and taken once": (
            story.first[-1].count(STEER) == 1
            and all(words.count(STEER) == 1 for words in story.retried)
            and story.steered == [STEER]
            and story.waiting == 0
        ),
        "the final answer stored": story.final == FINAL and story.words[-1:] == [FINAL],
        "each call and result stored once, in place": story.words == [*CARRIED_ON, FINAL]
        and problems(story.contents) == [],
        "the retry's events in the killed run's invocation": len(story.invocations) == 1,
    }
    return [name for name, held in checks.items() if not held]


async def test_the_documented_retry_carries_a_run_killed_mid_tool_on(
    store_url: str, tmp_path: Path
) -> None:
    await _kill_mid_book(store_url, tmp_path)
    killed = await _story(store_url, tmp_path, "")
    # the step that took the steer was stored; book's call, held for the next step, was not
    assert killed.words == CARRIED_ON[:4]
    assert killed.ran == ["fetch:start", "fetch:end", "book:start"]

    final = await _retry_in_a_process(store_url, tmp_path, "resume")
    story = await _story(store_url, tmp_path, final)
    assert _failures(story) == [], story
    assert story.retried[0] == story.first[-1]  # the step that died is asked again, as it was
    # book's call was never stored, so the model calls it again and it runs again
    assert story.ran == ["fetch:start", "fetch:end", "book:start", "book:start", "book:end"]


async def test_a_broken_retry_fails_the_checks(tmp_path: Path) -> None:
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    await _kill_mid_book(f"sqlite:///{crashed / 'run.db'}", crashed)
    broken: dict[str, list[str]] = {}
    shown: dict[str, list[str]] = {}
    for mode in ("resume", "wrong-id", "no-id", "prompt-again", "prompt-and-id"):
        where = tmp_path / mode
        shutil.copytree(crashed, where)  # the killed run's files (its -wal too), as it left them
        url = f"sqlite:///{where / 'run.db'}"
        async with open_url(url) as store:
            outcome = await retry(store, *_files(where), mode, ())
        story = await _story(url, where, outcome["final"])
        broken[mode] = _failures(story)
        shown[mode] = story.shown[len(story.first) :]  # at the retry's model calls
    assert broken == {
        "resume": [],
        # the same requests and the same transcript, under another invocation
        "wrong-id": ["the retry's events in the killed run's invocation"],
        "no-id": ["the retry's events in the killed run's invocation"],
        # a second prompt, answered with the first
        "prompt-again": [
            "the prompt stored once",
            "the final answer stored",
            "each call and result stored once, in place",
            "the retry's events in the killed run's invocation",
        ],
        # ADK ignores a new message when the invocation it names has its user message
        "prompt-and-id": [],
    }
    # the id names the prompt ADK shows callbacks; another id, or none, names nothing
    assert shown == {
        "resume": [PROMPT, PROMPT],
        "wrong-id": ["-", "-"],
        "no-id": ["-", "-"],
        "prompt-again": [PROMPT, PROMPT],
        "prompt-and-id": [PROMPT, PROMPT],
    }


@pytest.mark.filterwarnings(RESUMABLE_WARNING)
async def test_without_the_plugin_only_a_resumable_app_with_the_crashed_id_reruns_the_stored_call(
    tmp_path: Path,
) -> None:
    killed: dict[tuple[str, ...], Path] = {}
    for flags in [("plain", "resumable"), ("plain",)]:
        crashed = killed[flags] = tmp_path / "_".join(flags)
        crashed.mkdir()
        await _kill_mid_book(f"sqlite:///{crashed / 'run.db'}", crashed, *flags)
        left = await _story(f"sqlite:///{crashed / 'run.db'}", crashed, "")
        # without the plugin each event is stored as it is appended: book's call is, not
        # its result
        assert left.words == [PROMPT, "call:fetch-1", "result:fetch-1", "call:book-1"], flags
    seen: dict[str, Story] = {}
    for name, mode, flags in [
        ("resumable", "resume", ("plain", "resumable")),
        ("resumable, another id", "wrong-id", ("plain", "resumable")),
        ("not resumable", "resume", ("plain",)),
    ]:
        where = tmp_path / f"retry {name}"
        shutil.copytree(killed[flags], where)
        url = f"sqlite:///{where / 'run.db'}"
        async with open_url(url) as store:
            outcome = await retry(store, *_files(where), mode, flags)
        seen[name] = story = await _story(url, where, outcome["final"])
        assert story.final == f"answered: {PROMPT}", name
        assert story.ran == ["fetch:start", "fetch:end", "book:start", "book:start", "book:end"]

    # ADK runs the stored call itself, before asking the model anything
    rerun = seen["resumable"]
    assert rerun.retried == [
        [PROMPT, "call:fetch-1", "result:fetch-1", "call:book-1", "result:book-1"]
    ]
    assert rerun.words == [*left.words, "result:book-1", rerun.final]
    assert problems(rerun.contents) == []
    # otherwise the model is asked again with the call left out (ADK drops a call without
    # a result from the request), calls book again, and the transcript has the call twice
    for name in ("resumable, another id", "not resumable"):
        again = seen[name]
        assert again.retried[0] == [PROMPT, "call:fetch-1", "result:fetch-1"], name
        assert again.words == [*left.words, "call:book-1", "result:book-1", again.final], name
        assert problems(again.contents) != [], name
