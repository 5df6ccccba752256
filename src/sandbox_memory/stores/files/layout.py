"""Layout memory as files, read (:class:`LayoutFiles`): ``layout/head.json`` and the shards
(kept in step with the head, cached), whole, by key, as a view, the keys changed since a stamp,
the per-conversation citations (``layout/cites/``); reading ``layout.json`` of an earlier
release. Committing a change is :mod:`.layout_commits`.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import cast

from pydantic import ValidationError

from ...workspace.records import seal_of, unsealed
from ..records import (
    KEY_RE,
    LAYOUT_FORMAT,
    LAYOUT_SEALED_FORMAT,
    LAYOUT_SHARDS,
    SHARD_CACHE_BYTES,
    Entry,
    LayoutCommit,
    LayoutHead,
    LayoutMemory,
    LayoutShard,
    check_layout_format,
    layout_shard,
)
from .base import (
    _UNSET,
    SHARED_COPY_FILE,
    FileRecords,
    SealedShard,
    ViewedShard,
    _Shard,
    _why,
)
from .shards import _SHARD_LINES_RE, LayoutEntries, _entry_line, _entry_lines

logger = logging.getLogger("sandbox_memory")


_COMMITS_KEPT = 256

_SHARDS_READ_TOGETHER = 32
"""Shards read in one pass over their folder when every shard is read: a few per-file costs
saved each, and at most 32 shards' bytes (about 2 MB at 20,000 entries) held before they are
checked and dropped past the shard cache."""


class LayoutFiles(FileRecords):
    """Layout memory: head, shards, commits, recovery, and the split of ``layout.json``."""

    def shard_path(self, shard: int, count: int | None = None) -> str:
        """Shard ``shard`` of ``count`` (the head's count unless given): ``shard-NN.json`` of
        :data:`LAYOUT_SHARDS`, ``shard-<count>-<N>.json`` of more."""

        count = self._head.shards if count is None else count
        if count == LAYOUT_SHARDS:
            return f"{self.layout_dir}/shard-{shard:02d}.json"
        return f"{self.layout_dir}/shard-{count}-{shard}.json"

    def _shard_named(self, name: str) -> tuple[int, int] | None:
        """``(count, shard)`` of a file name :meth:`shard_path` gives, with anything after
        ``.json`` (a copy kept aside); ``None`` for any other name."""

        stem = name.partition(".json")[0]
        parts = stem.split("-")
        numbers = parts[1:]
        if parts[0] != "shard" or len(numbers) not in (1, 2):
            return None
        if not all(n.isascii() and n.isdigit() for n in numbers):
            return None
        count = int(numbers[0]) if len(numbers) == 2 else LAYOUT_SHARDS
        sid = int(numbers[-1])
        if sid >= count or self.shard_path(sid, count) != f"{self.layout_dir}/{stem}.json":
            return None
        return count, sid

    async def _sync_layout(self) -> None:
        """Look at the head and a pending commit (two small reads); forget cached shards when
        the head changed (another writer): each is parsed again only if its bytes changed."""

        hpath = f"{self.layout_dir}/head.json"
        raw = await self.read_state(hpath)
        head_moved = raw != self._head_raw
        if head_moved:
            self._head_raw = raw
            self._head_damaged = False
            self._head = LayoutHead(format=LAYOUT_FORMAT, entries=0)
            if raw is not None:
                plain = await self._verified(hpath, raw)
                try:
                    if plain is None:
                        raise ValueError("no valid seal")
                    self._head = LayoutHead.model_validate_json(plain)
                except ValidationError as exc:
                    await self._set_aside(hpath, raw, _why(exc))
                    self._head_damaged = True
                except ValueError:
                    self._head_damaged = True
                if not self._head_damaged and self._head.format > LAYOUT_FORMAT:
                    self._head_raw = _UNSET  # refused again at the next read
                    check_layout_format(self._head, hpath)
                if self._head_damaged:
                    # No shard is bound to a head memory did not write: every shard there is
                    # refused, and layout memory rebuilt from the conversation records.
                    self._head = LayoutHead(
                        version=await self._logged_layout_version(), format=LAYOUT_FORMAT
                    )
            if raw is None and self._legacy_layout is None:
                await self._read_legacy_layout()
        jpath = f"{self.layout_dir}/commit.json"
        jraw, _ = await self.read_record(jpath)
        if jraw != self._journal_raw or head_moved:
            self._journal_raw = jraw
            self._journal = None
            if jraw is not None:
                try:
                    self._journal = LayoutCommit.model_validate_json(jraw)
                except ValidationError as exc:
                    # Written whole before anything it changes: an unreadable one changed
                    # nothing yet. Kept aside; the change it held is lost, like a failed write.
                    await self._set_aside(jpath, jraw, _why(exc))
            journal = self._journal
            if (
                journal is not None
                and self._head_raw is not None
                and journal.before
                and self._head.stamp not in (journal.before, journal.stamp)
            ):
                # An older commit put back (its seal still verifies): applying it again would
                # bring back what later commits changed, a Forget among them.
                await self._refuse(
                    jpath,
                    await self.read_state(jpath) or b"",
                    "replayed: a commit of another layout head than the current one",
                )
                await self.ws.remove(jpath)
                self._journal_raw, self._journal = None, None
        if head_moved and not self._head_damaged and raw is not None:
            await self._check_head_against_log(raw)

    async def _check_head_against_log(self, raw: bytes) -> None:
        """A sealed head older than the layout changes the sealed log holds (the layout
        folder put back whole from an earlier copy, a Forget undone with it) is damage: no
        shard is bound to it, and layout memory is rebuilt from the conversation records. Not
        in a shared store's working copy, whose log is appended from the store's before its
        layout is brought up to date."""

        if self.record_seal is None:
            return
        if self.shared_copy is None:
            self.shared_copy = await self.ws.size(f"{self.dir}/{SHARED_COPY_FILE}") is not None
        if self.shared_copy:
            return
        await self._logged_changes()
        logged = self._log_layout_version
        pending = self._journal.version if self._journal is not None else 0
        if logged <= max(self._head.version, pending):
            return
        await self._refuse(
            f"{self.layout_dir}/head.json",
            raw,
            f"replayed: layout version {self._head.version}, older than the log's {logged}",
        )
        self._head_damaged = True
        self._head = LayoutHead(version=logged, format=LAYOUT_FORMAT)

    async def _logged_layout_version(self) -> int:
        versions = [r.version for r in await self.read_log() if r.scope == "layout"]
        return max(versions, default=0)

    async def _read_legacy_layout(self) -> None:
        """Readers before the first writer: ``layout.json`` (the old single file) as shards."""

        path = f"{self.dir}/layout.json"
        raw, refused = await self.read_record(path)
        if refused:
            self._legacy_broken = True
        if raw is None:
            return
        try:
            old = LayoutMemory.model_validate_json(raw)
        except ValidationError as exc:
            await self._set_aside(path, raw, _why(exc))
            self._legacy_broken = True
            return
        shards: dict[int, _Shard] = {}
        for key, entry in old.entries.items():
            shard = shards.setdefault(layout_shard(key), _Shard(None, None, {}))
            assert shard.entries is not None
            shard.entries[key] = entry
        self._legacy_layout = shards
        self._head = LayoutHead(version=old.version)

    async def _bound(self, sid: int, raw: bytes | None) -> bool:
        """Whether shard ``sid`` as read is the one the head names (see
        :attr:`LayoutHead.seals`); one that is not is kept aside (WARNING) and refused. A
        missing shard the head names is damage too (rebuilt, nothing kept aside)."""

        if self.record_seal is None or self._head_raw is None:
            return True
        if self._head.format < LAYOUT_SEALED_FORMAT and not self._head_damaged:
            return True  # an earlier head names no seals; the next writer rewrites them
        journal = self._journal
        if journal is not None and sid in journal.shards(self._head.shards):
            return True  # written by a commit being applied: the next head names it
        path = self.shard_path(sid)
        named = self._head.seals.get(f"{sid:02d}")
        if raw is None:
            if named is not None:
                self._damaged.add(sid)
            return True
        if seal_of(raw) == named:
            return True
        await self._refuse(
            path, raw, "replayed: not the version of the shard layout memory's head names"
        )
        return False

    def _named_by_head(self, sid: int, stored: bytes | None) -> bool:
        """Whether shard ``sid`` as stored is the one a sealed head of :data:`LAYOUT_FORMAT`
        names by its seal: memory wrote those very bytes one
        entry a line (:func:`_shard_bytes`), so their form needs no check (a regular
        expression over every byte, most of a shard's read at 20,000 entries)."""

        if stored is None or self.record_seal is None or self._head_damaged:
            return False
        if self._head_raw is None or self._head.format < LAYOUT_SEALED_FORMAT:
            return False
        # Also a shard a pending commit is about to write: until it does, the bytes stored
        # are still the ones the head names (bytes it wrote already are not named yet:
        # checked).
        named = self._head.seals.get(f"{sid:02d}")
        return named is not None and seal_of(stored) == named

    def _keep(self, sid: int, shard: _Shard) -> None:
        """Cache a shard read or written, dropping the least recently used past the budget."""

        self._shards.keep(sid, shard, SHARD_CACHE_BYTES)

    async def _all_stored(self) -> AsyncIterator[tuple[int, bytes | None | object]]:
        """Every shard of the head with its bytes as stored (:data:`_UNSET` for one kept), those
        not kept read :data:`_SHARDS_READ_TOGETHER` at a time (their folder reached once for
        them, not once a shard: hundreds of shards at 20,000 entries), so no more of their
        bytes are held at once than that."""

        count = self._head.shards
        for start in range(0, count, _SHARDS_READ_TOGETHER):
            sids = range(start, min(count, start + _SHARDS_READ_TOGETHER))
            read: dict[int, bytes | None] = {}
            if self._head_raw is not None:
                wanted = [sid for sid in sids if not self._kept(sid)]
                names = [self.shard_path(sid).rpartition("/")[2] for sid in wanted]
                found = await self.read_states(self.layout_dir, names)
                read = dict(zip(wanted, found, strict=True))
            for sid in sids:
                yield sid, read.pop(sid, _UNSET)

    async def _all_shards(self) -> AsyncIterator[tuple[int, _Shard]]:
        """Every shard of the head (see :meth:`_all_stored`), checked and cached."""

        async for sid, stored in self._all_stored():
            yield sid, await self._shard(sid, stored)

    async def _viewed_shards(self) -> dict[int, ViewedShard]:
        """Every shard of the head for a view (see :meth:`_all_stored`): one whose seal is the
        one the head names is held with its seal not checked yet (:class:`SealedShard`), the
        others checked as every read checks them."""

        shards: dict[int, ViewedShard] = {}
        # No shard is named by its seal in a store that does not seal (none to check).
        check = self._seal_check() if self.record_seal is not None else None
        async for sid, stored in self._all_stored():
            if check is not None and isinstance(stored, bytes) and self._named_by_head(sid, stored):
                shards[sid] = SealedShard(stored, functools.partial(check, sid))
                continue
            shard = await self._shard(sid, stored)
            if shard.entries is not None:
                shards[sid] = shard.entries
            elif shard.raw is not None:
                shards[sid] = shard.raw
        return shards

    def _seal_check(self) -> Callable[[int, bytes], bytes | None]:
        """How a view checks the seal of shard ``sid`` of the head's count when it first reads
        an entry of it: one that does not verify is reported once at WARNING and reads as
        empty; the next writer reads the shard again, sets it aside and rebuilds layout memory
        (as for a shard refused when read)."""

        record_seal, count = self.record_seal, self._head.shards
        assert record_seal is not None  # a shard named by a sealed head

        def check(sid: int, stored: bytes) -> bytes | None:
            path = self.shard_path(sid, count)
            body = memoryview(stored)[:-1] if stored.endswith(b"\n") else stored
            if record_seal().verify(body, self._record_context(path)):
                return unsealed(stored)
            logger.warning("memory found %s with no valid seal: read as empty", path)
            self.refused.add(path)
            if count == self._head.shards:
                self._damaged.add(sid)
            return None

        return check

    def _kept(self, sid: int) -> bool:
        cached = self._shards.get(sid)
        return cached is not None and cached.seen is self._head_raw

    async def _shard(self, sid: int, read: bytes | None | object = _UNSET) -> _Shard:
        """One shard as stored (without a pending commit), read again only when the head moved
        (``read``: its bytes, read already); a shard one entry a line is only checked, its
        entries parsed when asked for."""

        cached = self._shards.get(sid)
        if cached is not None and cached.seen is self._head_raw:
            self._shards.move_to_end(sid)
            return cached
        if self._head_raw is None:
            legacy = (self._legacy_layout or {}).get(sid)
            shard = legacy or _Shard(None, None, {})
            shard.seen = self._head_raw
            self._keep(sid, shard)
            return shard
        path = self.shard_path(sid)
        stored = await self.read_state(path) if read is _UNSET else cast("bytes | None", read)
        raw = None if stored is None else await self._verified(path, stored)
        refused = stored is not None and raw is None
        if not refused and not await self._bound(sid, stored):
            refused, raw = True, None
        if cached is not None and raw is not None and cached.raw == raw:
            cached.seen = self._head_raw
            self._keep(sid, cached)
            return cached
        shard = _Shard(raw, self._head_raw)
        if refused:
            # Not memory's: read as empty, rewritten by the next commit, and layout memory
            # rebuilt from conversation memory by the next phase 2 (like a damaged shard).
            self._damaged.add(sid)
            shard.entries = {}
        elif (
            raw is not None
            and not self._named_by_head(sid, stored)
            and not _SHARD_LINES_RE.fullmatch(raw)
        ):
            shard.entries = await self._parse_shard(sid, raw)  # format 1, or unreadable
        self._keep(sid, shard)
        return shard

    async def _parse_shard(self, sid: int, raw: bytes) -> dict[str, Entry]:
        try:
            return LayoutShard.model_validate_json(raw).entries
        except ValidationError as exc:
            await self._set_aside(self.shard_path(sid), raw, _why(exc))
            self._damaged.add(sid)
            return {}

    async def _shard_entries(self, sid: int, shard: _Shard) -> dict[str, Entry]:
        """Every entry of a shard as stored, parsed (not kept: :meth:`layout_for_reading`
        keeps what it merges), without the keys the head names as removed from it."""

        if shard.entries is not None:
            entries = shard.entries
        elif shard.raw is None:
            return {}
        else:
            entries = await self._parse_shard(sid, shard.raw)
            if sid in self._damaged:
                shard.entries = {}
        gone = self._removed(sid)
        return {k: e for k, e in entries.items() if k not in gone} if gone else entries

    def _removed(self, sid: int) -> frozenset[str]:
        """Keys the head names as removed from shard ``sid`` (their lines still in its bytes:
        absent for every reader)."""

        return self._head.removed_in(sid)

    async def _shard_entry(self, sid: int, shard: _Shard, key: str) -> Entry | None:
        """One entry of a shard as stored: found by its line, only it parsed (a copy, for a
        shard kept parsed)."""

        if shard.entries is not None:
            kept = shard.entries.get(key)
            return None if kept is None else kept.model_copy(deep=True)
        if shard.raw is None:
            return None
        line = _entry_line(shard.raw, key)
        if line is None:
            return None
        try:
            return Entry.model_validate_json(line)
        except ValidationError as exc:
            # Unreadable like a shard that is not JSON: kept aside whole, read as empty, and
            # rewritten (and layout memory rebuilt) by the next phase 2.
            await self._set_aside(self.shard_path(sid), shard.raw, _why(exc))
            self._damaged.add(sid)
            shard.entries = {}
            return None

    def _shard_holds(self, shard: _Shard, key: str) -> bool:
        """Whether a shard as stored holds a line of ``key`` (removed or not; nothing parsed)."""

        if shard.entries is not None:
            return key in shard.entries
        return shard.raw is not None and _entry_line(shard.raw, key) is not None

    async def _shard_entries_of(self, sid: int, shard: _Shard, keys: list[str]) -> dict[str, Entry]:
        """The entries of ``keys`` in a shard as stored: their lines found, and parsed together
        (one parse for the shard, not one per key)."""

        if shard.entries is not None or shard.raw is None or len(keys) < 2:
            one = [(k, await self._shard_entry(sid, shard, k)) for k in keys]
            return {k: e for k, e in one if e is not None}
        raw = shard.raw
        lines = {k: line for k in keys for line in [_entry_line(raw, k)] if line is not None}
        body = b",".join(json.dumps(k).encode("utf-8") + b":" + v for k, v in lines.items())
        try:
            return LayoutShard.model_validate_json(b'{"entries":{' + body + b"}}").entries
        except ValidationError:
            # One of them is unreadable: found (and the shard set aside) key by key; a shard
            # set aside reads as empty.
            one = [(k, await self._shard_entry(sid, shard, k)) for k in lines]
            return {} if sid in self._damaged else {k: e for k, e in one if e is not None}

    def _shard_json(self, sid: int, shard: _Shard) -> dict[str, str]:
        """Key -> entry JSON of every entry of a shard, to write it again (nothing parsed for
        a shard one entry a line), without the keys the head names as removed from it."""

        if shard.entries is not None:
            lines = {k: e.model_dump_json() for k, e in shard.entries.items()}
        else:
            lines = _entry_lines(shard.raw) if shard.raw is not None else {}
        for key in self._removed(sid):
            lines.pop(key, None)
        return lines

    def _pending(self, sid: int) -> tuple[dict[str, Entry], list[str]]:
        journal = self._journal
        if journal is None:
            return {}, []
        count = self._head.shards
        put = {k: e for k, e in journal.put.items() if layout_shard(k, count) == sid}
        return put, [k for k in journal.delete if layout_shard(k, count) == sid]

    async def _shard_view(self, sid: int) -> dict[str, Entry]:
        """A shard's entries as committed: a pending commit counts as applied."""

        shard = await self._shard(sid)
        entries = await self._shard_entries(sid, shard)
        put, gone = self._pending(sid)
        if not put and not gone:
            return entries
        view = dict(entries)
        view.update(put)
        for key in gone:
            view.pop(key, None)
        return view

    async def layout_head(self) -> LayoutHead:
        await self._sync_layout()
        if self._journal is not None:
            return LayoutHead(version=self._journal.version, stamp=self._journal.stamp)
        return self._head

    async def layout_damaged(self) -> bool:
        head = await self.layout_head()
        if head.stamp == "" or self._head_damaged or self._damaged:
            return True
        if self.record_seal is not None:
            # A shard another process refused (a run's prompt read it) is kept aside beside
            # it: the shard is checked here, so the refusal is seen whoever read it first.
            for name in await self.ws.listdir(self.layout_dir):
                named = self._shard_named(name) if ".json.unsealed-" in name else None
                if named is not None and named[0] == self._head.shards:
                    await self._shard(named[1])
        return bool(self._damaged)

    async def layout_entries(self, keys: Iterable[str]) -> dict[str, Entry]:
        await self._sync_layout()
        by_shard: dict[int, list[str]] = {}
        for key in keys:
            by_shard.setdefault(layout_shard(key, self._head.shards), []).append(key)
        found: dict[str, Entry] = {}
        journal = self._journal
        for sid, group in by_shard.items():
            shard = await self._shard(sid)
            stored: list[str] = []
            gone = self._removed(sid)
            for key in group:
                if journal is not None and key in journal.put:
                    found[key] = journal.put[key].model_copy(deep=True)
                elif (journal is None or key not in journal.delete) and key not in gone:
                    stored.append(key)
            found.update(await self._shard_entries_of(sid, shard, stored))
        return found

    async def layout_for_reading(self) -> LayoutMemory:
        await self._sync_layout()
        whole = self._whole
        if whole is not None and whole[0] is self._head_raw and whole[1] is self._journal_raw:
            return whole[2]
        merged: dict[str, Entry] = {}
        async for sid, _ in self._all_shards():
            merged.update(await self._shard_view(sid))
        version = self._journal.version if self._journal is not None else self._head.version
        value = LayoutMemory.model_construct(version=version, entries=merged)
        self._whole = (self._head_raw, self._journal_raw, value)
        return value

    async def layout_view(
        self, *, person: str | None = None, acting: bool = False
    ) -> tuple[int, Mapping[str, Entry]]:
        await self._sync_layout()
        version = self._journal.version if self._journal is not None else self._head.version
        whole = self._whole
        if whole is not None and whole[0] is self._head_raw and whole[1] is self._journal_raw:
            entries: Mapping[str, Entry] = whole[2].entries
            if acting:
                entries = {k: e for k, e in entries.items() if e.exists_for(person)}
            return version, entries
        # Every shard's bytes now (what a later commit writes does not reach this view); an
        # entry is parsed when asked for.
        viewed = self._viewed
        if viewed is not None and viewed[0] is self._head_raw and not self._damaged:
            shards = viewed[1]
        else:
            shards = await self._viewed_shards()
            self._viewed = (self._head_raw, shards)
        journal = self._journal
        put = dict(journal.put) if journal is not None else {}
        gone = [*(journal.delete if journal is not None else ()), *self._head.removed_keys()]

        def damaged(sid: int, why: str) -> None:
            # Set aside (and layout memory rebuilt) by the next writer, which reads it again.
            logger.warning("memory found an unreadable entry in %s: %s", self.shard_path(sid), why)
            self._damaged.add(sid)

        return version, LayoutEntries(
            shards,
            put,
            gone,
            count=self._head.shards,
            person=person,
            acting=acting,
            on_error=damaged,
        )

    async def layout_changes(self, since: str) -> tuple[str, set[str] | None]:
        await self._sync_layout()
        head, journal = self._head, self._journal
        now = head.stamp if journal is None else journal.stamp
        if not since or not head.stamp:
            return now, None  # no stamp to start from (a new or damaged head)
        keys: set[str] = set()
        if journal is not None and journal.stamp != head.stamp:
            # A commit written but not applied yet: read as applied, so named too.
            if since == journal.stamp:
                return now, keys
            pending = journal.changed_keys()
            if pending is None:
                return now, None
            keys.update(pending)
        steps = {c.stamp: c for c in head.changes}
        stamp = head.stamp
        while stamp != since:
            step = steps.pop(stamp, None)
            if step is None or step.keys is None:
                return now, None  # older than the commits named, or a rebuild between
            keys.update(step.keys)
            stamp = step.before
        return now, keys

    async def layout_parts(self) -> AsyncIterator[Iterable[Entry]]:
        await self._sync_layout()
        whole = self._whole
        if whole is not None and whole[0] is self._head_raw and whole[1] is self._journal_raw:
            yield whole[2].entries.values()
            return
        for sid in range(self._head.shards):
            # Parsed one shard at a time and not kept: at most one shard's entries are held.
            yield (await self._shard_view(sid)).values()

    def layout_changed_keys(self, since: str, until: str) -> set[str] | None:
        """Keys changed from stamp ``since`` to stamp ``until``, when every commit between them
        was made by this store object; ``None`` when not known (another writer's commit)."""

        keys: set[str] = set()
        stamp = until
        for _ in range(_COMMITS_KEPT):
            if stamp == since:
                return keys
            step = self._commits.get(stamp)
            if step is None:
                return None
            stamp, changed = step
            keys |= changed
        return None

    async def layout_citing(self, conversations: Iterable[str]) -> set[str]:
        await self._sync_layout()
        keys: set[str] = set()
        wanted = set(conversations)
        if self._head_raw is None and self._legacy_layout is not None:
            for shard in self._legacy_layout.values():
                for key, entry in (shard.entries or {}).items():
                    if any(s.conversation in wanted for s in entry.sources):
                        keys.add(key)
        for rid in sorted(wanted):
            raw = await self.read_state(f"{self.layout_dir}/cites/{rid}")
            for line in (raw or b"").decode("utf-8", "replace").splitlines():
                keys.update(k for k in line.split() if KEY_RE.fullmatch(k))
        if self._journal is not None:
            for key, entry in self._journal.put.items():
                if any(s.conversation in wanted for s in entry.sources):
                    keys.add(key)
        return keys
