"""The chat's two ends: lines typed in, the run's events and notes written out.

:class:`Terminal` reads a pipe (or any stdin that is not a terminal) on a thread and writes
plain text. :class:`PromptTerminal`, used when stdin and stdout are a terminal, reads with
prompt_toolkit under ``patch_stdout``: the input line stays at the bottom, below the
streaming answer, so a line typed while the answer streams is never mixed into its text.
The answer's unfinished line is drawn just above the input line and printed above it
once it ends (or once the turn ends: a stopped answer's text stays above the ``[stopped]``
note). A model request that shows nothing for a while is said to be waiting: after a
second, a line above the input line that counts the seconds until the reply comes; without
prompt_toolkit (a pipe), a note after five.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

from steerable.events import (
    Ended,
    Event,
    ModelRequested,
    Replied,
    SteersTaken,
    TextDelta,
    ToolEnded,
    ToolStarted,
)
from steerable.messages import ToolCall

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

__all__ = ["PROMPT", "STEER_PROMPT", "PromptTerminal", "Terminal", "short"]

PROMPT = "you> "
STEER_PROMPT = "steer> "  # while a turn runs: what is typed steers it


class Terminal:
    """Lines typed in (``lines``: None at the end of input), events and notes written out."""

    interactive = False
    """Whether the chat can ask the user a question here (a terminal, not a pipe)."""
    wait = 5.0
    """Seconds a model request may show nothing before the chat says it is waiting (a note
    that stays, so not for every request of a quick model)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.interrupt: Callable[[], None] = lambda: None  # Ctrl-C, where no signal comes
        self.whole_replies = False  # the model is asked for whole replies (--no-stream)
        self.notices: Callable[[], list[str]] = list  # what the model learned, said at once
        self._working = False
        self._mid_line = False
        self._color = out.isatty() and not os.environ.get("NO_COLOR")
        self._echoed = os.isatty(0)  # a terminal shows what is typed, Enter included
        self._open: dict[str, ToolCall] = {}  # tool calls started and not ended, by id
        self._asked: float | None = None  # when the model request under way was sent
        self._late = False  # it has shown nothing for ``wait`` seconds
        self._wait: asyncio.TimerHandle | None = None

    @property
    def working(self) -> bool:
        """Whether a turn runs; once it ends, its answer's unfinished line is ended."""
        return self._working

    @working.setter
    def working(self, value: bool) -> None:
        self._working = value
        if not value:
            self._answered()
            self.end_line()

    @property
    def mid_line(self) -> bool:
        """Whether the cursor is after text on its line (an answer being streamed)."""
        return self._mid_line

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Read stdin on a thread, one line at a time, for as long as the chat runs."""
        loop = asyncio.get_running_loop()
        thread = threading.Thread(target=self._read, args=(loop,), daemon=True)
        thread.start()
        yield

    def _read(self, loop: asyncio.AbstractEventLoop) -> None:
        # os.read holds no lock of sys.stdin's, so this thread cannot block the exit.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        while True:
            try:
                chunk = os.read(0, 4096)
            except OSError:
                chunk = b""
            pending += decoder.decode(chunk, final=not chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                loop.call_soon_threadsafe(self.lines.put_nowait, line.rstrip("\r"))
            if not chunk:
                loop.call_soon_threadsafe(self.lines.put_nowait, None)
                return

    def write(self, text: str) -> None:
        """Write ``text`` as it is."""
        self.out.write(text)
        self.out.flush()
        if text:
            self._mid_line = not text.endswith("\n")

    def note(self, text: str, *, dim: bool = True) -> None:
        """A line of its own, after whatever is on the current line."""
        if self._mid_line:
            self.write("\n")
        if self._color and dim:
            text = f"\x1b[2m{text}\x1b[0m"
        self.write(text + "\n")

    def block(self, text: str) -> None:
        """Lines of their own (``/help``), kept out of the answer's unfinished line."""
        for line in text.splitlines():
            self.note(line, dim=False)

    def end_line(self) -> None:
        """End the answer's unfinished line, if there is one."""
        if self._mid_line:
            self.write("\n")

    def typed(self) -> None:
        """A line was typed: the cursor is at the start of a line again."""
        if self._echoed:
            self._mid_line = False
        elif self._mid_line:
            self.write("\n")

    def prompt(self) -> None:
        """Show that a line is awaited."""
        if self._mid_line:
            self.write("\n")
        self.write(PROMPT)

    def render(self, event: Event) -> None:
        """Show one event of the run."""
        self.say_notices()
        if isinstance(event, ModelRequested):
            self._asking()
            return
        self._answered()
        if isinstance(event, TextDelta):
            self.write(event.text)
        elif isinstance(event, Replied):
            self.end_line()
        elif isinstance(event, ToolStarted):
            self._open[event.call.id] = event.call
            self.note(f"  -> {event.call.name}({short(event.call.arguments)})")
        elif isinstance(event, ToolEnded):
            self._open.pop(event.call.id, None)
            self._result(event.call, event.result.content, error=event.result.is_error)
        elif isinstance(event, SteersTaken):
            for message in event.messages:
                self.note(f"  [steer taken] {message.text}", dim=False)
        elif isinstance(event, Ended):
            self.end_line()  # a stopped answer's text stays above the turn's last note
            # The calls a stop (or a failure) cut short got their error results from the
            # run, with no ToolEnded: show them as any other result.
            last = event.result.transcript[-1:]
            for result in last[0].tool_results if last else ():
                call = self._open.pop(result.call_id, None)
                if call is not None:
                    self._result(call, result.content, error=result.is_error)
            self._open.clear()

    def say_notices(self) -> None:
        """What the model learned about its server (an empty stream: whole replies from
        now on), each once, as soon as the chat sees it: at an event, or while it waits."""
        for notice in self.notices():
            self.note(f"  [note] {notice}", dim=False)

    def _result(self, call: ToolCall, content: str, *, error: bool) -> None:
        flag = " [error]" if error else ""
        self.note(f"  <- {call.name}{flag}: {short(content)}")

    # -- a model request that shows nothing yet -------------------------------------------

    def _asking(self) -> None:
        """A model request was sent: say it waits if nothing of the reply comes soon."""
        self._answered()
        self._asked = time.monotonic()
        self._wait = asyncio.get_running_loop().call_later(self.wait, self._waiting)

    def _answered(self) -> None:
        """Something of the reply came (or the turn ended): no longer waiting."""
        if self._wait is not None:
            self._wait.cancel()
        self._wait, self._asked, self._late = None, None, False

    def waiting_for(self, *, seconds: bool = True) -> str:
        """What the request under way waits for (and how long it has): "" if none waits."""
        if self._asked is None or not self._late:
            return ""
        what = "the whole reply" if self.whole_replies else "the reply"
        if not seconds:
            return f"  waiting for {what}..."
        return f"  waiting for {what}... {int(time.monotonic() - self._asked)} s"

    def _waiting(self) -> None:
        """Said once on a pipe: a note."""
        self._wait, self._late = None, True
        self.say_notices()
        self.note(self.waiting_for(seconds=False))


class PromptTerminal(Terminal):
    """A terminal's input line kept apart from the output, by prompt_toolkit."""

    interactive = True
    wait = 1.0  # a line that goes once the reply comes

    def __init__(self, out: TextIO) -> None:
        super().__init__(out)
        self._partial = ""  # the answer's line being streamed, not printed yet
        self._session: PromptSession[str] | None = None

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Read lines with a prompt at the bottom; print above it."""
        from prompt_toolkit import PromptSession
        from prompt_toolkit.patch_stdout import patch_stdout

        # Erased when done: the typed line is printed again on its own, while the answer's
        # unfinished line drawn above the input stays ours to print once it ends.
        session: PromptSession[str] = PromptSession(erase_when_done=True)
        self._session = session
        with patch_stdout(raw=True):
            self.out = sys.stdout  # the proxy patch_stdout put there
            task = asyncio.ensure_future(self._read_lines(session))
            try:
                yield
            finally:
                task.cancel()

    async def _read_lines(self, session: PromptSession[str]) -> None:
        while True:
            try:
                line = await session.prompt_async(self._message)
            except KeyboardInterrupt:
                self.interrupt()
                continue
            except EOFError:
                self.lines.put_nowait(None)
                return
            self.out.write(f"{STEER_PROMPT if self.working else PROMPT}{line}\n")
            self.out.flush()
            self.lines.put_nowait(line)

    def _message(self) -> str:
        prompt = STEER_PROMPT if self.working else PROMPT
        above = [line for line in (self._partial, self.waiting_for()) if line]
        return "\n".join([*above, prompt])

    def _waiting(self) -> None:
        """Drawn above the input line, its seconds counted, until the reply comes."""
        self._late = True
        self.say_notices()
        self._redraw()
        self._wait = asyncio.get_running_loop().call_later(1.0, self._waiting)

    def _answered(self) -> None:
        waited = self._late
        super()._answered()
        if waited:
            self._redraw()  # the waiting line goes

    def _redraw(self) -> None:
        if self._session is not None and self._session.app.is_running:
            self._session.app.invalidate()

    def write(self, text: str) -> None:
        """Whole lines go above the prompt; the unfinished one is drawn with it."""
        done, newline, rest = (self._partial + text).rpartition("\n")
        if newline:
            self.out.write(done + "\n")
            self.out.flush()
        self._partial = rest
        self._mid_line = bool(rest)
        self._redraw()

    def note(self, text: str, *, dim: bool = True) -> None:
        """A line printed above the answer's unfinished line, which goes on below it."""
        if self._color and dim:
            text = f"\x1b[2m{text}\x1b[0m"
        self.out.write(text + "\n")
        self.out.flush()

    def typed(self) -> None:
        """The typed line was printed when it was accepted."""

    def prompt(self) -> None:
        """The prompt is always shown; it says ``you>`` when no turn runs."""
        self._redraw()


def short(text: str, limit: int = 120) -> str:
    """``text`` on one line of at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
