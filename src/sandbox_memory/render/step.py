"""Step 4 of the flow, render: write the files a user and the agent read from the store.

``MEMORY.md``, ``memory_summary.md``, ``raw_memories.md``, ``phase_two_selection.json``,
``skills/`` and the read prompt's index (``store/prompt.json``), each written only when its
content changed. What each file says is decided in ``sandbox_memory/render/files.py``; this step
decides what is written where, and when.

The rendering is kept entry by entry (:class:`~sandbox_memory.render.files.LayoutRendering`): a
render after one change costs that change plus joining cached lines, and a render whose inputs
(layout memory's change stamp, the registry, the selection, the budget) are those of the last
one writes nothing and renders nothing (``store/rendered.json`` keeps them).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from .. import bounded
from ..consolidate.selection import select_rollouts
from ..layout_state import LayoutState
from ..stores.records import Entry, LayoutMemory, Registry, RolloutProgress, now_ms
from ..stores.segments import rollout_path
from ..workspace import Workspace
from .files import (
    LayoutRendering,
    RolloutRef,
    SavedRows,
    collection_paused,
    entry_line,
    is_skill,
    newest_first,
    prompt_entry_json,
    prompt_text,
    render_skill,
    skill_digest,
    summary_tail,
)
from .patch import PATCH_FORMAT, PATCH_MARGIN, NotPatchable, Patch, SavedPatch, saved_patch

logger = logging.getLogger("sandbox_memory")

RENDERED_FILES = ("MEMORY.md", "memory_summary.md", "raw_memories.md", "phase_two_selection.json")
"""The views phase 2 renders under ``memories/`` (besides ``skills/``)."""

SAVED_FORMAT = 2
"""Shape of ``store/rendering.json`` (:class:`SavedRendering`); another is not read."""

SAVE_AFTER_COMMITS = 16
"""Layout commits after which the saved rendering is written again. Writing it costs every
entry's line (3.4 MB at 20,000 entries); a new process that takes up an older one reads again
the entries changed since (named by the sealed head, which keeps the last 64 commits), so it
is written once every few commands, not at each one."""

SAVE_FROM_ENTRIES = 200
"""Active layout entries from which the rendering is saved at all: a new process renders a
smaller layout memory from every entry in about the time one more record write takes."""

SAVE_AFTER_KEYS = 64
"""Entries changed since the saved rendering after which it is brought up to date again (each
one is read from its shard by the next process that takes it up)."""

DELTA_SHARE = 8
"""The saved rendering is brought up to date by its delta (``store/rendering-delta.json``:
the rows of the entries changed since it was written whole) until the delta holds more than
one in this many of its rows (and at least :data:`SAVE_AFTER_KEYS`); then it is written whole
again and the delta goes. After a close that changes 60 of 15,000 entries the delta holds
those 60 rows (after ten such closes, 600), not 15,000, and the whole rendering is written
once every 1/8 of memory changed (about 30 such closes): spread over the closes, saving
costs what changed, not memory's size."""


@dataclass
class _Patched:
    """The rendered files after a patch (:meth:`Renderer._patch`), to write."""

    saved: SavedPatch
    memory_md: bytes
    tail: str
    summary: tuple[list[str], int]
    prompt: str
    keys: set[str]
    skills: dict[str, str]
    """The keys' skills now: key -> digest of its ``SKILL.md``."""


class SavedRendering(BaseModel):
    """``store/rendering.json``: the rendering of one layout memory (its change stamp), saved
    by a process for the next (:meth:`Renderer.render`), sealed like memory's other records."""

    format: int
    layout_stamp: str
    layout_version: int
    prompt: dict[str, str]
    """The entries ``store/prompt.json`` was rendered from, as JSON (see ``Renderer._prompt``)."""
    rows: SavedRows


class SavedDelta(BaseModel):
    """``store/rendering-delta.json``: the rendering of layout memory at ``layout_stamp`` as
    the saved rendering of ``base_stamp`` (``store/rendering.json``) and the rows of the
    entries changed since (:meth:`Renderer._save_delta`), sealed like memory's other records.
    One whose base is not the saved rendering's (written whole again since) is not read."""

    format: int
    base_stamp: str
    layout_stamp: str
    layout_version: int
    prompt: dict[str, str]
    """As :attr:`SavedRendering.prompt`."""
    changed: list[str]
    """The keys changed since the base: each has its row in :attr:`rows`, or is no longer
    active."""
    rows: SavedRows


SKILL_MARK = "\nLearned from: "
"""In every ``SKILL.md`` rendered from the store: hand-written skills (or the SDK's) lack it."""


def prompt_index(entries: list[Entry], *, budget: int) -> str:
    """The read prompt's candidates: active entries newest first, shared ones and each person's
    private ones, each list cut once its rendered lines pass ``budget`` characters.

    Rendering every entry; :meth:`LayoutRendering.prompt_index` gives the same text from its
    cached lines."""

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


DIGEST_CHUNK_BYTES = 1 << 20


MEMORY_MD_TAIL_CHARS = 200
"""Characters of ``MEMORY.md``'s last rendered line kept in ``store/rendered.json``: a file
that no longer holds it was cut short (:mod:`.live_edits`)."""


def last_line(data: bytes) -> str:
    """The last non-empty line of rendered ``data``, at most :data:`MEMORY_MD_TAIL_CHARS`."""

    # Found in place: stripping and splitting ``data`` copied the whole file twice.
    end = len(data)
    while end and data[end - 1] == 0x0A:
        end -= 1
    start = data.rfind(b"\n", 0, end) + 1
    return data[start:end].decode("utf-8", "replace")[-MEMORY_MD_TAIL_CHARS:]


async def _file_digest(ws: Workspace, path: str, size: int) -> str | None:
    """SHA-256 of a file read in chunks; ``None`` when it is missing or not ``size`` bytes."""

    if await ws.size(path) != size:
        return None
    digest = hashlib.sha256()
    for offset in range(0, size, DIGEST_CHUNK_BYTES):
        chunk = await ws.read_range(path, offset, DIGEST_CHUNK_BYTES)
        if chunk is None:
            return None
        digest.update(chunk)
    return digest.hexdigest()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Renderer:
    """Renders one layout's files from its stored state (see :meth:`render`)."""

    def __init__(self, state: LayoutState) -> None:
        self.state = state
        self.model = LayoutRendering()
        self._skills: dict[str, str] | None = None
        """``skills/<key>/SKILL.md`` digests as last rendered (``store/skills.json``)."""
        self._raw: dict[str, tuple[str, str]] = {}
        """Rollout id -> (its notes file's stamp as listed then, :meth:`Workspace.stamps`,
        and the text read then): read again once the file changed, whoever changed it."""
        self._sources_changed = False
        """A rollout's notes were rewritten in place (a Forget): render even from the same
        inputs."""
        self._stamp_rendered = ""
        """Layout memory's stamp the rendering model holds."""
        self._saved_stamp = ""
        self._saved_version = 0
        """Layout memory's stamp and version of the saved rendering (``store/rendering.json``
        and its delta, as this process last wrote or read them)."""
        self._base_stamp = ""
        self._base_version = 0
        """The same of ``store/rendering.json`` alone (the delta's base)."""
        self._delta_keys: set[str] = set()
        """The keys changed between the two (those of the delta, none without one)."""
        self._prompt: tuple[str, dict[str, str]] = ("", {})
        """The entries ``store/prompt.json`` was last rendered from (as JSON: a few hundred
        short strings, not parsed entries), with layout memory's stamp then: a render after
        this process' own commits reads only the keys they changed."""
        self.memory_md_checked = False
        """Set by the live-edit check of this phase 2: ``MEMORY.md`` is what was rendered."""
        self.memory_md_bytes: bytes | None = None
        """Set with :attr:`memory_md_checked` when :attr:`wants_memory_md`: the bytes that
        check read and found as rendered, which a patch splices (not read and hashed again)."""

    @property
    def wants_memory_md(self) -> bool:
        """Whether a render would patch ``MEMORY.md`` (a process holding no rendering yet):
        then it takes the bytes the live-edit check read (:attr:`memory_md_bytes`)."""

        return not self._stamp_rendered

    def targets(self, keys: Iterable[str]) -> list[str]:
        """The paths a rendering after a change of ``keys`` may write: the views, their
        records, and the skills of those keys (a skill of another key is written only when
        its own procedure changes)."""

        mdir = self.state.layout.memories_dir
        return [
            *(f"{mdir}/{name}" for name in RENDERED_FILES),
            self.stamp_path,
            self.skills_path,
            self.saved_path,
            self.delta_path,
            self.patch_path,
            *(f"{mdir}/skills/{key}/SKILL.md" for key in keys),
        ]

    @property
    def stamp_path(self) -> str:
        return self.state.local.path("rendered.json")

    @property
    def skills_path(self) -> str:
        return self.state.local.path("skills.json")

    @property
    def saved_path(self) -> str:
        return self.state.local.path("rendering.json")

    @property
    def delta_path(self) -> str:
        return self.state.local.path("rendering-delta.json")

    @property
    def patch_path(self) -> str:
        return self.state.local.path("rendering-patch.json")

    async def _restore(self, registry: Registry) -> str:
        """Take up the rendering the last process saved (``store/rendering.json``, sealed:
        the agent's tools cannot forge one); returns the layout stamp it holds, ``""`` when
        there is none to take up (then every entry is taken in again).

        Only its seal is trusted, not its age: an older saved rendering put back is a true
        rendering of an earlier layout memory, and the keys changed since are read again
        (from the sealed head's list of commits, :meth:`MemoryStore.layout_changes`)."""

        raw, _ = await self.state.local.read_record(self.saved_path)
        if raw is None:
            return ""
        path = self.saved_path
        try:
            bounded.check_size(raw, limit=bounded.MAX_STATE_BYTES, what=path)
            with collection_paused():
                saved = SavedRendering.model_validate_json(raw)
            del raw
            if saved.format != SAVED_FORMAT:
                return ""
            path = self.delta_path
            delta = await self._read_delta(saved.layout_stamp)
            self.model.restore(
                saved.rows,
                registry.conversations,
                delta=None if delta is None else (delta.changed, delta.rows),
            )
        except ValueError as exc:  # pydantic's ValidationError included
            logger.warning(
                "memory could not take up %s (%s); every entry is rendered again", path, exc
            )
            self.model = LayoutRendering()
            return ""
        self._base_stamp, self._base_version = saved.layout_stamp, saved.layout_version
        self._delta_keys = set() if delta is None else set(delta.changed)
        top: SavedRendering | SavedDelta = saved if delta is None else delta
        stamp = top.layout_stamp
        self._prompt = (stamp, top.prompt)
        self._saved_stamp, self._saved_version = stamp, top.layout_version
        return stamp

    async def _read_delta(self, base_stamp: str) -> SavedDelta | None:
        """The saved rendering's delta when there is one of base ``base_stamp`` (one of an
        earlier base was left by a process cut short after writing the base: not read).
        Raises ``ValueError`` when it is not one."""

        raw, _ = await self.state.local.read_record(self.delta_path)
        if raw is None:
            return None
        bounded.check_size(raw, limit=bounded.MAX_STATE_BYTES, what=self.delta_path)
        with collection_paused():
            delta = SavedDelta.model_validate_json(raw)
        if delta.format != SAVED_FORMAT or delta.base_stamp != base_stamp:
            return None
        return delta

    async def _save(self, layout_stamp: str, version: int) -> None:
        """Save the rendering of layout stamp ``layout_stamp`` for the next process (sealed)."""

        saved = SavedRendering(
            format=SAVED_FORMAT,
            layout_stamp=layout_stamp,
            layout_version=version,
            prompt=self._prompt[1] if self._prompt[0] == layout_stamp else {},
            rows=self.model.saved(),
        )
        # Serialized straight to bytes: the JSON text and its encoding were two copies of the
        # 3.2 MB file at once (at 20,000 entries), at the close's peak of memory.
        data = saved.__pydantic_serializer__.to_json(saved)
        del saved
        await self.state.local.write_record(self.saved_path, data)
        del data
        # A delta left on the earlier base is no longer read (its base stamp is not this
        # one's): removed, not needed for safety.
        await self.state.ws.remove(self.delta_path)
        self._saved_stamp, self._saved_version = layout_stamp, version
        self._base_stamp, self._base_version = layout_stamp, version
        self._delta_keys = set()

    async def _save_delta(self, layout_stamp: str, version: int, changed: set[str]) -> None:
        """Save the rendering of ``layout_stamp`` as the saved one's base and the rows of
        ``changed``, the keys changed since that base (sealed)."""

        keys = sorted(changed)
        delta = SavedDelta(
            format=SAVED_FORMAT,
            base_stamp=self._base_stamp,
            layout_stamp=layout_stamp,
            layout_version=version,
            prompt=self._prompt[1] if self._prompt[0] == layout_stamp else {},
            changed=keys,
            rows=self.model.saved_of(keys),
        )
        await self.state.local.write_record(
            self.delta_path, delta.__pydantic_serializer__.to_json(delta)
        )
        self._saved_stamp, self._saved_version = layout_stamp, version
        self._delta_keys = set(keys)

    async def render_current(self) -> None:
        """Render ``MEMORY.md``, the summary and skills from the stored state as it is."""

        st = self.state
        progress = await st.store.list_progress()
        selection = select_rollouts(progress, st.generate.max_raw_memories_for_consolidation)
        await self.render(await st.store.load_registry(), selection.selected)

    async def _stamp(self) -> dict[str, object]:
        try:
            stamp = bounded.loads(
                await self.state.local.read_state(self.stamp_path) or b"{}",
                limit=bounded.MAX_STATE_BYTES,
                what=self.stamp_path,
            )
        except ValueError:
            stamp = {}
        return stamp if isinstance(stamp, dict) else {}

    async def _skill_digests(self, stamp: Mapping[str, object]) -> dict[str, str]:
        if self._skills is None:
            found: dict[str, str] = {}
            try:
                doc = bounded.loads(
                    await self.state.local.read_state(self.skills_path) or b"null",
                    limit=bounded.MAX_STATE_BYTES,
                    what=self.skills_path,
                )
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                found = {str(k): str(v) for k, v in doc.items()}
            else:
                # Written before skills had a record of their own: their digests were here.
                files = stamp.get("files")
                for rel, digest in (files if isinstance(files, dict) else {}).items():
                    parts = str(rel).split("/")
                    if len(parts) == 3 and parts[0] == "skills" and parts[2] == "SKILL.md":
                        found[parts[1]] = str(digest)
            self._skills = found
        return self._skills

    async def render(
        self,
        registry: Registry,
        selected: list[tuple[str, RolloutProgress]],
        *,
        layout: LayoutMemory | None = None,
    ) -> None:
        """Write the files rendered from the store, each only when its content changed.

        ``store/rendered.json`` keeps the SHA-256 of every file as last rendered and the
        inputs it was rendered from; ``store/skills.json`` the digest of every rendered
        ``SKILL.md``. The same inputs, every file present and ``MEMORY.md`` as rendered: there
        is nothing to do. Otherwise the rendering takes in the entries that changed, and a file
        whose new rendering has the same digest is not written again. ``MEMORY.md`` is compared
        with the file itself: an edit that was not taken in is replaced.
        """

        st = self.state
        store = st.store
        mdir = st.layout.memories_dir
        checked, self.memory_md_checked = self.memory_md_checked, False
        held, self.memory_md_bytes = self.memory_md_bytes, None
        # Layout memory's change stamp (its head): the same stamp, the same entries.
        head = await store.layout_head()
        layout_stamp = head.stamp if layout is None else ""
        layout_version = head.version
        refs = [RolloutRef(rollout_id=rid, progress=p) for rid, p in selected]
        budget = st.summary_budget
        limit = st.generate.max_raw_memories_for_consolidation
        selected_doc = [
            {
                "rollout_id": ref.rollout_id,
                "updated_at": ref.progress.updated_at,
                "rollout_path": rollout_path(st.layout.sessions_dir, ref.rollout_id),
                "rollout_summary_file": ref.summary_file,
            }
            for ref in refs
        ]
        others = [
            registry.model_dump_json(),
            selected_doc,
            [p.offset for _, p in selected],
            budget,
            limit,
        ]
        inputs = _sha(json.dumps([layout_stamp, *others]))
        others_digest = _sha(json.dumps(others))
        del others
        stamp = await self._stamp()
        found = stamp.get("files")
        old: dict[str, str] = dict(found) if isinstance(found, dict) else {}
        for name in {"memory_summary.md", "raw_memories.md", "phase_two_selection.json"}:
            if name in old and await st.ws.size(f"{mdir}/{name}") is None:
                old.pop(name)  # removed by hand: written again
        for rel in [r for r in old if r.startswith("skills/")]:
            old.pop(rel)  # kept in store/skills.json now
        skills = await self._skill_digests(stamp)
        await st.ws.mkdir(f"{mdir}/skills")
        existing = set(await st.ws.listdir(f"{mdir}/skills"))
        missing = {k for k in skills if k not in existing}  # removed by hand: written again
        if (
            layout_stamp
            and stamp.get("inputs") == inputs
            and checked
            and not missing
            and set(old) >= {"memory_summary.md", "raw_memories.md", "store/prompt.json"}
            and not self._sources_changed
        ):
            return  # rendered from these very inputs, and every file is still there
        self._sources_changed = False
        new: dict[str, str] = {}

        async def put(rel: str, text: str, *, digest_of: str | None = None) -> None:
            digest = _sha(digest_of or text)
            new[rel] = digest
            if old.get(rel) != digest:
                await st.ws.write_text(f"{mdir}/{rel}", text)

        if (
            checked
            and not self._stamp_rendered
            and layout is None
            and layout_stamp
            and not missing
            and set(old) >= {*RENDERED_FILES[1:], "store/prompt.json"}
        ):
            # A process holding no rendering (a fresh client's command): the files patched at
            # the keys changed since they were rendered, when that can be done with certainty.
            patch = await self._patch(
                registry, stamp, layout_stamp, layout_version, others_digest, held=held
            )
            if patch is not None:
                new.update(old)
                await self._write_patch(
                    patch, refs, put, stamp=stamp, existing=existing, skills=skills
                )
                digest = patch.saved.memory_md_sha256
                await self._record_rendered(
                    stamp, digest, patch.tail, layout_stamp, new, inputs, patch=patch.saved
                )
                return

        del held
        rendered_from, known, changed = await self._take_in(registry, layout, layout_stamp, skills)

        memory_digest, memory_tail = await self._write_memory_md(refs, stamp, checked=checked)
        await put("memory_summary.md", self.model.summary_file(refs, budget))
        await put("raw_memories.md", await self._raw_memories(refs))
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
        await self._skills_changed(changed | missing, existing, skills, layout)
        entries = await self._prompt_entries(layout, layout_stamp, rendered_from, known)
        parts, private, private_json = self.model.prompt_parts(2 * budget, entries)
        await put("store/prompt.json", prompt_text(2 * budget, [t for _, t in parts], private_json))
        if layout_stamp and layout_stamp != self._saved_stamp:
            await self._save_when_behind(layout_stamp, layout_version)
        if layout_stamp and self._saved_stamp and self.model.size >= SAVE_FROM_ENTRIES:
            # What a process holding no rendering needs to patch these files after a command.
            record: SavedPatch | None = saved_patch(
                self.model.newest_shown(2 * budget, PATCH_MARGIN),
                layout_stamp=layout_stamp,
                memory_md_sha256=memory_digest,
                others=others_digest,
                saved_stamp=self._saved_stamp,
                saved_version=self._saved_version,
                shown=self.model.shown_count,
                prompt=dict(parts),
                private=private_json,
                private_keys=[k for keys in private.values() for k in keys],
                files=self.model.crowded_files(),
            )
        else:
            record = None
        await self._record_rendered(
            stamp, memory_digest, memory_tail, layout_stamp, new, inputs, patch=record
        )

    async def _record_rendered(
        self,
        stamp: Mapping[str, object],
        memory_digest: str,
        memory_tail: str,
        layout_stamp: str,
        files: dict[str, str],
        inputs: str,
        *,
        patch: SavedPatch | None,
    ) -> None:
        """``store/rendered.json``: what was rendered, from what (written when it moved); with
        ``patch``, the record a later patch of these files starts from
        (``store/rendering-patch.json``, sealed), written first in the same wait for the disk
        (a process killed between the two leaves a record whose stamp and digest are not
        ``store/rendered.json``'s: not patched from, the next command renders every entry)."""

        stamp_doc = {
            "memory_md_sha256": memory_digest,
            "memory_md_tail": memory_tail,
            "layout_stamp": layout_stamp,
            "files": files,
            "inputs": inputs,
        }
        local = self.state.local
        items: list[tuple[str, bytes]] = []
        if patch is not None:
            data = patch.__pydantic_serializer__.to_json(patch)
            items.append((self.patch_path, local.sealed_record(self.patch_path, data)))
        if stamp != stamp_doc:
            items.append((self.stamp_path, json.dumps(stamp_doc).encode()))
        await local.write_states(items)
        self.state.memory_md_seen = memory_digest  # a run's change is judged from here on

    async def _patch(
        self,
        registry: Registry,
        stamp: Mapping[str, object],
        layout_stamp: str,
        layout_version: int,
        others: str,
        *,
        held: bytes | None = None,
    ) -> _Patched | None:
        """The rendered files patched at the keys changed since ``MEMORY.md`` was rendered
        (see :mod:`.patch`), computed and not written yet; ``None`` when that cannot be done
        with certainty: no record of the rendering it patches (``store/rendering-patch.json``,
        sealed: a forged one is refused) at the stamp and digest ``store/rendered.json`` has,
        ``MEMORY.md`` not that file, other inputs changed, keys changed not named, the saved
        rendering due to be brought up to date, or a change :class:`Patch` cannot place.
        ``held``: ``MEMORY.md`` as this phase 2's live-edit check read it and found it as
        rendered (of the digest ``store/rendered.json`` has), not read and hashed again."""

        st = self.state
        store = st.store
        raw, _ = await st.local.read_record(self.patch_path)
        if raw is None:
            return None
        try:
            bounded.check_size(raw, limit=bounded.MAX_STATE_BYTES, what=self.patch_path)
            saved = SavedPatch.model_validate_json(raw)
        except ValueError as exc:  # pydantic's ValidationError included
            logger.warning(
                "memory could not take up %s (%s); every entry is rendered again",
                self.patch_path,
                exc,
            )
            return None
        if (
            saved.format != PATCH_FORMAT
            or saved.layout_stamp != stamp.get("layout_stamp")
            or saved.memory_md_sha256 != stamp.get("memory_md_sha256")
            or saved.others != others
        ):
            return None
        now, keys = await store.layout_changes(saved.layout_stamp)
        if keys is None or now != layout_stamp:
            return None
        # The saved rendering brought up to date here, not by a patch (a patch keeps no rows).
        now, behind = await store.layout_changes(saved.saved_stamp)
        if (
            behind is None
            or now != layout_stamp
            or layout_version - saved.saved_version >= SAVE_AFTER_COMMITS
            or len(behind) >= SAVE_AFTER_KEYS
        ):
            return None
        memory_md = held
        if memory_md is None:
            memory_md = await st.ws.read_bytes(f"{st.layout.memories_dir}/MEMORY.md")
            if memory_md is None or hashlib.sha256(memory_md).hexdigest() != saved.memory_md_sha256:
                return None  # changed since the live-edit check: rendered from every entry
        entries = await store.layout_entries(keys)
        registry_keys = {
            e.key
            for group in registry.conversations.values()
            for e in group
            if e.status == "active" and e.person is None
        }
        budget = st.summary_budget
        try:
            patch = Patch(saved, memory_md, registry_keys=registry_keys)
            del memory_md
            # Oldest first: each entry put is then the newest of its block so far.
            dated = sorted((e.updated_at if (e := entries.get(k)) else 0, k) for k in keys)
            for _, key in dated:
                patch.apply(key, entries.get(key))
            cut = patch.cut(2 * budget)
            lines, left_out = patch.summary_lines(budget)
            unread = [k for k in cut if k not in patch.prompt]
            if set(unread) & registry_keys:
                raise NotPatchable("an entry the cut reaches is shown from a conversation")
            found = await store.layout_entries(unread)
            if len(found) != len(unread):
                raise NotPatchable("an entry the cut reaches is gone")
        except NotPatchable as exc:
            logger.debug("memory renders every entry: the change is not patched (%s)", exc)
            return None
        patch.prompt.update((k, prompt_entry_json(e)) for k, e in found.items())
        text = patch.memory_md()
        digest = hashlib.sha256(text).hexdigest()
        record = patch.saved_after(
            layout_stamp=layout_stamp, memory_md_sha256=digest, cut=cut, prompt=patch.prompt
        )
        skills = {
            k: skill_digest(e) for k, e in entries.items() if e.status == "active" and is_skill(e)
        }
        prompt = prompt_text(2 * budget, [patch.prompt[k] for k in cut], saved.private)
        return _Patched(
            saved=record,
            memory_md=text,
            tail=last_line(text),
            summary=(lines, left_out),
            prompt=prompt,
            keys=set(keys),
            skills=skills,
        )

    async def _write_patch(
        self,
        patch: _Patched,
        refs: list[RolloutRef],
        put: Callable[[str, str], Awaitable[None]],
        *,
        stamp: Mapping[str, object],
        existing: set[str],
        skills: dict[str, str],
    ) -> None:
        """Write what :meth:`_patch` computed, in the order a full rendering writes: the
        digest of the next ``MEMORY.md`` before the file (a process killed between the two
        leaves a file the next close recognises as memory's own), then the files, the skills
        (the caller writes the record and ``store/rendered.json`` last)."""

        digest = patch.saved.memory_md_sha256
        await self._write_memory_bytes(patch.memory_md, digest, stamp, checked=True)
        lines, left_out = patch.summary
        await put("memory_summary.md", summary_tail(lines, left_out, refs))
        # Read again as a full rendering does: a Forget takes facts out of rollouts' notes, in
        # this process or in one killed before it rendered them.
        await put("raw_memories.md", await self._raw_memories(refs))
        await put("store/prompt.json", patch.prompt)
        await self._skills_changed(patch.keys, existing, skills, None, rendered=patch.skills)
        logger.debug("memory patched its rendered files at %d keys", len(patch.keys))

    async def _take_in(
        self,
        registry: Registry,
        layout: LayoutMemory | None,
        layout_stamp: str,
        skills: Mapping[str, str],
    ) -> tuple[str, set[str] | None, set[str]]:
        """Bring the rendering up to ``layout_stamp``; returns the stamp it was rendered from
        before, the keys changed since (``None``: not known, every entry taken in again) and
        the keys whose rendering changed."""

        store = self.state.store
        # The keys this process' own commits changed since the last render: only those are
        # read; else every entry is taken in again, a shard at a time (the rendering keeps a
        # line per entry, not the entries).
        rendered_from = self._stamp_rendered
        if not rendered_from and layout is None and layout_stamp:
            # A new process: the rendering the last one saved, brought up to date below.
            rendered_from = await self._restore(registry)
        known = (
            store.layout_changed_keys(rendered_from, layout_stamp)
            if layout_stamp and rendered_from
            else None
        )
        if known is None and layout_stamp and rendered_from:
            # Commits of other processes: the sealed head names the keys each changed.
            now, named = await store.layout_changes(rendered_from)
            known = named if now == layout_stamp else None
        if layout is not None:
            changed = self.model.rebuild(layout.entries.values(), registry.conversations)
            changed |= set(skills)  # a skill rendered before whose procedure is gone goes
        elif known is not None:
            found = await store.layout_entries(known)
            changed = self.model.update({k: found.get(k) for k in known}, registry.conversations)
        else:
            self.model.start_rebuild()
            async for part in store.layout_parts():
                self.model.take(part)
            changed = self.model.finish_rebuild(registry.conversations) | set(skills)
        self._stamp_rendered = layout_stamp
        return rendered_from, known, changed

    async def _write_memory_md(
        self, refs: list[RolloutRef], stamp: Mapping[str, object], *, checked: bool
    ) -> tuple[str, str]:
        """``MEMORY.md`` written when it differs from this rendering; returns the rendering's
        digest and last line."""

        # Encoded once; the file on disk is compared by its size, then its digest a chunk at a
        # time (never a second copy of it in memory).
        memory_md = self.model.memory_md(refs).encode("utf-8")
        memory_digest = hashlib.sha256(memory_md).hexdigest()
        return await self._write_memory_bytes(memory_md, memory_digest, stamp, checked=checked)

    async def _write_memory_bytes(
        self, memory_md: bytes, memory_digest: str, stamp: Mapping[str, object], *, checked: bool
    ) -> tuple[str, str]:
        """``MEMORY.md`` (``memory_md``, of SHA-256 ``memory_digest``) written when it differs
        from the file; returns the digest and last line."""

        st = self.state
        memory_tail = last_line(memory_md)
        path = f"{st.layout.memories_dir}/MEMORY.md"
        if checked:
            # This phase 2's live-edit check found MEMORY.md as last rendered: it differs from
            # this rendering exactly when the digests do, and is not read again.
            stale = stamp.get("memory_md_sha256") != memory_digest
        else:
            stale = await _file_digest(st.ws, path, len(memory_md)) != memory_digest
        if stale:
            # Memory's own rendering is known by its digest before it reaches MEMORY.md: a
            # process killed between the two writes leaves a file the next close recognises,
            # not a person's edit (the stamp below then records it as rendered).
            await st.local.write_state(
                self.stamp_path,
                json.dumps({**stamp, "memory_md_next_sha256": memory_digest}).encode(),
            )
            await st.ws.write_atomic(path, memory_md)
        del memory_md
        return memory_digest, memory_tail

    async def _prompt_entries(
        self,
        layout: LayoutMemory | None,
        layout_stamp: str,
        rendered_from: str,
        known: set[str] | None,
    ) -> dict[str, Entry]:
        """What the first turn of a run needs from layout memory, newest first and cut at
        twice the budget: a run starts by reading this, not every entry (see
        :func:`.files.read_prompt_entries`)."""

        wanted = self.model.prompt_keys(2 * self.state.summary_budget)
        if layout is not None:
            entries = {k: layout.entries[k] for k in wanted}
        else:
            # The entries shown last time and unchanged since are the same entries; the
            # others are read (spread over most shards: as many reads as shards otherwise).
            since, shown = self._prompt
            kept = shown if known is not None and since == rendered_from else {}
            entries = {
                k: Entry.model_validate_json(kept[k])
                for k in wanted
                if k in kept and k not in (known or ())
            }
            entries.update(
                await self.state.store.layout_entries([k for k in wanted if k not in entries])
            )
        self._prompt = (
            (layout_stamp, {k: e.model_dump_json() for k, e in entries.items()})
            if layout_stamp
            else ("", {})
        )
        return entries

    async def _save_when_behind(self, layout_stamp: str, version: int) -> None:
        """Save the rendering when the saved one is :data:`SAVE_AFTER_COMMITS` commits or
        :data:`SAVE_AFTER_KEYS` changed entries behind (or cannot be brought up to date), and
        layout memory holds :data:`SAVE_FROM_ENTRIES` active entries or more: as a delta over
        the whole saved rendering while the entries changed since it are few enough
        (:data:`DELTA_SHARE`), else whole."""

        if self.model.size < SAVE_FROM_ENTRIES:
            return
        keys: set[str] | None = None
        if self._saved_stamp:
            now, keys = await self.state.store.layout_changes(self._saved_stamp)
            keys = keys if now == layout_stamp else None
        if keys is not None:
            if version - self._saved_version < SAVE_AFTER_COMMITS and len(keys) < SAVE_AFTER_KEYS:
                return
            # The keys changed since the whole saved rendering: the delta's and those since it.
            since_base = self._delta_keys | keys
            if self._base_stamp and len(since_base) <= max(
                SAVE_AFTER_KEYS, self.model.size // DELTA_SHARE
            ):
                await self._save_delta(layout_stamp, version, since_base)
                return
        await self._save(layout_stamp, version)

    def source_changed(self, rollout_id: str) -> None:
        """The raw notes of ``rollout_id`` were rewritten without new extraction (a Forget
        took a fact out of them): render at the next close even from the same inputs (the
        notes themselves are read again by their file's stamp, :meth:`_raw_memories`)."""

        self._sources_changed = True

    async def _raw_memories(self, refs: list[RolloutRef]) -> str:
        """``raw_memories.md``: each selected rollout's notes, read again only when their file
        changed since this process read it, whoever wrote it (phase 1, a Forget in this
        process or another, another machine's copy fetched, a person, the agent's tools).

        Known by one listing of the notes' stamps (:meth:`Workspace.stamps`), not by the
        rollout's progress: a Forget rewrites the notes and leaves the progress where it was."""

        st = self.state
        folder = f"{st.layout.memories_dir}/raw_memories"
        # Listed before the files are read: a file rewritten between the two is read again at
        # the next rendering (its stamp then is not the one kept).
        stamps = await st.ws.stamps(folder)
        kept: dict[str, tuple[str, str]] = {}
        unread: list[str] = []
        for ref in refs:
            rid = ref.rollout_id
            stamp = stamps.get(f"{rid}.md")
            cached = self._raw.get(rid)
            if stamp is not None and cached is not None and cached[0] == stamp:
                kept[rid] = cached
            else:
                unread.append(rid)
        if unread:
            read = await st.ws.read_many(folder, [f"{rid}.md" for rid in unread])
            for rid, data in zip(unread, read, strict=True):
                text = "" if data is None else data.decode("utf-8", errors="replace")
                # Not listed (missing, or not stamped): read at every rendering.
                kept[rid] = (stamps.get(f"{rid}.md", ""), text)
        parts = ["# Raw memories (newest first)", ""]
        for ref in refs:
            text = kept[ref.rollout_id][1]
            if text:
                parts.append(text.rstrip() + "\n")
        self._raw = kept
        return "\n".join(parts) + "\n"

    async def _skills_changed(
        self,
        keys: set[str],
        existing: set[str],
        digests: dict[str, str],
        layout: LayoutMemory | None,
        *,
        rendered: Mapping[str, str] | None = None,
    ) -> None:
        """Write the ``SKILL.md`` of each changed procedure; remove the rendered skills (file
        and folder) whose procedure is gone; record the digests if they moved. ``rendered``:
        the skills of ``keys`` as now (key -> digest), when not the rendering's."""

        st = self.state
        mdir = st.layout.memories_dir
        moved = False
        skills = self.model.skills if rendered is None else rendered
        # The rendering keeps each skill's digest: only a skill whose text changed (or whose
        # file is missing) is read from the store and written.
        stale = {
            k for k in keys if k in skills and (digests.get(k) != skills[k] or k not in existing)
        }
        procedures = (
            {k: layout.entries[k] for k in stale}
            if layout is not None
            else await st.store.layout_entries(stale)
        )
        for key in sorted(keys):
            if key in skills:
                entry = procedures.get(key)
                if entry is not None:
                    text = render_skill(entry)
                    await st.ws.write_text(f"{mdir}/skills/{key}/SKILL.md", text)
                    digests[key] = _sha(text)
                    moved = True
                continue
            if key in digests:
                digests.pop(key)
                moved = True
            if key in existing:
                # Only skills rendered from the store go; hand-written ones (or the SDK's) stay.
                text_on_disk = await st.ws.read_text(f"{mdir}/skills/{key}/SKILL.md")
                if text_on_disk is not None and SKILL_MARK in text_on_disk:
                    await st.ws.remove(f"{mdir}/skills/{key}/SKILL.md")
                    await st.ws.remove_empty_dir(f"{mdir}/skills/{key}")
        if moved:
            data = json.dumps(dict(sorted(digests.items())), separators=(",", ":")).encode()
            await st.local.write_state(self.skills_path, data)
