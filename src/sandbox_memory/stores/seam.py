"""The store seam: :class:`MemoryStore`, the per-record operations memory needs whatever
holds the records, the :class:`Lease` it hands out, and :class:`LayoutEdit`, one change of
layout memory under that lease, which every backend shares.

Backends: :class:`.files.Store` (workspace files), :class:`.postgres_seam.PostgresMemoryStore`
(PostgreSQL), :class:`.memory.InMemoryStore` (in-process, for tests); each passes
``tests/test_store_conformance.py``.
"""

from __future__ import annotations

import abc
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Protocol, Self

from .records import (
    ConversationMemory,
    CopyRetraction,
    Defaults,
    Entry,
    LayoutHead,
    LayoutMemory,
    LogRecord,
    Registry,
    RolloutProgress,
)


class Lease(Protocol):
    """The layout's lease as :meth:`MemoryStore.lease` hands it out: ``async with`` holds it
    (or :meth:`acquire` and :meth:`release`); a waiter that cannot get it within its timeout
    raises :class:`~sandbox_memory.errors.MemoryLockTimeout`."""

    async def acquire(self) -> None: ...

    async def release(self) -> None: ...

    async def check(self) -> None:
        """Fencing, before a write only the holder may make: raise
        :class:`~sandbox_memory.errors.MemoryLeaseLost` when the lease was lost (taken over
        after it ran out); nothing when it is still held."""

    async def __aenter__(self) -> Self:
        """Acquire; a lease class that names :class:`Lease` as its base inherits this."""
        await self.acquire()
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.release()


class MemoryStore(abc.ABC):
    """The store seam: the per-record operations memory needs, whatever holds the records.

    Every operation touches the records it names (one conversation, one rollout's progress,
    one log line), so its cost is that of the new work, not of the history. :class:`Store`
    keeps the records as files in the workspace; a shared store (PostgreSQL) implements the
    same operations on tables.
    """

    fence: Callable[[], Awaitable[None]] | None = None
    """Set while the layout lease is held (``LayoutState.write_lock``): checks that the lease
    is still this holder's before the writes only it may make (a layout commit, a progress
    record); raises :class:`~sandbox_memory.errors.MemoryLeaseLost` if not. A backend whose
    lease carries its own fencing token may leave it unused."""

    retract_copies: Callable[[Entry, CopyRetraction], Awaitable[None]] | None = None
    """Set by the runtime: retracts a layout entry's copies in conversation memory, each
    logged before it is saved (done again after a crash, it changes nothing twice). Called by
    :meth:`commit_layout` for each of its ``copies`` once the layout change is made."""

    # --- layout memory, one entry (shard) at a time
    @abc.abstractmethod
    async def layout_head(self) -> LayoutHead:
        """Layout memory's version and change stamp (two small reads)."""

    @abc.abstractmethod
    async def layout_entries(self, keys: Iterable[str]) -> dict[str, Entry]:
        """The layout entries of ``keys`` that exist, read from their shards only: parsed
        for this call (the caller may change them; :class:`LayoutEdit` does)."""

    @abc.abstractmethod
    async def layout_for_reading(self) -> LayoutMemory:
        """All of layout memory, to read, never to change: parsed again only where its records
        changed since the last call (a shard whose bytes are the same is not parsed again)."""

    async def layout_view(
        self, *, person: str | None = None, acting: bool = False
    ) -> tuple[int, Mapping[str, Entry]]:
        """Layout memory's version and its entries, to read, never to change; with
        ``acting``, only those that exist for ``person`` (:meth:`Entry.exists_for`). A backend
        may parse each entry only when it is asked for (:class:`Store` does)."""

        whole = await self.layout_for_reading()
        entries = whole.entries
        if acting:
            entries = {k: e for k, e in entries.items() if e.exists_for(person)}
        return whole.version, entries

    async def layout_changes(self, since: str) -> tuple[str, set[str] | None]:
        """Layout memory's stamp now, and the keys of the entries that may differ from what
        they were at stamp ``since`` (``None``: any may; this default always says so).

        What a derived copy (the search index) reads again to catch up, whoever made the
        changes and however a writer was cut short."""

        return (await self.layout_head()).stamp, None

    async def layout_parts(self) -> AsyncIterator[Iterable[Entry]]:
        """Every layout entry, a record at a time (a pending commit read as applied): to read
        all of them once without holding all of them parsed (see :class:`Store`)."""

        yield (await self.layout_for_reading()).entries.values()

    def layout_changed_keys(self, since: str, until: str) -> set[str] | None:
        """Keys changed from stamp ``since`` to stamp ``until`` when this store object knows
        them without a read (every commit between them its own); ``None`` (this default) when
        not: the caller asks :meth:`layout_changes`."""

        _ = since, until
        return None

    async def forget_citations(self, conversations: Iterable[str]) -> None:
        """Forgotten conversations' entries are gone: drop what this store keeps to answer
        :meth:`layout_citing` for them (this default keeps nothing apart from the entries)."""

        _ = conversations

    async def adopt_records(self) -> dict[str, int]:
        """A person vouches for the records here: each one whose seal does not verify is
        sealed with this host's key. Counts of records ``adopted`` and ``verified``. This
        default has nothing to adopt: a store the agent's tools cannot write seals nothing."""

        return {"adopted": 0, "verified": 0}

    @abc.abstractmethod
    async def layout_citing(self, conversations: Iterable[str]) -> set[str]:
        """Keys of the layout entries that may cite one of ``conversations`` (a superset: the
        caller checks each entry's sources)."""

    @abc.abstractmethod
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
        """Change layout memory (the caller holds the lease): replace the entries of ``put``,
        remove those of ``delete``, append ``log``, set ``version``; all of it or none of it,
        whatever kills the writer. ``copies``: retracted entries whose copies in conversation
        memory are retracted too, as part of the change. ``whole``: a rebuild, after which
        readers compare every entry again (:meth:`layout_changes` says so). Returns the new
        head."""

    async def _retract(self, put: Mapping[str, Entry], copies: Iterable[CopyRetraction]) -> None:
        """:attr:`retract_copies` of each of a commit's ``copies`` (the entry ``put`` holds)."""

        for copy in copies:
            retracted = put.get(copy.key)
            if retracted is not None and self.retract_copies is not None:
                await self.retract_copies(retracted, copy)

    @abc.abstractmethod
    async def recover_layout(self) -> None:
        """Under the lease: finish what a killed writer left (a commit half applied, an old
        single-file layout memory to split)."""

    async def layout_damaged(self) -> bool:
        """Whether layout memory is missing or was partly unreadable (then phase 2 rebuilds it
        from every selected conversation)."""

        return (await self.layout_head()).stamp == ""

    async def load_layout(self) -> LayoutMemory:
        """Layout memory as a copy the caller may change (a deep copy of every entry: the
        memory's hot paths use :meth:`layout_entries` and :class:`LayoutEdit`)."""

        whole = await self.layout_for_reading()
        return LayoutMemory(
            version=whole.version,
            entries={k: e.model_copy(deep=True) for k, e in whole.entries.items()},
        )

    async def save_layout(self, memory: LayoutMemory) -> None:
        """Replace layout memory (the caller holds the lease): only the entries that differ
        from the stored ones are written."""

        current = (await self.layout_for_reading()).entries
        put = {
            k: e
            for k, e in memory.entries.items()
            if k not in current or current[k].model_dump_json() != e.model_dump_json()
        }
        gone = [k for k in current if k not in memory.entries]
        await self.commit_layout(version=memory.version, put=put, delete=gone)

    async def edit_layout(self) -> LayoutEdit:
        """A change of layout memory under the lease (see :class:`LayoutEdit`)."""

        await self.recover_layout()
        return LayoutEdit(self, await self.layout_head())

    @abc.abstractmethod
    async def load_registry(self) -> Registry:
        """The selected conversations' short-lived entries (derived by phase 2)."""

    @abc.abstractmethod
    async def save_registry(self, registry: Registry) -> None:
        """Replace the registry."""

    async def registered_ids(self) -> list[str]:
        """The conversation ids the registry holds entries of (phase 2's selection); a store
        may answer without reading every entry (this default loads the registry)."""

        return list((await self.load_registry()).conversations)

    @abc.abstractmethod
    async def load_conversation(self, rollout_id: str) -> ConversationMemory:
        """One conversation's memory (empty when there is none yet)."""

    @abc.abstractmethod
    async def save_conversation(self, memory: ConversationMemory) -> None:
        """Replace one conversation's memory."""

    async def save_conversations(self, memories: Sequence[ConversationMemory]) -> None:
        """:meth:`save_conversation` of each, in order; a store may write them together (this
        default saves them one by one)."""

        for memory in memories:
            await self.save_conversation(memory)

    def conversation_refused(self, rollout_id: str) -> bool:
        """Whether the conversation's record was last read refused (no valid seal) and not
        saved since: what it held is to be learned again from its recorded runs."""

        return False

    @abc.abstractmethod
    async def conversation_exists(self, rollout_id: str) -> bool:
        """Whether the conversation has memory."""

    async def conversations_holding(self, key: str) -> list[str] | None:
        """Conversations whose memory may hold an entry ``key`` (a superset: the caller checks
        each); ``None`` when this store keeps no such index (then every conversation may)."""

        _ = key
        return None

    async def note_holders(self, memories: Iterable[ConversationMemory]) -> None:
        """Index the keys of ``memories``, every conversation's: :meth:`conversations_holding`
        answers from then on (this default keeps no index)."""

        _ = memories

    async def list_conversations(self) -> list[str]:
        """Rollout ids of every conversation with memory or progress.

        This default lists the rollouts with progress; a store that can list its conversation
        records (memory created by ``init`` before any run) overrides it.
        """

        return sorted(await self.list_progress())

    # --- switch defaults of the Memory configuration in use
    async def load_defaults(self) -> Defaults | None:
        """The recorded switch defaults; ``None`` when none were recorded (this default)."""

        return None

    async def save_defaults(self, defaults: Defaults) -> None:
        """Record the switch defaults (this default records nothing)."""

        _ = defaults

    # --- what changed, for a shared store's working copy
    def note_changes(self) -> None:
        """From now on note each conversation, progress and thread record before it changes
        (a shared store's working copy asks, to send only what changed); this default keeps
        no notes (:meth:`changed_records` is ``None``)."""

        return None

    async def changed_records(self) -> StoredRecords | None:
        """The records noted as changed since :meth:`clear_changed`, in the order first noted;
        ``None`` (this default) when no notes are kept: any record may have changed."""

        return None

    async def clear_changed(self) -> None:
        """Start the notes of :meth:`changed_records` afresh (this default keeps none)."""

        return None

    @abc.abstractmethod
    async def every_record(self) -> StoredRecords:
        """Every conversation, rollout (forgotten ones too) and thread this store holds a
        record of."""

    def layout_refused(self) -> bool:
        """Whether a layout record was last read refused (no valid seal) by this store object:
        what it held is not sent on (this default refuses nothing)."""

        return False

    # --- the change log
    @abc.abstractmethod
    async def append_log(self, record: LogRecord) -> None:
        """Append one change to the log."""

    @abc.abstractmethod
    async def replace_log(self, records: Iterable[LogRecord]) -> None:
        """The whole log replaced by ``records`` (a shared store's working copy takes the
        store's)."""

    @abc.abstractmethod
    async def read_log(self) -> list[LogRecord]:
        """Every change, oldest first (a change logged twice by a redone close, once)."""

    async def log_scopes_after(self, mark: str | None) -> tuple[set[str] | None, str]:
        """The scopes named by the log records appended since ``mark`` (what an earlier call
        returned), and the mark to hand over next time. ``None`` for the scopes when ``mark``
        tells nothing of this log (no mark yet, a log replaced): the caller compares every
        scope (:meth:`scopes_with_memory`).

        This default reads the log whole and counts its records; a store that can read the
        log's new part alone overrides it.
        """

        records = await self.read_log()
        seen = int(mark[1:]) if mark and mark[0] == "n" and mark[1:].isdigit() else -1
        if seen < 0 or len(records) < seen:
            return None, f"n{len(records)}"
        return {r.scope for r in records[seen:]}, f"n{len(records)}"

    async def scopes_with_memory(self) -> set[str]:
        """Scopes that may hold entries besides ``layout`` (``conversation:<id>``), for a
        reader that lost track of the log; this default names those the log names."""

        return {r.scope for r in await self.read_log()}

    # --- progress, one rollout at a time
    @abc.abstractmethod
    async def get_progress(self, rollout_id: str) -> RolloutProgress | None:
        """One rollout's progress (a forgotten one's, ``forgotten=True``); ``None`` if none."""

    @abc.abstractmethod
    async def put_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        """Replace one rollout's progress; a forgotten rollout becomes live again."""

    @abc.abstractmethod
    async def forget_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        """Prune a forgotten rollout's progress to what keeps its old bytes from coming back."""

    async def put_progress_many(self, progress: Mapping[str, RolloutProgress]) -> None:
        """:meth:`put_progress` of each rollout, in order; a store may write them together
        (this default writes them one by one)."""

        for rid, prog in progress.items():
            await self.put_progress(rid, prog)

    async def forget_progress_many(self, progress: Mapping[str, RolloutProgress]) -> None:
        """:meth:`forget_progress` of each rollout, in order; a store may write them together
        (this default prunes them one by one)."""

        for rid, prog in progress.items():
            await self.forget_progress(rid, prog)

    @abc.abstractmethod
    async def list_progress(self) -> dict[str, RolloutProgress]:
        """Progress of every rollout not forgotten (what phase 2 selects from)."""

    @abc.abstractmethod
    async def pending_rollouts(self) -> list[str]:
        """Rollouts holding recorded bytes not yet extracted (also from crashed sessions)."""

    @abc.abstractmethod
    async def mark_pending(self, rollout_id: str) -> None:
        """Have the next :meth:`pending_rollouts` look at this rollout again (``Refresh``)."""

    def pending_flag(self, rollout_id: str) -> str | None:
        """A workspace file the recorder creates in the same step as it appends a segment to
        ``sessions/<id>.jsonl``, marking the rollout pending whatever kills it after; ``None``
        (this default): the store learns of the segment from :meth:`append_segment`."""

        _ = rollout_id
        return None

    async def append_segment(self, rollout_id: str, line: bytes) -> None:
        """The recorder appended ``line`` (one segment, redacted and sealed) to the
        workspace's ``sessions/<id>.jsonl``, which extraction and search read. A store that
        keeps its own copy of the segments (to find pending rollouts, check a progress
        record's tail, share them) takes it here, the bytes counted as that file counts them;
        this default keeps nothing: the workspace files store reads ``sessions/`` itself."""

        _ = rollout_id, line

    async def mark_pending_many(self, rollout_ids: Iterable[str]) -> None:
        """:meth:`mark_pending` of each rollout; a store may write the flags together (this
        default marks them one by one)."""

        for rid in rollout_ids:
            await self.mark_pending(rid)

    async def changed_rollouts(self) -> RolloutFlags | None:
        """Rollouts flagged as changed since the search index last took them in: pending
        ones, and those read to their end since (see :meth:`rollouts_indexed`). ``None`` (this
        default) when the store keeps no such flags: the index then lists every rollout."""

        return None

    async def rollouts_indexed(self, rollout_ids: Iterable[str]) -> None:
        """The search index took these rollouts in: clear their flags of
        :meth:`changed_rollouts` that say so (not the pending ones)."""

        _ = rollout_ids

    async def flag_unindexed(self, rollout_ids: Iterable[str]) -> None:
        """These rollouts changed after the search index looked at them: flag them for its
        next sync (see :meth:`changed_rollouts`; this default keeps no flags)."""

        _ = rollout_ids

    # --- conversations known by their first items
    @abc.abstractmethod
    async def thread_for(self, fingerprint: str) -> str | None:
        """The rollout id of the conversation whose history starts with ``fingerprint``."""

    @abc.abstractmethod
    async def index_thread(self, fingerprint: str, rollout_id: str) -> None:
        """Remember that conversations starting with ``fingerprint`` are ``rollout_id``."""

    async def index_threads(self, threads: Mapping[str, str]) -> None:
        """:meth:`index_thread` of each fingerprint of ``threads`` that names no conversation
        yet (the first kept, as a run start that finds one keeps it); a store may write them
        together (this default goes one by one)."""

        for fingerprint, rollout_id in threads.items():
            if await self.thread_for(fingerprint) is None:
                await self.index_thread(fingerprint, rollout_id)

    # --- leases
    @abc.abstractmethod
    def lease(self, *, timeout: float, lease: float) -> Lease:
        """The layout's lease lock: one writer at a time across processes and machines."""


@dataclass
class StoredRecords:
    """Records of a store by name (:meth:`MemoryStore.changed_records`,
    :meth:`MemoryStore.every_record`): conversations with memory, rollouts with progress
    (forgotten ones too) and conversation fingerprints with a thread record."""

    conversations: list[str]
    rollouts: list[str]
    threads: list[str]


@dataclass
class RolloutFlags:
    """Rollouts a store flags as changed (:meth:`MemoryStore.changed_rollouts`)."""

    pending: set[str]
    """Recorded (or found) since they were last read to their end: cleared by the pending
    check once they are, never by the search index."""
    unindexed: set[str]
    """Read to their end since the search index last looked at them: cleared by the index
    (:meth:`MemoryStore.rollouts_indexed`)."""

    @property
    def all(self) -> set[str]:
        return self.pending | self.unindexed


class LayoutEdit:
    """Layout memory as one change under the lease sees it: entries are read (copied) when
    first asked for, so the change costs the entries it touches, not all of them.

    ``entries`` answers for the keys loaded (:meth:`load`) and those set; :meth:`changes`
    compares them with what was read; :meth:`commit` writes those alone.
    """

    def __init__(self, store: MemoryStore, head: LayoutHead) -> None:
        self.store = store
        self.version = head.version
        self.base = head
        self._read: dict[str, str | None] = {}
        """Key -> the entry's JSON as read (``None``: absent)."""
        self.complete = False
        """Every entry is loaded: a key not read is not in layout memory."""
        self.entries = EditedEntries(self)

    async def load(self, keys: Iterable[str]) -> None:
        """Read the entries of ``keys`` (those not read yet) for this change."""

        wanted = [k for k in dict.fromkeys(keys) if k not in self._read]
        if not wanted:
            return
        found = await self.store.layout_entries(wanted)
        for key in wanted:
            entry = found.get(key)
            self._read[key] = None if entry is None else entry.model_dump_json()
            if entry is not None:
                self.entries.data[key] = entry  # parsed for this change: not shared

    async def load_all(self) -> None:
        """Read every entry (a live edit of ``MEMORY.md`` compares every line)."""

        whole = await self.store.layout_for_reading()
        await self.load(whole.entries)
        self.complete = True

    def changes(self) -> tuple[dict[str, Entry], list[str]]:
        """Entries put (new or changed) and keys removed, against what was read."""

        put: dict[str, Entry] = {}
        gone: list[str] = []
        for key, was in self._read.items():
            now = self.entries.data.get(key)
            if now is None:
                if was is not None:
                    gone.append(key)
            elif was is None or now.model_dump_json() != was:
                put[key] = now
        return put, gone

    async def commit(
        self,
        log: Iterable[LogRecord] = (),
        *,
        force: bool = False,
        copies: Iterable[CopyRetraction] = (),
    ) -> bool:
        """Write the changes (and ``log``, and the retraction of ``copies``) as one commit;
        whether anything was written.

        Nothing changed and no version moved: only ``log`` is appended, unless ``force`` (a
        rebuild: the commit is written, and named as changing every entry)."""

        put, gone = self.changes()
        records = list(log)
        if not put and not gone and self.version == self.base.version and not force:
            for record in records:
                await self.store.append_log(record)
            return False
        head = await self.store.commit_layout(
            version=self.version, put=put, delete=gone, log=records, copies=copies, whole=force
        )
        self.base = head
        self._read = {
            k: (None if e is None else e.model_dump_json())
            for k in self._read
            for e in [self.entries.data.get(k)]
        }
        return True


class EditedEntries:
    """The mapping :class:`LayoutEdit` hands to the phase-2 rules (``promote``, ``retract``,
    the commands): the loaded entries, as copies they may change."""

    def __init__(self, edit: LayoutEdit) -> None:
        self.edit = edit
        self.data: dict[str, Entry] = {}

    def _check(self, key: str) -> None:
        if key not in self.edit._read and not self.edit.complete:
            raise KeyError(f"layout entry {key!r} was not loaded for this change")

    def get(self, key: str, default: Entry | None = None) -> Entry | None:
        self._check(key)
        return self.data.get(key, default)

    def __getitem__(self, key: str) -> Entry:
        self._check(key)
        return self.data[key]

    def __contains__(self, key: object) -> bool:
        assert isinstance(key, str)
        self._check(key)
        return key in self.data

    def __setitem__(self, key: str, entry: Entry) -> None:
        self.edit._read.setdefault(key, None)
        self.data[key] = entry

    def __delitem__(self, key: str) -> None:
        self._check(key)
        del self.data[key]

    def items(self) -> list[tuple[str, Entry]]:
        """The loaded entries (every entry after :meth:`LayoutEdit.load_all`)."""

        return list(self.data.items())

    def values(self) -> list[Entry]:
        return list(self.data.values())

    def keys(self) -> list[str]:
        return list(self.data)
