"""Forget reaches the derived text: what a forgotten fact's runs left in files any run opens.

A ``Forget`` retracts an entry, and search hides the items it rests on and the items and
summary lines that state it (:mod:`sandbox_memory.search.index`). The files phase 1 derived from those runs hold
it too: the rollout summary (``rollout_summaries/<id>_<slug>.md``, its name included) and the
raw notes (``raw_memories/<id>.md``, gathered into ``raw_memories.md``). This module takes it
out of them, for each conversation the entry rests on:

- a line of the summary or the notes that states the fact (its content, or the text of an
  item it rests on, as :func:`~sandbox_memory.search.index.states_any` reads it) is dropped;
- the slug loses the words only the fact had (``remember-trip-budget-1500-eur`` becomes
  ``remember``, ``rollout`` when none is left): the summary is written under its new name and
  the old file removed, and the rollout's progress, ``MEMORY.md`` and the notes' header follow.

When it runs: for a layout Forget, as part of its commit (the hook that retracts the entry's
copies in conversations), so a writer that finishes a commit a dead process left does it too;
for a conversation's retracted entries, in phase 2 when the conversation is taken in again (a
Forget there, or a new extraction). It is idempotent: a file already without the fact is not
written.

What phase 1 wrote is derived data: the recorded run stays in ``sessions/`` as it was (the
history is not rewritten), and a direct ``Remember`` of the key makes the entry active again
without bringing the dropped lines back.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from ..search.index import STATED_MIN_CHARS, _plain, states_any
from ..stores.records import Entry, RolloutProgress

if TYPE_CHECKING:
    from ..layout_state import LayoutState
    from ..render.step import Renderer
    from ..search.index import SearchIndex

logger = logging.getLogger("sandbox_memory")

_KEPT_LINE_RE = re.compile(
    r"^(?:#|<!--|session_id:|rollout_id:|updated_at:|rollout_path:|rollout_summary_file:|terminal_state:|"
    r"conversation:)"
)
"""Lines memory writes itself around the notes (headers, block marks): never a statement."""

NOT_CONVERSATIONS = frozenset({"person", "live"})
"""Source ``conversation`` values that name who edited, not a recorded conversation."""


def without_statements(text: str, probes: list[str]) -> str:
    """``text`` without the lines that state one of ``probes``."""

    kept = [
        line
        for line in text.splitlines()
        if _KEPT_LINE_RE.match(line) or not states_any(line, probes)
    ]
    return "\n".join(kept) + ("\n" if text.endswith("\n") else "")


def slug_without(slug: str, probes: list[str], kept_text: str) -> str:
    """``slug`` without the words the fact had that the kept text no longer has."""

    said = {w for p in probes for w in p.split()}
    kept = set(_plain(kept_text).split())
    parts = [p for p in slug.split("-") if p and (p not in said or p in kept)]
    return "-".join(parts) or "rollout"


async def forget_derived(
    st: LayoutState, entry: Entry, *, index: SearchIndex, renderer: Renderer
) -> list[str]:
    """Take the retracted ``entry`` out of the summaries and notes of the conversations it
    rests on; return the conversations whose files changed."""

    mdir = st.layout.memories_dir
    changed: list[str] = []
    for rid in sorted({s.conversation for s in entry.sources} - NOT_CONVERSATIONS):
        items = [s.item for s in entry.sources if s.conversation == rid]
        texts = [entry.content, *await index.item_texts(rid, items)]
        probes = [p for p in dict.fromkeys(_plain(t) for t in texts) if len(p) >= STATED_MIN_CHARS]
        if not probes:
            continue
        prog = await st.store.get_progress(rid)
        raw_rel = f"{mdir}/raw_memories/{rid}.md"
        raw = await st.ws.read_text(raw_rel)
        new_raw = without_statements(raw, probes) if raw else raw
        old_slug = prog.slug if prog is not None else None
        summary_rel = f"{mdir}/rollout_summaries/{rid}_{old_slug}.md" if old_slug else None
        summary = await st.ws.read_text(summary_rel) if summary_rel else None
        new_summary = without_statements(summary, probes) if summary else summary
        new_slug = old_slug
        if old_slug and new_summary is not None:
            body = "\n".join(
                line for line in new_summary.splitlines() if not _KEPT_LINE_RE.match(line)
            )
            new_slug = slug_without(old_slug, probes, body)
        if new_raw == raw and new_summary == summary and new_slug == old_slug:
            continue
        if new_slug != old_slug and old_slug:
            old_name = f"rollout_summaries/{rid}_{old_slug}.md"
            new_name = f"rollout_summaries/{rid}_{new_slug}.md"
            if new_summary is not None:
                new_summary = new_summary.replace(f"# {old_slug}\n", f"# {new_slug}\n", 1)
            if new_raw:
                new_raw = new_raw.replace(old_name, new_name)
        if new_raw is not None and new_raw != raw:
            await st.ws.write_text(raw_rel, new_raw)
        if new_summary is not None and summary_rel is not None:
            target = f"{mdir}/rollout_summaries/{rid}_{new_slug}.md"
            await st.ws.write_text(target, new_summary)
            if target != summary_rel:
                await st.ws.remove(summary_rel)

        if new_slug != old_slug:

            def renamed(p: RolloutProgress, slug: str | None = new_slug) -> None:
                p.slug = slug  # the rendering's inputs name the file: it renders again

            await st.update_progress(rid, renamed)
        renderer.source_changed(rid)
        index.mark(rid)
        changed.append(rid)
    if changed:
        logger.info(
            "forgetting %r took it out of the summaries and notes of %s",
            entry.key,
            ", ".join(changed),
        )
    return changed
