"""One LangGraph thread as a steerable session: an append-only log of checkpoint records.

Every record is one message holding one ``Native("langgraph-checkpoint", data)`` part,
``data`` being a small JSON object whose ``kind`` says what it is:

- ``checkpoint``: a checkpoint of one namespace (``ns``), its ``parent`` id, the
  checkpoint itself without its channel values and its metadata (each as the saver's serde
  typed them, bytes in base64), and the channels this checkpoint gave a new version,
  ``values``: per channel its version and either ``full`` (the value), ``empty`` (the
  channel has no value at that version) or ``base`` + ``append``: a list channel (the
  messages) whose value at ``base`` is a prefix of the new one, stored as the items added
  since. A step's record therefore grows with what the step added, not with the thread.
- ``writes``: one ``put_writes`` call (a task's pending writes against one checkpoint).
- ``pruned``: every checkpoint of a namespace but the ones in ``keep`` is gone.
- ``deleted``: everything before this record is gone (``delete_thread``).

A log is only ever appended to, one record (or one batch) per store save, so a reader
that folds it in order (:class:`ThreadLog`) sees whole records or none. A checkpoint put
twice under one id, and a write stored twice, fold into one, the later checkpoint (as the
SQL savers' ``INSERT OR REPLACE``) and the first regular write (their ``INSERT OR IGNORE``;
the special channels, with negative indices, the later).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from steerable.errors import CorruptRecord
from steerable.messages import Message, Native

FRAMEWORK = "langgraph-checkpoint"
"""The ``Native.framework`` of every record of a checkpoint log."""

Typed = tuple[str, bytes]
"""A serde's ``dumps_typed``: its type name and bytes."""

Packed = tuple[str, str]
"""A :data:`Typed` as stored and checked, its bytes still in base64 (:func:`decode`)."""


class _Missing:
    """The value of a channel that has none at a version (empty, or never stored)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def pack(typed: Typed) -> list[str]:
    """A serde's ``(type, bytes)`` as JSON: the bytes in base64."""
    kind, data = typed
    return [kind, base64.b64encode(data).decode("ascii")]


def packed(value: object) -> Packed:
    """A stored value's shape checked; a malformed one is a :class:`CorruptRecord`.

    Its base64 is decoded only when the value is read (:func:`decode`): a thread's first
    records hold the whole input several times over (the input's write, the ``__start__``
    channel, the messages channel), and a read of the latest checkpoint needs one of them.
    """
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise CorruptRecord(f"a LangGraph checkpoint record holds a malformed value: {value!r:.80}")
    return value[0], value[1]


def decode(value: Packed) -> Typed:
    """A checked value's serde ``(type, bytes)``; bad base64 is a :class:`CorruptRecord`."""
    try:
        return value[0], base64.b64decode(value[1], validate=True)
    except binascii.Error as exc:
        raise CorruptRecord(f"a LangGraph checkpoint record holds bad base64: {exc}") from None


def unpack(value: object) -> Typed:
    """:func:`pack` undone: :func:`packed`, then :func:`decode`."""
    return decode(packed(value))


def record(body: dict[str, Any], text: str) -> Message:
    """The message that stores ``body`` in a thread's log; ``text`` is what a person reads."""
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return Message("assistant", (Native(FRAMEWORK, data, text),))


def body_of(message: Message) -> dict[str, Any] | None:
    """The record ``message`` holds, or None for a message that is no record of ours."""
    for part in message.natives(FRAMEWORK):
        try:
            body = json.loads(part.data)
        except ValueError as exc:
            raise CorruptRecord(f"message {message.id!r}: not JSON: {exc}") from None
        if not isinstance(body, dict) or not isinstance(body.get("kind"), str):
            raise CorruptRecord(f"message {message.id!r}: not a checkpoint record")
        return body
    return None


@dataclass
class Saved:
    """One stored checkpoint of a namespace: its record's parts, decoded when asked."""

    id: str
    parent: str | None
    checkpoint: Typed
    metadata: Typed
    _decoded: dict[str, Any] | None = None

    def versions(self, serde: SerializerProtocol) -> dict[str, Any]:
        """The checkpoint's ``channel_versions`` (decoded once: only the writer reads it)."""
        if self._decoded is None:
            self._decoded = serde.loads_typed(self.checkpoint)
        versions: dict[str, Any] = self._decoded.get("channel_versions", {})
        return versions


@dataclass
class Blob:
    """A channel's value at one version: ``full``, ``empty`` or a ``delta`` on ``base``."""

    kind: str
    data: Packed | None = None
    base: str | None = None
    items: list[Any] | None = None  # a delta's added items, decoded once

    def stored(self) -> Packed:
        """The packed value (``full``) or added items (``delta``); none is a corrupt record."""
        if self.data is None:
            raise CorruptRecord(f"a {self.kind} channel value has no data")
        return self.data


@dataclass
class Write:
    """One pending write of a task."""

    task: str
    idx: int
    channel: str
    value: Packed
    path: str


@dataclass
class ThreadLog:
    """A thread's log folded: what ``get_tuple`` and ``list`` read, and the writer's cache.

    ``length`` is the number of messages of the session folded so far: the position the
    next save must be at. ``values`` keeps, per channel of a namespace, the last list value
    materialized (its version and items), so the next step's delta is found without
    decoding the thread again.
    """

    length: int = 0
    checkpoints: dict[str, dict[str, Saved]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, str], Blob] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], Write]] = field(default_factory=dict)
    values: dict[tuple[str, str], tuple[str, list[Any]]] = field(default_factory=dict)

    def apply(self, messages: Sequence[Message]) -> None:
        """Fold ``messages`` (the next ones of the session, in order) into this log."""
        for message in messages:
            body = body_of(message)
            if body is not None:
                try:
                    self._apply(body)
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    why = f"message {message.id!r}: a malformed record: {exc!r}"
                    raise CorruptRecord(why) from None
        self.length += len(messages)

    def _apply(self, body: dict[str, Any]) -> None:
        kind = body["kind"]
        if kind == "checkpoint":
            ns = str(body["ns"])
            parent = body["parent"]
            saved = Saved(body["id"], parent, unpack(body["checkpoint"]), unpack(body["metadata"]))
            for channel, entry in body["values"].items():
                self.blobs[(ns, channel, entry["v"])] = _blob(entry)
            self.checkpoints.setdefault(ns, {})[saved.id] = saved
        elif kind == "writes":
            key = (str(body["ns"]), str(body["checkpoint"]))
            stored = self.writes.setdefault(key, {})
            for idx, channel, value in body["writes"]:
                write = Write(body["task"], int(idx), channel, packed(value), body["path"])
                if write.idx < 0 or (write.task, write.idx) not in stored:
                    stored[(write.task, write.idx)] = write
        elif kind == "pruned":
            ns, keep = str(body["ns"]), set(body["keep"])
            kept = {k: v for k, v in self.checkpoints.get(ns, {}).items() if k in keep}
            self.checkpoints[ns] = kept
            for key in [k for k in self.writes if k[0] == ns and k[1] not in keep]:
                del self.writes[key]
        elif kind == "deleted":
            self.checkpoints.clear()
            self.blobs.clear()
            self.writes.clear()
            self.values.clear()
        else:
            raise ValueError(f"unknown kind {kind!r}")

    def empty(self) -> bool:
        """Whether the thread has no checkpoint and no write."""
        return not any(self.checkpoints.values()) and not self.writes

    def find(self, ns: str, checkpoint_id: str | None) -> Saved | None:
        """The checkpoint ``checkpoint_id`` of ``ns``, or its latest (the greatest id)."""
        saved = self.checkpoints.get(ns, {})
        if checkpoint_id is not None:
            return saved.get(checkpoint_id)
        return saved[max(saved)] if saved else None

    def pending(self, ns: str, checkpoint_id: str) -> list[Write]:
        """The writes stored against a checkpoint, in ``writes_sort_key`` order."""
        writes = self.writes.get((ns, checkpoint_id), {}).values()
        return sorted(writes, key=lambda w: writes_sort_key(w.path, w.task, w.idx))

    def value(self, serde: SerializerProtocol, ns: str, channel: str, version: str) -> Any:
        """The channel's value at ``version`` (a fresh list for a list), or :data:`MISSING`.

        A delta is resolved by walking its bases back to a full value (or to the last list
        materialized), then adding each delta's items in order.
        """
        chain: list[Blob] = []
        key = version
        while True:
            cached = self.values.get((ns, channel))
            if cached is not None and cached[0] == key:
                base: Any = cached[1]
                break
            blob = self.blobs.get((ns, channel, key))
            if blob is None or blob.kind == "empty":
                if chain:
                    raise CorruptRecord(f"channel {channel!r}: a delta's base {key!r} is missing")
                return MISSING
            if blob.kind == "full":
                base = serde.loads_typed(decode(blob.stored()))
                break
            chain.append(blob)
            if len(chain) > len(self.blobs):
                raise CorruptRecord(f"channel {channel!r}: the deltas at {version!r} form a cycle")
            if blob.base is None:
                raise CorruptRecord(f"channel {channel!r}: a delta at {key!r} has no base")
            key = blob.base
        if not chain and not isinstance(base, list):
            return base
        items = list(base)
        for blob in reversed(chain):
            if blob.items is None:
                blob.items = list(serde.loads_typed(decode(blob.stored())))
            items.extend(blob.items)
        self.values[(ns, channel)] = (version, items)
        return list(items)

    def replay(self, serde: SerializerProtocol) -> list[Message]:
        """Records that rebuild this log's live state in another thread (for copy_thread)."""
        messages: list[Message] = []
        for ns, saved_of_ns in self.checkpoints.items():
            for saved in sorted(saved_of_ns.values(), key=lambda s: s.id):
                versions = saved.versions(serde)
                entries: dict[str, Any] = {}
                for channel, version in versions.items():
                    value = self.value(serde, ns, channel, str(version))
                    if value is not MISSING:
                        entries[channel] = {
                            "v": str(version),
                            "full": pack(serde.dumps_typed(value)),
                        }
                body: dict[str, Any] = {
                    "kind": "checkpoint",
                    "ns": ns,
                    "id": saved.id,
                    "parent": saved.parent,
                    "checkpoint": pack(saved.checkpoint),
                    "metadata": pack(saved.metadata),
                    "values": entries,
                }
                messages.append(record(body, f"checkpoint {saved.id} (copied)"))
        for (ns, checkpoint_id), writes in self.writes.items():
            for write in writes.values():
                copied = {
                    "kind": "writes",
                    "ns": ns,
                    "checkpoint": checkpoint_id,
                    "task": write.task,
                    "path": write.path,
                    "writes": [[write.idx, write.channel, list(write.value)]],
                }
                messages.append(record(copied, f"a write of task {write.task} (copied)"))
        return messages


def _blob(entry: dict[str, Any]) -> Blob:
    if "full" in entry:
        return Blob("full", packed(entry["full"]))
    if "append" in entry:
        return Blob("delta", packed(entry["append"]), base=str(entry["base"]))
    if entry.get("empty") is True:
        return Blob("empty")
    raise ValueError(f"a channel entry of no known form: {sorted(entry)}")


def same(left: Sequence[Any], right: Sequence[Any]) -> bool:
    """Whether ``left`` is a prefix of ``right``, item by item (identity first: cheap)."""
    if len(left) > len(right):
        return False
    for a, b in zip(left, right, strict=False):
        if a is b:
            continue
        try:
            if not bool(a == b):
                return False
        except Exception:  # an item whose == cannot answer: store the whole value
            return False
    return True
