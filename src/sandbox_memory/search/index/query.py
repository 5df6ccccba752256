"""The index's two searches: a query's ranked hits, and the curated text relevant to a run.

:meth:`IndexQueries.search` (the ``memory_search`` tool, ``MemoryClient.search``, the CLI, the
MCP server) syncs, ranks by BM25 (:mod:`.rank`), fuses the cosine ranking when there is an
embedder (:mod:`.vectors`), brings in the entries citing the items ranked, keeps one hit per
fact (:mod:`.hits`) and adds each entry's excerpt. :meth:`IndexQueries.curated` (the read
prompt's section "relevant to this task", ``render/relevant.py``) ranks entries and rollout
summaries for a run's input, asking a shared store's index first when there is one.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from ... import spans
from ...errors import MemoryConfigError
from ...stores.records import Source
from .hits import (
    ENTRY_TEXT_CHARS,
    EntryCopy,
    SearchHit,
    _hit_of,
    _window,
    distinct,
    excerpt_of,
    one_per_key,
)
from .retracted import RetractedItems, states_any
from .schema import FEW_TABLES, KIND_TABLES, HitKind, _sources_of, _unpack
from .sync import IndexSync
from .text import _plain, all_words, file_phrases, search_expression
from .vectors import RERANK_POOL, VectorRanking

DEFAULT_LIMIT = 10
"""Hits returned when no limit is given: what fits in a tool result without flooding it."""


CANDIDATES_PER_HIT = 3
"""Ranked documents read per hit returned, so that a hit dropped as a duplicate of another
(an entry and its source item) is replaced by the next best."""


MAX_LIMIT = 100
"""Largest ``limit`` accepted: a search is for the best few, not an export."""


class IndexQueries(IndexSync, VectorRanking):
    """The searches of the index, each synced first."""

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
        files = file_phrases(phrases)
        for kind in ("entry", "rollout_summary"):  # each ranked among its kind (see _lexical)
            # The documents naming a file the input names first (as a search ranks them).
            naming = self._naming(db, FEW_TABLES.get(kind, KIND_TABLES[kind]), files)
            first = self._ranked_within(
                db, expression, naming, kind=kind, person=person, limit=limit
            )
            if kind in FEW_TABLES:
                rest = self._ranked_few(db, terms, kind=kind, person=person, limit=limit, held=held)
            else:
                rest = self._ranked_own(db, expression, kind=kind, person=person, limit=limit)
            seen = {(h.kind, h.path, h.key) for h in first}
            ranked += [*first, *(h for h in rest if (h.kind, h.path, h.key) not in seen)][:limit]
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

    async def count(self, kind: HitKind | None = None) -> int:
        db = await self._open()
        if kind is None:
            return int(db.execute("SELECT COUNT(*) FROM docs").fetchone()[0])
        return int(db.execute("SELECT COUNT(*) FROM docs WHERE kind = ?", (kind,)).fetchone()[0])
