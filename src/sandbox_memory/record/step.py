"""Step 1 of the flow, record: append each run's segment to its conversation's rollout.

The segment is redacted and given item ids (``record.offload.Recording``); a run without a
conversation id of its own that replays a recorded conversation joins that conversation, whose
replayed items are recognised by their digests.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from .. import spans
from ..datapolicy import exc_text
from ..integrity import MEMORY_MD_NOTE
from ..layout_state import LayoutState
from ..stores.segments import read_new_segments, rollout_path, run_rollout_id, text_value
from .item_notes import note_items, parse_item_notes
from .offload import Recording

logger = logging.getLogger("sandbox_memory")


class RecordedSink(Protocol):
    """Where a recorded segment goes besides the workspace: a shared store's working copy
    (:class:`sandbox_memory.shared_copy.SharedCopy`, a layer above this step: passed in, not
    imported)."""

    async def after_record(self, rollout_id: str, segment: dict[str, Any], line: bytes) -> None:
        """Send one recorded segment (``line``, as appended to the rollout)."""


class Recorder:
    """Records run segments of one layout (see :meth:`record`)."""

    def __init__(self, state: LayoutState, *, shared: RecordedSink | None) -> None:
        self.state = state
        self.shared = shared
        self._item_digests: dict[str, dict[str, list[str]]] = {}
        """Per conversation: digests of its recorded items (see ``recorded_items``)."""
        self._rollout_ends: dict[str, int] = {}
        """Per conversation: the size of its rollout that its cached digests account for (a
        line mending a torn one, or another writer, moves it on: see :meth:`check_cached`)."""

    @spans.traced(spans.RECORD)
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

        st = self.state
        rid = run_rollout_id(rollout_id)
        if person is not None:
            text_value("person", person)
        before = st.redactor.total
        recording = Recording(
            payload,
            rollout_id=rid,
            person=person,
            redactor=st.redactor,
            settings=st.redaction_settings,
        )
        await recording.build()
        notes = await self.live_edit_notes()
        try:
            if per_run_id:
                joined = await self.conversation_for(recording.fingerprint)
                if joined is not None and joined != rid:
                    rid = joined
            async with st.session_file_lock(rid):
                known = await self.recorded_items(rid)
                line, replayed, digests, fp = await recording.finish(rid, known, st.seal, notes)
                redacted = st.redactor.total - before
                spans.note(bytes=len(line), redacted=redacted, replayed_items=replayed)
                if redacted:
                    logger.info(
                        "redacted %d secret(s) from a run of conversation %s", redacted, rid
                    )
                if replayed:
                    logger.debug("%d replayed item(s) of conversation %s recognised", replayed, rid)
                is_new = await st.ws.append_line(
                    rollout_path(st.layout.sessions_dir, rid),
                    line,
                    flag=st.store.pending_flag(rid),
                )
                await st.store.append_segment(rid, line)
                for digest, item_id in digests:
                    known.setdefault(digest, []).append(item_id)
                self._rollout_ends[rid] = self._rollout_ends.get(rid, 0) + len(line)
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
                    await st.store.index_thread(fp, rid)
                except Exception as exc:  # noqa: BLE001
                    logger.warning(
                        "could not index conversation %s by its first items (%s); its next "
                        "run may not recognise it",
                        rid,
                        exc_text(exc),
                    )
        st.bump()
        return rid

    async def live_edit_notes(self) -> dict[str, str] | None:
        """The note of a run that changed ``MEMORY.md`` while it was live (see
        :data:`~sandbox_memory.integrity.MEMORY_MD_NOTE`), ``None`` for a run that did not.

        The file is compared with what this process saw at the run's start
        (:meth:`LayoutState.note_memory_md`, from the capability's first turn) or at the
        previous run's end: any change in between is the run's, whichever tool made it and
        however it spelled the path. A run recorded without a start seen (the public route,
        a bare ``record``) costs no read and carries no note.
        """

        st = self.state
        before = st.memory_md_seen
        if before is None:
            return None
        now = await st.memory_md_digest()
        st.memory_md_seen = now
        if now is None or now == before:
            return None
        return {MEMORY_MD_NOTE: now}

    async def check_cached(self) -> None:
        """At a run's start: drop the cached digests of each conversation whose rollout is no
        longer the size they account for (another process recorded a run of it, or it was
        rewritten or deleted since), so the run's record reads it afresh. One size read for
        every cached conversation (one command through a session); nothing while none is
        cached. A record between two runs is never slowed by it."""

        rids = sorted(self._item_digests)
        if not rids:
            return
        dirs = self.state.layout.sessions_dir
        sizes = await self.state.ws.sizes_of([rollout_path(dirs, rid) for rid in rids])
        for rid, size in zip(rids, sizes, strict=True):
            if (size or 0) != self._rollout_ends.get(rid):
                self._item_digests.pop(rid, None)
                self._rollout_ends.pop(rid, None)

    def forget_cached(self) -> None:
        """Drop every cached digest (each conversation's next record reads it afresh)."""

        self._item_digests.clear()
        self._rollout_ends.clear()

    async def recorded_items(self, rid: str) -> dict[str, list[str]]:
        """Digest -> ids of the items conversation ``rid`` recorded (for replay recognition).

        Cached per runtime (a record adds its items without any I/O; each run's start checks
        the cache against the rollout's size, :meth:`check_cached`). A cold cache is built
        from ``store/items/<rid>.txt``, where phase 1 notes the items it extracted, plus
        the part of the rollout not extracted yet; without that file (older rollouts), from the
        whole rollout once, and the file is written. Without a rollout there is nothing.
        """

        st = self.state
        cached = self._item_digests.get(rid)
        if cached is not None:
            return cached
        known: dict[str, list[str]] = {}
        path = rollout_path(st.layout.sessions_dir, rid)
        rollout_size, notes_size = await st.ws.sizes_of([path, st.items_path(rid)])
        self._rollout_ends[rid] = rollout_size or 0
        if rollout_size is None:
            self._item_digests[rid] = known
            if notes_size is not None:
                await st.ws.remove(st.items_path(rid))  # notes of a rollout that is gone
            return known
        raw = await st.ws.read_bytes(st.items_path(rid))
        prog = await st.store.get_progress(rid)
        offset = prog.offset if prog is not None else 0
        if raw is not None:
            for digest, item_id in parse_item_notes(raw):
                known.setdefault(digest, []).append(item_id)
        parsed = await read_new_segments(
            st.ws,
            path,
            offset=0 if raw is None else offset,
            check=st.line_check(rid),
            digests=True,
            segments=False,
        )
        if parsed is not None:
            for digest, item_id in parsed.item_digests:
                known.setdefault(digest, []).append(item_id)
            if raw is None and parsed.item_digests:
                await note_items(st, rid, parsed.item_digests)
        self._item_digests[rid] = known
        return known

    async def conversation_for(self, fingerprint: str | None) -> str | None:
        if fingerprint is None:
            return None
        return await self.state.store.thread_for(fingerprint)
