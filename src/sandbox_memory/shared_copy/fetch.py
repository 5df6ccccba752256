"""Store to copy: the scopes, log, notes, thread records and rollouts (sessions files and
progress) written since the copy last looked, then a new rendering."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ..stores.records import ConversationMemory, LayoutMemory, RolloutProgress
from ..stores.segments import rollout_path
from ..stores.shared import LAYOUT_SCOPE, RolloutState
from .base import CopyBase, _entry_hash, _h, _lines_with_ends, _segment_id

PULL_BATCH = 256
"""Rollouts (and conversations) a fetch from the store takes at a time: one statement for their
new segments, one wait for the disk for each kind of file they write."""


class CopyFetch(CopyBase):
    """The copy brought up to date from the store."""

    async def pull(self) -> bool:
        """Bring the copy up to date from the store and re-render; whether anything changed."""

        base = await self._base()
        st = self.rt.working_copy
        changed = False
        # What changed since the copy last looked: rows written from its horizon on.
        horizon = await self.store.horizon()
        versions, rollouts, threads = await self.store.changed_since(int(base["xid"]))
        since = {
            scope: int(base["scopes"][scope]["version"]) if scope in base["scopes"] else 0
            for scope, v in versions.items()
            if base["scopes"].get(scope, {}).get("version") != v
        }
        conversations: list[ConversationMemory] = []
        for scope, state in (await self.store.read_changes(since)).items():
            b = base["scopes"].get(scope) if state.since else None
            known: dict[str, list[Any]] = dict(b["entries"]) if b else {}
            for k, e in state.entries.items():
                known[k] = [state.entry_versions[k], _entry_hash(e)]
            for k in state.removed:
                known.pop(k, None)
            if scope == LAYOUT_SCOPE:
                if state.since:
                    # Only what changed after the copy's version: one commit of those entries.
                    await st.commit_layout(
                        version=state.version, put=state.entries, delete=state.removed
                    )
                else:
                    await st.save_layout(LayoutMemory(version=state.version, entries=state.entries))
            elif scope.startswith("conversation:"):
                rid = scope.split(":", 1)[1]
                entries = state.entries
                if state.since:
                    conv_entries = dict((await st.load_conversation(rid)).entries)
                    conv_entries.update(entries)
                    for k in state.removed:
                        conv_entries.pop(k, None)
                    entries = conv_entries
                conversations.append(
                    ConversationMemory(
                        rollout_id=rid,
                        version=state.version,
                        head=state.head,
                        entries=entries,
                        overrides=state.overrides,
                    )
                )
                if len(conversations) == PULL_BATCH:
                    await st.save_conversations(conversations)
                    conversations = []
            base["scopes"][scope] = {
                "version": state.version,
                "entries": known,
                "meta": _h(json.dumps([state.head, state.overrides.model_dump()])),
            }
            self.rt.search_index.mark_scope(scope)
            changed = True
        await st.save_conversations(conversations)

        local_lines = len(await st.read_log())
        log_replaced = False
        if local_lines == base["log_lines"]:
            # The copy's log is what it last fetched: append only what came since.
            fresh = await self.store.read_log(after=int(base["log_seq"]))
            if fresh:
                for _, record in fresh:
                    await st.append_log(record)
                base["log_seq"], base["log_lines"] = fresh[-1][0], local_lines + len(fresh)
        else:
            # The copy logged changes of its own (now sent): the store's log replaces it.
            log = await self.store.read_log()
            await st.replace_log(r for _, r in log)
            base["log_seq"], base["log_lines"] = (log[-1][0] if log else 0), len(log)
            log_replaced = True

        notes, newest = await self.store.files(after=int(base.get("files_rev", 0)))
        for rel, data in notes.items():
            if data is None:
                if base["files"].pop(rel, None) is not None:
                    await self.rt.ws.remove(f"{self.mdir}/{rel}")
                    changed = True
            elif base["files"].get(rel) != _h(data):
                await self.rt.ws.write_atomic(f"{self.mdir}/{rel}", data)
                base["files"][rel] = _h(data)
                changed = True
        base["files_rev"] = newest

        await st.index_threads(threads)

        if await self._pull_rollouts(base, rollouts):
            changed = True
        if changed or await self.rt.ws.size(f"{self.mdir}/MEMORY.md") is None:
            await self.rt.render_current()
        base["xid"] = horizon
        base["noted"] = True  # from here on, records are noted before they change
        # The copy's layout memory is the store's now (its changes were sent first): the
        # commits after this stamp are the ones the next send looks at.
        base["layout_stamp"] = (await st.layout_head()).stamp
        await self._save_base(base)
        # The copy holds the store's records now (its own changes went first): the notes of
        # changed records start afresh (a kill before this leaves notes of records as sent).
        await st.clear_changed()
        if log_replaced:
            # The search index reads the log from where it stopped, and the log it read is
            # gone: take in the scopes marked above now, in this process.
            await self.rt.sync_search()
        if changed:
            self.rt.bump()
        return changed

    async def _pull_rollouts(self, base: dict[str, Any], rollouts: dict[str, RolloutState]) -> bool:
        """Sessions files in the store's order (runs only the copy has after them); progress.

        ``rollouts``: those written since the copy last looked. Taken :data:`PULL_BATCH` at a
        time: one statement reads a batch's new segments and each kind of file of a batch is
        written waiting for the disk once (a new sandbox on a store of 10,000 conversations
        fetches them all)."""

        todo: list[tuple[str, RolloutState]] = []
        for rid, state in rollouts.items():
            known = base["rollouts"].get(rid) or {}
            if (
                state.segments == known.get("n")
                and state.watermark == known.get("wm")
                and _h(json.dumps(state.progress, sort_keys=True)) == known.get("meta")
            ):
                continue
            todo.append((rid, state))
        changed = False
        for first in range(0, len(todo), PULL_BATCH):
            if await self._pull_rollout_batch(base, todo[first : first + PULL_BATCH]):
                changed = True
        return changed

    async def _pull_rollout_batch(
        self, base: dict[str, Any], batch: list[tuple[str, RolloutState]]
    ) -> bool:
        changed = False
        sdir = self.rt.layout.sessions_dir
        st = self.rt.working_copy
        fetched: dict[str, dict[str, Any]] = {}
        async with contextlib.AsyncExitStack() as held:
            # Each lock is otherwise taken alone (an append to one rollout's file), so taking
            # a batch's in turn cannot deadlock.
            for rid, _ in batch:
                await held.enter_async_context(self.rt.session_file_lock(rid))
            datas: dict[str, bytes] = {}
            prefixes: dict[str, bytes] = {}
            knowns: dict[str, dict[str, Any]] = {}
            for rid, _ in batch:
                known = base["rollouts"].get(rid) or {"n": 0, "offset": 0}
                data = await self.rt.ws.read_bytes(rollout_path(sdir, rid)) or b""
                prefix = data[: int(known["offset"])]
                if _lines_with_ends(prefix) and len(_lines_with_ends(prefix)) != known["n"]:
                    prefix = b""  # the copy's file is not what it was: rebuild it whole
                    known = {"n": 0, "offset": 0}
                datas[rid], prefixes[rid], knowns[rid] = data, prefix, known
            news = await self.store.read_segments_many(
                {rid: int(knowns[rid]["n"]) for rid, _ in batch}
            )
            writes: list[tuple[str, bytes]] = []
            for rid, state in batch:
                data, prefix = datas[rid], prefixes[rid]
                new = news.get(rid, [])
                rest = data[len(prefix) :]
                new_lines = [line.encode("utf-8") for _, _, line in new]
                new_ids = [sid for _, sid, _ in new]
                local = _lines_with_ends(rest)
                torn = rest[sum(len(x) for x in local) :]
                local_ids = [_segment_id(x) for x in local]
                if local_ids[: len(new_ids)] != new_ids:
                    # Runs of other sandboxes came between: the store's order, then the runs
                    # only this copy has (not lost, sent at the next catch-up).
                    theirs = set(new_ids)
                    mine = [x for x, sid in zip(local, local_ids, strict=True) if sid not in theirs]
                    data = prefix + b"".join(new_lines) + b"".join(mine) + torn
                    writes.append((rollout_path(sdir, rid), data))
                lines = _lines_with_ends(data)
                fetched[rid] = {
                    "n": state.segments,
                    "offset": len(prefix) + sum(len(x) for x in new_lines),
                    "wm": state.watermark,
                    "meta": _h(json.dumps(state.progress, sort_keys=True)),
                    "wm_offset": sum(len(x) for x in lines[: state.watermark]),
                }
            if writes:
                await self.rt.ws.write_atomic_many(writes)
                changed = True
        live: dict[str, RolloutProgress] = {}
        gone: dict[str, RolloutProgress] = {}
        for rid, state in batch:
            known = fetched[rid]
            wm_offset = known.pop("wm_offset")
            if state.progress or state.watermark:
                prog = RolloutProgress.model_validate({**state.progress, "offset": wm_offset})
                known["progress"] = _h(prog.model_dump_json())
                if await st.get_progress(rid) != prog:
                    (gone if prog.forgotten else live)[rid] = prog
        if live or gone:
            await st.put_progress_many(live)
            await st.forget_progress_many(gone)
            changed = True
        # The rollouts may hold segments past their progress now: the next close looks, and
        # the search index takes in the runs other sandboxes recorded.
        await st.mark_pending_many(rid for rid, _ in batch)
        for rid, _ in batch:
            self.rt.search_index.mark(rid)
            base["rollouts"][rid] = fetched[rid]
        return changed
