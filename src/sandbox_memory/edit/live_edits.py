"""Step 5 of the flow, live edits: take in what the agent (or a person) changed in ``MEMORY.md``.

An edit made since the last render becomes changes of the stored memory, with the run item that
made it as their source, before the next render would replace it: in phase 2
(:mod:`sandbox_memory.consolidate`), and when a shared copy sends its changes.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from .. import bounded
from ..consolidate.selection import shown_entries
from ..engines.base import ENTRY_KINDS
from ..integrity import MEMORY_MD_NOTE
from ..layout_state import LayoutState
from ..render.files import parse_registry
from ..rules import retract, secret_problem
from ..stores.records import (
    KEY_RE,
    LONG_LIVED_KINDS,
    Cause,
    Entry,
    LogRecord,
    RolloutProgress,
    Source,
    now_ms,
)
from ..stores.seam import LayoutEdit
from ..stores.segments import last_item_id, parse_segments, rollout_path
from .copies import retract_copies, save_changed_conversation

logger = logging.getLogger("sandbox_memory")

LIVE_EDIT_TAIL_BYTES = 1 << 20
"""Bytes read from the end of a rollout to find the run item that edited MEMORY.md: the edit
is in the newest segments, and a 100 MB rollout must not be read whole for it."""


class LiveEdits:
    """Finds and takes in live edits of one layout's ``MEMORY.md``."""

    def __init__(self, state: LayoutState) -> None:
        self.state = state
        self.as_rendered = False
        """What the last :meth:`memory_md_edited` found: ``MEMORY.md`` is as last rendered."""
        self.edited_digest = ""
        """SHA-256 of ``MEMORY.md`` as the last :meth:`memory_md_edited` read it."""
        self.keep_rendered = False
        """Keep the bytes of a ``MEMORY.md`` found as last rendered, for a renderer that
        patches them (a process holding no rendering): the file is then neither read nor
        hashed again by the render (2.4 MB at 20,000 entries)."""
        self.rendered_bytes: bytes | None = None
        """Those bytes, when :attr:`keep_rendered` and the last :meth:`memory_md_edited`
        found them as last rendered."""
        self.rendered_tail = ""
        """The last line of ``MEMORY.md`` as last rendered (``""``: not known)."""
        self.rendered_layout = ""
        """Layout memory's change stamp ``MEMORY.md`` was last rendered from (``""``: not
        known), as :meth:`memory_md_edited` found it in ``store/rendered.json``."""

    async def memory_md_edited(self) -> str | None:
        """``MEMORY.md``'s text when it differs from what was last rendered (a live edit)."""

        st = self.state
        self.as_rendered = False
        self.rendered_bytes = None
        # Compared as bytes: the text is decoded only when it is an edit to take in.
        raw = await st.ws.read_bytes(f"{st.layout.memories_dir}/MEMORY.md")
        if raw is None:
            return None
        stamp_bytes = await st.local.read_state(st.local.path("rendered.json"))
        stamp_raw = None if stamp_bytes is None else stamp_bytes.decode("utf-8", "replace")
        try:
            doc = bounded.loads(
                stamp_raw or "{}", limit=bounded.MAX_STATE_BYTES, what="store/rendered.json"
            )
            rendered = doc.get("memory_md_sha256")
            next_rendered = doc.get("memory_md_next_sha256")
            layout_stamp = doc.get("layout_stamp")
            tail = doc.get("memory_md_tail")
        except (ValueError, AttributeError):
            rendered = next_rendered = layout_stamp = tail = None
        self.rendered_layout = layout_stamp if isinstance(layout_stamp, str) else ""
        self.rendered_tail = tail if isinstance(tail, str) else ""
        if rendered is None:
            return None
        self.edited_digest = hashlib.sha256(raw).hexdigest()
        if self.edited_digest == rendered:
            self.as_rendered = True
            if self.keep_rendered:
                self.rendered_bytes = raw
            return None
        if self.edited_digest == next_rendered:
            # Memory's own rendering, written by a process killed before it recorded it as
            # rendered: no edit (and not "as rendered": the next rendering compares the file).
            return None
        return raw.decode("utf-8", errors="replace")

    async def take_live_edits(self) -> None:
        """Take in live edits of ``MEMORY.md`` now, as changes of the stored layout memory."""

        st = self.state
        async with st.write_lock():
            edit = await st.store.edit_layout()
            changes: list[LogRecord] = []
            await self.collect(edit, changes)
            await edit.commit(changes)  # logged and saved in one commit, as in phase 2
            if changes:
                st.bump()

    async def collect(self, layout: LayoutEdit, changes: list[LogRecord]) -> None:
        """Keep edits made to MEMORY.md since the last render, as changes with sources."""

        st = self.state
        current = await self.memory_md_edited()
        if current is None:
            return
        await layout.load_all()  # every line is compared with what was rendered
        parsed = parse_registry(current)
        why = self._damage(current, parsed)
        if why is not None:
            await self._keep_aside(current, why)
            return
        # Entries committed since MEMORY.md was rendered (a command's own change, which its
        # phase 2 takes edits in after; a writer killed before rendering) were never shown as
        # they are: their lines, or their lines' absence, are not edits. Not known (more
        # commits than the head names, a rebuild): every entry is compared.
        moved: set[str] = set()
        if self.rendered_layout:
            _, since = await st.store.layout_changes(self.rendered_layout)
            moved = since or set()
        source = await self.source(self.edited_digest)
        cause: Cause = "live_update" if source.conversation != "person" else "person"
        keys: list[str] = []
        stamp = now_ms()
        # What the last render showed: layout entries and the conversations' facts (registry).
        # Lines still showing them (content compared as rendered, on one line) are no edit.
        registry = await st.store.load_registry()
        rendered_as = shown_entries(layout, registry)
        owner = {key: rid for key, (_, rid) in rendered_as.items() if rid is not None}
        shown = {key: e for key, (e, _) in rendered_as.items()}
        conversations: dict[str, Any] = {}
        conv_keys: list[str] = []

        async def conversation(rid: str) -> Any:
            if rid not in conversations:
                conversations[rid] = await st.store.load_conversation(rid)
            return conversations[rid]

        for key, (kind, content) in parsed.items():
            if key in moved:
                continue
            entry = layout.entries.get(key)
            was = shown.get(key)
            if was is not None and was.kind == kind and " ".join(was.content.split()) == content:
                continue
            reason = self._refused(key, kind, content, entry, cause)
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
                if (
                    entry.status == "active"
                    and entry.person is None
                    and key not in parsed
                    and key not in moved
                ):
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
                await save_changed_conversation(
                    st.store,
                    conv,
                    at=stamp,
                    cause=cause,
                    keys=[k for k in conv_keys if owner.get(k) == conv.rollout_id],
                )
            )
        if conversations:
            await st.store.save_registry(registry)
        for key in keys:
            if layout.entries[key].status == "retracted":
                # A deleted line is a Forget: the conversations holding the entry lose it too.
                changes += await retract_copies(
                    st.store, layout.entries[key], source, stamp=stamp, cause=cause
                )
        if keys:
            layout.version += 1
            changes.append(
                LogRecord(version=layout.version, at=stamp, cause=cause, scope="layout", keys=keys)
            )

    def _damage(self, current: str, parsed: dict[str, tuple[str, str]]) -> str | None:
        """Why ``MEMORY.md`` as found is damage, not an edit (``None``: it reads as an edit)."""

        if not parsed and current.strip():
            # Edited into something without a single entry line: nonsense, not an edit.
            return "was edited into text without entry lines"
        if self.rendered_tail and not current.endswith("\n") and self.rendered_tail not in current:
            # It ends inside a line and its last rendered line is gone (truncated, a disk
            # full, a copy cut short): the lines after the cut are damage, not a person's
            # deletions, and the cut line is no new content. (Memory writes whole lines; a
            # cut exactly at a line's end is not told from deleted lines.)
            return "was cut short (it ends inside a line, its last rendered line gone)"
        return None

    async def _keep_aside(self, current: str, why: str) -> None:
        """A damaged ``MEMORY.md`` kept (redacted) as ``store/MEMORY.md.broken-<ms>``, logged;
        the next render writes it again from the store."""

        st = self.state
        mdir = st.layout.memories_dir
        aside = st.local.path(f"MEMORY.md.broken-{now_ms()}")
        raw = await st.ws.read_bytes(f"{mdir}/MEMORY.md")
        from ..redact import redact_bytes  # imported on first use, like the redactor

        kept = redact_bytes(raw if raw is not None else current.encode(), st.redactor)
        await st.ws.write_atomic(aside, kept)
        logger.warning(
            "%s/MEMORY.md %s; kept as %s and rebuilt from the store, no entry changed",
            mdir,
            why,
            aside,
        )

    def _refused(
        self, key: str, kind: str, content: str, entry: Entry | None, cause: Cause
    ) -> str | None:
        """Why an edited line of ``MEMORY.md`` is not taken in (``None``: it is)."""

        if not KEY_RE.fullmatch(key) or ".." in key:
            return "key is not a safe slug"
        if kind not in ENTRY_KINDS:
            return f"unknown kind {kind!r}"
        if not content:
            return "empty content"
        if kind == "preference" and cause != "person":
            return "a preference needs an explicit statement by the user"
        if entry is not None and not entry.exists_for(None):
            # MEMORY.md is shared: a person's private entry is not in it, nor changed by it.
            return "its key is a person's private entry, which MEMORY.md does not hold"
        return secret_problem(content, self.state.redactor)

    async def source(self, digest: str) -> Source:
        """Who made ``MEMORY.md`` what it is now (``digest``, its SHA-256): the run whose sealed
        line names that content (:data:`~sandbox_memory.integrity.MEMORY_MD_NOTE`: the file
        changed while that run was live, by any tool), else a person.

        Not a search of tool arguments for the file's name: ``apply_patch`` keeps the path in
        its ``input``, a shell reaches the file through a glob or a variable. The host compares
        the file's bytes at a run's start and end; only a change no run's end saw can be a
        person's. A line the agent wrote carries no valid seal and is never read here.
        """

        st = self.state
        progress = await st.store.list_progress()
        for rid in await self.pending_or_recent(progress):
            path = rollout_path(st.layout.sessions_dir, rid)
            size = await st.ws.size(path) or 0
            start = max(0, size - LIVE_EDIT_TAIL_BYTES)
            data = await st.ws.read_range(path, start, LIVE_EDIT_TAIL_BYTES)
            if not data:
                continue
            if start:
                data = data[data.find(b"\n") + 1 :]  # from the first whole line
            parsed = parse_segments(data, start_offset=start, check=st.line_check(rid))
            for seg in reversed(parsed.segments):
                if seg.get(MEMORY_MD_NOTE) == digest:
                    item = last_item_id([seg])
                    if item is not None:
                        return Source(conversation=rid, item=item)
        return Source(conversation="person", item=f"MEMORY.md@{now_ms()}")

    async def pending_or_recent(self, progress: dict[str, RolloutProgress]) -> list[str]:
        st = self.state
        recent = sorted(progress.items(), key=lambda kv: kv[1].updated_at, reverse=True)[:5]
        pending = await st.pending_rollouts()
        return list(dict.fromkeys([*pending, *(rid for rid, _ in recent)]))
