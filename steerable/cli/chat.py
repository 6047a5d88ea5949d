"""``steerable chat``: talk to an agent in the terminal, and keep typing while it works.

The conversation is a session in a local SQLite file; starting the chat again with the same
``--store`` and ``--session`` resumes it, and carries on a turn that a crash left halfway.

While the agent is idle, a line starts a turn. While it works:

==============  ==================================================================
a plain line    a steer: it joins the turn at its next step (shown when taken)
``/queue TEXT`` TEXT waits and becomes the next turn
``/stop``       stops the turn now (Ctrl-C too)
``/quit``       stops the turn and leaves
==============  ==================================================================

At the end of input (Ctrl-D, or a pipe) the chat answers the running and queued turns, then
leaves.

A steer is left in the session's store, so one typed just as the agent writes its final
answer is not lost: it is answered as a turn of its own right after. ``/help`` lists this.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from steerable.cli.terminal import PROMPT, PromptTerminal, Terminal, short
from steerable.compaction import compact, compaction_of, is_context_overflow
from steerable.errors import ProviderError, UsageError
from steerable.messages import Message, user
from steerable.models.base import Model, ModelSettings
from steerable.runner import Result, Run, Runner, Spec
from steerable.session import Session, open_session
from steerable.tools import Tool, ToolFunction

__all__ = ["HOW_TO_CONFIGURE", "ChatOptions", "Conversation", "chat", "load_tools"]

HOW_TO_CONFIGURE = """\
steerable chat: no model is configured.

Name one with --model (or the STEERABLE_MODEL environment variable) and set its key:

  export OPENAI_API_KEY=sk-...         steerable chat --model openai:gpt-5-mini
  export ANTHROPIC_API_KEY=sk-ant-...  steerable chat --model anthropic:claude-sonnet-4-5

A server that speaks OpenAI's Chat Completions (vLLM, Ollama, LM Studio, llama.cpp):

  steerable chat --model openai:llama3.1 --base-url http://localhost:11434/v1

(or set OPENAI_BASE_URL). Some servers need --tool-choice auto, some --no-stream too.

See docs/models.md for the providers and docs/chat.md for the chat's commands.
"""

STOPPED = "steerable.chat.stopped"
"""The session metadata key (``set_metadata``) holding the id of the last message of the
turn the user stopped: a turn left halfway that ends there is not carried on unasked."""

HELP = """\
  a line while the agent works: a steer, joining the turn at its next step
  /queue TEXT   make TEXT the next turn        /stop   stop the turn (Ctrl-C)
  /quit         leave now (Ctrl-D: when done)  /help   this
  /compact      summarize the conversation so far; the model is sent the summary from then on
"""


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """What ``steerable chat`` was asked for."""

    store: Path
    session: str = "chat"
    model: str | None = None
    base_url: str | None = None
    tools: tuple[str, ...] = ()
    instructions: str | None = None
    max_steps: int = 32
    tool_choice: Literal["auto", "required", "none"] | None = None
    stream: bool = True
    max_tokens: int | None = None
    temperature: float | None = None


def load_tools(spec: str) -> list[Tool | ToolFunction]:
    """The tools ``module:attribute`` names (a dotted module or a ``.py`` path).

    The attribute is a tool, a function, or a list of them.
    """
    value = import_attribute(spec, "--tools", "module:attribute, like examples.tools.slow:TOOLS")
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, Tool) and not callable(item):
            raise UsageError(f"--tools {spec}: {item!r} is not a tool or a function")
    return items


def import_attribute(spec: str, flag: str, shape: str) -> Any:
    """The attribute ``module:attribute`` names (a dotted module or a ``.py`` path), or a
    :class:`UsageError` in one line naming ``flag``; ``shape`` says what the flag takes."""
    where, colon, name = spec.rpartition(":")
    if not colon or not where or not name:
        raise UsageError(f"{flag} takes {shape}, not {spec!r}")
    try:
        module = _import(where)
    except Exception as exc:  # the user's module: what it raised, in one line
        raise UsageError(
            f"{flag} {spec}: cannot import {where!r}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        return getattr(module, name)
    except AttributeError:
        raise UsageError(f"{flag} {spec}: {where!r} has no attribute {name!r}") from None


def _import(where: str) -> Any:
    if where.endswith(".py"):
        path = Path(where).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no module at {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    if os.getcwd() not in sys.path:  # `examples.tools.slow` from a checkout, as python -m would
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(where)


async def chat(options: ChatOptions, *, out: TextIO | None = None) -> int:
    """Run the chat on the terminal until ``/quit`` or end of input; the exit status.

    The status is 0, or 1 when the last turn failed (a piped question that got no answer),
    or 2 for a chat that could not start (no model, no key, bad tools).
    """
    tty = out is None and sys.stdin.isatty() and sys.stdout.isatty()
    if tty and importlib.util.find_spec("prompt_toolkit") is None:
        tty = False
        print(
            "steerable chat: pip install 'steerable[chat]' keeps what you type apart from"
            " the answer",
            file=sys.stderr,
        )
    out = out or sys.stdout
    model_name = options.model or os.environ.get("STEERABLE_MODEL")
    if not model_name:
        print(HOW_TO_CONFIGURE, file=sys.stderr, end="")
        return 2
    from steerable.models.registry import model_from_string
    from steerable.stores.sqlite import SQLiteStore

    try:
        tools = [t for spec in options.tools for t in load_tools(spec)]
        Spec(tools=tools)  # a bad tool is told now, not at the first turn
    except UsageError as exc:
        print(f"steerable chat: {exc}", file=sys.stderr)
        return 2
    try:
        model = model_from_string(model_name, base_url=options.base_url, **_model_options(options))
    except UsageError as exc:
        print(f"steerable chat: {exc}\n", file=sys.stderr)
        print(HOW_TO_CONFIGURE.split("\n", 1)[1], file=sys.stderr, end="")
        return 2
    async with model, SQLiteStore(options.store) as store:
        session = open_session(options.session, store)
        spec = Spec(
            tools=tools,
            instructions=options.instructions,
            session=session,
            max_steps=options.max_steps,
            settings=ModelSettings(temperature=options.temperature, max_tokens=options.max_tokens),
        )
        terminal = PromptTerminal(out) if tty else Terminal(out)
        terminal.whole_replies = not options.stream
        take_notices = getattr(model, "take_notices", None)
        if callable(take_notices):
            terminal.notices = take_notices
        conversation = Conversation(session, spec, model, terminal)
        await conversation.greet(model_name, options.store)
        with terminal.reading():
            await conversation.main()
    return 1 if conversation.last is not None and conversation.last.reason == "failed" else 0


def _model_options(options: ChatOptions) -> dict[str, Any]:
    """The Chat Completions settings asked for; other APIs refuse them, by name."""
    chosen: dict[str, Any] = {}
    if options.tool_choice is not None:
        chosen["tool_choice"] = options.tool_choice
    if not options.stream:
        chosen["stream"] = False
    return chosen


class Conversation:
    """The chat's turns over one session."""

    def __init__(self, session: Session, spec: Spec, model: Model, terminal: Terminal) -> None:
        self.session = session
        self.spec = spec
        self.model = model
        self.terminal = terminal
        self.queued: list[str] = []
        self.quitting = False  # /quit: leave now
        self.compacting = False  # /compact typed during a turn: once it ends
        self.input_ended = False  # end of input: leave once the work asked for is done
        self.run: Run | None = None
        self.last: Result | None = None  # the last turn's result
        self._line: asyncio.Task[str | None] | None = None

    async def greet(self, model_name: str, store: Path) -> None:
        """Say what the chat is on, and how far a resumed session got.

        Before the input line is up: a prompt drawn before these lines would stay above them.
        """
        note = self.terminal.note
        note(f"steerable chat: session {self.session.id!r} in {store}, model {model_name}")
        note("Type while the agent works to steer it; /help for the commands.")
        messages = await self.session.messages()
        if messages:
            note(f"resumed: {len(messages)} messages so far")
            last = next((m for m in reversed(messages) if m.role == "assistant" and m.text), None)
            if last is not None:
                note(f"  last answer: {short(last.text)}")

    async def main(self) -> None:
        """Carry on an interrupted turn, then take turns until /quit or the end of input."""
        note = self.terminal.note
        messages = await self.session.messages()
        with self._interrupts():
            if (messages and _mid_turn(messages[-1])) or await self.session.steers():
                if await self._stopped_by_user(messages):
                    carry = await self._ask_to_carry_on()
                else:  # the chat was killed mid-turn: carry it on, unasked
                    note("carrying on the interrupted turn")
                    carry = True
                if carry:
                    await self.turn(messages)
            while not self.quitting:
                if self.compacting:
                    self.compacting = False
                    await self._compact()
                text = await self._next_prompt()
                if text is None:
                    break
                messages = await self.session.messages()
                await self.turn([*messages, user(text)])

    async def _next_prompt(self) -> str | None:
        """The next turn's text: a queued one, or a line typed at the prompt."""
        while True:
            if self.queued:
                text = self.queued.pop(0)
                self.terminal.note(f"{PROMPT}{text}  (queued)", dim=False)
                return text
            if self.input_ended:
                return None
            self.terminal.prompt()
            line = await self._read_line()
            self.terminal.typed()
            if line is None or line.strip() == "/quit":
                self.quitting = True
                return None
            command, _, rest = line.strip().partition(" ")
            if command == "/queue" and rest.strip():
                return rest.strip()
            if command == "/help":
                self.terminal.block(HELP)
            elif command == "/stop":
                self.terminal.note("  nothing to stop")
            elif command == "/compact":
                await self._compact()
            elif command.startswith("/"):
                self.terminal.note(f"  unknown command {command}; /help lists them")
            elif line.strip():
                return line.strip()

    async def _compact(self) -> None:
        """Summarize the conversation into the transcript (steerable.compaction)."""
        self.terminal.note("  summarizing the conversation so far...")
        try:
            summary = await compact(self.session, self.model, settings=self.spec.settings)
        except (UsageError, ProviderError) as exc:
            self.terminal.note(f"  [not compacted] {exc}", dim=False)
            return
        words = len(summary.text.split())
        self.terminal.note(
            f"  [compacted] the model is sent a summary of {words} words from now on;"
            " every message is still in the store"
        )

    async def _mark_stopped(self, transcript: Sequence[Message]) -> None:
        """Record in the session's metadata that the user stopped the turn (/stop, /quit,
        Ctrl-C) that ``transcript`` ends: started again, the chat asks before carrying it on,
        while a turn the chat was killed in is carried on unasked."""
        store = self.session.store
        status, set_metadata = getattr(store, "status", None), getattr(store, "set_metadata", None)
        if not transcript or not callable(status) or not callable(set_metadata):
            return
        try:
            metadata = dict((await status(self.session.id, limit=1)).metadata)
            metadata[STOPPED] = transcript[-1].id
            await set_metadata(self.session.id, metadata)
        except Exception as exc:  # the turn is stored; only the question at restart is lost
            self.terminal.note(f"  [error] could not record the stop: {exc}", dim=False)

    async def _stopped_by_user(self, messages: Sequence[Message]) -> bool:
        """Whether the turn ``messages`` leave halfway is one the user stopped."""
        status = getattr(self.session.store, "status", None)
        if not messages or not callable(status):
            return False
        metadata = (await status(self.session.id, limit=1)).metadata
        return bool(metadata.get(STOPPED) == messages[-1].id)

    async def _ask_to_carry_on(self) -> bool:
        """Whether to carry on a turn the user stopped: asked on a terminal; piped input
        cannot be asked, and carries it on as it always did."""
        note = self.terminal.note
        if not self.terminal.interactive:
            note("carrying on the turn you stopped (no terminal to ask)")
            return True
        note("the last turn was stopped before it ended: carry it on? [y/N]", dim=False)
        while True:
            self.terminal.prompt()
            line = await self._read_line()
            self.terminal.typed()
            answer = (line or "").strip().lower()
            if line is None or answer == "/quit":
                self.quitting = True
                return False
            if answer in ("y", "yes"):
                note("carrying on the stopped turn")
                return True
            if answer in ("", "n", "no"):
                note("  left as it was: the next line you type starts a new turn")
                return False
            note("  y carries the stopped turn on; n (or Enter) leaves it as it was")

    async def _read_line(self) -> str | None:
        if self.input_ended:
            return None
        if self._line is None:
            self._line = asyncio.ensure_future(self.terminal.lines.get())
        line = await self._line
        self._line = None
        self.input_ended = line is None
        return line

    async def turn(self, messages: Sequence[Message]) -> None:
        """One turn: run, take lines as steers and commands while it works, report."""
        while True:
            result = await self._run(messages)
            if result.reason == "stopped":
                await self._mark_stopped(result.transcript)
            waiting = await self.session.steers()
            if result.reason != "completed" or not waiting or self.quitting:
                if waiting:
                    self.terminal.note(f"  {len(waiting)} steer(s) wait; they join the next turn")
                return
            self.terminal.note("  a steer came after the last step: answering it now")
            messages = await self.session.messages()

    async def _run(self, messages: Sequence[Message]) -> Result:
        run = Runner.start(self.spec, messages, self.model, events=self.terminal.render)
        self.run = run
        self.terminal.working = True
        ended: asyncio.Future[Result] = asyncio.ensure_future(_result(run))
        try:
            while not ended.done():
                if self.input_ended:
                    await asyncio.wait({ended})
                    break
                if self._line is None:
                    self._line = asyncio.ensure_future(self.terminal.lines.get())
                waiting: set[asyncio.Future[Any]] = {ended, self._line}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if self._line.done():
                    line, self._line = self._line.result(), None
                    await self._during_turn(line, run)
            result = ended.result()
        finally:
            self.run = None
            self.terminal.working = False
        self.last = result
        self._report(result)
        return result

    async def _during_turn(self, line: str | None, run: Run) -> None:
        note = self.terminal.note
        if line is None:  # the turn, and any queued, are answered before the chat leaves
            self.input_ended = True
            return
        self.terminal.typed()
        if line.strip() == "/quit":
            self.quitting = True
            run.stop()
            return
        command, _, rest = line.strip().partition(" ")
        if command == "/stop":
            run.stop()
            note("  stopping the turn")
        elif command == "/queue":
            if rest.strip():
                self.queued.append(rest.strip())
                note("  queued as the next turn")
        elif command == "/help":
            self.terminal.block(HELP)
        elif command == "/compact":
            self.compacting = True
            note("  compacting once this turn ends")
        elif command.startswith("/"):
            note(f"  unknown command {command}; /help lists them")
        elif line.strip():
            await self.session.steer(line.strip())
            note("  [steer sent] it joins the turn at its next step")

    def _report(self, result: Result) -> None:
        self.terminal.say_notices()  # any the turn's last events did not show
        if result.reason == "completed" and not result.output.strip():
            # Frequent with small local models when tools are offered: say it, or the
            # screen shows nothing between the prompt and the usage line.
            self.terminal.note("  [the model's answer was empty]", dim=False)
        usage = result.usage
        # A server that reports no usage leaves the counts at 0: saying "0 tokens" would lie.
        if usage.input_tokens or usage.output_tokens:
            tokens = f"{usage.input_tokens} tokens in, {usage.output_tokens} out"
        else:
            tokens = "usage not reported"
        if result.reason == "failed":
            self.terminal.note(f"  [failed] {result.error}", dim=False)
            if is_context_overflow(result.error):
                self.terminal.note(
                    "  the conversation no longer fits the model's context: /compact"
                    " summarizes it (every message stays in the store), or start afresh"
                    " with --session NEW",
                    dim=False,
                )
        elif result.reason == "completed" and result.finish_reason == "length":
            self.terminal.note(f"  [cut short: the reply hit max_tokens] ({tokens})", dim=False)
        elif result.reason == "completed" and result.finish_reason == "content_filter":
            self.terminal.note(f"  [cut short by the provider's filter] ({tokens})", dim=False)
        elif result.reason == "completed":
            self.terminal.note(f"  ({tokens})")
        else:
            self.terminal.note(f"  [{result.reason.replace('_', ' ')}] ({tokens})", dim=False)

    @contextlib.contextmanager
    def _interrupts(self) -> Iterator[None]:
        """Ctrl-C stops a running turn, or leaves when none runs."""
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            if self.run is not None and not self.run.done():
                self.run.stop()
                return
            self.quitting = True
            self.terminal.lines.put_nowait(None)

        self.terminal.interrupt = interrupt  # a terminal in raw mode sends no SIGINT
        try:
            loop.add_signal_handler(signal.SIGINT, interrupt)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)


async def _result(run: Run) -> Result:
    return await run


def _mid_turn(last: Message) -> bool:
    """Whether a transcript ending with ``last`` stopped in the middle of a turn.

    Any user message at the end is unanswered: tool results, a steer, or the turn's own
    prompt (the loop saves it before the first request, so a chat killed during its first
    request or tool call leaves exactly that). A compaction (``/compact``) is not one.
    """
    return last.role == "user" and compaction_of(last) is None
