"""A LangGraph checkpointer over any steerable store: :class:`SteerableSaver`.

Each thread is one session of the store (``prefix`` + thread id) holding an append-only
log of checkpoint records (:mod:`._saver_log`). Each ``put`` and ``put_writes`` is one
``Store.save`` at the position the saver last saw, so it is atomic, and a writer that
another process got ahead of gets a :class:`TranscriptConflict`, reloads the thread and
builds its record again (:mod:`._saver_threads`). The big list channel (the messages) is
stored as the items each step added, so a step writes what it added, not the whole
conversation as LangGraph's own savers do.

Reads keep a process-local copy of each thread's folded log. Before it is used, an empty
save at its length checks that no other process wrote since (one statement); if one did,
the thread is loaded again. So the copy is a cache, never a second truth; there is one per
event loop the saver runs on. ``list(None)`` lists every thread of the saver's index
(:mod:`._saver_index`). The sync methods run the async ones on a loop chosen by
:mod:`._saver_sync`. This module is LangGraph's interface: what each call stores and how
a stored checkpoint reads back.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import weakref
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from steerable.errors import UsageError
from steerable.integrations.langgraph._saver_log import (
    MISSING,
    Saved,
    ThreadLog,
    decode,
    pack,
    record,
    same,
)
from steerable.integrations.langgraph._saver_sync import SyncCalls
from steerable.integrations.langgraph._saver_threads import Lists, Threads
from steerable.messages import Message
from steerable.store import Store

__all__ = ["SteerableSaver"]

T = TypeVar("T")


class SteerableSaver(BaseCheckpointSaver[str]):
    """LangGraph's ``BaseCheckpointSaver`` over a steerable :class:`~steerable.Store`.

    ``prefix`` is put before each thread id to name its session (keep checkpoint logs
    apart from conversations in one store); ``serde`` is LangGraph's serializer (its
    ``JsonPlusSerializer`` by default); ``cache`` is how many threads' logs one process
    keeps (per event loop). Both interfaces work: the async one (``ainvoke``, ``astream``)
    on any loop, the sync one (``invoke``, ``get_state``) in a plain program and from any
    thread, on the loop :mod:`._saver_sync` picks; a store bound to a loop that is gone is
    a :class:`UsageError` saying so. ``list(None)`` lists every thread the saver's index
    holds (none for the prefix ``""``: a :class:`UsageError`). ``delete_for_runs`` is not
    provided: LangGraph's base class raises ``NotImplementedError`` for it (its conformance
    suite reports it absent), sync or async.
    """

    def __init__(
        self,
        store: Store,
        *,
        prefix: str = "langgraph:",
        serde: SerializerProtocol | None = None,
        cache: int = 128,
    ) -> None:
        super().__init__(serde=serde)
        if not isinstance(store, Store):
            raise UsageError(f"SteerableSaver needs a steerable Store, not {type(store).__name__}")
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise UsageError(f"prefix is a str without NUL, not {prefix!r}")
        if type(cache) is not int or cache < 1:
            raise UsageError(f"cache is an int >= 1, not {cache!r}")
        self.store = store
        self.prefix = prefix
        self._cache = cache
        self._calls = SyncCalls(store)
        # one Threads per event loop: its locks and kept logs belong to that loop
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Threads]
        self._by_loop = weakref.WeakKeyDictionary()
        self._by_loop_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SteerableSaver({self.store!r}, prefix={self.prefix!r})"

    @property
    def _threads(self) -> Threads:
        """The running loop's :class:`Threads`; that loop is now the sync methods' home."""
        loop = asyncio.get_running_loop()
        self._calls.used(loop)
        with self._by_loop_lock:
            threads = self._by_loop.get(loop)
            if threads is None:
                threads = self._by_loop[loop] = Threads(self.store, self.prefix, self._cache)
        return threads

    # -- the async interface --------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the latest)."""
        thread, ns, checkpoint_id = _address(config)
        log = await self._threads.read(thread)
        saved = log.find(ns, checkpoint_id)
        return None if saved is None else self._tuple(log, thread, ns, saved)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Checkpoints newest first (by id): of ``config``'s thread, or (None) of every
        thread the saver's index holds; ``filter`` keeps those whose metadata has each of
        its keys equal to its value, ``before`` those older than its checkpoint, ``limit``
        the first so many."""
        if limit is not None and (type(limit) is not int or limit < 0):
            raise UsageError(f"list's limit is None or an int >= 0, not {limit!r}")
        if filter is not None and not isinstance(filter, dict):
            raise UsageError(f"list's filter is None or a dict, not {type(filter).__name__}")
        configurable = {} if config is None else config.get("configurable", {})
        wanted_ns = configurable.get("checkpoint_ns")
        wanted_id = configurable.get("checkpoint_id")
        bound = before["configurable"].get("checkpoint_id") if before else None
        here = self._threads
        threads = await self._threads_to_list(here) if config is None else [_thread(config)]
        found: list[tuple[str, str, str, Saved, ThreadLog]] = []
        for thread in threads:
            log = await here.read(thread)
            found += [
                (saved.id, thread, ns, saved, log)
                for ns, saved_of_ns in log.checkpoints.items()
                if wanted_ns is None or ns == wanted_ns
                for saved in saved_of_ns.values()
                if (wanted_id is None or saved.id == wanted_id)
                and (bound is None or saved.id < bound)
            ]
        found.sort(key=lambda item: item[0], reverse=True)  # stable: threads in index order
        count = 0
        for _, thread, ns, saved, log in found:
            if limit is not None and count >= limit:
                return
            if filter:
                metadata = self.serde.loads_typed(saved.metadata)
                if any(metadata.get(k) != v for k, v in filter.items()):
                    continue
            count += 1
            yield self._tuple(log, thread, ns, saved)

    async def _threads_to_list(self, here: Threads) -> list[str]:
        if here.index is None:
            raise UsageError(
                "SteerableSaver.list(None) lists the threads of the saver's index, which lives"
                " in the session named by its prefix: a saver with prefix '' keeps none; give"
                " list a config with a thread_id, or the saver a prefix"
            )
        return await here.index.threads()

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint``: one record, the new channel versions in it (lists as deltas)."""
        thread, ns, parent = _address(config)
        stored: dict[str, Any] = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        values = checkpoint["channel_values"]
        head = {
            "kind": "checkpoint",
            "ns": ns,
            "id": checkpoint["id"],
            "parent": parent,
            "checkpoint": pack(self.serde.dumps_typed(stored)),
            "metadata": pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))),
        }
        text = f"checkpoint {checkpoint['id']} step {metadata.get('step')} ns {ns!r}"

        def build(log: ThreadLog) -> tuple[list[Message], Lists]:
            base = log.find(ns, parent) if parent is not None else None
            entries: dict[str, Any] = {}
            lists: Lists = []
            for channel, version in new_versions.items():
                key = str(version)
                if channel not in values:
                    entries[channel] = {"v": key, "empty": True}
                    continue
                value = values[channel]
                entries[channel] = self._entry(log, ns, channel, key, value, base)
                if isinstance(value, list):
                    lists.append((ns, channel, key, list(value)))
            return [record({**head, "values": entries}, text)], lists

        await self._threads.write(thread, build)
        return {
            "configurable": {
                "thread_id": thread,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes against the checkpoint ``config`` names: one record."""
        thread, ns, checkpoint_id = _address(config)
        if checkpoint_id is None:
            raise UsageError("put_writes needs a config with a checkpoint_id")
        body = {
            "kind": "writes",
            "ns": ns,
            "checkpoint": checkpoint_id,
            "task": task_id,
            "path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(channel, idx), channel, pack(self.serde.dumps_typed(value))]
                for idx, (channel, value) in enumerate(writes)
            ],
        }
        message = record(body, f"{len(writes)} writes of task {task_id} at {checkpoint_id}")
        await self._threads.write(thread, lambda log: ([message], []))

    async def adelete_thread(self, thread_id: str) -> None:
        """Forget the thread: a record after which its log reads as empty (no space freed)."""
        thread = _check_thread(thread_id)
        deleted = record({"kind": "deleted"}, "thread deleted")
        await self._threads.write(thread, lambda log: ([] if log.empty() else [deleted], []))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's latest checkpoint; ``delete``: forget all."""
        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"prune's strategy is 'keep_latest' or 'delete', not {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self.adelete_thread(thread_id)
                continue

            def build(log: ThreadLog) -> tuple[list[Message], Lists]:
                bodies = [
                    {"kind": "pruned", "ns": ns, "keep": [max(saved)]}
                    for ns, saved in log.checkpoints.items()
                    if len(saved) > 1
                ]
                return [record(b, f"pruned ns {b['ns']!r}") for b in bodies], []

            await self._threads.write(_check_thread(thread_id), build)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append the source thread's live checkpoints and writes to the target, in one save."""
        source = await self._threads.read(_check_thread(source_thread_id))
        copies = source.replay(self.serde)
        await self._threads.write(_check_thread(target_thread_id), lambda log: (list(copies), []))

    # -- the sync interface: the async one, run on a loop (:mod:`._saver_sync`) --------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`aget_tuple`, run on the loop :mod:`._saver_sync` picks."""
        return self._sync(self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """:meth:`alist`, run on the loop :mod:`._saver_sync` picks."""

        async def collect() -> list[CheckpointTuple]:
            found = self.alist(config, filter=filter, before=before, limit=limit)
            return [item async for item in found]

        yield from self._sync(collect())

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`aput`, run on the loop :mod:`._saver_sync` picks."""
        return self._sync(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`aput_writes`, run on the loop :mod:`._saver_sync` picks."""
        self._sync(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """:meth:`adelete_thread`, run on the loop :mod:`._saver_sync` picks."""
        self._sync(self.adelete_thread(thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`aprune`, run on the loop :mod:`._saver_sync` picks."""
        self._sync(self.aprune(thread_ids, strategy=strategy))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`acopy_thread`, run on the loop :mod:`._saver_sync` picks."""
        self._sync(self.acopy_thread(source_thread_id, target_thread_id))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next version: a zero-padded counter, then random digits.

        The random part keeps two forks of one checkpoint from giving one version key to
        two different values (a version names a stored value here, as in the SQL savers).
        """
        # an int too (a thread stored by a saver of int versions): str() reads both
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:032}.{secrets.randbelow(10**16):016}"

    # -- the machinery --------------------------------------------------------------------

    def _entry(
        self, log: ThreadLog, ns: str, channel: str, key: str, value: Any, base: Saved | None
    ) -> dict[str, Any]:
        """A channel's new version: the items added to its parent's list, else the value."""
        if isinstance(value, list) and base is not None:
            old = base.versions(self.serde).get(channel)
            if old is not None:
                before = log.value(self.serde, ns, channel, str(old))
                if isinstance(before, list) and same(before, value):
                    added = self.serde.dumps_typed(value[len(before) :])
                    return {"v": key, "base": str(old), "append": pack(added)}
        return {"v": key, "full": pack(self.serde.dumps_typed(value))}

    def _tuple(self, log: ThreadLog, thread: str, ns: str, saved: Saved) -> CheckpointTuple:
        checkpoint: Any = self.serde.loads_typed(saved.checkpoint)
        values: dict[str, Any] = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            value = log.value(self.serde, ns, channel, str(version))
            if value is not MISSING:
                values[channel] = value
        checkpoint["channel_values"] = values
        parent = None
        if saved.parent is not None:
            parent = _config(thread, ns, saved.parent)
        writes = [
            (w.task, w.channel, self.serde.loads_typed(decode(w.value)))
            for w in log.pending(ns, saved.id)
        ]
        return CheckpointTuple(
            _config(thread, ns, saved.id),
            checkpoint,
            self.serde.loads_typed(saved.metadata),
            parent,
            writes,
        )

    def _sync(self, work: Coroutine[Any, Any, T]) -> T:
        return self._calls.run(work)


def _check_thread(thread_id: object) -> str:
    if isinstance(thread_id, bool) or not isinstance(thread_id, str | int) or thread_id == "":
        raise UsageError(f"a thread_id is a non-empty str (or an int), not {thread_id!r}")
    return str(thread_id)


def _thread(config: RunnableConfig) -> str:
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(configurable, dict) or "thread_id" not in configurable:
        raise UsageError("a checkpointer's config needs configurable.thread_id")
    return _check_thread(configurable["thread_id"])


def _address(config: RunnableConfig) -> tuple[str, str, str | None]:
    """The thread, namespace and checkpoint id (None: the latest) ``config`` names."""
    thread = _thread(config)
    configurable = config["configurable"]
    ns = configurable.get("checkpoint_ns") or ""
    checkpoint_id = configurable.get("checkpoint_id")
    return thread, str(ns), None if checkpoint_id is None else str(checkpoint_id)


def _config(thread: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    }
