"""Step 3 of the flow, consolidate (phase 2): the layout memory made from its conversations.

Select the newest conversations (what falls out is forgotten), promote their long-lived
entries, take in live edits of ``MEMORY.md`` (:mod:`sandbox_memory.edit.live_edits`), log
and save the changes, then render (:mod:`sandbox_memory.render`). The rules themselves are in
:mod:`sandbox_memory.rules`.
"""

from __future__ import annotations

import logging
from typing import Protocol

from .. import spans
from ..layout_state import LayoutState
from ..search.index import SearchIndex
from ..search.step import sync_index
from ..stores.records import (
    LONG_LIVED_KINDS,
    Defaults,
    LogRecord,
    Registry,
    RolloutProgress,
    now_ms,
)
from ..stores.seam import LayoutEdit
from .carryover import carry_over
from .selection import Selection, forget_conversations, promote, select_rollouts

logger = logging.getLogger("sandbox_memory")


class LiveEditIntake(Protocol):
    """What phase 2 uses of the live-edit step (:class:`sandbox_memory.edit.live_edits.LiveEdits`,
    a later step, which reads phase 2's selection: it is passed in, not imported)."""

    as_rendered: bool
    """Whether the last :meth:`collect` found ``MEMORY.md`` as last rendered."""
    keep_rendered: bool
    """Set before :meth:`collect`: keep the bytes of a ``MEMORY.md`` found as last rendered
    (in :attr:`rendered_bytes`)."""
    rendered_bytes: bytes | None

    async def collect(self, layout: LayoutEdit, changes: list[LogRecord]) -> None:
        """Take a person's edits of ``MEMORY.md`` into ``layout``, noting them in ``changes``."""


class Rendering(Protocol):
    """What phase 2 uses of the render step (:class:`sandbox_memory.render.step.Renderer`, the
    step after it, which reads phase 2's selection: it is passed in, not imported)."""

    memory_md_checked: bool
    """Set before :meth:`render` when this phase 2 found ``MEMORY.md`` as last rendered."""
    memory_md_bytes: bytes | None
    """Set with :attr:`memory_md_checked`: the bytes of that ``MEMORY.md``, when
    :attr:`wants_memory_md`."""

    @property
    def wants_memory_md(self) -> bool:
        """Whether a render would use the bytes of ``MEMORY.md`` found as last rendered."""

    async def render(self, registry: Registry, selected: list[tuple[str, RolloutProgress]]) -> None:
        """Write the files rendered from the store (see ``Renderer.render``)."""


class Consolidator:
    """Phase 2 for one layout (see :meth:`consolidate_layout`)."""

    def __init__(
        self,
        state: LayoutState,
        *,
        index: SearchIndex,
        live_edits: LiveEditIntake,
        renderer: Rendering,
    ) -> None:
        self.state = state
        self.index = index
        self.live_edits = live_edits
        self.renderer = renderer

    async def _forget_derived(self, progress: dict[str, RolloutProgress]) -> bool:
        """The entries retracted in a conversation phase 2 takes in again (a Forget there, or
        a new extraction) leave its summary and notes (``runtime/forgetting.py``; nothing to do when
        they already have). Whether a file changed."""

        hook = self.state.forget_derived
        if hook is None:
            return False
        changed = False
        for rid, prog in sorted(progress.items()):
            if prog.consolidated or prog.forgotten or not prog.slug:
                continue
            conversation = await self.state.store.load_conversation(rid)
            for entry in conversation.entries.values():
                if entry.status == "retracted" and any(
                    s.conversation == rid for s in entry.sources
                ):
                    changed = bool(await hook(entry)) or changed
        return changed

    @spans.traced(spans.CONSOLIDATE)
    async def consolidate_layout(self) -> None:
        """Phase 2: select, forget, promote, take in live edits, render. Caller holds the lock.

        It costs the new work: layout entries are read (and written) for the conversations
        not consolidated yet and the ones forgotten, and with nothing new it reads no entry
        and renders nothing (see :meth:`Renderer.render`).
        """

        st = self.state
        store = st.store
        # Missing or partly unreadable: rebuilt from every selected conversation. A commit a
        # dead writer left is finished here (a Forget's included: see ``runtime/forgetting.py``).
        edit = await store.edit_layout()
        progress = await store.list_progress()
        if await self._forget_derived(progress):
            progress = await store.list_progress()  # a summary may have a new name
        rebuild = await store.layout_damaged()
        # Usage by later runs (found in the recorded items): what is used is kept.
        # The rollouts flagged since the last sync are enough: the index holds the rest.
        synced = await sync_index(self.index, flagged=True)
        usage = await self.index.usage() if synced else {}
        selection = select_rollouts(
            progress, st.generate.max_raw_memories_for_consolidation, usage=usage
        )
        changes: list[LogRecord] = []

        # Before the first render here: what the SDK's Memory left is kept and taken in.
        await carry_over(st, edit, changes)
        self.live_edits.keep_rendered = self.renderer.wants_memory_md
        await self.live_edits.collect(edit, changes)
        self.live_edits.keep_rendered = False

        registry = await store.load_registry()
        registry_before = registry.model_dump_json()
        promoted = await self._promote(edit, selection, registry, changes, rebuild=rebuild)
        forgotten_ids = {rid for rid, _ in selection.forgotten}
        selected_ids = {rid for rid, _ in selection.selected}
        for rid in list(registry.conversations):
            if rid not in selected_ids:
                del registry.conversations[rid]
        if registry.model_dump_json() != registry_before:
            await store.save_registry(registry)
        if forgotten_ids:
            await self._forget(edit, selection, changes)

        # The log and the layout's changes in one commit (a redone change logs the same
        # version, read once), the layout before progress. Every change to layout memory here
        # moves its version (promotion, forgetting, live edits), so the version says whether
        # to write it. Forgetting conversations changes what memory shows even when no layout
        # entry goes.
        layout_changed = await edit.commit(changes, force=rebuild)
        spans.note(
            selected=len(selection.selected),
            promoted=len(set(promoted)),
            forgotten_conversations=len(forgotten_ids),
            log_records=len(changes),
        )
        if forgotten_ids:
            await store.forget_citations(forgotten_ids)

        # Progress last, only the records that change, written together: a rollout is marked
        # consolidated (or pruned as forgotten) once what phase 2 made of it is on disk.
        def consolidated(p: RolloutProgress) -> None:
            p.consolidated = True

        await st.update_progress_many(
            [rid for rid, prog in selection.selected if not prog.consolidated], consolidated
        )
        async with st.progress_lock:
            await store.forget_progress_many(dict(selection.forgotten))
        if changes or layout_changed:
            st.bump()
        await store.save_defaults(
            Defaults(
                use=st.read is not None,
                generate=st.generate_enabled,
                max_summary_chars=st.summary_budget,
            )
        )
        self.renderer.memory_md_checked = self.live_edits.as_rendered
        self.renderer.memory_md_bytes, self.live_edits.rendered_bytes = (
            self.live_edits.rendered_bytes,
            None,
        )
        await self.renderer.render(registry, selection.selected)
        # What changed here: the log's entries, and the forgotten conversations (their
        # summaries and entries leave the index).
        await sync_index(self.index, rollouts=sorted(forgotten_ids), flagged=True)

    async def _promote(
        self,
        edit: LayoutEdit,
        selection: Selection,
        registry: Registry,
        changes: list[LogRecord],
        *,
        rebuild: bool,
    ) -> list[str]:
        """The selected conversations not consolidated yet (all of them on a rebuild) promoted
        into layout memory, their facts shown in the registry; returns the keys promoted (one
        log record for all of them)."""

        store = self.state.store
        promoted: list[str] = []
        for rid, prog in selection.selected:
            if prog.consolidated and rid in registry.conversations and not rebuild:
                continue
            conversation = await store.load_conversation(rid)
            await edit.load(conversation.entries)
            promoted += promote(edit, conversation, since=0)
            registry.conversations[rid] = [
                e
                for e in conversation.entries.values()
                if e.kind not in LONG_LIVED_KINDS and e.status == "active" and e.person is None
            ]
        if promoted:
            edit.version += 1
            changes.append(
                LogRecord(
                    version=edit.version,
                    at=now_ms(),
                    cause="promotion",
                    scope="layout",
                    keys=sorted(set(promoted)),
                )
            )
        return promoted

    async def _forget(
        self, edit: LayoutEdit, selection: Selection, changes: list[LogRecord]
    ) -> None:
        """The conversations phase 2 forgets: the layout entries resting only on them dropped
        (found by their citation lists), their notes and summaries removed, one log record."""

        st = self.state
        forgotten_ids = {rid for rid, _ in selection.forgotten}
        # The entries citing a forgotten conversation, found by its citation list.
        await edit.load(await st.store.layout_citing(forgotten_ids))
        dropped = forget_conversations(edit, forgotten_ids)
        for rid, prog in selection.forgotten:
            await st.ws.remove(f"{st.layout.memories_dir}/raw_memories/{rid}.md")
            await st.ws.remove(f"{st.layout.memories_dir}/rollout_summaries/{rid}_{prog.slug}.md")
        if dropped:
            edit.version += 1
        changes.append(
            LogRecord(
                version=edit.version,
                at=now_ms(),
                cause="forgetting",
                scope="layout",
                keys=dropped,
                detail=f"forgot {len(forgotten_ids)} older conversation(s): "
                + ", ".join(sorted(forgotten_ids))[:800],
            )
        )
        logger.info("memory forgot %d older conversation(s)", len(forgotten_ids))
