"""Search: a ranked full-text index over everything memory holds, and its queries.

What is indexed (each a *document*):

- ``entry``: every active entry of layout memory and of each conversation memory;
- ``rollout_summary``: each rollout summary file under ``rollout_summaries/``;
- ``item``: every recorded item of ``sessions/<rollout-id>.jsonl`` (already redacted when it
  was recorded), except the ``memory_search`` tool's own calls and results.

The engine is SQLite FTS5 (in Python's standard library) with its BM25 ranking and the
``porter unicode61`` tokenizer: Unicode-aware word splitting, accents folded, English words
reduced to their stem ("painted" finds "painting"). Chinese, Japanese and Korean text has no
spaces between words, so each such character is indexed as its own token and a query's CJK run
is searched as overlapping two-character phrases.

The index is derived data, never the source of truth: ``<memories_dir>/store/search.sqlite``
can be deleted at any time and is rebuilt from the workspace by the next search or close.
It is brought up to date incrementally from watermarks it keeps itself:

- items: the byte offset of each rollout file already indexed (new bytes only);
- conversation entries: the byte offset of ``store/log.jsonl`` already read; every change to
  an entry is a log record naming its scope, and only the scopes named are compared again;
- layout entries: layout memory's change stamp last synced; the head names the keys each of
  its latest commits changed (a rebuild: all), and only those entries are compared again (all
  of them when the stamp is older than the commits named, or unknown);
- summaries: the rollout's progress (slug, extracted offset); a summary is read again only
  when its rollout was extracted again (or forgotten, which drops it).

A retracted entry leaves the index at the next sync, and every search syncs first, so it
never appears in a result; nor do the recorded items it rests on (its sources), as long as it
stays retracted: a search for a forgotten fact does not bring it back through the run it was
learned from. A direct Remember makes the entry active again, and its items with it. Hits carry a ``person`` filter: a private entry, and the items and
summary of a person's runs, are returned only to that person.

Over a local folder the SQLite file is used in place. Through any other sandbox backend (the
session API cannot host a live SQLite file) the runtime works on a local copy, fetched once,
and writes it back to the workspace at close, before the snapshot; if a process dies first,
the next one catches up from the watermarks in the copy it finds.

Usage: while items are indexed, a later run's use of memory is recorded: a tool call that
reads a rollout summary, raw memory or rollout file of a conversation; an entry line of
``MEMORY.md`` shown in a tool result; an entry key cited in an assistant message. Phase 2
reads these counts (:meth:`SearchIndex.usage`) when it selects which rollouts to keep.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import sqlite3
import zlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from ... import bounded, spans
from ...engines.transcript import item_text, segment_id_of, segment_items
from ...errors import MemoryConfigError
from ...record.segments import read_new_segments, rollout_path
from ...stores.records import ConversationMemory, Entry, LayoutMemory, Source
from .base import RemoteIndex
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
from .hits import (
    ENTRY_TEXT_CHARS,
    EXCERPT_CHARS,
    HIT_TEXT_CHARS,
    SCORE_SHOWN_MIN,
    EntryCopy,
    SearchHit,
    _hit_of,
    _window,
    distinct,
    excerpt_of,
    format_hits,
    hit_text_chars,
    one_per_key,
)
from .rank import KIND_ORDER, RRF_K
from .retracted import (
    STATED_MIN_CHARS,
    RetractedItems,
    states_any,
)
from .schema import (
    FEW_TABLES,
    INDEX_FILE,
    TEXT_COMPRESSION,
    TOKENIZER,
    HitKind,
    _own_tables,
    _sources_of,
    _unpack,
)
from .text import (
    MAX_QUERY_PHRASES,
    QUERY_STOPWORDS,
    _fts_body,
    _plain,
    all_words,
    fts_query,
    known_terms,
    named_phrases,
    says_the_same,
    search_expression,
)
from .usage import UsageCounts, _active_keys, _uses_in
from .vectors import RERANK_POOL, VectorRanking

logger = logging.getLogger("sandbox_memory")

DEFAULT_LIMIT = 10
"""Hits returned when no limit is given: what fits in a tool result without flooding it."""

CANDIDATES_PER_HIT = 3
"""Ranked documents read per hit returned, so that a hit dropped as a duplicate of another
(an entry and its source item) is replaced by the next best."""

MAX_LIMIT = 100

KNOWN_CANDIDATES = 200
"""Entries an extraction gets from the index as known (see :meth:`SearchIndex.known_entries`):
the model engine shows the best of them within its 4,000-character budget, the offline engine
matches its candidates' keys against them."""

KNOWN_WORDS_LOOKED_UP = 256
"""Distinct words of a transcript (its most repeated) whose rarity among entries is looked up."""

KNOWN_TERMS_PER_STATEMENT = 64
"""Words counted by one SQL statement (a compound of one count per word; SQLite allows 500
parts by default)."""

KNOWN_QUERY_TERMS = 32
"""Words of a transcript searched for known entries: the rarest of those looked up."""

KNOWN_PER_WORD = 200
"""Entries read per word searched (the newest holding it)."""

KNOWN_SCOPE_SETS = 4
"""Sets of wanted scopes whose per-word lookups :meth:`SearchIndex.known_entries` keeps for
the next lookups (see :meth:`SearchIndex._known_words_of`)."""

KNOWN_NEWEST = 50
"""Newest entries added to those sharing words with a transcript, so that a prompt whose
budget the shared ones do not fill shows the latest memory (as it did when every entry was
ranked)."""
"""Largest ``limit`` accepted: a search is for the best few, not an export."""

YIELD_EVERY_SEGMENTS = 20
"""Segments indexed between two yields to the event loop (a few milliseconds of work)."""

FLAGGED_SYNC_MAX = 256
"""Most rollouts a flagged sync looks at one by one (a few calls each); with more flagged, one
listing of every rollout (one call per folder) costs less."""


class SearchIndex(VectorRanking, UsageCounts):
    """The search index of one layout: sync it with the workspace, query it, read usage."""

    def mark(self, rollout_id: str) -> None:
        """The rollout's summary was written by this process: read it again at the next sync
        even if its size did not change."""

        self._dirty.add(rollout_id)

    def mark_scope(self, scope: str) -> None:
        """The entries of ``scope`` were replaced from outside (a shared store's copy, whose
        log is then rewritten): compare them at the next sync even if no new log line names
        them."""

        self._dirty_scopes.add(scope)

    # --------------------------------------------------------------------- sync

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
                db.execute("COMMIT")
                self._dirty_scopes -= marked
            except BaseException:
                db.execute("ROLLBACK")
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
        db.execute("INSERT INTO fts(rowid, body) VALUES (?, ?)", (cur.lastrowid, body))
        for own in _own_tables(doc["kind"]):
            db.execute(f"INSERT INTO {own}(rowid, body) VALUES (?, ?)", (cur.lastrowid, body))
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
            db.execute("INSERT INTO fts(fts, rowid, body) VALUES ('delete', ?, ?)", (row_id, body))
            for own in _own_tables(kind):
                db.execute(
                    f"INSERT INTO {own}({own}, rowid, body) VALUES ('delete', ?, ?)",
                    (row_id, body),
                )
            db.execute("DELETE FROM docs WHERE id = ?", (row_id,))
        return len(rows)

    async def _new_log_scopes(self, db: sqlite3.Connection) -> tuple[set[str] | None, str]:
        """Scopes named by log records not read yet, and the new watermark.

        ``None`` means the watermark is lost (a new index, a replaced log): compare every
        scope (:meth:`~sandbox_memory.stores.files.MemoryStore.log_scopes_after`).
        """

        return await self.store.log_scopes_after(self._meta(db, "log_mark"))

    async def _sync_entries(self, db: sqlite3.Connection, marked: set[str]) -> None:
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
        scopes.discard("layout")
        for scope in sorted(scopes):
            await self._sync_scope(db, scope)
        await self._sync_layout(db, whole=layout_whole)
        if mark != self._meta(db, "log_mark"):
            db.execute("INSERT OR REPLACE INTO meta(k, v) VALUES ('log_mark', ?)", (mark,))

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

    # -------------------------------------------------------------------- query

    @spans.traced(spans.SEARCH, result=spans.hit_figures)
    async def search(
        self,
        query: str,
        *,
        conversation: str | None = None,
        limit: int = DEFAULT_LIMIT,
        person: str | None = None,
    ) -> list[SearchHit]:
        """Ranked hits for ``query`` (synced first, so nothing retracted can appear), in the
        order :data:`HIT_ORDER` says (ties included)."""

        if not isinstance(query, str):
            raise MemoryConfigError("query", query, "must be a string")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise MemoryConfigError("limit", limit, f"must be an integer from 1 to {MAX_LIMIT}")
        spans.note(query_chars=len(query), limit=limit, one_conversation=conversation is not None)
        expression = search_expression(query)
        if not expression:
            raise MemoryConfigError("query", query, "has no words to search for")
        await self.sync()
        db = await self._open()
        lexical_ids: list[int] = []
        rerank = self.embedder is not None and self.fusion == "rerank"
        ranked = self._lexical(
            db,
            expression,
            query=query,
            person=person,
            conversation=conversation,
            limit=max(limit * CANDIDATES_PER_HIT, RERANK_POOL if rerank else 0),
            doc_ids=lexical_ids,
        )
        if self.embedder is not None:
            nearest = await self._vector_ranked(
                db,
                query,
                person=person,
                conversation=conversation,
                limit=None if rerank else limit * CANDIDATES_PER_HIT,
            )
            if nearest is not None:
                if rerank:  # the cosine order of BM25's documents, none added
                    pool = set(lexical_ids)
                    nearest = [doc for doc in nearest if doc in pool]
                ranked = self._fused(
                    db,
                    query,
                    ranked,
                    lexical_ids,
                    nearest,
                    person=person,
                    conversation=conversation,
                )
        ranked += self._citing(db, ranked, query=query, person=person)
        hits = distinct(self._one_per_key(db, ranked, person, conversation, query=query), limit)
        return self._with_excerpts(db, hits, expression, query=query, person=person)

    @staticmethod
    def _with_excerpts(
        db: sqlite3.Connection,
        hits: list[SearchHit],
        expression: str,
        *,
        query: str,
        person: str | None,
    ) -> list[SearchHit]:
        """``hits`` with each entry's :attr:`SearchHit.excerpt`: of the items it cites that
        match ``expression`` and this search may see (the same filters as a ranked item:
        ``person``, items of a retracted entry and items stating one), the best by BM25, cut
        to :data:`EXCERPT_CHARS` around ``query``'s words. One query for all hits."""

        wanted = {
            f"item:{s.conversation}:{s.item}"
            for hit in hits
            if hit.kind == "entry"
            for s in hit.sources
        }
        if not wanted:
            return hits
        best: dict[tuple[str, str], tuple[float, str]] = {}
        probes: dict[str, list[str]] = {}
        for text, conv, sources, score in db.execute(
            "SELECT d.text, d.conversation, d.sources, -bm25(fts) FROM fts "
            "JOIN docs d ON d.id = fts.rowid WHERE fts MATCH ? "
            "AND d.doc IN (SELECT value FROM json_each(?)) AND d.kind = 'item' "
            "AND (d.person IS NULL OR d.person = ?) "
            "AND NOT EXISTS (SELECT 1 FROM retracted r WHERE r.conversation = d.conversation "
            "AND r.item = json_extract(d.sources, '$[0].item'))",
            (expression, json.dumps(sorted(wanted)), person),
        ):
            plain = _unpack(text)
            if conv not in probes:
                probes[conv] = RetractedItems._retracted_probes(db, conv)
            if probes[conv] and states_any(plain, probes[conv]):
                continue
            item = _sources_of(sources)[0]["item"]
            best[(conv, item)] = (float(score), plain)
        out: list[SearchHit] = []
        for hit in hits:
            found = [
                (best[(s.conversation, s.item)], s)
                for s in hit.sources
                if hit.kind == "entry" and (s.conversation, s.item) in best
            ]
            if found:
                (_, plain), source = max(found, key=lambda f: f[0][0])  # first on ties
                excerpt = excerpt_of(plain, query)
                if not all_words(excerpt) <= all_words(hit.text):  # it adds something
                    hit = hit.model_copy(update={"excerpt": excerpt, "excerpt_source": source})
            out.append(hit)
        return out

    @staticmethod
    def _citing(
        db: sqlite3.Connection, ranked: list[SearchHit], *, query: str, person: str | None
    ) -> list[SearchHit]:
        """The entries of each conversation that cite its items among ``ranked`` and are not
        ranked themselves (a long tool output shares more of a query's words than the short
        entry learned from it): :func:`distinct` puts each in its item's place. Scored 0:
        they take the score of the items they stand for."""

        wanted: set[tuple[str, str]] = set()
        for hit in ranked:
            if hit.kind == "item" and hit.conversation is not None and hit.sources:
                wanted.add((hit.conversation, hit.sources[0].item))
        if not wanted:
            return []
        have = {(h.conversation, h.key) for h in ranked if h.kind == "entry"}
        scopes = sorted({f"conversation:{conv}" for conv, _ in wanted} | {"layout"})
        found: list[SearchHit] = []
        # One pass over the entries of these scopes (layout memory's promoted entries cite
        # the items of the conversations they were learned in).
        for row in db.execute(
            "SELECT d.kind, d.text, 0.0, d.updated_at, d.conversation, d.sources, d.key, "
            "d.detail, d.path, COALESCE(u.uses, 0) FROM docs d "
            "LEFT JOIN usage u ON u.target = d.key AND u.kind = 'entry' "
            "WHERE d.kind = 'entry' AND d.scope IN (SELECT value FROM json_each(?)) "
            "AND (d.person IS NULL OR d.person = ?) "
            "AND EXISTS (SELECT 1 FROM json_each(d.sources) s "
            "WHERE json_extract(s.value, '$.item') IN (SELECT value FROM json_each(?))) "
            "ORDER BY d.updated_at DESC, d.doc",
            (json.dumps(scopes), person, json.dumps(sorted({i for _, i in wanted}))),
        ):
            cites = {(c["conversation"], c["item"]) for c in _sources_of(row[5])}
            if cites & wanted and (row[4], row[6]) not in have:
                found.append(_hit_of(row, query, whole=False))
        return found

    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit]:
        """The best ``limit`` entries, then the best ``limit`` rollout summaries, for a run's
        input (each kind ranked on its own, see :data:`KIND_TABLES`), their text whole, each entry
        key once: what the read prompt's section "relevant to this task" is
        chosen from (see ``render/relevant.py``).

        The query is ``phrases`` (FTS5 phrases, all kept) and, up to ``max_terms`` terms in
        all, the rarest of ``words`` (FTS5 terms) in the index: BM25 weighs a word by its
        rarity, and FTS5 gives a word held by more than half the documents no weight at all,
        while scoring every document it holds; such words, and words held by none, are left
        out. Synced first, so nothing retracted or forgotten can appear; ``person`` as for
        :meth:`search`. The sync is the flagged one (every entry change, and the rollouts
        flagged as changed since the last sync): at run start, with thousands of rollouts,
        listing them all would cost more than the rest."""

        if not phrases and not words:
            return []
        if self.remote is not None:
            found = await self.remote.curated(
                phrases, words, person=person, limit=limit, max_terms=max_terms
            )
            if found is not None:
                return found
        await self.sync(flagged=True)
        db = await self._open()
        held = self._held(db, words)
        total = int(db.execute("SELECT COUNT(*) FROM docs").fetchone()[0])
        useful = [w for w in words if 0 < held.get(w, 0) <= total // 2]
        useful.sort(key=lambda w: held[w])  # stable: the text's order on ties
        terms = [*phrases, *useful[: max(0, max_terms - len(phrases))]]
        expression = " OR ".join(terms)
        if not expression:
            return []
        ranked: list[SearchHit] = []
        for kind in ("entry", "rollout_summary"):  # each ranked among its kind (see _lexical)
            if kind in FEW_TABLES:
                ranked += self._ranked_few(
                    db, terms, kind=kind, person=person, limit=limit, held=held
                )
            else:
                ranked += self._ranked_own(db, expression, kind=kind, person=person, limit=limit)
        return self._one_per_key(db, ranked, person, None, whole=True)

    @staticmethod
    def _one_per_key(
        db: sqlite3.Connection,
        ranked: list[SearchHit],
        person: str | None,
        conversation: str | None,
        *,
        query: str = "",
        whole: bool = False,
    ) -> list[SearchHit]:
        """:func:`one_per_key`, the copies read from this index (their text shown as
        :func:`_hit_of` shows a hit's: ``whole``, or a window around ``query``)."""

        def copies_of(key: str) -> list[EntryCopy]:
            sql = (
                "SELECT sources, text, updated_at FROM docs WHERE kind = 'entry' AND key = ? "
                "AND (person IS NULL OR person = ?)"
            )
            args: list[Any] = [key, person]
            if conversation is not None:
                sql += " AND conversation = ?"
                args.append(conversation)
            copies: list[EntryCopy] = []
            for sources, packed, updated in db.execute(
                sql + " ORDER BY updated_at DESC, doc", args
            ):
                text = _unpack(packed)
                shown = text[len(key) + 2 :] if whole else _window(text, query, ENTRY_TEXT_CHARS)
                copies.append(
                    EntryCopy(
                        [Source(**raw) for raw in _sources_of(sources)],
                        _plain(text),
                        shown,
                        int(updated),
                    )
                )
            return copies

        return one_per_key(ranked, copies_of)

    async def known_entries(
        self, text: str, *, scopes: Collection[str], limit: int = KNOWN_CANDIDATES
    ) -> list[Entry]:
        """The active entries of ``scopes`` that share the most words with ``text``, best
        first (then newest, then by key): what an extraction shows its engine as known, found
        through the index instead of scoring every entry; then the :data:`KNOWN_NEWEST`
        newest others.

        The words searched are the text's :data:`KNOWN_QUERY_TERMS` rarest among entries
        (looked up in an entries-only FTS5 table); for each, the newest
        :data:`KNOWN_PER_WORD` entries holding it count. A word's list is read once for the
        lookups of one set of scopes while none of their entries changes (the rollouts of a
        close share it): see :meth:`_known_words_of`. The cost follows the transcript and
        the length of its words' posting lists, not the number of entries.

        The entries are brought up to date first (the log's new records only: one size call
        when nothing changed). An entry comes back with its key, kind, content, person and
        ``updated_at`` (its sources are not needed here and are left empty).
        """

        terms = list(known_terms(text))[:KNOWN_WORDS_LOOKED_UP]
        if not scopes:
            return []
        async with self._lock:
            db = await self._open()
            self._scopes_synced = set()
            marked = set(self._dirty_scopes)
            db.execute("BEGIN IMMEDIATE")
            try:
                await self._sync_entries(db, marked)
                db.execute("COMMIT")
                self._dirty_scopes -= marked
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._check_known_lookups(db)
            # How many entries hold each word (counted up to a cap: a few postings each), so
            # the rarest words, which tell most, are the ones searched. A word an earlier
            # lookup found at the cap is still there while no entry was dropped.
            cap = KNOWN_PER_WORD + 1
            held: dict[str, int] = dict.fromkeys(self._common_words.intersection(terms), cap)
            counted = [t for t in terms if t not in held]
            for first in range(0, len(counted), KNOWN_TERMS_PER_STATEMENT):
                part = counted[first : first + KNOWN_TERMS_PER_STATEMENT]
                counts = " UNION ALL ".join(
                    f"SELECT {n}, count(*) FROM (SELECT rowid FROM entry_fts "
                    "WHERE entry_fts MATCH ? LIMIT ?)"
                    for n in range(len(part))
                )
                args: list[str | int] = [a for t in part for a in (t, cap)]
                for n, count in db.execute(counts, args):
                    held[part[int(n)]] = int(count)
                    if count >= cap:
                        self._common_words.add(part[int(n)])
            chosen = sorted((t for t in terms if held[t]), key=lambda t: held[t])
            chosen = chosen[:KNOWN_QUERY_TERMS]
            in_scopes = sorted(set(scopes))
            wanted = json.dumps(in_scopes)
            # For each word, the newest entries of these scopes holding it (rowids grow with
            # every change written), as an earlier lookup of the same scopes found them while
            # no entry of theirs changed (the rollouts of one close share many words).
            found = self._known_words_of(wanted, in_scopes)
            missing = [t for t in chosen if t not in found]
            if missing:
                # The entries of the other scopes, few (the conversations phase 2 has not
                # taken in yet), found in the gaps the wanted scopes leave in the scope
                # index: the postings are filtered by them, not each looked up in ``docs``.
                others = [
                    int(r)
                    for (r,) in db.execute(
                        _KNOWN_OTHER_SCOPES_SQL, (json.dumps(_other_entry_scopes(in_scopes)),)
                    )
                ]
                # One row per word (its entries as a JSON array), in one statement.
                per_word = " UNION ALL ".join(
                    f"SELECT {n}, json_group_array(id) FROM ({_KNOWN_PER_WORD_SQL})"
                    for n in range(len(missing))
                )
                args = [json.dumps(others)]
                for term in missing:
                    args += [term, KNOWN_PER_WORD]
                for n, ids in db.execute(
                    f"WITH others(id) AS (SELECT value FROM json_each(?)) {per_word}", args
                ):
                    found[missing[n]] = json.loads(ids)
            # Ranked by the words shared, then newest first.
            shared: Counter[int] = Counter()
            for term in chosen:
                shared.update(found[term])
            best = _most_shared(shared, limit)
            # Walked newest first along the time index, stopping at the limit (by the scope
            # index, every entry of the scopes was sorted: most of the lookup at 20,000).
            newest = db.execute(
                "SELECT id FROM docs INDEXED BY docs_entry_time WHERE kind = 'entry' "
                "AND scope IN (SELECT value FROM json_each(?)) "
                "AND id NOT IN (SELECT value FROM json_each(?)) "
                "ORDER BY updated_at DESC, key, id LIMIT ?",
                (wanted, json.dumps(best), KNOWN_NEWEST),
            ).fetchall()
            best += [int(r) for (r,) in newest]
            rows = db.execute(
                "SELECT id, key, detail, text, updated_at, person FROM docs "
                "WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(best),),
            ).fetchall()
        rows.sort(key=lambda r: (-shared.get(r[0], 0), -r[4], r[1]))
        # An entry's text is ``<key with spaces>: <content>`` (see ``_sync_scope``).
        return [
            Entry.model_validate(
                {
                    "key": key,
                    "kind": kind,
                    "content": _unpack(packed)[len(key) + 2 :],
                    "person": person,
                    "updated_at": int(updated_at),
                }
            )
            for _, key, kind, packed, updated_at, person in rows
        ]

    def _check_known_lookups(self, db: sqlite3.Connection) -> None:
        """Drop what earlier lookups of :meth:`known_entries` found that may have changed
        since: everything when another connection wrote (SQLite's ``data_version``), the
        words found common when an entry was dropped (adding entries only makes a word
        more common), and the per-word lists of a set of scopes when an entry of one of
        them was written or dropped here (noted by ``_put`` and ``_drop``)."""

        (version,) = db.execute("PRAGMA data_version").fetchone()
        written, self._entry_scopes_written = self._entry_scopes_written, set()
        dropped, self._entry_dropped = self._entry_dropped, False
        if version != self._known_version:
            self._known_words.clear()
            self._common_words.clear()
            self._known_version = version
        if dropped:
            self._common_words.clear()
        for key, (held, _) in list(self._known_words.items()):
            if not held.isdisjoint(written):
                del self._known_words[key]

    def _known_words_of(self, wanted: str, scopes: Iterable[str]) -> dict[str, list[int]]:
        """The words :meth:`known_entries` looked up earlier for the scopes ``wanted`` (JSON
        of the sorted ``scopes``), each with the newest entries of those scopes holding it,
        as :meth:`_check_known_lookups` kept them. Entries of other scopes may change
        meanwhile (the conversations a close extracts before phase 2 takes them in): they
        are never among these. At most :data:`KNOWN_SCOPE_SETS` sets of scopes are kept
        (each rollout of a conversation already taken in looks up all scopes but its own)."""

        kept = self._known_words.pop(wanted, None)
        words = kept[1] if kept is not None else {}
        self._known_words[wanted] = (frozenset(scopes), words)
        while len(self._known_words) > KNOWN_SCOPE_SETS:
            del self._known_words[next(iter(self._known_words))]
        return words

    async def count(self, kind: HitKind | None = None) -> int:
        db = await self._open()
        if kind is None:
            return int(db.execute("SELECT COUNT(*) FROM docs").fetchone()[0])
        return int(db.execute("SELECT COUNT(*) FROM docs WHERE kind = ?", (kind,)).fetchone()[0])


_KNOWN_PER_WORD_SQL = (
    "SELECT rowid AS id FROM entry_fts WHERE entry_fts MATCH ? AND rowid NOT IN others "
    "ORDER BY rowid DESC LIMIT ?"
)
"""The newest entries of the wanted scopes holding one word (:meth:`SearchIndex.known_entries`):
those of the other scopes (``others``) left out as the postings are read, with no look-up in
``docs`` per posting (which took most of the lookup)."""

_KNOWN_OTHER_SCOPES_SQL = (
    "SELECT d.id FROM json_each(?) g JOIN docs d INDEXED BY docs_scope "
    "ON d.scope > g.value ->> 0 AND d.scope < g.value ->> 1 WHERE d.kind = 'entry'"
)
"""The entries whose scope lies strictly inside one of the ranges given (``[[low, high], ...]``,
see :func:`_other_entry_scopes`), read from the scope index."""


def _most_shared(shared: Mapping[int, int], limit: int) -> list[int]:
    """The ``limit`` entries sharing the most words (``shared``: words per entry id), newest
    (highest id) first among equals: taken by number of words, from the most, so the
    thousands sharing one word are not all sorted."""

    by_words: dict[int, list[int]] = {}
    for row_id, words in shared.items():
        by_words.setdefault(words, []).append(row_id)
    best: list[int] = []
    for words in sorted(by_words, reverse=True):
        best += sorted(by_words[words], reverse=True)
        if len(best) >= limit:
            break
    return best[:limit]


def _other_entry_scopes(wanted: list[str]) -> list[tuple[str, str]]:
    """Open ranges of scopes holding every entry scope but the sorted ``wanted`` ones: the
    gaps between the wanted conversations among ``conversation:<id>``, and ``layout`` unless
    wanted (entries have no other scope; see ``_sync_scope``). A range may hold documents of
    other kinds, which are passed over."""

    bounds = [
        "conversation",
        *(s for s in wanted if s.startswith("conversation:")),
        "conversation;",
    ]
    ranges = list(itertools.pairwise(bounds))
    if "layout" not in wanted:
        ranges.append(("layou", "layout:"))
    return ranges


__all__ = [
    "CANDIDATES_PER_HIT",
    "DEFAULT_LIMIT",
    "ENTRY_TEXT_CHARS",
    "EXCERPT_CHARS",
    "HIT_TEXT_CHARS",
    "INDEX_FILE",
    "KIND_ORDER",
    "KNOWN_CANDIDATES",
    "KNOWN_NEWEST",
    "MAX_ITEM_CHARS",
    "MAX_LIMIT",
    "MAX_QUERY_PHRASES",
    "QUERY_STOPWORDS",
    "RRF_K",
    "SCORE_SHOWN_MIN",
    "SEARCH_TOOL_NAME",
    "STATED_MIN_CHARS",
    "TOKENIZER",
    "EntryCopy",
    "HitKind",
    "RemoteIndex",
    "SearchHit",
    "SearchIndex",
    "_fts_body",
    "_plain",
    "_sources_of",
    "_unpack",
    "_window",
    "all_words",
    "distinct",
    "excerpt_of",
    "format_hits",
    "fts_query",
    "hit_text_chars",
    "known_terms",
    "named_phrases",
    "one_per_key",
    "says_the_same",
    "search_expression",
    "settled_text",
    "states_any",
    "timestamp_ms",
]
