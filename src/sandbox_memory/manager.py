"""The memory of one layout in one workspace: record, extract, consolidate, render.

:class:`LayoutRuntime` works over any :class:`~sandbox_memory.workspace.Workspace`; the SDK
bridge (``_sdk.py``), the commands and the CLI all go through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from .config import (
    DEFAULT_LOCK_LEASE_SECONDS,
    DEFAULT_SUMMARY_BUDGET_CHARS,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
)
from .engines.base import ExtractionEngine
from .offload import Recording, RedactionSettings
from .phase_one import Budget, extract_rollout, note_items, parse_item_notes
from .phase_two import (
    displayed_entries,
    forget_conversations,
    promote,
    retract,
    same_fact,
    secret_problem,
    select_rollouts,
    shown_entries,
)
from .render import (
    RolloutRef,
    entry_line,
    newest_first,
    parse_registry,
    render_memory_md,
    render_skill,
    render_summary_file,
)
from .rollouts import (
    new_item_digests,
    read_new_segments,
    rollout_path,
    safe_rollout_id,
)
from .search import SearchIndex
from .store import (
    LONG_LIVED_KINDS,
    Cause,
    ConversationMemory,
    Defaults,
    Entry,
    LayoutMemory,
    LogRecord,
    Registry,
    RolloutProgress,
    Source,
    Store,
    now_ms,
)
from .workspace import LeaseLock, Workspace

if TYPE_CHECKING:
    from .redact import Redactor
    from .stores.postgres import PostgresStore
    from .stores.sync import SharedCopy

logger = logging.getLogger("sandbox_memory")

_ENGINE_ANNOUNCED: set[str] = set()

LIVE_EDIT_TAIL_BYTES = 1 << 20
"""Bytes read from the end of a rollout to find the run item that edited MEMORY.md: the edit
is in the newest segments, and a 100 MB rollout must not be read whole for it."""


def prompt_index(entries: list[Entry], *, budget: int) -> str:
    """The read prompt's candidates: active entries newest first, shared ones and each person's
    private ones, each list cut once its rendered lines pass ``budget`` characters."""

    shared: list[Entry] = []
    private: dict[str, list[Entry]] = {}
    used: dict[str | None, int] = {}
    for entry in newest_first(e for e in entries if e.status == "active"):
        who = entry.person
        if used.get(who, 0) > budget:
            continue
        used[who] = used.get(who, 0) + len(entry_line(entry, with_sources=False)) + 1
        (shared if who is None else private.setdefault(who, [])).append(entry)
    doc = {
        "budget": budget,
        "shared": [e.model_dump(mode="json") for e in shared],
        "private": {p: [e.model_dump(mode="json") for e in group] for p, group in private.items()},
    }
    return json.dumps(doc, separators=(",", ":"))


def resolve_engine(generate: MemoryGenerateConfig) -> ExtractionEngine:
    """The engine ``generate.engine`` asks for; ``auto`` picks the model where credentials exist
    (``OPENAI_API_KEY``, ``set_default_openai_key``, ``set_default_openai_client``, or a model
    object). The choice is logged once, naming the model."""

    from .config import model_settings
    from .engines.model import ModelEngine, credentials_source
    from .engines.offline import OfflineEngine

    choice = generate.engine
    model = generate.phase_one_model
    if choice == "auto":
        why = "a model object was configured" if not isinstance(model, str) else None
        why = why or credentials_source()
        choice = "model" if why is not None else "offline"
        why = why or (
            "no OpenAI credentials: no OPENAI_API_KEY, set_default_openai_key or "
            "set_default_openai_client"
        )
        name = model if isinstance(model, str) else type(model).__name__
        line = (
            f"sandbox-memory: using the model engine with {name} ({why})"
            if choice == "model"
            else f"sandbox-memory: using the offline engine ({why})"
        )
        if line not in _ENGINE_ANNOUNCED:
            _ENGINE_ANNOUNCED.add(line)
            logger.info("%s", line)
    if choice == "offline":
        return OfflineEngine()
    settings = model_settings(
        "generate.phase_one_model_settings", generate.phase_one_model_settings
    )
    return ModelEngine(model, model_settings=settings)


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
        store: PostgresStore | None = None,
    ) -> None:
        self.ws = workspace
        self.layout = layout
        self.generate_enabled = generate is not None
        self.generate = generate or MemoryGenerateConfig()
        self.read = read
        self.store = Store(workspace, layout.memories_dir, layout.sessions_dir)
        self.store.redactor_source = lambda: self.redactor
        self._redactor: Redactor | None = None
        self._redaction_settings: RedactionSettings | None = None
        """What ``redactor`` was built from (``None`` for one set from outside): a child
        process builds the same one to record a big run (:mod:`sandbox_memory.offload`)."""
        self._engine = engine
        self._engine_given = engine is not None
        self._progress_lock = asyncio.Lock()
        self._local_lock = asyncio.Lock()
        self._rollout_locks: dict[str, asyncio.Lock] = {}
        self._run_budget: Budget | None = None
        self._redactions_reported = 0
        """Redactions already counted in an earlier close's report."""
        self._item_digests: dict[str, dict[str, list[str]]] = {}
        """Per conversation: digests of its recorded items (see ``_recorded_items``)."""
        self._calls_reported = 0
        """Model requests already counted in an earlier close's report."""
        self.generation = 0
        """Bumped on every change made through this runtime: keys the read cache."""
        self.search_index = SearchIndex(
            workspace,
            store=self.store,
            memories_dir=layout.memories_dir,
            sessions_dir=layout.sessions_dir,
        )
        """The derived full-text index (``search.py``), synced after runs and at close."""
        self._file_locks: dict[str, asyncio.Lock] = {}
        self.shared: SharedCopy | None = None
        """With a shared store: keeps this workspace's copy in step with it (stores/sync.py)."""
        if store is not None:
            from .stores.sync import SharedCopy

            self.shared = SharedCopy(self, store)

    @property
    def engine(self) -> ExtractionEngine:
        if self._engine is None:
            self._engine = resolve_engine(self.generate)
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
            self._redaction_settings = settings
        return self._redactor

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

    def session_file_lock(self, rollout_id: str) -> asyncio.Lock:
        """In-process: an append to a rollout's file never races a rewrite of it (shared copy)."""

        lock = self._file_locks.get(rollout_id)
        if lock is None:
            lock = self._file_locks[rollout_id] = asyncio.Lock()
        return lock

    async def start_run(self) -> None:
        """Run start: with a shared store, bring the workspace copy up to date (never raises)."""

        if self.shared is not None:
            await self.shared.refresh()

    def rollout_lock(self, rollout_id: str) -> asyncio.Lock:
        """In-process: one extraction of a rollout at a time."""

        lock = self._rollout_locks.get(rollout_id)
        if lock is None:
            lock = self._rollout_locks[rollout_id] = asyncio.Lock()
        return lock

    @contextlib.asynccontextmanager
    async def write_lock(self) -> AsyncIterator[None]:
        """Exclusive right to change this layout's state: in-process, then across processes."""

        async with self._local_lock, self.lock():
            yield

    def lock(self) -> LeaseLock:
        return self.store.lease(
            timeout=self.generate.lock_timeout_seconds, lease=DEFAULT_LOCK_LEASE_SECONDS
        )

    async def update_progress(
        self, rollout_id: str, change: Callable[[RolloutProgress], None]
    ) -> RolloutProgress:
        """Change one rollout's progress record (read, change, write back that record only)."""

        async with self._progress_lock:
            current = await self.store.get_progress(rollout_id)
            prog = current.model_copy() if current is not None else RolloutProgress()
            change(prog)
            await self.store.put_progress(rollout_id, prog)
            return prog

    # ----------------------------------------------------------------- record

    async def record(
        self,
        payload: dict[str, Any],
        *,
        rollout_id: str,
        person: str | None = None,
        per_run_id: bool = False,
    ) -> str:
        """Append one run segment (redacted, with item ids); return the file-safe rollout id.

        ``per_run_id``: ``rollout_id`` was made up for this run alone (no conversation id,
        session or group). If the run replays the history of a recorded conversation, it is
        recorded in that conversation, where its replayed items are recognised.
        """

        rid = safe_rollout_id(rollout_id)
        before = self.redactor.total
        recording = Recording(
            payload,
            rollout_id=rid,
            person=person,
            redactor=self.redactor,
            settings=self._redaction_settings,
        )
        await recording.build()
        try:
            if per_run_id:
                joined = await self.conversation_for(recording.fingerprint)
                if joined is not None and joined != rid:
                    rid = joined
            async with self.session_file_lock(rid):
                known = await self._recorded_items(rid)
                line, replayed, digests, fp = await recording.finish(rid, known)
                redacted = self.redactor.total - before
                if redacted:
                    logger.info(
                        "redacted %d secret(s) from a run of conversation %s", redacted, rid
                    )
                if replayed:
                    logger.debug("%d replayed item(s) of conversation %s recognised", replayed, rid)
                is_new = await self.ws.append_line(
                    rollout_path(self.layout.sessions_dir, rid),
                    line,
                    flag=self.store.pending_flag(rid),
                )
                for digest, item_id in digests:
                    known.setdefault(digest, []).append(item_id)
        finally:
            recording.abandon()
        if self.shared is not None:
            await self.shared.after_record(rid, {"segment_id": recording.segment_id}, line)
        if is_new:
            if fp is not None:
                # The segment is recorded: a failure here must not make the caller record it
                # again (a second, duplicate line), so it is logged and the run goes on. One
                # record per conversation: processes sharing the folder never drop each other's.
                try:
                    await self.store.index_thread(fp, rid)
                except Exception as exc:  # noqa: BLE001
                    logger.warning(
                        "could not index conversation %s in %s/threads/ (%s); its next run "
                        "may not recognise it",
                        rid,
                        self.store.dir,
                        exc,
                    )
        self.bump()
        return rid

    def items_path(self, rid: str) -> str:
        """Digests of a conversation's extracted items (see ``note_items``)."""

        return f"{self.store.dir}/items/{rid}.txt"

    async def _recorded_items(self, rid: str) -> dict[str, list[str]]:
        """Digest -> ids of the items conversation ``rid`` recorded (for replay recognition).

        Cached per runtime (a record adds its items without any I/O). A cold cache is built
        from ``store/items/<rid>.txt``, where phase 1 notes the items it extracted, plus
        the part of the rollout not extracted yet; without that file (older rollouts), from the
        whole rollout once, and the file is written. Without a rollout there is nothing.
        """

        cached = self._item_digests.get(rid)
        if cached is not None:
            return cached
        known: dict[str, list[str]] = {}
        path = rollout_path(self.layout.sessions_dir, rid)
        if await self.ws.size(path) is None:
            self._item_digests[rid] = known
            if await self.ws.size(self.items_path(rid)) is not None:
                await self.ws.remove(self.items_path(rid))  # notes of a rollout that is gone
            return known
        raw = await self.ws.read_bytes(self.items_path(rid))
        prog = await self.store.get_progress(rid)
        offset = prog.offset if prog is not None else 0
        if raw is not None:
            for digest, item_id in parse_item_notes(raw):
                known.setdefault(digest, []).append(item_id)
        parsed = await read_new_segments(self.ws, path, offset=0 if raw is None else offset)
        if parsed is not None:
            for segment in parsed.segments:
                for digest, item_id in new_item_digests(segment):
                    known.setdefault(digest, []).append(item_id)
            if raw is None and parsed.segments:
                await note_items(self, rid, parsed.segments)
        self._item_digests[rid] = known
        return known

    async def sync_search(self) -> bool:
        """Bring the search index up to date; ``False`` (logged) when it could not be.

        The index is derived: a failure here never fails a run or a close, the next sync
        catches up.
        """

        try:
            await self.search_index.sync()
        except Exception as exc:  # noqa: BLE001
            logger.warning(
                "memory search index %s could not be updated (%s: %s); it catches up at the "
                "next search or close",
                self.search_index.rel_path,
                type(exc).__name__,
                exc,
            )
            return False
        return True

    async def save_search(self) -> None:
        """Write the index back to the workspace (backends other than a local folder)."""

        try:
            await self.search_index.save()
        except Exception as exc:  # noqa: BLE001
            logger.warning(
                "memory search index could not be written to %s (%s); it is rebuilt from the "
                "workspace when next needed",
                self.search_index.rel_path,
                exc,
            )

    async def conversation_for(self, fingerprint: str | None) -> str | None:
        if fingerprint is None:
            return None
        return await self.store.thread_for(fingerprint)

    # --------------------------------------------------------------- generate

    def _between_closes(self) -> Budget:
        """The budget runs spend before the close: the close gets what they leave."""

        if self._run_budget is None:
            g = self.generate
            self._run_budget = Budget(
                calls=g.max_model_calls_per_close,
                tokens=g.max_input_tokens_per_close,
                deadline=float("inf"),
                per_extraction_seconds=g.max_seconds_per_close,
            )
        return self._run_budget

    def begin_close(self, deadline: float) -> None:
        """A close starts: extractions still running after runs stop at its ``deadline``."""

        if self._run_budget is not None:
            self._run_budget.shorten(deadline)

    async def consolidate_conversation(self, rollout_id: str) -> bool:
        """Phase 1 for one conversation after a run (changes applied under the layout lock).

        Model calls made here count against the budget of the coming close.
        """

        budget = self._between_closes()
        changed = await extract_rollout(self, rollout_id, budget=budget)
        if changed:
            self.search_index.mark(rollout_id)
        await self.sync_search()
        if rollout_id in budget.deferred:
            budget.deferred.remove(rollout_id)
            logger.info(
                "memory budget until the next close is spent; conversation %s is extracted at "
                "close if the budget allows, else at a later close",
                rollout_id,
            )
        return changed

    async def pending_rollouts(self) -> list[str]:
        """Rollouts whose file holds bytes not yet extracted (also from crashed sessions)."""

        return await self.store.pending_rollouts()

    async def close(
        self, *, only: list[str] | None = None, deadline: float | None = None
    ) -> dict[str, Any]:
        """Phase 1 for every pending rollout, then phase 2; returns a report.

        Model work stops at ``deadline`` (``time.monotonic()``; default: now plus
        ``max_seconds_per_close``); what it leaves stays pending for the next close.
        With a shared store, under its lease and between catching up and sending changes.
        """

        if self.shared is not None:
            return await self.shared.close(lambda: self._close_local(only=only, deadline=deadline))
        return await self._close_local(only=only, deadline=deadline)

    async def _close_local(
        self, *, only: list[str] | None = None, deadline: float | None = None
    ) -> dict[str, Any]:
        g = self.generate
        spent = self._run_budget
        self._run_budget = None
        calls_before = self._calls_reported
        budget = Budget(
            calls=g.max_model_calls_per_close - (spent.spent_calls if spent else 0),
            tokens=g.max_input_tokens_per_close - (spent.spent_tokens if spent else 0),
            deadline=deadline
            if deadline is not None
            else time.monotonic() + g.max_seconds_per_close,
        )
        report: dict[str, Any] = {
            "extracted": list(dict.fromkeys(spent.extracted)) if spent else [],
            "deferred": [],
            "redactions": 0,
        }
        pending = await self.pending_rollouts()
        if only is not None:
            pending = [r for r in pending if r in only]
        sem = asyncio.Semaphore(g.phase_one_concurrency)

        async def one(rid: str) -> None:
            async with sem:
                await extract_rollout(self, rid, budget=budget)

        await asyncio.gather(*(one(r) for r in pending))
        report["extracted"] = list(dict.fromkeys([*report["extracted"], *budget.extracted]))
        report["deferred"] = list(dict.fromkeys(budget.deferred))
        # Requests really sent (every attempt), since the previous close of this runtime.
        calls = getattr(self._engine, "calls", None)
        if isinstance(calls, int):
            self._calls_reported = calls
        report["model_calls"] = self._calls_reported - calls_before
        for rid in report["extracted"]:
            self.search_index.mark(rid)
        async with self.write_lock():
            await self.consolidate_layout()
        await self.save_search()
        # Secrets redacted since the previous close of this runtime (records, notes, errors).
        total = self.redactor.total
        report["redactions"] = total - self._redactions_reported
        self._redactions_reported = total
        logger.info(
            "memory close: %d rollout(s) extracted, %d model call(s), %d secret(s) redacted, "
            "%d deferred",
            len(report["extracted"]),
            report["model_calls"],
            report["redactions"],
            len(report["deferred"]),
        )
        if report["deferred"]:
            logger.warning(
                "memory close left %d rollout(s) for the next close (its model-call, token or "
                "time budget ran out): %s",
                len(report["deferred"]),
                ", ".join(report["deferred"]),
            )
        return report

    async def consolidate_layout(self) -> None:
        """Phase 2: select, forget, promote, take in live edits, render. Caller holds the lock."""

        store = self.store
        progress = await store.list_progress()
        # Read and parsed once; missing or unreadable: rebuilt from every selected conversation.
        layout, rebuild = await store.load_layout_for_phase_two()
        version_before = layout.version
        # Usage by later runs (found in the recorded items): what is used is kept.
        usage = await self.search_index.usage() if await self.sync_search() else {}
        selection = select_rollouts(
            progress, self.generate.max_raw_memories_for_consolidation, usage=usage
        )
        changes: list[LogRecord] = []

        await self._take_live_edits(layout, changes)

        registry = await store.load_registry()
        registry_before = registry.model_dump_json()
        promoted: list[str] = []
        for rid, prog in selection.selected:
            if prog.consolidated and rid in registry.conversations and not rebuild:
                continue
            conversation = await store.load_conversation(rid)
            promoted += promote(layout, conversation, since=0)
            registry.conversations[rid] = [
                e
                for e in conversation.entries.values()
                if e.kind not in LONG_LIVED_KINDS and e.status == "active" and e.person is None
            ]
        if promoted:
            layout.version += 1
            changes.append(
                LogRecord(
                    version=layout.version,
                    at=now_ms(),
                    cause="promotion",
                    scope="layout",
                    keys=sorted(set(promoted)),
                )
            )
        forgotten_ids = {rid for rid, _ in selection.forgotten}
        selected_ids = {rid for rid, _ in selection.selected}
        for rid in list(registry.conversations):
            if rid not in selected_ids:
                del registry.conversations[rid]
        if registry.model_dump_json() != registry_before:
            await store.save_registry(registry)
        if forgotten_ids:
            dropped = forget_conversations(layout, forgotten_ids)
            for rid, prog in selection.forgotten:
                await self.ws.remove(f"{self.layout.memories_dir}/raw_memories/{rid}.md")
                await self.ws.remove(
                    f"{self.layout.memories_dir}/rollout_summaries/{rid}_{prog.slug}.md"
                )
            if dropped:
                layout.version += 1
            changes.append(
                LogRecord(
                    version=layout.version,
                    at=now_ms(),
                    cause="forgetting",
                    scope="layout",
                    keys=dropped,
                    detail=f"forgot {len(forgotten_ids)} older conversation(s): "
                    + ", ".join(sorted(forgotten_ids))[:800],
                )
            )
            logger.info("memory forgot %d older conversation(s)", len(forgotten_ids))

        # The log before the layout (a redone change logs the same version, read once), the
        # layout before progress. Every change to layout memory here moves its version
        # (promotion, forgetting, live edits), so the version says whether to write it.
        # Forgetting conversations changes what memory shows even when no layout entry goes.
        for record in changes:
            await store.append_log(record)
        layout_changed = layout.version != version_before
        if layout_changed or rebuild:
            await store.save_layout(layout)

        # Progress last, one record each, only where it changes: a rollout is marked
        # consolidated (or pruned as forgotten) once what phase 2 made of it is on disk.
        def consolidated(p: RolloutProgress) -> None:
            p.consolidated = True

        for rid, prog in selection.selected:
            if not prog.consolidated:
                await self.update_progress(rid, consolidated)
        async with self._progress_lock:
            for rid, prog in selection.forgotten:
                await store.forget_progress(rid, prog)
        if changes or layout_changed:
            self.bump()
        await store.save_defaults(
            Defaults(
                use=self.read is not None,
                generate=self.generate_enabled,
                max_summary_chars=self.summary_budget,
            )
        )
        await self.render(layout, registry, selection.selected)
        await self.sync_search()

    async def render(
        self,
        layout: LayoutMemory,
        registry: Registry,
        selected: list[tuple[str, RolloutProgress]],
    ) -> None:
        """Write the files rendered from the store, each only when its content changed.

        ``store/rendered.json`` keeps the SHA-256 of every file as last rendered; a file whose
        new rendering has the same digest is not written again (thousands of unchanged
        ``SKILL.md`` files cost nothing). ``MEMORY.md`` is compared with the file itself: an
        edit that was not taken in is replaced.
        """

        mdir = self.layout.memories_dir
        stamp_path = f"{self.store.dir}/rendered.json"
        try:
            stamp = json.loads(await self.store.read_state(stamp_path) or b"{}")
        except ValueError:
            stamp = {}
        found = stamp.get("files") if isinstance(stamp, dict) else None
        old: dict[str, str] = dict(found) if isinstance(found, dict) else {}
        for name in {"memory_summary.md", "raw_memories.md", "phase_two_selection.json"}:
            if name in old and await self.ws.size(f"{mdir}/{name}") is None:
                old.pop(name)  # removed by hand: written again
        new: dict[str, str] = {}

        async def put(rel: str, text: str, *, digest_of: str | None = None) -> None:
            digest = hashlib.sha256((digest_of or text).encode("utf-8")).hexdigest()
            new[rel] = digest
            if old.get(rel) != digest:
                await self.ws.write_text(f"{mdir}/{rel}", text)

        refs = [RolloutRef(rollout_id=rid, progress=p) for rid, p in selected]
        budget = self.summary_budget
        everything = displayed_entries(layout, registry)
        memory_md = render_memory_md(everything, refs)
        memory_digest = hashlib.sha256(memory_md.encode()).hexdigest()
        current = await self.ws.read_bytes(f"{mdir}/MEMORY.md")
        if current is None or hashlib.sha256(current).hexdigest() != memory_digest:
            await self.ws.write_text(f"{mdir}/MEMORY.md", memory_md)
        await put("memory_summary.md", render_summary_file(everything, refs, budget))
        raw_parts = ["# Raw memories (newest first)", ""]
        for ref in refs:
            text = await self.ws.read_text(f"{mdir}/raw_memories/{ref.rollout_id}.md")
            if text:
                raw_parts.append(text.rstrip() + "\n")
        await put("raw_memories.md", "\n".join(raw_parts) + "\n")
        selected_doc = [
            {
                "rollout_id": ref.rollout_id,
                "updated_at": ref.progress.updated_at,
                "rollout_path": rollout_path(self.layout.sessions_dir, ref.rollout_id),
                "rollout_summary_file": ref.summary_file,
            }
            for ref in refs
        ]
        limit = self.generate.max_raw_memories_for_consolidation
        selection_doc = {
            "generated_at": now_ms(),
            "max_raw_memories_for_consolidation": limit,
            "selected": selected_doc,
        }
        await put(
            "phase_two_selection.json",
            json.dumps(selection_doc, indent=1) + "\n",
            digest_of=json.dumps([limit, selected_doc]),  # the same selection, not rewritten
        )
        await self.ws.mkdir(f"{mdir}/skills")
        existing = set(await self.ws.listdir(f"{mdir}/skills"))
        wanted = {
            e.key: e
            for e in layout.entries.values()
            if e.kind == "procedure" and e.status == "active" and e.person is None
        }
        for key, entry in wanted.items():
            rel = f"skills/{key}/SKILL.md"
            if key not in existing:
                old.pop(rel, None)  # removed by hand: written again
            await put(rel, render_skill(entry))
        for stale in sorted(existing - set(wanted)):
            # Only skills rendered from the store go; hand-written ones (or the SDK's) stay.
            text = await self.ws.read_text(f"{mdir}/skills/{stale}/SKILL.md")
            if text is not None and "\nLearned from: " in text:
                await self.ws.remove(f"{mdir}/skills/{stale}/SKILL.md")
        # What the first turn of a run needs from layout memory, newest first and cut at twice
        # the budget: a run starts by reading this, not every entry (see ``prompt_entries``).
        await put("store/prompt.json", prompt_index(everything, budget=2 * budget))
        stamp_doc = {"memory_md_sha256": memory_digest, "files": new}
        if stamp != stamp_doc:
            await self.store.write_state(stamp_path, json.dumps(stamp_doc).encode())

    async def _save_changed_conversation(
        self,
        conversation: ConversationMemory,
        *,
        at: int,
        cause: Cause,
        keys: list[str],
        detail: str | None = None,
    ) -> LogRecord:
        """Save a changed conversation memory under its next version; return its log record."""

        conversation.version += 1
        await self.store.save_conversation(conversation)
        return LogRecord(
            version=conversation.version,
            at=at,
            cause=cause,
            scope=f"conversation:{conversation.rollout_id}",
            keys=keys,
            detail=detail,
        )

    async def retract_copies(
        self, entry: Entry, source: Source, *, stamp: int, cause: Cause
    ) -> list[LogRecord]:
        """Retract, in every conversation, the copies of a retracted layout entry.

        A layout entry is one lesson however many conversations taught it: each of them holds
        it (promoted from there, shown there as *This conversation*), and forgetting it in
        layout memory must not leave it there. A copy is an active entry of the same key that
        shares a source with it or is of a long-lived kind, for the same person. Returns the
        log records. Forgetting is rare: every conversation's record is looked at.
        """

        records: list[LogRecord] = []
        for rid in await self.store.list_conversations():
            conversation = await self.store.load_conversation(rid)
            copy = conversation.entries.get(entry.key)
            if copy is None or copy.status != "active" or copy.person != entry.person:
                continue
            if not (same_fact(copy, entry) or copy.kind in LONG_LIVED_KINDS):
                continue
            retract(copy, [source], stamp)
            records.append(
                await self._save_changed_conversation(
                    conversation,
                    at=stamp,
                    cause=cause,
                    keys=[entry.key],
                    detail="retracted with its layout copy",
                )
            )
        return records

    async def memory_md_edited(self) -> str | None:
        """``MEMORY.md``'s text when it differs from what was last rendered (a live edit)."""

        current = await self.ws.read_text(f"{self.layout.memories_dir}/MEMORY.md")
        if current is None:
            return None
        stamp_bytes = await self.store.read_state(f"{self.store.dir}/rendered.json")
        stamp_raw = None if stamp_bytes is None else stamp_bytes.decode("utf-8", "replace")
        try:
            rendered = json.loads(stamp_raw or "{}").get("memory_md_sha256")
        except (ValueError, AttributeError):
            rendered = None
        if rendered is None or hashlib.sha256(current.encode()).hexdigest() == rendered:
            return None
        return current

    async def take_live_edits(self) -> None:
        """Take in live edits of ``MEMORY.md`` now, as changes of the stored layout memory."""

        async with self.write_lock():
            layout = await self.store.load_layout()
            changes: list[LogRecord] = []
            await self._take_live_edits(layout, changes)
            for record in changes:  # logged before saved, as in consolidate_layout
                await self.store.append_log(record)
            if any(c.scope == "layout" for c in changes):
                await self.store.save_layout(layout)
            if changes:
                self.bump()

    async def render_current(self) -> None:
        """Render ``MEMORY.md``, the summary and skills from the stored state as it is."""

        progress = await self.store.list_progress()
        selection = select_rollouts(progress, self.generate.max_raw_memories_for_consolidation)
        await self.render(
            await self.store.load_layout(), await self.store.load_registry(), selection.selected
        )

    async def _take_live_edits(self, layout: LayoutMemory, changes: list[LogRecord]) -> None:
        """Keep edits made to MEMORY.md since the last render, as changes with sources."""

        mdir = self.layout.memories_dir
        current = await self.memory_md_edited()
        if current is None:
            return
        parsed = parse_registry(current)
        if not parsed and current.strip():
            # Edited into something without a single entry line: nonsense, not an edit.
            aside = f"{self.store.dir}/MEMORY.md.broken-{now_ms()}"
            raw = await self.ws.read_bytes(f"{mdir}/MEMORY.md")
            from .redact import redact_bytes

            kept = redact_bytes(raw if raw is not None else current.encode(), self.redactor)
            await self.ws.write_atomic(aside, kept)
            logger.warning(
                "%s/MEMORY.md was edited into text without entry lines; kept as %s and "
                "rebuilt from the store",
                mdir,
                aside,
            )
            return
        source = await self._live_edit_source()
        cause: Cause = "live_update" if source.conversation != "person" else "person"
        keys: list[str] = []
        stamp = now_ms()
        from .engines.base import ENTRY_KINDS
        from .store import KEY_RE

        # What the last render showed: layout entries and the conversations' facts (registry).
        # Lines still showing them (content compared as rendered, on one line) are no edit.
        registry = await self.store.load_registry()
        rendered_as = shown_entries(layout, registry)
        owner = {key: rid for key, (_, rid) in rendered_as.items() if rid is not None}
        shown = {key: e for key, (e, _) in rendered_as.items()}
        conversations: dict[str, Any] = {}
        conv_keys: list[str] = []

        async def conversation(rid: str) -> Any:
            if rid not in conversations:
                conversations[rid] = await self.store.load_conversation(rid)
            return conversations[rid]

        for key, (kind, content) in parsed.items():
            entry = layout.entries.get(key)
            was = shown.get(key)
            if was is not None and was.kind == kind and " ".join(was.content.split()) == content:
                continue
            reason = None
            if not KEY_RE.fullmatch(key) or ".." in key:
                reason = "key is not a safe slug"
            elif kind not in ENTRY_KINDS:
                reason = f"unknown kind {kind!r}"
            elif not content:
                reason = "empty content"
            elif kind == "preference" and cause != "person":
                reason = "a preference needs an explicit statement by the user"
            else:
                reason = secret_problem(content, self.redactor)
            if reason:
                logger.warning("live edit of MEMORY.md entry %r rejected: %s", key, reason)
                continue
            if entry is not None and entry.status == "retracted" and cause != "person":
                logger.warning("live edit of %r rejected: the entry was retracted", key)
                continue
            new_entry = Entry(
                key=key, content=content, kind=kind, sources=[source], updated_at=stamp
            )
            if key in owner and kind not in LONG_LIVED_KINDS:
                # A conversation's fact was corrected: the correction goes to that conversation.
                conv = await conversation(owner[key])
                old = conv.entries.get(key)
                new_entry.sources = [*(old.sources if old else []), source]
                conv.entries[key] = new_entry
                registry.conversations[owner[key]] = [
                    new_entry if e.key == key else e for e in registry.conversations[owner[key]]
                ]
                conv_keys.append(key)
            else:
                layout.entries[key] = new_entry
                keys.append(key)
        if parsed:
            for key, entry in layout.entries.items():
                if entry.status == "active" and entry.person is None and key not in parsed:
                    retract(entry, [source], stamp)
                    keys.append(key)
            for key, rid in owner.items():
                if key in parsed:
                    continue
                conv = await conversation(rid)
                gone = conv.entries.get(key)
                if gone is not None and gone.status == "active":
                    retract(gone, [source], stamp)
                    conv_keys.append(key)
                registry.conversations[rid] = [
                    e for e in registry.conversations[rid] if e.key != key
                ]
        for conv in conversations.values():
            changes.append(
                await self._save_changed_conversation(
                    conv,
                    at=stamp,
                    cause=cause,
                    keys=[k for k in conv_keys if owner.get(k) == conv.rollout_id],
                )
            )
        if conversations:
            await self.store.save_registry(registry)
        for key in keys:
            if layout.entries[key].status == "retracted":
                # A deleted line is a Forget: the conversations holding the entry lose it too.
                changes += await self.retract_copies(
                    layout.entries[key], source, stamp=stamp, cause=cause
                )
        if keys:
            layout.version += 1
            changes.append(
                LogRecord(version=layout.version, at=stamp, cause=cause, scope="layout", keys=keys)
            )

    async def _live_edit_source(self) -> Source:
        """The recorded item that edited MEMORY.md (newest), else a person's hand edit."""

        progress = await self.store.list_progress()
        for rid in await self.pending_or_recent(progress):
            path = rollout_path(self.layout.sessions_dir, rid)
            size = await self.ws.size(path) or 0
            data = await self.ws.read_range(
                path, max(0, size - LIVE_EDIT_TAIL_BYTES), LIVE_EDIT_TAIL_BYTES
            )
            if not data:
                continue
            for line in reversed(data.splitlines()[-20:]):
                try:
                    seg = json.loads(line)
                except ValueError:
                    continue
                for item in reversed(seg.get("generated_items") or []):
                    if not isinstance(item, dict):
                        continue
                    blob = json.dumps(item.get("arguments") or item.get("action") or "")
                    if "MEMORY.md" in blob and item.get("memory_item_id"):
                        return Source(conversation=rid, item=str(item["memory_item_id"]))
        return Source(conversation="person", item=f"MEMORY.md@{now_ms()}")

    async def pending_or_recent(self, progress: dict[str, RolloutProgress]) -> list[str]:
        recent = sorted(progress.items(), key=lambda kv: kv[1].updated_at, reverse=True)[:5]
        pending = await self.pending_rollouts()
        return list(dict.fromkeys([*pending, *(rid for rid, _ in recent)]))
