"""What the copy changed since it was last brought up to date (compared with its
bookkeeping), and the runs recorded in it since."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from ..stores.records import RolloutProgress
from ..stores.shared import LAYOUT_SCOPE, conversation_scope
from .base import REGISTRY_FILE, CopyBase, _entry_hash, _h


class CopyChanges(CopyBase):
    """The copy's records, layout and notes that changed since it was brought up to date."""

    async def _local_records(self, base: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
        """Conversations, rollouts (progress) and fingerprints whose records may have changed
        since the copy was last brought up to date: those noted before they changed
        (:meth:`MemoryStore.changed_records`), or every one when there are no notes (a copy
        written before notes were kept, or never brought up to date)."""

        st = self.rt.working_copy
        found = await st.changed_records() if base.get("noted") else None
        if found is None:
            found = await st.every_record()
        return found.conversations, found.rollouts, found.threads

    async def has_unsent_changes(self) -> bool:
        base = await self._base(to_change=False)
        st = self.rt.working_copy
        if LAYOUT_SCOPE in base["scopes"] and (await st.layout_head()).stamp != base.get(
            "layout_stamp"
        ):
            return True
        convs, rollouts, _ = await self._local_records(base)
        for rid in convs:
            if await self._conversation_changed(base, rid):
                return True
        if await self._changed_progress(base, rollouts):
            return True
        registry = await self.rt.ws.read_bytes(f"{self.mdir}/{REGISTRY_FILE}")
        if registry is not None and _h(registry) != base["files"].get(REGISTRY_FILE):
            return True
        return await self.rt.memory_md_edited() is not None

    async def _conversation_changed(self, base: dict[str, Any], rid: str) -> bool:
        conv = await self.rt.working_copy.load_conversation(rid)
        b = base["scopes"].get(conversation_scope(rid))
        if b is None:
            return True
        known: dict[str, list[Any]] = b["entries"]
        if sorted(known) != sorted(conv.entries):
            return True
        if any(known[k][1] != _entry_hash(e) for k, e in conv.entries.items()):
            return True
        return bool(_h(json.dumps([conv.head, conv.overrides.model_dump()])) != b.get("meta"))

    async def _changed_progress(
        self, base: dict[str, Any], rollouts: Collection[str]
    ) -> dict[str, RolloutProgress]:
        """Progress of ``rollouts`` (forgotten ones too) the copy changed since it was last
        brought up to date."""

        out: dict[str, RolloutProgress] = {}
        for rid in rollouts:
            prog = await self.rt.working_copy.get_progress(rid)
            if prog is None:
                continue
            if base["rollouts"].get(rid, {}).get("progress") != _h(prog.model_dump_json()):
                out[rid] = prog
        return out

    async def recorded_here(self) -> list[str]:
        """Pending rollouts holding runs recorded in this copy since it last took in the
        store's: the ones whose extraction is this sandbox's to do."""

        base = await self._base(to_change=False)
        sizes = await self.rt.ws.sizes(self.rt.layout.sessions_dir)
        pending = set(await self.rt.pending_rollouts())
        out: list[str] = []
        for name, size in sorted(sizes.items()):
            rid = name[: -len(".jsonl")] if name.endswith(".jsonl") else None
            if rid is None or name.startswith(".") or rid not in pending:
                continue
            if size > int(base["rollouts"].get(rid, {}).get("offset", 0)):
                out.append(rid)
        return out
