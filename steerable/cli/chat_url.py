"""``steerable chat --url``: the same chat against a service (``steerable serve``).

The turns run on the service; the chat sends lines as sends and steers over its HTTP API and
shows the session's events as they come, live deltas held until the durable events catch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import signal
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from steerable.cli.terminal import PromptTerminal, Terminal, short
from steerable.errors import UsageError

__all__ = ["RemoteConversation", "chat_url"]

HOLD = 0.6
"""Seconds the first live delta of a reply waits for the durable events before it."""

REMOTE_HELP = """\
  a line while a turn runs: a steer, joining the turn at its next step
  /queue TEXT   send TEXT as a turn of its own  /stop   stop the running turn (Ctrl-C)
  /quit         leave now (Ctrl-D: when done)   /help   this
"""


async def chat_url(
    url: str, session: str, *, token: str | None = None, out: TextIO | None = None
) -> int:
    """``steerable chat --url``: the chat against a service, until ``/quit`` or end of input.

    The status is 0, 1 when the last turn of ours failed, 2 when the service cannot be
    reached or refuses the token.
    """
    from steerable.service.client import Client, ServiceError, check_session

    try:
        check_session(session)
        client = Client(url, token=token, retries=5)  # a token it cannot send: UsageError
    except UsageError as exc:
        print(f"steerable chat: {exc}", file=sys.stderr)
        return 2
    tty = out is None and sys.stdin.isatty() and sys.stdout.isatty()
    tty = tty and importlib.util.find_spec("prompt_toolkit") is not None
    terminal = PromptTerminal(out or sys.stdout) if tty else Terminal(out or sys.stdout)
    async with client:
        remote = RemoteConversation(client, session, terminal)
        try:
            opening = await remote.opening()
        except ServiceError as exc:
            print(f"steerable chat: {url}: {exc}", file=sys.stderr)
            return 2
        terminal.note(f"steerable chat: session {session!r} at {url}")
        terminal.note("Type while the agent works to steer it; /help for the commands.")
        remote.greet(*opening)
        with terminal.reading():
            await remote.main()
    if remote.refused:
        return 2
    return 1 if remote.last_state == "failed" else 0


class RemoteConversation:
    """The chat's turns over a session of a service: events in, inputs out."""

    def __init__(self, client: Any, session: str, terminal: Terminal) -> None:
        self.client = client
        self.session = session
        self.terminal = terminal
        self.running: str | None = None  # the session's running turn, as the events tell
        self.steers: dict[str, str] = {}  # our steers' ids and texts
        self.pending: set[str] = set()  # our inputs not answered yet (taken, or a turn ended)
        self.answered = asyncio.Event()  # nothing of ours pending
        self.answered.set()
        self.last_state: str | None = None  # how the last turn of ours ended
        self._streamed = False  # deltas of the running turn's reply were shown
        self._held: list[str] = []  # deltas not shown yet (see _delta)
        self._hold: asyncio.TimerHandle | None = None
        self._live = False  # the reply's first deltas were shown: show the rest at once
        self._after: int | None = None
        self.refused = False  # the service refused the token mid-chat: leave with status 2

    async def opening(self) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Where the events start, then the status and the transcript (ServiceError).

        The last event first: one stored while the views are read is then followed, not
        lost between them (shown twice at worst).
        """
        from steerable.service.client import NotFound

        self._after = await self._last_event()
        try:
            status: dict[str, Any] | None = await self.client.status(self.session)
        except NotFound:
            status = None
        try:
            page: dict[str, Any] = await self.client.transcript(self.session, limit=1000)
        except NotFound:
            page = {"messages": []}
        return status, page

    def greet(self, status: dict[str, Any] | None, page: dict[str, Any]) -> None:
        """Say how far the session got (what :meth:`opening` read)."""
        messages = page.get("messages", [])
        if messages:
            more = "+" if page.get("next") else ""
            self.terminal.note(f"resumed: {len(messages)}{more} messages so far")
        if status is not None and status.get("turn"):
            self.running = status["turn"]["id"]
            self.terminal.working = True
            self.terminal.note(f"  a turn is running: {self.running}")

    async def _last_event(self) -> int:
        """The session's last durable event id, so the stream starts after it (0: new)."""
        from steerable.service.client import NotFound

        try:
            last: int = await self.client.last_event(self.session)
        except NotFound:
            return 0  # a session nobody wrote to: every event of it is new
        return last

    async def main(self) -> None:
        """Follow the session's events and take lines until /quit or the end of input."""
        follow = asyncio.create_task(self._follow())
        try:
            with self._interrupts():
                await self._lines()
        finally:
            follow.cancel()
            await asyncio.gather(follow, return_exceptions=True)

    async def _lines(self) -> None:
        while True:
            if not self.terminal.working:
                self.terminal.prompt()
            line = await self.terminal.lines.get()
            if line is None:  # end of input: wait for the answers of what we sent
                await self.answered.wait()
                return
            self.terminal.typed()
            if not await self._line(line.strip()):
                return

    async def _line(self, line: str) -> bool:
        """Act on one typed line; False to leave."""
        from steerable.service.client import ServiceError

        note = self.terminal.note
        command, _, rest = line.partition(" ")
        try:
            if command == "/quit":
                return False
            if command == "/help":
                self.terminal.block(REMOTE_HELP)
            elif command == "/stop":
                turn = await self.client.stop(self.session)
                note("  stopping the turn" if turn else "  nothing to stop")
            elif command == "/queue" and rest.strip():
                await self._send(rest.strip())
                note("  queued: it becomes a turn of its own")
            elif command.startswith("/"):
                note(f"  unknown command {command}; /help lists them")
            elif line and (self.running is not None or self.pending):
                await self._steer(line)
            elif line:
                await self._send(line)
        except ServiceError as exc:
            note(f"  [error] {exc}", dim=False)
        return True

    def _mine(self, id: str) -> None:
        self.pending.add(id)
        self.answered.clear()

    def _answered(self, id: str) -> None:
        self.pending.discard(id)
        if not self.pending:
            self.answered.set()

    async def _send(self, text: str) -> None:
        from steerable.messages import new_id
        from steerable.service.client import ServiceError

        id = new_id()
        self._mine(id)
        self.terminal.working = True
        try:
            await self.client.send(self.session, text, id=id)
        except ServiceError:  # not sent: nothing to wait for (the end of input would hang)
            self._answered(id)
            self.terminal.working = self.running is not None or bool(self.pending)
            raise

    async def _steer(self, text: str) -> None:
        from steerable.messages import new_id
        from steerable.service.client import ServiceError

        id = new_id()
        self.steers[id] = text
        self._mine(id)
        try:
            steered = await self.client.steer(self.session, text, id=id)
        except ServiceError:
            self._answered(id)
            self.steers.pop(id, None)
            raise
        if steered.turn is not None:
            self.terminal.note(f"  [steer sent] offered to turn {steered.turn}, at its next step")
        else:
            self.terminal.note("  [steer sent] no step ahead: it becomes a turn of its own")

    async def _follow(self) -> None:
        from steerable.service.client import NotFound, ServiceError, Unauthorized

        failures = 0
        while True:
            try:
                async for event in self.client.events(self.session, after=self._after):
                    failures = 0
                    if event.id is not None:
                        self._after = event.id
                    try:
                        await self._event(event)
                    except Exception as exc:  # a view that failed: say so, keep following
                        self.terminal.note(f"  [error] {type(exc).__name__}: {exc}", dim=False)
            except NotFound:  # no input yet: the session begins with our first
                await asyncio.sleep(0.1)
            except Unauthorized as exc:  # no retry gets past a refused token
                self.terminal.note(f"  [error] {exc}", dim=False)
                self.refused = True
                self.answered.set()  # nothing more will be answered to us
                self.terminal.lines.put_nowait("/quit")
                return
            except ServiceError as exc:  # said, then tried again, less often each time
                self.terminal.note(f"  [error] {exc}; following again", dim=False)
                await asyncio.sleep(min(0.5 * 2**failures, 10.0))
                failures += 1

    async def _event(self, event: Any) -> None:
        note, data = self.terminal.note, event.data
        if event.kind == "delta":
            if event.turn == self.running and data.get("text"):
                self._delta(str(data["text"]))
        elif event.kind == "turn_started":
            self.running, self._streamed = event.turn, False
            self._drop_held()
            self.terminal.working = True
            if event.turn in self.steers:
                note(f"  [steer became turn {event.turn}] {self.steers[event.turn]}", dim=False)
            else:
                note(f"  [turn {event.turn} on {data.get('holder')}]")
        elif event.kind == "holder":
            note(f"  [the turn is carried on by {data.get('holder')}]")
        elif event.kind == "steers_taken":
            for id in data.get("ids", ()):
                text = self.steers.get(id, f"(input {id})")
                note(f"  [steer taken at step {data.get('step')}] {text}", dim=False)
                self._answered(id)
        elif event.kind == "message":
            await self._message(data)
        elif event.kind == "turn_ended":
            self._ended(event.turn, str(data.get("state")))
        elif event.kind == "refetch":
            note("  [the stream restarted: events may have been missed]")

    def _delta(self, text: str) -> None:
        """Show a live delta, after the durable events written before it.

        Deltas are pushed and durable events polled (at most ``HOLD`` apart), so the first
        delta of a reply can come before the events of the step it follows (the last tool
        results). It is held ``HOLD`` seconds, and the rest of the reply with it; a reply
        stored meanwhile replaces the deltas held.
        """
        self._held.append(text)
        if self._live:
            self._flush()
        elif self._hold is None:
            self._hold = asyncio.get_running_loop().call_later(HOLD, self._flush)

    def _flush(self) -> None:
        self._hold, self._live, self._streamed = None, True, True
        self.terminal.write("".join(self._held))
        self._held.clear()

    def _drop_held(self) -> None:
        """The stored reply replaces the deltas held; the next reply is held again."""
        if self._hold is not None:
            self._hold.cancel()
        self._hold, self._live, self._held = None, False, []

    def _ended(self, turn: str | None, state: str) -> None:
        if self.terminal.mid_line:
            self.terminal.write("\n")
        label = "" if state == "completed" else f"[{state.replace('_', ' ')}] "
        self.terminal.note(f"  {label}(turn {turn} {state})", dim=state == "completed")
        if turn in self.pending:
            self.last_state = state
            self._answered(turn)
        if turn == self.running:
            self.running = None
            self.terminal.working = bool(self.pending)
        if not self.terminal.working:
            self.terminal.prompt()

    async def _message(self, data: dict[str, Any]) -> None:
        if data.get("role") not in ("assistant", "user") or data.get("steered"):
            return
        position = data.get("position")
        if not isinstance(position, int):
            return
        page = await self.client.transcript(self.session, after=position - 1, limit=1)
        for entry in page.get("messages", [])[:1]:
            parts = entry.get("parts", [])
            if entry.get("role") == "assistant" and any(p.get("type") == "text" for p in parts):
                self._drop_held()  # the stored text replaces the deltas not shown yet
            self._render(entry.get("role"), parts)

    def _render(self, role: object, parts: list[dict[str, Any]]) -> None:
        note = self.terminal.note
        for part in parts:
            kind = part.get("type")
            if kind == "tool_call":
                note(f"  -> {part.get('name')}({short(str(part.get('arguments', '')))})")
            elif kind == "tool_result":
                flag = " [error]" if part.get("is_error") else ""
                note(f"  <- {part.get('name')}{flag}: {short(str(part.get('content', '')))}")
            elif kind != "text" or role != "assistant":
                continue  # a prompt: typed here, or by another client
            elif self._streamed:
                self.terminal.write("\n" if self.terminal.mid_line else "")
            elif part.get("text"):
                self.terminal.write(str(part["text"]) + "\n")
        self._streamed = False

    @contextlib.contextmanager
    def _interrupts(self) -> Iterator[None]:
        """Ctrl-C stops the running turn, or leaves when none runs."""
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            if self.running is not None:
                self.terminal.lines.put_nowait("/stop")
            else:
                self.terminal.lines.put_nowait("/quit")

        self.terminal.interrupt = interrupt
        try:
            loop.add_signal_handler(signal.SIGINT, interrupt)
        except (NotImplementedError, RuntimeError):
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)
