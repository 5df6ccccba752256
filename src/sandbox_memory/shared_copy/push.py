"""Copy to store: the scopes (layout memory, each conversation's memory), notes and progress
the copy changed, each written on condition that the store still holds what the copy read."""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from typing import Any

from ..errors import MemoryConflict
from ..stores.records import Entry, LogRecord, RolloutProgress
from ..stores.segments import rollout_path
from ..stores.shared import LAYOUT_SCOPE, SETTINGS_NOTE, Fence, ScopeState, conversation_scope
from .base import REGISTRY_FILE, CopyBase, _entry_hash, _h, _lines_with_ends, _segment_id

logger = logging.getLogger("sandbox_memory")

NOTE_DIRS = ("raw_memories", "rollout_summaries")
"""Phase-1 notes under ``memories/`` that phase 2 of any machine reads: kept in the store."""

STORE_NOTES = (REGISTRY_FILE, SETTINGS_NOTE)
"""State files under ``memories/`` kept in the store as notes: the registry phase 2 derives and
the switch defaults of the ``Memory`` configuration that last consolidated."""


def _note_rollout(rel: str) -> str:
    """The rollout a note belongs to: ``raw_memories/<id>.md``,
    ``rollout_summaries/<id>_<slug>.md`` (a slug has no ``_``)."""

    folder, _, name = rel.partition("/")
    stem = name[: -len(".md")] if name.endswith(".md") else name
    return stem[: stem.rfind("_")] if folder == "rollout_summaries" and "_" in stem else stem


class CopyPush(CopyBase):
    """What the copy changed, sent to the store under the lease."""

    async def push_state(self, fence: Fence) -> None:
        """Send what the copy changed since it was last brought up to date."""

        base = await self._base()
        st = self.rt.working_copy
        new_logs = (await st.read_log())[int(base["log_lines"]) :]
        head = await st.layout_head()
        layout_refused = st.layout_refused()
        if not layout_refused and (
            LAYOUT_SCOPE not in base["scopes"] or head.stamp != base.get("layout_stamp")
        ):
            # A shard refused for want of a seal reads as empty: its absence is not sent as
            # deletions (sent once the copy's layout is rebuilt and committed again).
            await self._push_layout(base, head.stamp, head.version, new_logs, fence)
        convs, rollouts, threads = await self._local_records(base)
        for rid in convs:
            conv = await st.load_conversation(rid)
            if st.conversation_refused(rid):
                continue  # not memory's record: nothing of it is sent
            await self._push_scope(
                base,
                conversation_scope(conv.rollout_id),
                conv.entries,
                conv.version,
                conv.head,
                conv.overrides,
                new_logs,
                fence,
            )
        changed = await self._changed_progress(base, rollouts)
        await self._push_files(base, fence, changed)
        await self._push_progress(changed, fence)
        fresh: dict[str, str] = {}
        for fp in threads:
            found = await st.thread_for(fp)
            if found is not None:
                fresh[fp] = found
        await self.store.map_threads(fresh)  # one already stored stays as it is

    async def _push_layout(
        self, base: dict[str, Any], stamp: str, version: int, logs: list[LogRecord], fence: Fence
    ) -> None:
        """Send the layout entries the copy changed since it was last brought up to date.

        The copy's layout commits since then name the keys they changed (its head lists the
        latest ones, whichever process made them): only those are read and compared. When
        they are not known (more commits since than the head names, a rebuild), every entry
        is compared instead.
        """

        st = self.rt.working_copy
        keys = None
        if LAYOUT_SCOPE in base["scopes"] and base.get("layout_stamp"):
            now, keys = await st.layout_changes(str(base["layout_stamp"]))
            if now != stamp:
                keys = None  # committed to meanwhile: compare all
        if keys is None:
            entries: dict[str, Entry] = (await st.load_layout()).entries
            await self._push_scope(base, LAYOUT_SCOPE, entries, version, None, None, logs, fence)
            return
        found = await st.layout_entries(keys)
        await self._push_scope(
            base, LAYOUT_SCOPE, found, version, None, None, logs, fence, only=keys
        )

    async def _push_scope(
        self,
        base: dict[str, Any],
        scope: str,
        entries: dict[str, Entry],
        version: int,
        head: str | None,
        overrides: Any,
        logs: list[LogRecord],
        fence: Fence,
        *,
        only: Collection[str] | None = None,
    ) -> None:
        """``entries``: the scope's entries as the copy holds them, or, with ``only``, those
        of the keys ``only`` names (the keys that may have changed; the rest did not)."""

        b = base["scopes"].get(scope) or {"version": 0, "entries": {}, "meta": None}
        known: dict[str, list[Any]] = b["entries"]
        changed = {
            k: e for k, e in entries.items() if known.get(k, [None, None])[1] != _entry_hash(e)
        }
        candidates = known if only is None else [k for k in only if k in known]
        removed = [k for k in candidates if k not in entries]
        meta = _h(json.dumps([head, overrides.model_dump() if overrides else None]))
        meta_changed = overrides is not None and meta != b.get("meta")
        # A change is logged before it is saved: a record past the scope's saved version is of
        # a change a killed close never saved (it is redone and logged again), not sent.
        scope_logs = [r for r in logs if r.scope == scope and r.version <= version]
        known_scope = scope in base["scopes"]
        if not changed and not removed and not meta_changed and not scope_logs and known_scope:
            return
        expected = {k: (known[k][0] if k in known else None) for k in [*changed, *removed]}
        bump = version - int(b["version"])
        if changed or removed or meta_changed or scope_logs:
            bump = max(1, bump)  # a change always moves the version other copies compare
        for attempt in (1, 2):
            try:
                await self.store.write_scope(
                    scope,
                    entries=changed,
                    remove=removed,
                    expected_entries=expected,
                    head=head,
                    overrides=overrides if meta_changed else None,
                    log=scope_logs,
                    fence=fence,
                    bump=bump,
                )
                return
            except MemoryConflict as exc:
                if attempt == 2 or type(exc) is not MemoryConflict:
                    raise
                now: ScopeState = await self.store.read_scope(scope)
                stale = sorted(k for k, v in expected.items() if now.entry_versions.get(k) != v)
                logger.warning(
                    "memory change of %s rejected for %s: changed in the store since this copy "
                    "read it (another sandbox); the store's version is kept",
                    scope,
                    ", ".join(stale),
                )
                for k in stale:
                    changed.pop(k, None)
                    expected.pop(k, None)
                removed = [k for k in removed if k not in stale]

    async def _note_paths(self) -> list[str]:
        out = list(STORE_NOTES)
        for d in NOTE_DIRS:
            out += [
                f"{d}/{n}"
                for n in await self.rt.ws.listdir(f"{self.mdir}/{d}")
                if not n.startswith(".")
            ]
        return out

    async def _push_files(
        self, base: dict[str, Any], fence: Fence, extracted: Collection[str]
    ) -> None:
        """Send the notes changed since the copy was last brought up to date.

        A rollout's notes are written only by its extraction, which then moves its progress:
        only the notes of ``extracted`` rollouts (progress changed), new notes and the store
        notes are read; a removed note is seen by its name missing.
        """

        known: dict[str, str] = base["files"]
        send: dict[str, bytes | None] = {}
        present = set()
        for rel in await self._note_paths():
            if rel in known and rel not in STORE_NOTES and _note_rollout(rel) not in extracted:
                present.add(rel)
                continue
            data = await self.rt.ws.read_bytes(f"{self.mdir}/{rel}")
            if data is None:
                continue
            present.add(rel)
            if known.get(rel) != _h(data):
                send[rel] = data
        for rel in known:
            if rel not in present:
                send[rel] = None
        await self.store.put_files(send, fence=fence)

    async def _push_progress(self, changed: dict[str, RolloutProgress], fence: Fence) -> None:
        for rid, prog in changed.items():
            data = await self.rt.ws.read_range(
                rollout_path(self.rt.layout.sessions_dir, rid), 0, prog.offset
            )
            extracted = {_segment_id(line) for line in _lines_with_ends(data or b"")}
            ids = await self.store.segment_ids(rid)
            watermark = 0
            while watermark < len(ids) and ids[watermark] in extracted:
                watermark += 1
            await self.store.advance(
                rid,
                watermark=watermark,
                progress=prog.model_dump(exclude={"offset"}),
                fence=fence,
            )
