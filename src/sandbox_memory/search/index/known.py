"""Known entries: what an extraction is shown as already in memory, found through the index.

:meth:`KnownLookup.known_entries` gives the active entries of some scopes that share the most
words with a transcript (then the newest others), without scoring every entry: the
transcript's rarest words among entries (:func:`~.text.known_terms`, counted in the
entries-only FTS5 table) are searched, each word's newest entries counted, and the per-word
lists kept for the next lookups of the same scopes while none of their entries changes
(:meth:`KnownLookup._known_words_of`, :meth:`KnownLookup._check_known_lookups`).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ...stores.records import Entry
from .schema import _unpack
from .sync import IndexSync
from .text import known_terms

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


KNOWN_BUILT_KEPT = 4 * (KNOWN_CANDIDATES + KNOWN_NEWEST)
"""Entries :meth:`KnownLookup.known_entries` keeps built for the next lookups (a few lookups'
worth; all are dropped when it is full)."""


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


class KnownLookup(IndexSync):
    """The lookup of known entries for extraction, and what it keeps between lookups."""

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
                left = await self._sync_entries(db, marked, only=scopes)
                self._commit(db)
                self._dirty_scopes -= marked - left
            except BaseException:
                self._rollback(db)
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
        return [self._known_entry(row) for row in rows]

    def _known_entry(self, row: tuple[Any, ...]) -> Entry:
        """The entry of one row :meth:`known_entries` read, built once per row: the lookups of
        one close return mostly the same entries (the newest ones, the common words'), and
        building each again was half of a lookup. The row is the key, every column of it,
        so a row rewritten under a reused rowid is built afresh. Callers read the entries
        they are given and never change them (they are shared between lookups)."""

        built = self._known_built.get(row)
        if built is None:
            _, key, kind, packed, updated_at, person = row
            # An entry's text is ``<key with spaces>: <content>`` (see ``_sync_scope``).
            built = Entry.model_validate(
                {
                    "key": key,
                    "kind": kind,
                    "content": _unpack(packed)[len(key) + 2 :],
                    "person": person,
                    "updated_at": int(updated_at),
                }
            )
            if len(self._known_built) >= KNOWN_BUILT_KEPT:
                self._known_built.clear()
            self._known_built[row] = built
        return built

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
