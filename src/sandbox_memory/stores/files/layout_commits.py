"""Committing a change of layout memory as files (:class:`LayoutCommits`): the pending
commit written first, then the shards and the head, recovered when a close died between them;
the per-conversation citations dropped with a forgotten conversation; ``layout.json`` of an
earlier release split into shards.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence

from ...workspace.records import seal_of
from ..records import (
    LAYOUT_CHANGE_KEYS_KEPT,
    LAYOUT_CHANGES_KEPT,
    LAYOUT_FORMAT,
    LAYOUT_REMOVED_KEPT,
    LAYOUT_REMOVED_SHARE,
    LAYOUT_SEALED_FORMAT,
    SHARD_ENTRIES,
    CopyRetraction,
    Entry,
    LayoutChange,
    LayoutCommit,
    LayoutHead,
    LayoutMemory,
    LogRecord,
    layout_shard,
    layout_shard_count,
)
from .base import _JSON, _citable, _Shard
from .layout import _COMMITS_KEPT, LayoutFiles
from .shards import _shard_bytes

logger = logging.getLogger("sandbox_memory")


class LayoutCommits(LayoutFiles):
    """Changes of layout memory (reading it is :class:`~.layout.LayoutFiles`)."""

    async def forget_citations(self, conversations: Iterable[str]) -> None:
        """Drop the citation lists of forgotten conversations (after their entries went)."""

        for rid in conversations:
            await self.ws.remove(f"{self.layout_dir}/cites/{rid}")
            self._cited = {pair for pair in self._cited if pair[0] != rid}

    async def recover_layout(self) -> None:
        """Split ``layout.json`` into records, or finish a commit a killed writer left."""

        await self._sync_layout()
        legacy = f"{self.dir}/layout.json"
        if self._head_raw is None and self._legacy_layout is not None:
            await self._split_legacy_layout()
        elif await self.ws.size(legacy) is not None and (
            self._head_raw is not None or self._legacy_broken
        ):
            # Split already (a writer killed before removing it), or unreadable and kept aside.
            await self.ws.remove(legacy)
        if self._journal is not None:
            await self._apply(self._journal)
        if self._head_raw is not None and self._head.format < LAYOUT_SEALED_FORMAT:
            await self._rewrite_shards()
        await self._spread_shards()
        if not self._held_checked:
            self._held_checked = True
            if await self.ws.size(self.held_path(".complete")) is None:
                # Conversations written before the index of their keys: indexed once.
                names = await self._names(f"{self.dir}/conversations", _JSON)
                await self.note_holders([await self.load_conversation(r) for r in sorted(names)])

    async def _rewrite_shards(self) -> None:
        """Shards written by an earlier release (every entry on one line) again one entry a
        line, then the head says so (last: a writer killed before it rewrites them again; the
        entries are the same in both formats, so readers see no change)."""

        self._viewed = None

        for sid in range(self._head.shards):
            shard = await self._shard(sid)
            if shard.entries is None or shard.raw is None or sid in self._damaged:
                continue
            data = _shard_bytes(self._shard_json(sid, shard))
            await self._write_shard(sid, data)
            self._keep(sid, _Shard(data, self._head_raw))
        await self._write_head(self._head.model_copy(update={"format": LAYOUT_FORMAT}))
        logger.info("layout memory's records in %s rewritten one entry a line", self.layout_dir)

    async def _spread_shards(self) -> None:
        """Spread the entries over more shards once they hold more than
        :data:`~..records.SHARD_ENTRIES` each on average (:func:`layout_shard_count`); count
        them once in a head that does not say how many there are (an earlier release's).

        The new shards are written under names of their own count, the head naming the count
        and their seals last (the commit point: a writer killed before it spreads them again,
        the old shards untouched), then the old shards go (a writer killed before that leaves
        them to :meth:`_sweep_shards`). The entries are the same, so the head keeps its stamp:
        no reader reads any entry again for it.
        """

        head = self._head
        if self._head_raw is None or self._head_damaged or self._damaged:
            return
        if head.entries is not None and layout_shard_count(head.entries) <= head.shards:
            await self._sweep_shards()
            return
        lines: dict[str, str] = {}
        async for sid, shard in self._all_shards():
            lines.update(self._shard_json(sid, shard))
        if self._damaged:
            return  # one unreadable: phase 2 rebuilds layout memory first
        count = max(head.shards, layout_shard_count(len(lines)))
        if count == head.shards:
            await self._write_head(head.model_copy(update={"entries": len(lines)}))
            await self._sweep_shards()
            return
        spread: dict[int, dict[str, str]] = {}
        for key, line in lines.items():
            spread.setdefault(layout_shard(key, count), {})[key] = line
        await self._write_shards(
            [(sid, _shard_bytes(part)) for sid, part in sorted(spread.items())], count=count
        )
        self._viewed = None
        self._shards.clear()
        await self._write_head(
            head.model_copy(
                update={"shards": count, "entries": len(lines), "seals": {}, "removed": {}}
            )
        )
        for sid in range(head.shards):
            await self.ws.remove(self.shard_path(sid, head.shards))
        logger.info(
            "layout memory's %d entries in %s spread over %d records (from %d)",
            len(lines),
            self.layout_dir,
            count,
            head.shards,
        )

    async def _sweep_shards(self) -> None:
        """Once per store object: remove shards of another count than the head's (left by a
        writer killed after spreading them, or by a rebuild after a damaged head)."""

        if self._shards_swept or self._journal is not None:
            return
        self._shards_swept = True
        for name in await self.ws.listdir(self.layout_dir):
            named = self._shard_named(name) if name.endswith(_JSON) else None
            if named is not None and named[0] != self._head.shards:
                await self.ws.remove(f"{self.layout_dir}/{name}")

    async def _split_legacy_layout(self) -> None:
        """``layout.json`` into shards and citation lists, the head last (the commit point: a
        writer killed before it splits the file again), then the old file goes."""

        self._viewed = None

        version = self._head.version
        old = {
            k: e for s in (self._legacy_layout or {}).values() for k, e in (s.entries or {}).items()
        }
        count = layout_shard_count(len(old))
        legacy: dict[int, dict[str, Entry]] = {}
        for key, entry in old.items():
            legacy.setdefault(layout_shard(key, count), {})[key] = entry
        self._shards.clear()
        cites: dict[str, set[str]] = {}
        for sid in range(count):
            entries = legacy.get(sid)
            if not entries:
                await self.ws.remove(self.shard_path(sid, count))  # left by an earlier store
                continue
            data = _shard_bytes({k: e.model_dump_json() for k, e in entries.items()})
            await self._write_shards([(sid, data)], count=count)
            for key, entry in entries.items():
                for source in entry.sources:
                    cites.setdefault(source.conversation, set()).add(key)
        for rid, keys in sorted(cites.items()):
            if _citable(rid):
                line = " ".join(sorted(keys)) + "\n"
                await self.write_state(f"{self.layout_dir}/cites/{rid}", line.encode("utf-8"))
                self._cited.update((rid, k) for k in keys)
        head = LayoutHead(
            version=version,
            stamp=secrets.token_hex(8),
            format=LAYOUT_FORMAT,
            shards=count,
            entries=len(old),
        )
        await self._write_head(head)
        self._shards.clear()  # read under the old count
        await self.ws.remove(f"{self.dir}/layout.json")
        self._legacy_layout = None
        logger.info(
            "layout memory split from %s/layout.json into %d records",
            self.dir,
            len(legacy),
        )

    async def _write_shard(self, sid: int, data: bytes) -> None:
        """Write a shard (sealed); the next head names its seal."""

        await self._write_shards([(sid, data)])

    async def _write_shards(
        self, shards: Sequence[tuple[int, bytes]], *, count: int | None = None
    ) -> None:
        """Write shards (sealed) of ``count`` (the head's unless given), waiting for the disk
        once for them all; the next head names their seals."""

        paths = [self.shard_path(sid, count) for sid, _ in shards]
        items = [(path, self._sealed(path, d)) for path, (_, d) in zip(paths, shards, strict=True)]
        await self.write_states(items)
        for (sid, _), (_, sealed) in zip(shards, items, strict=True):
            seal = seal_of(sealed)
            if seal is not None:
                self._written_seals[f"{sid:02d}"] = seal

    def _as_named(self, sid: int, shard: _Shard, data: bytes) -> bool:
        """Whether shard ``sid`` is stored holding ``data`` already, sealed as the head names
        it: then it is not written again (a commit that leaves a shard's bytes as they are).
        A shard written by a writer killed before its head is not as named: written again,
        so the next head names it."""

        if sid in self._damaged or shard.raw != data or self._head.format < LAYOUT_SEALED_FORMAT:
            return False
        if self.record_seal is None:
            return True
        sealed = self._sealed(self.shard_path(sid), data)
        return seal_of(sealed) == self._head.seals.get(f"{sid:02d}")

    async def _write_head(self, head: LayoutHead) -> None:
        if head.format >= LAYOUT_SEALED_FORMAT:
            head = head.model_copy(update={"seals": {**head.seals, **self._written_seals}})
        path = f"{self.layout_dir}/head.json"
        raw = self._sealed(path, head.model_dump_json().encode("utf-8"))
        await self.write_state(path, raw)
        self._written_seals = {}
        old = self._head_raw
        for shard in self._shards.values():
            if shard.seen is old:
                shard.seen = raw  # still what is stored: only this writer changes shards
        if self._whole is not None and self._whole[0] is old and self._journal is None:
            self._whole = (raw, self._journal_raw, self._whole[2])
        if self._viewed is not None and self._viewed[0] is old:
            self._viewed = (raw, self._viewed[1])
        self._head_raw, self._head, self._head_damaged = raw, head, False

    async def commit_layout(
        self,
        *,
        version: int,
        put: Mapping[str, Entry],
        delete: Iterable[str] = (),
        log: Iterable[LogRecord] = (),
        copies: Iterable[CopyRetraction] = (),
        whole: bool = False,
    ) -> LayoutHead:
        if self.fence is not None:
            await self.fence()
        await self.recover_layout()
        commit = LayoutCommit(
            whole=whole,
            version=version,
            stamp=secrets.token_hex(8),
            put=dict(put),
            delete=[k for k in dict.fromkeys(delete) if k not in put],
            log=list(log),
            rewrite=sorted(self._damaged),
            copies=list(copies),
            before=self._head.stamp,
        )
        raw = commit.model_dump_json().encode("utf-8")
        await self.write_record(f"{self.layout_dir}/commit.json", raw)  # the commit point
        self._journal_raw, self._journal = raw, commit
        await self._apply(commit)
        return self._head

    def _rewritten(
        self,
        commit: LayoutCommit,
        put_in: Mapping[int, object],
        gone_in: Mapping[int, list[str]],
    ) -> set[int]:
        """The shards ``commit`` rewrites: those it puts into or was told to rewrite, and those
        it deletes from whose removed keys (the head's and its own) reach
        :data:`~..records.LAYOUT_REMOVED_SHARE` of a shard's entries, or that hold most of them
        when the head's list would pass :data:`~..records.LAYOUT_REMOVED_KEPT`. The others
        keep their bytes, their removed keys named by the head.

        Decided from the commit and the head it applies to alone (not from a shard's bytes, which
        a writer killed while applying it may have rewritten already), so applying it again
        decides the same."""

        head = self._head
        rewrite = {*commit.rewrite, *put_in}
        if self._head_raw is None or self._head_damaged or head.format < LAYOUT_SEALED_FORMAT:
            return rewrite | set(gone_in)  # no head naming seals to name the keys in
        share = (head.entries if head.entries is not None else SHARD_ENTRIES) / head.shards
        limit = max(2, -(-int(share) // LAYOUT_REMOVED_SHARE))
        named: dict[int, int] = {}
        for sid in sorted({*gone_in, *(int(s) for s in head.removed)} - rewrite):
            keys = head.removed_in(sid).union(gone_in.get(sid, ()))
            if len(keys) >= limit:
                rewrite.add(sid)
            else:
                named[sid] = len(keys)
        total = sum(named.values())
        for sid in sorted(named, key=lambda s: (-named[s], s)):
            if total <= LAYOUT_REMOVED_KEPT:
                break
            rewrite.add(sid)
            total -= named[sid]
        return rewrite

    async def _apply(self, commit: LayoutCommit) -> None:
        """Apply a written commit: log, shards, citation lists, head; then drop it. Each step
        may be done twice (a writer killed in between): the result is the same."""

        for record in commit.log:
            await self.append_log(record)
        count = self._head.shards
        put_in: dict[int, dict[str, Entry]] = {}
        for key, entry in commit.put.items():
            put_in.setdefault(layout_shard(key, count), {})[key] = entry
        gone_in: dict[int, list[str]] = {}
        for key in commit.delete:
            gone_in.setdefault(layout_shard(key, count), []).append(key)
        rewritten = self._rewritten(commit, put_in, gone_in)
        touched = {sid: (put_in.get(sid, {}), gone_in.get(sid, [])) for sid in rewritten}
        grown = 0
        # Keys removed from the shards not rewritten: named by the head, their bytes left.
        removed = {s: k for s, k in self._head.removed.items() if int(s) not in rewritten}
        for sid, deleted in sorted(gone_in.items()):
            if sid in rewritten:
                continue
            shard, already = await self._shard(sid), self._removed(sid)
            held = {k for k in deleted if k not in already and self._shard_holds(shard, k)}
            if held:
                grown -= len(held)
                removed[f"{sid:02d}"] = sorted(held.union(removed.get(f"{sid:02d}", ())))
        # The cached whole, if it is of the head this commit applies to (it may hold this
        # commit already, read as pending: applying it again gives the same).
        whole = self._whole
        previous = whole[2].entries if whole is not None and whole[0] is self._head_raw else None
        shards: list[tuple[int, bytes]] = []
        viewed = self._viewed
        shown = dict(viewed[1]) if viewed is not None and viewed[0] is self._head_raw else None
        self._viewed = None
        for sid in sorted(touched):
            changed, gone = touched[sid]
            shard = await self._shard(sid)
            js = self._shard_json(sid, shard)
            grown -= len(js)
            for key, entry in changed.items():
                js[key] = entry.model_dump_json()
            for key in gone:
                js.pop(key, None)
            grown += len(js)
            data = _shard_bytes(js)
            if (js or shard.raw is not None or sid in self._damaged) and not self._as_named(
                sid, shard, data
            ):
                shards.append((sid, data))
            self._keep(sid, _Shard(data, self._head_raw))
            if shown is not None:
                shown[sid] = data
        # Every shard that changes, then the head: the head names no shard before it is on
        # disk, and the shards wait for the disk together.
        await self._write_shards(shards)
        lines: dict[str, set[str]] = {}
        for key, entry in commit.put.items():
            for source in entry.sources:
                rid = source.conversation
                if (rid, key) in self._cited or not _citable(rid):
                    continue
                lines.setdefault(rid, set()).add(key)
        for rid, keys in sorted(lines.items()):
            line = " ".join(sorted(keys)) + "\n"
            await self.ws.append_line(f"{self.layout_dir}/cites/{rid}", line.encode("utf-8"))
            self._cited.update((rid, k) for k in keys)
        self._journal = None
        if shown is not None:
            self._viewed = (self._head_raw, shown)
        if previous is not None:
            # Copied, never changed in place: a reader may be iterating the old one.
            merged = dict(previous)
            merged.update(commit.put)
            for key in commit.delete:
                merged.pop(key, None)
            self._whole = (
                self._head_raw,
                None,
                LayoutMemory.model_construct(version=commit.version, entries=merged),
            )
        else:
            self._whole = None
        before = self._head.stamp
        changes = list(self._head.changes)
        if before != commit.stamp:  # else written already, by a writer killed after it
            changes.append(
                LayoutChange(stamp=commit.stamp, before=before, keys=commit.changed_keys())
            )
        while len(changes) > LAYOUT_CHANGES_KEPT or (
            len(changes) > 1 and sum(len(c.keys or ()) for c in changes) > LAYOUT_CHANGE_KEYS_KEPT
        ):
            changes.pop(0)
        sealed = self._head.format >= LAYOUT_SEALED_FORMAT
        await self._write_head(
            LayoutHead(
                version=commit.version,
                stamp=commit.stamp,
                changes=changes,
                format=LAYOUT_FORMAT if sealed else self._head.format,
                seals=self._head.seals,
                shards=count,
                entries=None if self._head.entries is None else self._head.entries + grown,
                removed=dict(sorted(removed.items())),
            )
        )
        self._commits[commit.stamp] = (before, {*commit.put, *commit.delete})
        while len(self._commits) > _COMMITS_KEPT:
            self._commits.pop(next(iter(self._commits)))
        if commit.copies:
            if self.retract_copies is None:
                return  # left for a writer that can (the runtime's store); readers see it done
            for copy in commit.copies:
                retracted = commit.put.get(copy.key)
                if retracted is not None:
                    await self.retract_copies(retracted, copy)
        await self.ws.remove(f"{self.layout_dir}/commit.json")
        self._journal_raw = None
        if self._whole is not None:
            self._whole = (self._head_raw, None, self._whole[2])
        self._damaged.clear()
        self._legacy_layout = None
