"""The chat's two ends: lines typed in, the run's events and notes written out.

:class:`Terminal` reads a pipe (or any stdin that is not a terminal) on a thread and writes
plain text. :class:`PromptTerminal`, used when stdin and stdout are a terminal, reads with
prompt_toolkit under ``patch_stdout``: the input line stays at the bottom, below the
streaming answer, so a line typed while the answer streams is never mixed into its text.
The answer's unfinished line is drawn just above the input line and printed above it
once it ends.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

from steerable.events import Event, Replied, SteersTaken, TextDelta, ToolEnded, ToolStarted

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

__all__ = ["PROMPT", "STEER_PROMPT", "PromptTerminal", "Terminal", "short"]

PROMPT = "you> "
STEER_PROMPT = "steer> "  # while a turn runs: what is typed steers it


class Terminal:
    """Lines typed in (``lines``: None at the end of input), events and notes written out."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lines: asyncio.Queue[str | None] = asyncio.Queue()
        self.working = False  # a turn runs
        self.interrupt: Callable[[], None] = lambda: None  # Ctrl-C, where no signal comes
        self._mid_line = False
        self._color = out.isatty() and not os.environ.get("NO_COLOR")
        self._echoed = os.isatty(0)  # a terminal shows what is typed, Enter included

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
        if isinstance(event, TextDelta):
            self.write(event.text)
        elif isinstance(event, Replied):
            if self._mid_line:
                self.write("\n")
        elif isinstance(event, ToolStarted):
            self.note(f"  -> {event.call.name}({short(event.call.arguments)})")
        elif isinstance(event, ToolEnded):
            flag = " [error]" if event.result.is_error else ""
            self.note(f"  <- {event.call.name}{flag}: {short(event.result.content)}")
        elif isinstance(event, SteersTaken):
            for message in event.messages:
                self.note(f"  [steer taken] {message.text}", dim=False)


class PromptTerminal(Terminal):
    """A terminal's input line kept apart from the output, by prompt_toolkit."""

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
        return f"{self._partial}\n{prompt}" if self._partial else prompt

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
