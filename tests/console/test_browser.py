"""The console in a real headless Chromium, against ``steerable serve`` on SQLite (one
process) and on Postgres (two replicas behind nginx); each test runs on both.

- a send and its answer appearing live, a tool call shown as it runs, a steer typed during
  that tool call shown as taken at the turn's next step (in the steer's list and on its
  message), and a stop (Escape) ending a turn mid-tool-call;
- the replica running a turn SIGKILLed while the page watches: the page carries on (the
  stream reconnects with ``Last-Event-ID``; the turn is taken over) and shows every
  message once;
- another tenant's session: not in the list, and its page shows nothing of it.

The SQLite run saves the screenshots of docs/console.md (docs/console/list.png and
session.png).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.console.conftest import CHROMIUM_ARGS, Site

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs" / "console"
SHOTS = os.environ.get("STEERABLE_CONSOLE_SHOTS")
"""Where the SQLite run saves its screenshots: ``docs`` for docs/console/ (how the docs'
ones are made: ``STEERABLE_CONSOLE_SHOTS=docs pytest tests/console -k sqlite``); unset, a
temporary folder, so a test run leaves the tree as it was."""


def shots(tmp: Path) -> Path:
    """The folder of this run's screenshots."""
    folder = DOCS if SHOTS == "docs" else tmp
    folder.mkdir(parents=True, exist_ok=True)
    return folder


WAIT = 30_000  # ms: a hang guard for the page, far above what any step here takes

with contextlib.suppress(ImportError):  # the `chromium` fixture skips (or fails) without it
    from playwright.async_api import Page, async_playwright, expect


@pytest.fixture
async def page(chromium: str, site: Site) -> AsyncIterator[Page]:
    """A Chromium page signed in to the console as tenant ``acme``, on the list."""
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        context = await browser.new_context(viewport={"width": 1200, "height": 800})
        page = await context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        expect.set_options(timeout=WAIT)
        await page.goto(f"{site.url}/console")
        await page.fill("#token", "t-acme")  # the API's 401 asked for it
        await page.press("#token", "Enter")
        await expect(page.locator("#empty")).to_have_text(
            "No sessions yet. Start one below: give it a name and a first message."
        )
        yield page
        await browser.close()
        assert errors == []  # no script error on the page


async def start(page: Page, session: str) -> None:
    """Start ``session`` from the list's form with a first turn (answered: the tool is not
    held), so the page follows the session's stream before the test's own send."""
    await page.goto(page.url.split("#")[0] + "#/")
    await page.fill("#new-session", session)
    await page.fill("#new-text", "hello")
    await page.press("#new-text", "Enter")
    await expect(page.locator("#session-id")).to_have_text(session)
    await expect(page.locator("#feed-state")).to_have_text("live")
    answer = page.locator("article.message.assistant .text", has_text="answered: hello")
    await expect(answer).to_have_count(1)


async def send(page: Page, text: str) -> None:
    """Type ``text`` and press Enter (a send)."""
    await page.fill("#text", text)
    await page.press("#text", "Enter")


async def test_send_live_steer_taken_at_the_next_step_and_stop(
    page: Page, site: Site, tmp_path: Path
) -> None:
    await start(page, "trip")
    site.hold.hold()
    await send(page, "plan my week")
    prompt = page.locator("article.message.user", has_text="plan my week")
    await expect(prompt).to_have_count(1)
    # The first tool call runs (held): shown live, as it runs, before any step stored it.
    running = page.locator(".live-tool.running")
    await expect(running).to_contain_text("work")
    await expect(running).to_contain_text('{"step": 1}')
    await expect(page.locator('#status [data-field="state"]')).to_have_text("running")
    await expect(page.locator('#status [data-field="steps"]')).to_have_text("1")

    # A steer typed during that tool call (Ctrl+Enter): its {id, turn} at once, then
    # taken at step 2, the next step.
    await page.fill("#text", "skip friday")
    await page.press("#text", "Control+Enter")
    steer = page.locator("#steers li").first
    await expect(steer.locator(".fate")).to_contain_text("offered to turn")
    site.hold.release()
    await expect(steer.locator(".fate")).to_contain_text("at step 2")
    assert (await steer.get_attribute("data-fate")) == "taken"
    steered = page.locator("article.message.steer")
    await expect(steered).to_contain_text("skip friday")
    await expect(steered.locator(".steered")).to_have_text("steered · taken at step 2")
    answer = page.locator("article.message.assistant", has_text="answered: plan")
    await expect(answer).to_have_count(1)
    await expect(answer.locator(".text")).to_have_text("answered: plan my week | skip friday")
    turn = page.locator("section.turn").nth(1)
    await expect(turn.locator(".turn-head")).to_contain_text("completed")
    if site.kind == "sqlite":
        await steered.scroll_into_view_if_needed()  # the steered turn, not the first one
        await page.screenshot(path=str(shots(tmp_path) / "session.png"))

    # Stop (Escape) in the middle of the next turn's tool call.
    site.hold.hold()
    await send(page, "and next week")
    await expect(page.locator("section.turn")).to_have_count(3)
    second = page.locator("section.turn").nth(2)
    await expect(second.locator(".live-tool.running")).to_contain_text("work")
    await page.press("#text", "Escape")
    await expect(page.locator("#notice")).to_contain_text("Stop asked of turn")
    await expect(second.locator(".turn-head")).to_contain_text("stopped")  # its tool cut
    site.hold.release()

    # The list: the session, idle again, a keyboard-usable link to it.
    await page.click("#back")
    row = page.locator('#sessions tr[data-session="trip"]')
    await expect(row.locator(".state")).to_have_text("idle")
    if site.kind == "sqlite":
        await page.screenshot(path=str(shots(tmp_path) / "list.png"))
    await row.locator("a").focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#session-id")).to_have_text("trip")


async def test_a_replica_killed_while_the_page_watches(page: Page, site: Site) -> None:
    await start(page, "crash")
    site.hold.hold()
    await send(page, "survive this")
    await expect(page.locator(".live-tool.running")).to_contain_text("work")
    field = page.locator('#status [data-field="holder"]')  # the status is read after the event
    await expect(field).to_have_text(re.compile(f"^({'|'.join(map(re.escape, site.servers))})$"))
    holder = (await field.text_content()) or ""
    site.servers[holder].kill(signal.SIGKILL)
    if site.kind == "sqlite":
        await site.restart(holder)  # one process: the page waits for it to come back
    # The stream reconnects (Last-Event-ID); the turn is taken over and its tool runs again.
    await site.hold.until_calls(4)  # the first turn's two, then this one's, again
    site.hold.release()
    answer = page.locator("article.message.assistant", has_text="answered: survive")
    await expect(answer.locator(".text")).to_have_text("answered: survive this")
    await expect(page.locator("#feed-state")).to_have_text("live")
    await expect(page.locator('#status [data-field="state"]')).to_have_text("idle")
    # Every message shown once: the transcript's ids, and the page's, each once.
    async with site.api() as http:
        stored = (await http.get("/v1/sessions/crash/transcript")).json()["messages"]
    shown = await page.locator("article.message[data-id]").evaluate_all(
        "nodes => nodes.map(n => n.dataset.id)"
    )
    assert shown == [m["id"] for m in stored]
    await expect(page.locator("article.message.user", has_text="survive this")).to_have_count(1)
    await expect(page.locator(".live .streaming")).to_have_count(0)  # live pieces replaced


async def test_another_tenants_session_is_not_reachable(page: Page, site: Site) -> None:
    async with site.api("t-other") as other:
        sent = await other.post("/v1/sessions/secret/messages", json={"text": "theirs only"})
        assert sent.status_code == 202, sent.text
    await start(page, "mine")
    await page.goto(page.url.split("#")[0] + "#/")
    await expect(page.locator('#sessions tr[data-session="mine"]')).to_have_count(1)
    await expect(page.locator('#sessions tr[data-session="secret"]')).to_have_count(0)
    await page.goto(page.url.split("#")[0] + "#/s/secret")
    await expect(page.locator("#status")).to_have_text("This session has nothing yet.")
    await expect(page.locator("#no-messages")).to_be_visible()
    assert "theirs only" not in await page.locator("main").inner_text()
