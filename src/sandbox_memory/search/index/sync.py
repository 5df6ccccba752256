"""Keeping the index in step with the workspace: what changed is found and written again.

:meth:`IndexSync.sync` brings the index up to date in one transaction, from watermarks it keeps
itself (see the package's docstring): entries from the change log's new records and layout
memory's change stamp (:meth:`~IndexSync._sync_entries`, :meth:`~IndexSync._sync_scope`);
recorded items from each rollout file's new bytes (:meth:`~IndexSync._sync_items`, which also
counts the uses of memory they show); rollout summaries from their rollout's progress
(:meth:`~IndexSync._sync_summary`). Which rollouts are looked at: all (two folder listings),
those named, or those flagged as changed (:data:`FLAGGED_SYNC_MAX`). A document is written by
:meth:`~IndexSync._put` and removed by :meth:`~IndexSync._drop`, in every FTS5 table it is in.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ... import bounded
from ...engines.transcript import item_text, segment_id_of, segment_items
from ...stores.records import ConversationMemory, Entry, LayoutMemory
from ...stores.segments import read_new_segments, rollout_path
from .documents import (
    MAX_ITEM_CHARS,
    MIXED_PERSONS,
    SEARCH_TOOL_NAME,
    _clip,
    _entry_stamp,
    _item_label,
    settled_text,
    subject_terms,
    timestamp_ms,
)
from .fts_writes import FTS_PENDING_CHARS
from .retracted import RetractedItems
from .schema import TEXT_COMPRESSION, _own_tables, _sources_of, _unpack
from .text import _fts_body
from .usage import _active_keys, _uses_in

YIELD_EVERY_SEGMENTS = 20
"""Segments indexed between two yields to the event loop (a few milliseconds of work)."""


FLAGGED_SYNC_MAX = 256
"""Most rollouts a flagged sync looks at one by one (a few calls each); with more flagged, one
listing of every rollout (one call per folder) costs less."""


class IndexSync(RetractedItems):
    """The index kept in step with the workspace and the store."""

    def mark(self, rollout_id: str) -> None:
        """The rollout's summary was written by this process: read it again at the next sync
        even if its size did not change."""

        self._dirty.add(rollout_id)

    def mark_scope(self, scope: str) -> None:
        """The entries of ``scope`` were replaced from outside (a shared store's copy, whose
        log is then rewritten): compare them at the next sync even if no new log line names
        them."""

        self._dirty_scopes.add(scope)

    async def sync(self, rollouts: Collection[str] | None = None, *, flagged: bool = False) -> int:
        """Bring the index up to date with the workspace; return the documents written.

        Every entry change is taken in (from the log). Rollouts' items and summaries:

        - by default, every rollout is looked at (two folder listings with sizes): what a
          search needs, since anything may have changed since the last one;
        - with ``rollouts``, only those: what a run's extraction changed;
        - with ``flagged``, the rollouts flagged since the last sync (:meth:`MemoryStore.
          changed_rollouts <sandbox_memory.stores.files.MemoryStore.changed_rollouts>`), those
          :meth:`mark`-ed here, and ``rollouts``: what phase 2 needs, at the cost of the new
          work. Every rollout is listed instead when the store keeps no flags, when the index
          never listed them all (new, rebuilt), or when more than
          :data:`FLAGGED_SYNC_MAX` are flagged.

        An index found damaged on the way (not merely busy) is set aside and built again
        (then wholly).
        """

        try:
            return await self._sync_once(rollouts, flagged=flagged)
        except sqlite3.DatabaseError as exc:
            if type(exc) is not sqlite3.DatabaseError:
                raise  # locked, constraint: not damage
            self._set_aside(exc)
            return await self._sync_once(None)

    async def _sync_once(self, rollouts: Collection[str] | None, *, flagged: bool = False) -> int:
        async with self._lock:
            db = await self._open()
            before = self.rows_indexed
            self._scopes_synced = set()
            # The flags are read before anything is looked at, and cleared only once what was
            # looked at is committed (and, for a copy, written back): a flag set meanwhile is
            # looked at again by the next sync.
            flags = await self.store.changed_rollouts()
            scope: set[str] | None = None if rollouts is None else set(rollouts)
            if flagged:
                scope = None
                if flags is not None and self._meta(db, "listed") == "1":
                    scope = flags.all | self._dirty | set(rollouts or ())
                    if len(scope) > FLAGGED_SYNC_MAX:
                        scope = None
            listing = scope is None
            # One transaction per sync: one commit (and disk flush) however much is new, and
            # another process never sees half an update.
            db.execute("BEGIN IMMEDIATE")
            marked = set(self._dirty_scopes)
            try:
                await self._sync_entries(db, marked)
                await self._sync_rollouts(db, scope)
                if listing and self._meta(db, "listed") != "1":
                    db.execute("INSERT OR REPLACE INTO meta(k, v) VALUES ('listed', '1')")
                self._commit(db)
                self._dirty_scopes -= marked
            except BaseException:
                self._rollback(db)
                self.rows_indexed = before
                raise
            written = self.rows_indexed - before
            if written:
                self._unsaved = True
            clearable = set() if flags is None else flags.unindexed
            taken = clearable if listing else clearable & (scope or set())
            if taken:
                if self.in_place:
                    await self._flags_taken_in(db, taken)
                else:
                    self._flags_unsaved |= taken
            return written

    async def _flags_taken_in(self, db: sqlite3.Connection, rollouts: set[str]) -> None:
        """Clear the flags of ``rollouts``, whose state the index now holds, then look once
        more: a rollout that changed after it was looked at (its flag set again before the
        clearing) is flagged again for the next sync."""

        await self.store.rollouts_indexed(sorted(rollouts))
        changed: list[str] = []
        states = await self._states(rollouts)
        for rid in sorted(rollouts):
            size, summary = states[rid]
            row = db.execute(
                "SELECT items_offset, summary_stamp FROM rollouts WHERE rid = ?", (rid,)
            ).fetchone()
            offset, stamp = (0, None) if row is None else (int(row[0]), row[1])
            want = None if summary is None else f"{summary[0]}:{summary[1]}"
            if (size or 0) != offset or want != stamp:
                changed.append(rid)
        if changed:
            await self.store.flag_unindexed(changed)

    def _commit(self, db: sqlite3.Connection) -> None:
        """Commit a sync's transaction, its FTS5 writes made first (see :class:`FtsWrites`)."""

        self._fts.flush(db)
        db.execute("COMMIT")

    def _rollback(self, db: sqlite3.Connection) -> None:
        self._fts.clear()
        db.execute("ROLLBACK")

    def _put(self, db: sqlite3.Connection, doc: dict[str, Any]) -> None:
        """Insert or replace one document (caller holds a transaction)."""

        self._drop(db, "doc = ?", (doc["doc"],))
        text = doc["text"]
        terms = doc.get("terms", "")
        doc = {**doc, "text": zlib.compress(text.encode("utf-8"), TEXT_COMPRESSION), "terms": terms}
        cur = db.execute(
            "INSERT INTO docs(doc, kind, scope, conversation, key, person, detail, updated_at, "
            "sources, path, stamp, text, terms) VALUES (:doc, :kind, :scope, :conversation, :key, "
            ":person, :detail, :updated_at, :sources, :path, :stamp, :text, :terms)",
            doc,
        )
        body = _fts_body(text, terms)
        rowid = int(cur.lastrowid or 0)
        for table in ("fts", *_own_tables(doc["kind"])):
            self._fts.insert(table, rowid, body)
        if self._fts.chars > FTS_PENDING_CHARS:
            self._fts.flush(db)
        if self.shared_out:
            db.execute("INSERT OR IGNORE INTO shared_out(doc) VALUES (?)", (doc["doc"],))
        self.rows_indexed += 1
        if doc["kind"] == "entry":
            self._entry_scopes_written.add(doc["scope"])

    def _drop(self, db: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> int:
        rows = db.execute(
            f"SELECT id, kind, text, terms, doc, scope FROM docs WHERE {where}", args
        ).fetchall()
        for row_id, kind, packed, terms, name, scope in rows:
            if kind == "entry":
                self._entry_scopes_written.add(scope)
                self._entry_dropped = True
            if self.shared_out:
                db.execute("INSERT OR IGNORE INTO shared_out(doc) VALUES (?)", (name,))
            # A contentless FTS5 table forgets a row when given the text it indexed.
            body = _fts_body(_unpack(packed), terms)
            for table in ("fts", *_own_tables(kind)):
                self._fts.delete(table, row_id, body)
            db.execute("DELETE FROM docs WHERE id = ?", (row_id,))
        return len(rows)

    async def _new_log_scopes(self, db: sqlite3.Connection) -> tuple[set[str] | None, str]:
        """Scopes named by log records not read yet, and the new watermark.

        ``None`` means the watermark is lost (a new index, a replaced log): compare every
        scope (:meth:`~sandbox_memory.stores.files.MemoryStore.log_scopes_after`).
        """

        return await self.store.log_scopes_after(self._meta(db, "log_mark"))

    async def _sync_entries(
        self, db: sqlite3.Connection, marked: set[str], *, only: Collection[str] | None = None
    ) -> set[str]:
        """Entries brought up to date from the log's new records (and the scopes ``marked``);
        returns the scopes left for a later sync.

        With ``only``, the scopes the log names outside it (and outside layout memory) are
        left: the lookup of known entries for one extraction wants layout memory and the
        conversations phase 2 selected, not the entries the close's other extractions just
        wrote (their conversations are not selected yet), which phase 2's sync takes in
        together. The log's mark then stays where it was, so the next sync reads those
        records again (what this one compared reads as unchanged)."""

        scopes, mark = await self._new_log_scopes(db)
        # Layout memory is followed by its change stamp, not by the log: every commit names
        # the keys it changed (a rebuild says "all"), so only those entries are compared.
        layout_whole = scopes is None or "layout" in marked
        if scopes is not None:
            scopes |= marked
        if scopes is None:
            # Compare every scope once: layout, every conversation with memory, and what the
            # index holds.
            scopes = {"layout", *await self.store.scopes_with_memory()}
            for (scope,) in db.execute("SELECT DISTINCT scope FROM docs WHERE kind = 'entry'"):
                scopes.add(str(scope))
            left: set[str] = set()
        else:
            left = set() if only is None else scopes.difference(only, ("layout",))
        scopes.discard("layout")
        for scope in sorted(scopes - left):
            await self._sync_scope(db, scope)
        await self._sync_layout(db, whole=layout_whole)
        if not left and mark != self._meta(db, "log_mark"):
            db.execute("INSERT OR REPLACE INTO meta(k, v) VALUES ('log_mark', ?)", (mark,))
        return left

    async def _sync_layout(self, db: sqlite3.Connection, *, whole: bool) -> None:
        """Layout memory's entries, from the stamp the index last synced them at: the entries
        the commits since then name, or all of them when that is not known (a new index, a
        rebuild, a stamp older than the commits the head names, a copy replaced from
        outside)."""

        synced = self._meta(db, "layout_stamp")
        stamp, keys = await self.store.layout_changes("" if whole else synced or "")
        if not whole and stamp and stamp == synced:
            return
        await self._sync_scope(db, "layout", keys=keys)
        if stamp != synced:
            db.execute("INSERT OR REPLACE INTO meta(k, v) VALUES ('layout_stamp', ?)", (stamp,))

    async def _sync_scope(
        self, db: sqlite3.Connection, scope: str, *, keys: Collection[str] | None = None
    ) -> None:
        """Compare a scope's entries with their rows: those of ``keys`` only, when given."""

        self._scopes_synced.add(scope)
        entries: Mapping[str, Entry]
        conversation: str | None
        if scope == "layout":
            # The parsed copy readers share (its shards parsed again only when they changed),
            # or the entries named, from their shards.
            if keys is None:
                layout: LayoutMemory = await self.store.layout_for_reading()
                entries = layout.entries
            else:
                entries = await self.store.layout_entries(sorted(keys))
            conversation = None
            path = f"{self.memories_dir}/MEMORY.md"
        elif scope.startswith("conversation:"):
            conversation = scope.split(":", 1)[1]
            memory: ConversationMemory = await self.store.load_conversation(conversation)
            entries = memory.entries
            path = f"{self.memories_dir}/store/conversations/{conversation}.json"
        else:
            return
        shown = [e for e in entries.values() if e.status == "active"]
        if conversation is not None and shown:
            # A conversation phase 2 forgot is out of memory's view (the registry, MEMORY.md,
            # its summary): its entries leave the index too, until it is extracted again.
            prog = await self.store.get_progress(conversation)
            if prog is not None and prog.forgotten:
                shown = []
        wanted = {f"entry:{scope}:{e.key}": e for e in shown}
        have: dict[str, str] = {}
        before: set[tuple[str, str, str, str]] = set()
        named = None if keys is None else sorted(set(keys))
        if named is None:
            have = dict(
                db.execute(
                    "SELECT doc, stamp FROM docs WHERE scope = ? AND kind = 'entry'", (scope,)
                ).fetchall()
            )
            # The items a retracted entry rests on are hidden from search while it stays so,
            # and so is a rollout summary stating it (see ``_sync_summary``).
            before = set(
                db.execute(
                    "SELECT key, conversation, item, content FROM retracted WHERE scope = ?",
                    (scope,),
                ).fetchall()
            )
        else:
            for key in named:
                have.update(
                    db.execute(
                        "SELECT doc, stamp FROM docs WHERE doc = ?", (f"entry:{scope}:{key}",)
                    ).fetchall()
                )
                before.update(
                    db.execute(
                        "SELECT key, conversation, item, content FROM retracted "
                        "WHERE scope = ? AND key = ?",
                        (scope, key),
                    ).fetchall()
                )
        for doc in set(have) - set(wanted):
            self._drop(db, "doc = ?", (doc,))
        after = {
            (e.key, s.conversation, s.item, e.content)
            for e in entries.values()
            if e.status == "retracted"
            for s in e.sources
        }
        if after != before:
            if named is None:
                db.execute("DELETE FROM retracted WHERE scope = ?", (scope,))
            else:
                db.executemany(
                    "DELETE FROM retracted WHERE scope = ? AND key = ?",
                    [(scope, key) for key in named],
                )
            db.executemany(
                "INSERT OR IGNORE INTO retracted(scope, key, conversation, item, content) "
                "VALUES (?, ?, ?, ?, ?)",
                [(scope, *row) for row in sorted(after)],
            )
            for rid in sorted({row[1] for row in before ^ after}):
                found = db.execute(
                    "SELECT summary_stamp FROM rollouts WHERE rid = ?", (rid,)
                ).fetchone()
                if found is not None and found[0]:
                    await self._sync_summary(db, rid, str(found[0]).rsplit(":", 1)[0], found[0])
        for doc, entry in wanted.items():
            stamp = _entry_stamp(entry)
            if have.get(doc) == stamp:
                continue
            self._put(
                db,
                {
                    "doc": doc,
                    "kind": "entry",
                    "scope": scope,
                    "conversation": conversation,
                    "key": entry.key,
                    "person": entry.person,
                    "detail": entry.kind,
                    "updated_at": entry.updated_at,
                    "sources": json.dumps([s.model_dump() for s in entry.sources]),
                    "path": path,
                    "stamp": stamp,
                    "text": f"{entry.key.replace('-', ' ')}: {entry.content}",
                    "terms": subject_terms(entry),
                },
            )

    async def _sync_rollouts(
        self, db: sqlite3.Connection, only: Collection[str] | None = None
    ) -> None:
        folder = f"{self.memories_dir}/rollout_summaries"
        sizes: dict[str, int] = {}
        summaries: dict[str, tuple[str, int]] = {}
        if only is None:
            # Two folder listings with sizes (one call each, also through the session API)
            # tell which rollout files grew and which summaries changed; only those are read.
            files = await self.ws.sizes(self.sessions_dir)
            sizes = {
                n[: -len(".jsonl")]: size
                for n, size in files.items()
                if n.endswith(".jsonl") and not n.startswith(".")
            }
            for name, size in (await self.ws.sizes(folder)).items():
                # ``<rollout-id>_<slug>.md``: a slug has no '_', so the id ends at the last one.
                if name.endswith(".md") and "_" in name and not name.startswith("."):
                    summaries[name[: name.rfind("_")]] = (name, size)
            rows = {
                str(rid): (int(offset), stamp)
                for rid, offset, stamp in db.execute(
                    "SELECT rid, items_offset, summary_stamp FROM rollouts"
                )
            }
            dirty, self._dirty = self._dirty, set()
            listed = set(sizes) | set(summaries)

            def known(rid: str) -> bool:
                return rid in listed

            order = sorted(listed | set(rows))
        else:
            # Named rollouts only (the one a run just extracted): their file, their summary
            # (named by their progress' slug), their row; no listing of every rollout.
            order = sorted(set(only))
            rows = {}
            for rid in order:
                file_size, summary = await self._look(rid)
                if file_size is not None:
                    sizes[rid] = file_size
                if summary is not None:
                    summaries[rid] = summary
                row = db.execute(
                    "SELECT items_offset, summary_stamp FROM rollouts WHERE rid = ?", (rid,)
                ).fetchone()
                if row is not None:
                    rows[rid] = (int(row[0]), row[1])
            dirty = self._dirty & set(order)
            self._dirty -= dirty

            def known(rid: str) -> bool:
                # A conversation named in an item: one of these, or one indexed before.
                return rid in sizes or bool(
                    db.execute("SELECT 1 FROM rollouts WHERE rid = ?", (rid,)).fetchone()
                )

        for rid in order:
            offset, stamp = rows.get(rid, (0, None))
            if sizes.get(rid, 0) != offset:
                await self._sync_items(db, rid, sizes.get(rid, 0), known)
            found = summaries.get(rid)
            want = None if found is None else f"{found[0]}:{found[1]}"
            if want != stamp or (rid in dirty and found is not None):
                await self._sync_summary(db, rid, None if found is None else found[0], want)
                # Its summary came or went (extracted again, forgotten by phase 2): whether
                # the conversation's entries are shown may have changed with it.
                if f"conversation:{rid}" not in self._scopes_synced:
                    await self._sync_scope(db, f"conversation:{rid}")

    async def _states(
        self, rollouts: Collection[str]
    ) -> dict[str, tuple[int | None, tuple[str, int] | None]]:
        """:meth:`_look` of each of ``rollouts``; from two folder listings when there are many."""

        if len(rollouts) <= FLAGGED_SYNC_MAX:
            return {rid: await self._look(rid) for rid in rollouts}
        files = await self.ws.sizes(self.sessions_dir)
        summaries: dict[str, tuple[str, int]] = {}
        for name, size in (await self.ws.sizes(f"{self.memories_dir}/rollout_summaries")).items():
            if name.endswith(".md") and "_" in name and not name.startswith("."):
                summaries[name[: name.rfind("_")]] = (name, size)
        return {rid: (files.get(f"{rid}.jsonl"), summaries.get(rid)) for rid in rollouts}

    async def _look(self, rid: str) -> tuple[int | None, tuple[str, int] | None]:
        """One rollout as the workspace holds it: its file's size, and its summary file's
        name and size (named by its progress' slug; none once forgotten)."""

        size = await self.ws.size(rollout_path(self.sessions_dir, rid))
        prog = await self.store.get_progress(rid)
        if prog is None or not prog.slug or prog.forgotten:
            return size, None
        name = f"{rid}_{prog.slug}.md"
        found = await self.ws.size(f"{self.memories_dir}/rollout_summaries/{name}")
        return size, None if found is None else (name, found)

    def _rollout_row(self, db: sqlite3.Connection, rid: str) -> tuple[int, list[str | None]]:
        row = db.execute("SELECT items_offset, persons FROM rollouts WHERE rid = ?", (rid,))
        found = row.fetchone()
        if found is None:
            return 0, []
        return int(found[0]), list(
            bounded.loads(found[1], limit=bounded.MAX_FIELD_BYTES, what="the index's persons")
        )

    async def _sync_items(
        self, db: sqlite3.Connection, rid: str, size: int, known: Callable[[str], bool]
    ) -> None:
        path = rollout_path(self.sessions_dir, rid)
        offset, persons = self._rollout_row(db, rid)
        if size < offset:
            self._drop(db, "scope = ? AND kind = 'item'", (f"items:{rid}",))
            db.execute("UPDATE rollouts SET items_offset = 0 WHERE rid = ?", (rid,))
            offset, persons = 0, []
        if size == offset:
            return
        parsed = await read_new_segments(self.ws, path, offset=offset, check=self.line_check(rid))
        if parsed is None or parsed.end_offset == offset:
            return
        from ...engines.commands import MemoryReads
        from ...engines.transcript import tool_names_by_call_id

        names = tool_names_by_call_id(parsed.segments)

        def active_keys(words: Iterable[str]) -> set[str]:
            return _active_keys(db, words)

        uses: list[tuple[str, str, int]] = []
        calls_reading: set[str] = set()
        reads = MemoryReads()
        for position, seg in enumerate(parsed.segments):
            if position and position % YIELD_EVERY_SEGMENTS == 0:
                await asyncio.sleep(0)  # a big catch-up must not stall runs sharing the loop
            person = seg.get("person") if isinstance(seg.get("person"), str) else None
            if person not in persons:
                persons.append(person)
            stamp = timestamp_ms(seg.get("updated_at"))
            for item_id, item in segment_items(seg, segment_id_of(seg, position)):
                if item.get("type") == "memory_edit":
                    continue
                label = _item_label(item, names)
                if label.endswith(SEARCH_TOOL_NAME):
                    continue
                text = _clip(settled_text(item_text(item, max_chars=MAX_ITEM_CHARS), "item"))
                doc = f"item:{rid}:{item_id}"
                read_back = reads.is_read(item)
                if not text or db.execute("SELECT 1 FROM docs WHERE doc = ?", (doc,)).fetchone():
                    continue
                for target, kind in _uses_in(item, text, calls_reading, active_keys, known):
                    uses.append((target, kind, stamp))
                if read_back:
                    continue  # memory read back: counted as a use above, not a thing the run saw
                self._put(
                    db,
                    {
                        "doc": doc,
                        "kind": "item",
                        "scope": f"items:{rid}",
                        "conversation": rid,
                        "key": None,
                        "person": person,
                        "detail": label,
                        "updated_at": stamp,
                        "sources": json.dumps([{"conversation": rid, "item": item_id}]),
                        "path": path,
                        "stamp": "",
                        "text": text,
                    },
                )
        for target, kind, at in uses:
            db.execute(
                "INSERT INTO usage(target, kind, uses, last_used_at) VALUES (?, ?, 1, ?) "
                "ON CONFLICT(target, kind) DO UPDATE SET uses = uses + 1, "
                "last_used_at = MAX(last_used_at, excluded.last_used_at)",
                (target, kind, at),
            )
        db.execute(
            "INSERT INTO rollouts(rid, items_offset, persons) VALUES (?, ?, ?) "
            "ON CONFLICT(rid) DO UPDATE SET items_offset = excluded.items_offset, "
            "persons = excluded.persons",
            (rid, parsed.end_offset, json.dumps(persons)),
        )

    async def _sync_summary(
        self, db: sqlite3.Connection, rid: str, name: str | None, stamp: str | None
    ) -> None:
        """Index the summary file ``name`` of ``rid`` again (``None``: it is gone)."""

        path = f"{self.memories_dir}/rollout_summaries/{name}" if name else ""
        text = await self.ws.read_text(path) if name else None
        _, persons = self._rollout_row(db, rid)
        people = {p for p in persons if p is not None}
        person = None if not people else (people.pop() if len(people) == 1 else MIXED_PERSONS)
        newest = db.execute(
            "SELECT MAX(updated_at) FROM docs WHERE scope = ?", (f"items:{rid}",)
        ).fetchone()[0]
        self._drop(db, "doc = ?", (f"summary:{rid}",))
        if text is not None:
            text = settled_text(text, "rollout_summary")
        if name and text and not self._states_retracted(db, rid, text):
            self._put(
                db,
                {
                    "doc": f"summary:{rid}",
                    "kind": "rollout_summary",
                    "scope": f"summary:{rid}",
                    "conversation": rid,
                    "key": None,
                    "person": person,
                    "detail": name[len(rid) + 1 : -len(".md")],
                    "updated_at": int(newest or 0),
                    "sources": json.dumps(self._summary_sources(db, rid)),
                    "path": path,
                    "stamp": stamp or "",
                    "text": text,
                },
            )
        db.execute(
            "INSERT INTO rollouts(rid, summary_stamp) VALUES (?, ?) "
            "ON CONFLICT(rid) DO UPDATE SET summary_stamp = excluded.summary_stamp",
            (rid, stamp),
        )

    async def item_texts(self, rid: str, items: Collection[str]) -> list[str]:
        """The indexed text of ``items`` of rollout ``rid`` (its new runs indexed first)."""

        await self.sync([rid])
        async with self._lock:
            db = await self._open()
            found = db.execute(
                "SELECT text FROM docs WHERE doc IN (SELECT value FROM json_each(?))",
                (json.dumps([f"item:{rid}:{item}" for item in items]),),
            ).fetchall()
        return [_unpack(packed) for (packed,) in found]

    @staticmethod
    def _summary_sources(db: sqlite3.Connection, rid: str) -> list[dict[str, str]]:
        rows = db.execute(
            "SELECT sources FROM docs WHERE scope = ? ORDER BY id", (f"items:{rid}",)
        ).fetchall()
        if not rows:
            return []
        ends = [_sources_of(rows[0][0])[0], _sources_of(rows[-1][0])[0]]
        return ends[:1] if ends[0] == ends[1] else ends
