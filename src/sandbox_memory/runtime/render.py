"""Step 4 of the flow, render: write the files a user and the agent read from the store.

``MEMORY.md``, ``memory_summary.md``, ``raw_memories.md``, ``phase_two_selection.json``,
``skills/`` and the read prompt's index (``store/prompt.json``), each written only when its
content changed. What each file says is decided in ``sandbox_memory/render.py``; this step
decides what is written where, and when.
"""

from __future__ import annotations

import hashlib
import json

from ..phase_two import displayed_entries, select_rollouts
from ..render import (
    RolloutRef,
    entry_line,
    newest_first,
    render_memory_md,
    render_skill,
    render_summary_file,
)
from ..rollouts import rollout_path
from ..store import Entry, LayoutMemory, Registry, RolloutProgress, now_ms
from .state import LayoutState


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


class Renderer:
    """Renders one layout's files from its stored state (see :meth:`render`)."""

    def __init__(self, state: LayoutState) -> None:
        self.state = state

    async def render_current(self) -> None:
        """Render ``MEMORY.md``, the summary and skills from the stored state as it is."""

        st = self.state
        progress = await st.store.list_progress()
        selection = select_rollouts(progress, st.generate.max_raw_memories_for_consolidation)
        await self.render(
            await st.store.load_layout(), await st.store.load_registry(), selection.selected
        )

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

        st = self.state
        mdir = st.layout.memories_dir
        stamp_path = f"{st.store.dir}/rendered.json"
        try:
            stamp = json.loads(await st.store.read_state(stamp_path) or b"{}")
        except ValueError:
            stamp = {}
        found = stamp.get("files") if isinstance(stamp, dict) else None
        old: dict[str, str] = dict(found) if isinstance(found, dict) else {}
        for name in {"memory_summary.md", "raw_memories.md", "phase_two_selection.json"}:
            if name in old and await st.ws.size(f"{mdir}/{name}") is None:
                old.pop(name)  # removed by hand: written again
        new: dict[str, str] = {}

        async def put(rel: str, text: str, *, digest_of: str | None = None) -> None:
            digest = hashlib.sha256((digest_of or text).encode("utf-8")).hexdigest()
            new[rel] = digest
            if old.get(rel) != digest:
                await st.ws.write_text(f"{mdir}/{rel}", text)

        refs = [RolloutRef(rollout_id=rid, progress=p) for rid, p in selected]
        budget = st.summary_budget
        everything = displayed_entries(layout, registry)
        memory_md = render_memory_md(everything, refs)
        memory_digest = hashlib.sha256(memory_md.encode()).hexdigest()
        current = await st.ws.read_bytes(f"{mdir}/MEMORY.md")
        if current is None or hashlib.sha256(current).hexdigest() != memory_digest:
            await st.ws.write_text(f"{mdir}/MEMORY.md", memory_md)
        await put("memory_summary.md", render_summary_file(everything, refs, budget))
        raw_parts = ["# Raw memories (newest first)", ""]
        for ref in refs:
            text = await st.ws.read_text(f"{mdir}/raw_memories/{ref.rollout_id}.md")
            if text:
                raw_parts.append(text.rstrip() + "\n")
        await put("raw_memories.md", "\n".join(raw_parts) + "\n")
        selected_doc = [
            {
                "rollout_id": ref.rollout_id,
                "updated_at": ref.progress.updated_at,
                "rollout_path": rollout_path(st.layout.sessions_dir, ref.rollout_id),
                "rollout_summary_file": ref.summary_file,
            }
            for ref in refs
        ]
        limit = st.generate.max_raw_memories_for_consolidation
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
        await st.ws.mkdir(f"{mdir}/skills")
        existing = set(await st.ws.listdir(f"{mdir}/skills"))
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
            text = await st.ws.read_text(f"{mdir}/skills/{stale}/SKILL.md")
            if text is not None and "\nLearned from: " in text:
                await st.ws.remove(f"{mdir}/skills/{stale}/SKILL.md")
        # What the first turn of a run needs from layout memory, newest first and cut at twice
        # the budget: a run starts by reading this, not every entry (see ``prompt_entries``).
        await put("store/prompt.json", prompt_index(everything, budget=2 * budget))
        stamp_doc = {"memory_md_sha256": memory_digest, "files": new}
        if stamp != stamp_doc:
            await st.store.write_state(stamp_path, json.dumps(stamp_doc).encode())
