"""A store that keeps every record in the process: the third backend of the store seam.

:class:`InMemoryStore` meets :class:`~sandbox_memory.stores.files.MemoryStore` with dictionaries, so
the rules that run over the seam (phase 2's, the commands', :class:`~sandbox_memory.stores.files.
LayoutEdit`) can be tested in microseconds, and so the conformance suite
(``tests/test_store_conformance.py``) shows what a new backend has to provide: the same cases
run against this store and the workspace files (:class:`~sandbox_memory.stores.files.Store`).

Recorded segments are part of the seam here (:meth:`InMemoryStore.append_segment`): the
workspace store finds them in ``sessions/`` instead, where the recorder appends them. Nothing
is shared between processes; the lease is an in-process lock with the same interface.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import AsyncIterator, Iterable, Mapping

from ..errors import MemoryLockTimeout
from .records import (
    LAYOUT_CHANGE_KEYS_KEPT,
    LAYOUT_CHANGES_KEPT,
    TAIL_BYTES,
    ConversationMemory,
    CopyRetraction,
    Defaults,
    Entry,
    LayoutChange,
    LayoutHead,
    LayoutMemory,
    LogRecord,
    Registry,
    RolloutProgress,
)
from .seam import Lease, MemoryStore, RolloutFlags, StoredRecords


class InMemoryLease(Lease):
    """The layout's lease for one :class:`InMemoryStore`: one holder at a time, waiters give
    up after ``timeout`` seconds with :class:`~sandbox_memory.errors.MemoryLockTimeout`."""

    def __init__(self, lock: asyncio.Lock, *, timeout: float, where: str) -> None:
        self._lock = lock
        self._timeout = timeout
        self._where = where
        self._held = False

    async def acquire(self) -> None:
        try:
            await asyncio.wait_for(self._lock.acquire(), timeout=self._timeout)
        except asyncio.TimeoutError:
            raise MemoryLockTimeout(
                f"the lease of the {self._where} is held for more than {self._timeout:.0f}s "
                "(generate.lock_timeout_seconds)"
            ) from None
        self._held = True

    async def release(self) -> None:
        if self._held:
            self._held = False
            self._lock.release()

    async def check(self) -> None:
        """Held until released: a lock of this process cannot be taken over."""


class InMemoryStore(MemoryStore):
    """Every record in dictionaries of this object (see the module docstring)."""

    def __init__(self) -> None:
        self._head = LayoutHead(format=2)
        self._layout: dict[str, str] = {}
        """Key -> the entry's JSON: handed out parsed afresh, so callers never share it."""
        self._cites: dict[str, set[str]] = {}
        self._registry = Registry()
        self._conversations: dict[str, str] = {}
        self._holders: dict[str, set[str]] = {}
        self._defaults: Defaults | None = None
        self._log: list[LogRecord] = []
        self._progress: dict[str, RolloutProgress] = {}
        self._forgotten: dict[str, RolloutProgress] = {}
        self._segments: dict[str, bytearray] = {}
        self._pending: set[str] = set()
        self._unindexed: set[str] = set()
        self._threads: dict[str, str] = {}
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------ segments

    async def append_segment(self, rollout_id: str, line: bytes) -> None:
        """Record one segment line of ``rollout_id`` (what the recorder appends to
        ``sessions/<id>.jsonl`` on the workspace store) and flag the rollout as pending."""

        self._segments.setdefault(rollout_id, bytearray()).extend(line)
        self._pending.add(rollout_id)

    async def read_segments(self, rollout_id: str, offset: int = 0) -> bytes:
        """The recorded bytes of ``rollout_id`` from ``offset`` on."""

        return bytes(self._segments.get(rollout_id, b"")[offset:])

    def _tail(self, rollout_id: str, offset: int) -> str | None:
        data = self._segments.get(rollout_id, bytearray())
        if offset <= 0 or offset > len(data):
            return None
        return hashlib.sha256(bytes(data[max(0, offset - TAIL_BYTES) : offset])).hexdigest()[:16]

    # -------------------------------------------------------------- layout

    async def layout_head(self) -> LayoutHead:
        return self._head.model_copy(deep=True)

    async def layout_entries(self, keys: Iterable[str]) -> dict[str, Entry]:
        return {
            key: Entry.model_validate_json(self._layout[key])
            for key in dict.fromkeys(keys)
            if key in self._layout
        }

    async def layout_for_reading(self) -> LayoutMemory:
        entries = {k: Entry.model_validate_json(v) for k, v in self._layout.items()}
        return LayoutMemory(version=self._head.version, entries=entries)

    async def layout_changes(self, since: str) -> tuple[str, set[str] | None]:
        now = self._head.stamp
        if not since or not now:
            return now, None
        steps = {c.stamp: c for c in self._head.changes}
        keys: set[str] = set()
        stamp = now
        while stamp != since:
            step = steps.pop(stamp, None)
            if step is None or step.keys is None:
                return now, None
            keys.update(step.keys)
            stamp = step.before
        return now, keys

    async def layout_parts(self) -> AsyncIterator[Iterable[Entry]]:
        yield (await self.layout_for_reading()).entries.values()

    async def layout_citing(self, conversations: Iterable[str]) -> set[str]:
        found: set[str] = set()
        for rid in set(conversations):
            found |= self._cites.get(rid, set())
        return found

    async def commit_layout(
        self,
        *,
        version: int,
        put: Mapping[str, Entry],
        delete: Iterable[str] = (),
        log: Iterable[LogRecord] = (),
        copies: Iterable[CopyRetraction] = (),
        whole: bool = False,
    ) -> LayoutHead:
        gone = [k for k in dict.fromkeys(delete) if k not in put]
        self._log.extend(log)
        for key, entry in put.items():
            self._layout[key] = entry.model_dump_json()
            for source in entry.sources:
                self._cites.setdefault(source.conversation, set()).add(key)
        for key in gone:
            self._layout.pop(key, None)
        keys = sorted({*put, *gone})
        stamp = secrets.token_hex(8)
        changes = [
            *self._head.changes,
            LayoutChange(
                stamp=stamp,
                before=self._head.stamp,
                keys=None if whole or len(keys) > LAYOUT_CHANGE_KEYS_KEPT else keys,
            ),
        ]
        while len(changes) > LAYOUT_CHANGES_KEPT or (
            len(changes) > 1 and sum(len(c.keys or ()) for c in changes) > LAYOUT_CHANGE_KEYS_KEPT
        ):
            changes.pop(0)
        self._head = LayoutHead(version=version, stamp=stamp, changes=changes, format=2)
        await self._retract(put, copies)
        return await self.layout_head()

    async def recover_layout(self) -> None:
        """Nothing to recover: a commit here is applied whole or not at all."""

    async def layout_damaged(self) -> bool:
        return self._head.stamp == ""

    # ------------------------------------------------------- conversations

    async def load_registry(self) -> Registry:
        return self._registry.model_copy(deep=True)

    async def save_registry(self, registry: Registry) -> None:
        self._registry = registry.model_copy(deep=True)

    async def load_conversation(self, rollout_id: str) -> ConversationMemory:
        raw = self._conversations.get(rollout_id)
        if raw is None:
            return ConversationMemory(rollout_id=rollout_id)
        return ConversationMemory.model_validate_json(raw)

    async def save_conversation(self, memory: ConversationMemory) -> None:
        memory.updated_at = int(time.time() * 1000)
        self._conversations[memory.rollout_id] = memory.model_dump_json()
        for key in memory.entries:
            self._holders.setdefault(key, set()).add(memory.rollout_id)

    async def conversation_exists(self, rollout_id: str) -> bool:
        return rollout_id in self._conversations

    async def scopes_with_memory(self) -> set[str]:
        return {f"conversation:{rid}" for rid in self._conversations}

    async def conversations_holding(self, key: str) -> list[str] | None:
        return sorted(self._holders.get(key, set()))

    async def note_holders(self, memories: Iterable[ConversationMemory]) -> None:
        for memory in memories:
            for key in memory.entries:
                self._holders.setdefault(key, set()).add(memory.rollout_id)

    async def list_conversations(self) -> list[str]:
        return sorted({*self._conversations, *self._progress})

    async def load_defaults(self) -> Defaults | None:
        return None if self._defaults is None else self._defaults.model_copy()

    async def save_defaults(self, defaults: Defaults) -> None:
        self._defaults = defaults.model_copy()

    # ----------------------------------------------------------------- log

    async def append_log(self, record: LogRecord) -> None:
        self._log.append(record.model_copy(deep=True))

    async def read_log(self) -> list[LogRecord]:
        return [r.model_copy(deep=True) for r in self._log]

    async def replace_log(self, records: Iterable[LogRecord]) -> None:
        self._log = [r.model_copy(deep=True) for r in records]

    async def every_record(self) -> StoredRecords:
        return StoredRecords(
            conversations=sorted(self._conversations),
            rollouts=sorted({*self._progress, *self._forgotten}),
            threads=sorted(self._threads),
        )

    # ------------------------------------------------------------ progress

    async def get_progress(self, rollout_id: str) -> RolloutProgress | None:
        live = self._progress.get(rollout_id)
        if live is not None:
            return live.model_copy()
        gone = self._forgotten.get(rollout_id)
        return None if gone is None else gone.model_copy(update={"forgotten": True})

    async def put_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        self._progress[rollout_id] = progress.model_copy(update={"forgotten": False})
        self._forgotten.pop(rollout_id, None)

    async def forget_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        self._forgotten[rollout_id] = RolloutProgress(
            offset=progress.offset, updated_at=progress.updated_at
        )
        self._progress.pop(rollout_id, None)

    async def list_progress(self) -> dict[str, RolloutProgress]:
        return {rid: p.model_copy() for rid, p in self._progress.items()}

    async def pending_rollouts(self) -> list[str]:
        pending: list[str] = []
        for rid in sorted(self._segments):
            prog = await self.get_progress(rid)
            if prog is None:
                self._pending.add(rid)
                pending.append(rid)
                continue
            if rid not in self._pending:
                continue
            size = len(self._segments[rid])
            if size != prog.offset or (
                prog.tail is not None and self._tail(rid, prog.offset) != prog.tail
            ):
                pending.append(rid)
                continue
            self._pending.discard(rid)  # read to its end: the search index looks at it next
            self._unindexed.add(rid)
        return pending

    async def mark_pending(self, rollout_id: str) -> None:
        self._pending.add(rollout_id)

    async def changed_rollouts(self) -> RolloutFlags | None:
        return RolloutFlags(pending=set(self._pending), unindexed=set(self._unindexed))

    async def rollouts_indexed(self, rollout_ids: Iterable[str]) -> None:
        self._unindexed.difference_update(rollout_ids)

    async def flag_unindexed(self, rollout_ids: Iterable[str]) -> None:
        self._unindexed.update(rollout_ids)

    # ------------------------------------------------------------- threads

    async def thread_for(self, fingerprint: str) -> str | None:
        return self._threads.get(fingerprint)

    async def index_thread(self, fingerprint: str, rollout_id: str) -> None:
        self._threads[fingerprint] = rollout_id

    # --------------------------------------------------------------- lease

    def lease(self, *, timeout: float, lease: float) -> InMemoryLease:
        _ = lease  # an in-process holder cannot vanish without releasing
        return InMemoryLease(self._lock, timeout=timeout, where="in-memory store")
