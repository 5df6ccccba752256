"""What every step of one layout's flow shares: its settings, store, workspace and locks.

Not a step itself: :mod:`sandbox_memory.record`, :mod:`sandbox_memory.extract` (and phase 1 under it), :mod:`sandbox_memory.consolidate`,
:mod:`sandbox_memory.render` and :mod:`sandbox_memory.edit.live_edits` each take this state and use only the parts they need.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .config import (
    DEFAULT_LOCK_LEASE_SECONDS,
    DEFAULT_SUMMARY_BUDGET_CHARS,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
)
from .engines.base import ExtractionEngine
from .engines.resolve import resolve_engine
from .integrity import SegmentSeal, host_keys
from .stores.files import Store
from .stores.records import Cause, CopyRetraction, Entry, LogRecord, RolloutProgress, Source
from .stores.seam import Lease, MemoryStore
from .stores.segments import LineCheck
from .workspace import Workspace
from .workspace.records import LocalRecords

if TYPE_CHECKING:
    from .redact import Redactor


@dataclass(frozen=True)
class RedactionSettings:
    """What a redactor is built from: the child builds its own, identical one."""

    extra_patterns: tuple[tuple[str, str], ...] = ()
    allowlist: tuple[str, ...] = ()

    def build(self) -> Redactor:
        from .redact import Redactor

        return Redactor(extra_patterns=dict(self.extra_patterns), allowlist=self.allowlist)


class CopyRetractor(Protocol):
    """Retracts a layout entry's copies in conversation memory (the edit step's
    :func:`sandbox_memory.edit.copies.retract_copies`, given by the runtime that builds this
    state: a step above it)."""

    async def __call__(
        self,
        store: MemoryStore,
        entry: Entry,
        source: Source,
        *,
        stamp: int,
        cause: Cause,
        log: bool,
    ) -> list[LogRecord]: ...


class LayoutState:
    """One layout of one workspace: configuration, the store, the redactor, the engine, locks."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        layout: MemoryLayoutConfig,
        generate: MemoryGenerateConfig | None,
        read: MemoryReadConfig | None,
        retract_copies: CopyRetractor,
        engine: ExtractionEngine | None = None,
        backend: MemoryStore | None = None,
    ) -> None:
        self.ws = workspace
        self._copy_retractor = retract_copies
        self.layout = layout
        self.generate_enabled = generate is not None
        self.generate = generate or MemoryGenerateConfig()
        self.read = read
        local: LocalRecords
        if backend is None:
            # The workspace files: they keep this workspace's own records too.
            backend = local = Store(workspace, layout.memories_dir, layout.sessions_dir)
            local.line_check = self.line_check
        else:
            local = LocalRecords(workspace, f"{layout.memories_dir}/store")
        self.store: MemoryStore = backend
        """Where memory is kept (``backend``, else the workspace files): every step reads and
        changes it through the store seam."""
        self.store.retract_copies = self._retract_copies
        self.local = local
        """This workspace's own records, beside the files rendered from memory (what was
        rendered, the saved rendering, carry-over copies, item digests), under
        ``<memories_dir>/store/`` whatever store holds memory
        (:mod:`sandbox_memory.workspace.records`)."""
        self.local.redactor_source = lambda: self.redactor
        self.local.record_seal = lambda: self.record_seal
        self.forget_derived: Callable[[Entry], Awaitable[list[str]]] | None = None
        """Takes a retracted entry out of the summaries and notes it came from (set by the
        runtime: ``runtime/forgetting.py``)."""
        self._redactor: Redactor | None = None
        self.redaction_settings: RedactionSettings | None = None
        """What ``redactor`` was built from (``None`` for one set from outside): a child
        process builds the same one to record a big run (:mod:`sandbox_memory.record.offload`)."""
        self._engine = engine
        self._engine_given = engine is not None
        self.progress_lock = asyncio.Lock()
        """Held while a rollout's progress record is read, changed and written back."""
        self._local_lock = asyncio.Lock()
        self._rollout_locks: dict[str, asyncio.Lock] = {}
        self.sdk_files_checked = False
        """Whether the SDK's leftover files were looked for (``LayoutRuntime.first_use``)."""
        self.session_id: str | None = None
        """The sandbox session this runtime works in (``None`` on a local folder, the command
        line): the ``session_id:`` line of the rollout summaries it writes, as in the SDK's."""
        self._file_locks: dict[str, asyncio.Lock] = {}
        self.generation = 0
        """Bumped on every change made through this runtime: keys the read cache."""
        self._seal: SegmentSeal | None = None
        self._record_seal: tuple[SegmentSeal, SegmentSeal] | None = None
        self.memory_md_seen: str | None = None
        """SHA-256 of ``MEMORY.md`` as this process last saw it: at a run's start, at a run's
        end, after a render (``None``: not seen; what was rendered is the baseline)."""

    async def _retract_copies(self, entry: Entry, copy: CopyRetraction) -> None:
        """A Forget's commit: the layout entry's copies in conversations go with it."""

        await self._copy_retractor(
            self.store, entry, copy.source, stamp=copy.stamp, cause=copy.cause, log=True
        )
        # Part of the commit, so done again by the next writer if this one dies.
        if self.forget_derived is not None:
            await self.forget_derived(entry)

    @property
    def engine(self) -> ExtractionEngine:
        if self._engine is None:
            self._engine = resolve_engine(self.generate)
        return self._engine

    @property
    def built_engine(self) -> ExtractionEngine | None:
        """The engine if one is given or was chosen already (never chooses one)."""

        return self._engine

    @property
    def redactor(self) -> Redactor:
        """Built on first use: reading memory (the command line's show) never needs it."""

        if self._redactor is None:
            settings = RedactionSettings(
                extra_patterns=tuple(self.generate.redact_patterns.items()),
                allowlist=tuple(self.generate.redact_allowlist),
            )
            self._redactor = settings.build()
            self.redaction_settings = settings
        return self._redactor

    @property
    def seal(self) -> SegmentSeal:
        """Seals the lines this runtime records and verifies the lines it reads (the host's
        key, :func:`~sandbox_memory.integrity.host_keys`); made on first use."""

        if self._seal is None:
            self._seal = SegmentSeal(host_keys())
        return self._seal

    @seal.setter
    def seal(self, value: SegmentSeal) -> None:
        self._seal = value

    @property
    def record_seal(self) -> SegmentSeal:
        """Seals memory's own records in ``store/`` (shards, head, log, conversation records,
        settings) with the host's key, whatever key lines are sealed with: the records never
        leave this host (machines sharing a store exchange its rows), so a new process
        verifies them before it reaches the store, or while the store is unreachable. Also
        verifies with the keys of :attr:`seal` (a copy's records sealed with a namespace's
        key by an earlier build)."""

        lines = self.seal
        if self._record_seal is None or self._record_seal[0] is not lines:
            self._record_seal = (lines, lines.led_by(host_keys()))
        return self._record_seal[1]

    async def memory_md_digest(self) -> str | None:
        """SHA-256 of ``MEMORY.md`` now (``None``: no file)."""

        return await self.ws.sha256(f"{self.layout.memories_dir}/MEMORY.md")

    async def note_memory_md(self) -> None:
        """A run starts: what ``MEMORY.md`` holds now is the baseline its changes are judged
        against (an edit before it is not the run's)."""

        self.memory_md_seen = await self.memory_md_digest()

    def line_check(self, rollout_id: str) -> LineCheck:
        """How the lines of ``rollout_id``'s file are checked when read."""

        return LineCheck(self.seal, rollout_id)

    @property
    def has_engine_object(self) -> bool:
        """Whether an engine object was given (rather than chosen from ``generate.engine``)."""

        return self._engine_given

    @property
    def summary_budget(self) -> int:
        """Characters of entries in ``memory_summary.md`` (the read budget, else its default)."""

        return self.read.max_summary_chars if self.read else DEFAULT_SUMMARY_BUDGET_CHARS

    def bump(self) -> None:
        self.generation += 1

    def switch(self, override: bool | None, name: str) -> bool:
        """A conversation's switch: its override, else the default from the configuration."""

        if override is not None:
            return override
        return self.generate_enabled if name == "generate" else self.read is not None

    def items_path(self, rid: str) -> str:
        """Digests of a conversation's extracted items (see ``record.item_notes.note_items``)."""

        return self.local.path(f"items/{rid}.txt")

    def session_file_lock(self, rollout_id: str) -> asyncio.Lock:
        """In-process: an append to a rollout's file never races a rewrite of it (shared copy)."""

        lock = self._file_locks.get(rollout_id)
        if lock is None:
            lock = self._file_locks[rollout_id] = asyncio.Lock()
        return lock

    def rollout_lock(self, rollout_id: str) -> asyncio.Lock:
        """In-process: one extraction of a rollout at a time."""

        lock = self._rollout_locks.get(rollout_id)
        if lock is None:
            lock = self._rollout_locks[rollout_id] = asyncio.Lock()
        return lock

    @contextlib.asynccontextmanager
    async def write_lock(self) -> AsyncIterator[None]:
        """Exclusive right to change this layout's state: in-process, then across processes."""

        lease = self.lock()
        async with self._local_lock, lease:
            # Fencing: the store checks the lock is still this holder's before it commits.
            self.store.fence = lease.check
            try:
                yield
            finally:
                self.store.fence = None

    def lock(self) -> Lease:
        return self.store.lease(
            timeout=self.generate.lock_timeout_seconds, lease=DEFAULT_LOCK_LEASE_SECONDS
        )

    async def update_progress(
        self, rollout_id: str, change: Callable[[RolloutProgress], None]
    ) -> RolloutProgress:
        """Change one rollout's progress record (read, change, write back that record only)."""

        async with self.progress_lock:
            current = await self.store.get_progress(rollout_id)
            prog = current.model_copy() if current is not None else RolloutProgress()
            change(prog)
            await self.store.put_progress(rollout_id, prog)
            return prog

    async def update_progress_many(
        self, rollout_ids: Iterable[str], change: Callable[[RolloutProgress], None]
    ) -> None:
        """:meth:`update_progress` of each rollout, the records written together."""

        async with self.progress_lock:
            changed: dict[str, RolloutProgress] = {}
            for rid in rollout_ids:
                current = await self.store.get_progress(rid)
                prog = current.model_copy() if current is not None else RolloutProgress()
                change(prog)
                changed[rid] = prog
            await self.store.put_progress_many(changed)

    async def pending_rollouts(self) -> list[str]:
        """Rollouts whose file holds bytes not yet extracted (also from crashed sessions)."""

        return await self.store.pending_rollouts()
