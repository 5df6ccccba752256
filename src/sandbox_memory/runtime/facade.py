"""The memory of one layout in one workspace, as one object: the flow's steps put together.

:class:`LayoutRuntime` holds no step's code: it builds the shared state (:mod:`sandbox_memory.layout_state`) and
the steps, record (:mod:`sandbox_memory.record`), extract (:mod:`sandbox_memory.extract`), consolidate
(:mod:`sandbox_memory.consolidate`), render (:mod:`sandbox_memory.render`) and live edits (:mod:`sandbox_memory.edit.live_edits`), and
hands each call to the step that does it. The SDK bridge (``_sdk.py``), the commands, the CLI
and a shared store's copy (``shared_copy/``) all go through it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from ..config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from ..consolidate.carryover import keep_sdk_files
from ..consolidate.step import Consolidator
from ..datapolicy import exc_text
from ..edit.copies import retract_copies
from ..edit.forgetting import forget_derived as take_out
from ..edit.live_edits import LiveEdits
from ..engines.base import ExtractionEngine
from ..extract.step import Extractor
from ..layout_state import LayoutState
from ..record.step import Recorder
from ..render.step import Renderer
from ..search.embedding import resolve as resolve_embedder
from ..search.index import SearchIndex
from ..search.step import save_index, sync_index
from ..stores.records import (
    Cause,
    Entry,
    LayoutMemory,
    LogRecord,
    Registry,
    RolloutProgress,
    Source,
)

logger = logging.getLogger("sandbox_memory")

if TYPE_CHECKING:
    from ..redact import Redactor
    from ..shared_copy import SharedCopy
    from ..stores.seam import Lease, MemoryStore
    from ..stores.shared import SharedStore
    from ..workspace import Workspace


logger = logging.getLogger("sandbox_memory")


class LayoutRuntime:
    """Everything memory does for one layout of one workspace."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        layout: MemoryLayoutConfig,
        generate: MemoryGenerateConfig | None,
        read: MemoryReadConfig | None,
        engine: ExtractionEngine | None = None,
        store: SharedStore | None = None,
        backend: MemoryStore | None = None,
    ) -> None:
        layout = layout.normalized()  # memory's own paths; the prompt keeps the user's spelling
        if store is not None and backend is not None:
            # The copy is written against the seam, but what it was last brought to
            # (``store/shared.json``) is kept in the workspace: a copy in a store that does not
            # live and die with the workspace (one in the process) would be taken for up to date.
            raise ValueError(
                "backend: a shared store's working copy is workspace files; give a shared "
                f"store or a backend, not both (backend={type(backend).__name__})"
            )
        self.state = LayoutState(
            workspace,
            layout=layout,
            generate=generate,
            read=read,
            retract_copies=retract_copies,
            engine=engine,
            backend=backend,
        )
        """Settings, store, workspace and locks that every step shares."""
        self.search_index = SearchIndex(
            workspace,
            store=self.state.store,
            memories_dir=layout.memories_dir,
            sessions_dir=layout.sessions_dir,
            line_check=self.state.line_check,
            embedder=None
            if read is None
            else resolve_embedder(
                read.embedder, model=read.embedding_model, dimension=read.embedding_dimension
            ),
            fusion="rrf" if read is None else read.fusion,
            vector_weight=0.25 if read is None else read.vector_weight,
        )
        """The derived full-text index (:mod:`sandbox_memory.search.index`), synced after runs and at close."""
        self.shared: SharedCopy | None = None
        """With a shared store: keeps this workspace's copy in step with it (shared_copy/)."""
        if store is not None:
            from ..search.postgres import store_search
            from ..shared_copy import SharedCopy

            searched = store_search(store)
            self.shared = SharedCopy(self, store, searched)
            if searched is not None and self.search_index.embedder is not None:
                # The namespace's vectors: what another sandbox embedded is fetched, not
                # embedded again (search/postgres.py).
                self.search_index.shared_vectors = searched
        st = self.state
        self.recorder = Recorder(st, shared=self.shared)
        self.renderer = Renderer(st)
        self.live_edits = LiveEdits(st)
        self.consolidator = Consolidator(
            st, index=self.search_index, live_edits=self.live_edits, renderer=self.renderer
        )
        self.extractor = Extractor(st, index=self.search_index, consolidator=self.consolidator)

        async def forget_derived(entry: Entry) -> list[str]:
            return await take_out(st, entry, index=self.search_index, renderer=self.renderer)

        st.forget_derived = forget_derived

    # ------------------------------------------------------- the shared state

    @property
    def ws(self) -> Workspace:
        return self.state.ws

    @property
    def layout(self) -> MemoryLayoutConfig:
        return self.state.layout

    @property
    def generate(self) -> MemoryGenerateConfig:
        return self.state.generate

    @property
    def generate_enabled(self) -> bool:
        return self.state.generate_enabled

    @generate_enabled.setter
    def generate_enabled(self, value: bool) -> None:
        self.state.generate_enabled = value

    @property
    def read(self) -> MemoryReadConfig | None:
        return self.state.read

    @read.setter
    def read(self, value: MemoryReadConfig | None) -> None:
        self.state.read = value

    @property
    def store(self) -> MemoryStore:
        return self.state.store

    @property
    def working_copy(self) -> MemoryStore:
        """The store a shared store's working copy keeps in step (this runtime's)."""

        return self.state.store

    @property
    def engine(self) -> ExtractionEngine:
        return self.state.engine

    @property
    def redactor(self) -> Redactor:
        return self.state.redactor

    @property
    def has_engine_object(self) -> bool:
        return self.state.has_engine_object

    @property
    def summary_budget(self) -> int:
        return self.state.summary_budget

    @property
    def generation(self) -> int:
        """Bumped on every change made through this runtime: keys the read cache."""

        return self.state.generation

    def bump(self) -> None:
        self.state.bump()

    def switch(self, override: bool | None, name: str) -> bool:
        return self.state.switch(override, name)

    def items_path(self, rid: str) -> str:
        return self.state.items_path(rid)

    def session_file_lock(self, rollout_id: str) -> asyncio.Lock:
        return self.state.session_file_lock(rollout_id)

    def rollout_lock(self, rollout_id: str) -> asyncio.Lock:
        return self.state.rollout_lock(rollout_id)

    def write_lock(self) -> AbstractAsyncContextManager[None]:
        return self.state.write_lock()

    def lock(self) -> Lease:
        return self.state.lock()

    async def update_progress(
        self, rollout_id: str, change: Callable[[RolloutProgress], None]
    ) -> RolloutProgress:
        return await self.state.update_progress(rollout_id, change)

    async def pending_rollouts(self) -> list[str]:
        return await self.state.pending_rollouts()

    async def start_run(self) -> None:
        """Run start: with a shared store, bring the workspace copy up to date (never raises)."""

        if self.shared is not None:
            await self.shared.refresh()
        try:
            await self.state.note_memory_md()
        except Exception as exc:  # noqa: BLE001 - a run is never failed by memory
            self.state.memory_md_seen = None  # judged against what was rendered instead
            logger.warning("could not read MEMORY.md at the run's start (%s)", exc_text(exc))
        try:
            await self.recorder.check_cached()
        except Exception as exc:  # noqa: BLE001 - a run is never failed by memory
            self.recorder.forget_cached()
            logger.warning(
                "could not size the recorded conversations at the run's start (%s); their "
                "next records read them afresh",
                exc_text(exc),
            )
        await self.first_use()

    async def first_use(self) -> None:
        """Before memory first writes in this layout (from this process): what the SDK's
        ``Memory`` left is kept as it is now (``carryover.keep_sdk_files``), so files an agent
        writes later are never taken for it. Never raises; a failure is retried next time."""

        st = self.state
        if st.sdk_files_checked or not st.generate_enabled:
            return
        try:
            await keep_sdk_files(st)
        except Exception as exc:  # noqa: BLE001 - retried at the next use; the run goes on
            logger.warning(
                "memory could not keep the files the SDK's Memory left in %s (%s); tried "
                "again at the next run or close",
                st.layout.memories_dir,
                exc_text(exc),
            )
            return
        st.sdk_files_checked = True

    # ----------------------------------------------------------------- record

    async def record(
        self,
        payload: dict[str, Any],
        *,
        rollout_id: str,
        person: str | None = None,
        per_run_id: bool = False,
    ) -> str:
        await self.first_use()
        return await self.recorder.record(
            payload, rollout_id=rollout_id, person=person, per_run_id=per_run_id
        )

    async def conversation_for(self, fingerprint: str | None) -> str | None:
        return await self.recorder.conversation_for(fingerprint)

    async def sync_search(self) -> bool:
        return await sync_index(self.search_index)

    async def save_search(self) -> None:
        await save_index(self.search_index)

    # ---------------------------------------------------------------- extract

    def begin_close(self, deadline: float) -> None:
        """A close starts: extractions still running after runs stop at its ``deadline``."""

        self.extractor.begin_close(deadline)

    async def consolidate_conversation(self, rollout_id: str) -> bool:
        return await self.extractor.consolidate_conversation(rollout_id)

    async def close(
        self, *, only: list[str] | None = None, deadline: float | None = None
    ) -> dict[str, Any]:
        """Phase 1 for every pending rollout, then phase 2; returns a report.

        Model work stops at ``deadline`` (``time.monotonic()``; default: now plus
        ``max_seconds_per_close``); what it leaves stays pending for the next close.
        With a shared store, under its lease and between catching up and sending changes.
        """

        await self.first_use()
        if self.shared is not None:
            return await self.shared.close(
                lambda skip: self.extractor.close(only=only, skip=skip, deadline=deadline)
            )
        return await self.extractor.close(only=only, deadline=deadline)

    # ------------------------------------------------------------ consolidate

    def render_paths(self, keys: Iterable[str]) -> list[str]:
        """What phase 2 may write after a change of ``keys`` (checked before a command)."""

        return self.renderer.targets(keys)

    async def consolidate_layout(self) -> None:
        """Phase 2: select, forget, promote, take in live edits, render. Caller holds the lock."""

        await self.consolidator.consolidate_layout()

    async def retract_copies(
        self, entry: Entry, source: Source, *, stamp: int, cause: Cause
    ) -> list[LogRecord]:
        return await retract_copies(self.store, entry, source, stamp=stamp, cause=cause)

    # ----------------------------------------------------------------- render

    async def render(
        self,
        layout: LayoutMemory,
        registry: Registry,
        selected: list[tuple[str, RolloutProgress]],
    ) -> None:
        await self.renderer.render(registry, selected, layout=layout)

    async def render_current(self) -> None:
        await self.renderer.render_current()

    # ------------------------------------------------------------- live edits

    async def memory_md_edited(self) -> str | None:
        return await self.live_edits.memory_md_edited()

    async def take_live_edits(self) -> None:
        await self.live_edits.take_live_edits()

    async def pending_or_recent(self, progress: dict[str, RolloutProgress]) -> list[str]:
        return await self.live_edits.pending_or_recent(progress)
