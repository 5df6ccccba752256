"""Committing a change of layout memory as files (:class:`LayoutCommits`): the pending
commit written first, then the shards and the head, recovered when a close died between them;
the per-conversation citations dropped with a forgotten conversation; ``layout.json`` of an
earlier release split into shards.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence

from ..records import (
    LAYOUT_CHANGE_KEYS_KEPT,
    LAYOUT_CHANGES_KEPT,
    LAYOUT_FORMAT,
    LAYOUT_SHARDS,
    CopyRetraction,
    Entry,
    LayoutChange,
    LayoutCommit,
    LayoutHead,
    LayoutMemory,
    LogRecord,
    layout_shard,
)
from .base import _JSON, _citable, _seal_of, _Shard
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
        if self._head_raw is not None and self._head.format < LAYOUT_FORMAT:
            await self._rewrite_shards()
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

        for sid in range(LAYOUT_SHARDS):
            shard = await self._shard(sid)
            if shard.entries is None or shard.raw is None or sid in self._damaged:
                continue
            data = _shard_bytes(self._shard_json(shard))
            await self._write_shard(sid, data)
            self._keep(sid, _Shard(data, self._head_raw))
        await self._write_head(self._head.model_copy(update={"format": LAYOUT_FORMAT}))
        logger.info("layout memory's records in %s rewritten one entry a line", self.layout_dir)

    async def _split_legacy_layout(self) -> None:
        """``layout.json`` into shards and citation lists, the head last (the commit point: a
        writer killed before it splits the file again), then the old file goes."""

        self._viewed = None

        legacy = self._legacy_layout or {}
        version = self._head.version
        cites: dict[str, set[str]] = {}
        for sid in range(LAYOUT_SHARDS):
            shard = legacy.get(sid)
            if shard is None or not shard.entries:
                await self.ws.remove(self.shard_path(sid))  # left by an earlier store
                continue
            data = _shard_bytes({k: e.model_dump_json() for k, e in shard.entries.items()})
            await self._write_shard(sid, data)
            self._keep(sid, _Shard(data, self._head_raw))
            for key, entry in shard.entries.items():
                for source in entry.sources:
                    cites.setdefault(source.conversation, set()).add(key)
        for rid, keys in sorted(cites.items()):
            if _citable(rid):
                line = " ".join(sorted(keys)) + "\n"
                await self.write_state(f"{self.layout_dir}/cites/{rid}", line.encode("utf-8"))
                self._cited.update((rid, k) for k in keys)
        head = LayoutHead(version=version, stamp=secrets.token_hex(8), format=LAYOUT_FORMAT)
        await self._write_head(head)
        await self.ws.remove(f"{self.dir}/layout.json")
        self._legacy_layout = None
        logger.info(
            "layout memory split from %s/layout.json into %d records",
            self.dir,
            sum(1 for s in legacy.values() if s.entries),
        )

    async def _write_shard(self, sid: int, data: bytes) -> None:
        """Write a shard (sealed); the next head names its seal."""

        await self._write_shards([(sid, data)])

    async def _write_shards(self, shards: Sequence[tuple[int, bytes]]) -> None:
        """Write shards (sealed), waiting for the disk once for them all; the next head names
        their seals."""

        items = [(self.shard_path(sid), self._sealed(self.shard_path(sid), d)) for sid, d in shards]
        await self.write_states(items)
        for (sid, _), (_, sealed) in zip(shards, items, strict=True):
            seal = _seal_of(sealed)
            if seal is not None:
                self._written_seals[f"{sid:02d}"] = seal

    def _as_named(self, sid: int, shard: _Shard, data: bytes) -> bool:
        """Whether shard ``sid`` is stored holding ``data`` already, sealed as the head names
        it: then it is not written again (a commit that leaves a shard's bytes as they are).
        A shard written by a writer killed before its head is not as named: written again,
        so the next head names it."""

        if sid in self._damaged or shard.raw != data or self._head.format < LAYOUT_FORMAT:
            return False
        if self.record_seal is None:
            return True
        sealed = self._sealed(self.shard_path(sid), data)
        return _seal_of(sealed) == self._head.seals.get(f"{sid:02d}")

    async def _write_head(self, head: LayoutHead) -> None:
        if head.format >= LAYOUT_FORMAT:
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

    async def _apply(self, commit: LayoutCommit) -> None:
        """Apply a written commit: log, shards, citation lists, head; then drop it. Each step
        may be done twice (a writer killed in between): the result is the same."""

        for record in commit.log:
            await self.append_log(record)
        touched: dict[int, tuple[dict[str, Entry], list[str]]] = {
            sid: ({}, []) for sid in commit.rewrite
        }
        for key, entry in commit.put.items():
            touched.setdefault(layout_shard(key), ({}, []))[0][key] = entry
        for key in commit.delete:
            touched.setdefault(layout_shard(key), ({}, []))[1].append(key)
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
            js = self._shard_json(shard)
            for key, entry in changed.items():
                js[key] = entry.model_dump_json()
            for key in gone:
                js.pop(key, None)
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
        await self._write_head(
            LayoutHead(
                version=commit.version,
                stamp=commit.stamp,
                changes=changes,
                format=self._head.format,
                seals=self._head.seals,
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
