"""Ranking by words: BM25 in SQLite FTS5, each kind of document among its own kind.

:meth:`LexicalRanking._ranked` runs one FTS5 query under a search's filters (person,
conversation, items a Forget hides) in :data:`~.hits.HIT_ORDER`; :meth:`~LexicalRanking._lexical`
ranks each kind in its own table (:data:`~.schema.KIND_TABLES`) and takes the kinds in turn
(reciprocal rank fusion, :data:`RRF_K`); :meth:`~LexicalRanking._ranked_own` and
:meth:`~LexicalRanking._ranked_few` give the same hits as ``_ranked`` for one kind at a cost that
follows the documents of that kind; :meth:`~LexicalRanking._held` reads how many documents hold
each word from the index's vocabulary.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Mapping
from typing import Any, Final

from ..bm25 import rank_few
from .hits import SCORE_SHOWN_MIN, SearchHit, _hit_of
from .retracted import RetractedItems, states_any
from .schema import FEW_TABLES, KIND_TABLES, TOKENIZER, HitKind, _unpack
from .text import named_files

KIND_ORDER: Final[tuple[HitKind, ...]] = ("entry", "rollout_summary", "item")
"""The order of the kinds on one rank: curated text (an entry, then a summary) before the raw
item."""


RRF_K = 60
"""Reciprocal rank fusion: a document's fused score is ``sum(RRF_K / (RRF_K + rank))`` over
the two rankings (BM25, cosine) it is in; 60 is the constant of the original paper (Cormack,
Clarke and Buettcher, 2009), which damps the head of each list so that agreement between the
two rankings counts more than a first place in one."""


BOUNDED_SORT_MIN_TERMS = 16
"""Terms of an expression from which :meth:`LexicalRanking._ranked_own` first reads FTS5's
best in a bounded sort: FTS5's work per entry scored grows with the terms (about 3.4 us with
64, 1.2 with 8), so with many the bounded sort saves much of a long task message's lookup;
with few it saves little, and the ties at its edge that send it to the full query (common
among short, uniform entries) made a short message's lookup run both queries."""


class LexicalRanking(RetractedItems):
    """The BM25 rankings of a search (static: each takes the index's connection)."""

    @classmethod
    def _ranked_own(
        cls,
        db: sqlite3.Connection,
        expression: str,
        *,
        kind: HitKind,
        person: str | None,
        limit: int,
    ) -> list[SearchHit]:
        """The hits :meth:`_ranked` gives for ``kind`` (whose table in :data:`KIND_TABLES`
        holds only its documents), their text whole: the same documents, order and scores,
        with ``docs`` read for FTS5's ``2 * limit`` best instead of for every document holding
        a term. With :data:`BOUNDED_SORT_MIN_TERMS` terms or more, those are first kept in a
        bounded sort as FTS5 scores them (no table of every score); they are enough when
        ``limit`` of them are this person's and the ``limit``-th of those scores better than
        the last one read, so no document left unread can reach or tie it. Otherwise (a tie at the edge, a person's best further
        down), the documents scoring at least as well as the ``2 * limit``-th best, ties
        included, are read; when fewer than ``limit`` of those are this person's, all."""

        table = KIND_TABLES[kind]
        if expression.count(" OR ") + 1 >= BOUNDED_SORT_MIN_TERMS:
            best = db.execute(
                f"SELECT rowid, bm25({table}) AS s FROM {table} WHERE {table} MATCH ? "
                "ORDER BY s LIMIT ?",
                (expression, 2 * limit),
            ).fetchall()
            read = {int(r): float(b) for r, b in best}
            seen = sorted(
                read[int(doc)]
                for (doc,) in db.execute(
                    "SELECT id FROM docs WHERE id IN (SELECT value FROM json_each(?)) "
                    "AND kind = ? AND (person IS NULL OR person = ?)",
                    (json.dumps(sorted(read)), kind, person),
                )
            )
            every = len(best) < 2 * limit  # every document holding a term was read
            if every or (len(seen) >= limit and seen[limit - 1] < float(best[-1][1])):
                return cls._best(db, read, kind=kind, person=person, limit=limit)
        # r is read twice: SQLite 3.35 and later compute it once (older ones twice, slower
        # but the same rows).
        rows = db.execute(
            f"WITH r AS (SELECT rowid AS id, bm25({table}) AS s FROM {table} "
            f"WHERE {table} MATCH ?) "
            "SELECT r.id, r.s FROM r JOIN docs d ON d.id = r.id "
            "WHERE r.s <= COALESCE((SELECT s FROM r ORDER BY s LIMIT 1 OFFSET ?), 1e308) "
            "AND d.kind = ? AND (d.person IS NULL OR d.person = ?)",
            (expression, 2 * limit - 1, kind, person),
        ).fetchall()
        if len(rows) >= limit:
            return cls._best(
                db, {int(r): float(b) for r, b in rows}, kind=kind, person=person, limit=limit
            )
        return cls._ranked(
            db,
            expression,
            query="",
            person=person,
            conversation=None,
            kinds=(kind,),
            limit=limit,
            whole=True,
            table=table,
        )

    @classmethod
    def _ranked_few(
        cls,
        db: sqlite3.Connection,
        terms: list[str],
        *,
        kind: HitKind,
        person: str | None,
        limit: int,
        held: Mapping[str, int] | None = None,
    ) -> list[SearchHit]:
        """The hits :meth:`_ranked` gives for ``kind`` (a kind of :data:`FEW_TABLES`), the
        expression ``terms`` joined by ``OR``, in the table :data:`KIND_TABLES` names, their
        text whole: the same documents, order and scores, found by scoring the documents of
        this kind that hold a term (:func:`.bm25.rank_few`) instead of every document that
        does. ``held``: :meth:`_held` of the words among ``terms``, if read already."""

        scores = rank_few(
            db,
            terms,
            table=KIND_TABLES[kind],
            few=FEW_TABLES[kind],
            tokenizer=TOKENIZER,
            held=held,
        )
        return cls._best(db, scores, kind=kind, person=person, limit=limit)

    @classmethod
    def _best(
        cls,
        db: sqlite3.Connection,
        scores: dict[int, float],
        *,
        kind: HitKind,
        person: str | None,
        limit: int,
    ) -> list[SearchHit]:
        """The best ``limit`` of the documents ``scores`` gives a BM25 value (FTS5's: lower is
        better) in :meth:`_ranked`'s order and under its filters, their text whole."""

        if not scores:
            return []
        rows = db.execute(
            "SELECT id, updated_at, doc FROM docs WHERE id IN (SELECT value FROM json_each(?)) "
            "AND kind = ? AND (person IS NULL OR person = ?)",
            (json.dumps(sorted(scores)), kind, person),
        ).fetchall()
        # As _ranked orders them: BM25, then newest, then by name (one kind).
        rows.sort(key=lambda r: (scores[int(r[0])], -int(r[1]), str(r[2])))
        ids = [int(r[0]) for r in rows[:limit]]
        found: list[int] = []
        hits = cls._ranked(
            db,
            "",
            query="",
            person=person,
            conversation=None,
            kinds=(kind,),
            limit=limit,
            whole=True,
            ids=ids,
            doc_ids=found,
        )
        return [
            hit.model_copy(update={"score": round(-scores[doc], 4)})
            for doc, hit in zip(found, hits, strict=True)
        ]

    @staticmethod
    def _held(db: sqlite3.Connection, words: list[str]) -> dict[str, int]:
        """How many indexed documents hold each of ``words`` (FTS5 terms such as ``"parser"``),
        read from the index's vocabulary: each word is tokenized as the index does (stemmed),
        then looked up. A word that is more than one token (a CJK phrase) counts as its
        rarest token."""

        if not words:
            return {}
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_words "
            f"USING fts5(body, tokenize='{TOKENIZER}')"
        )
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_tokens "
            "USING fts5vocab(temp, query_words, instance)"
        )
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.index_terms USING fts5vocab(main, fts, row)"
        )
        db.execute("DELETE FROM temp.query_words")
        db.executemany(
            "INSERT INTO temp.query_words(rowid, body) VALUES (?, ?)",
            [(n, w.strip('"')) for n, w in enumerate(words, 1)],
        )
        held: dict[str, int] = {}
        for row, count in db.execute(
            "SELECT q.doc, COALESCE(t.doc, 0) FROM temp.query_tokens q "
            "LEFT JOIN temp.index_terms t ON t.term = q.term"
        ):
            word = words[int(row) - 1]
            held[word] = min(held.get(word, int(count)), int(count))
        db.execute("DELETE FROM temp.query_words")
        return held

    @classmethod
    def _lexical(
        cls,
        db: sqlite3.Connection,
        expression: str,
        *,
        query: str,
        person: str | None,
        conversation: str | None,
        limit: int,
        doc_ids: list[int],
    ) -> list[SearchHit]:
        """The best ``limit`` documents for ``expression``, the kinds taken in turn: each kind
        ranked by BM25 on its own (in the table :data:`KIND_TABLES` names), the first of each
        kind, then the second of each, and so on (on one rank: entry, summary, item; see
        :data:`KIND_ORDER`). ``doc_ids`` receives the id of each hit returned.

        One BM25 over all documents ranks by the collection's statistics, which the recorded
        items make: a word in every entry (``pytest`` in a project's fix notes) is rare among
        items, so it weighs heavily, and an entry is short, so it scores as though it were all
        about that word. Ranked that way, a long task's text put every project entry above the
        recorded run of the earlier fix that shares its words. Ranked among its own kind, an
        entry is weighed by what sets it apart from other entries, an item by what sets it
        apart from other items; taking the kinds in turn is reciprocal rank fusion of the three
        rankings (each document is in one of them, so its constant does not matter). A hit's
        :attr:`SearchHit.score` is then ``RRF_K / (RRF_K + rank)``, its rank in its kind, and 0
        where BM25 gives it nothing, among its kind and among all documents (every word it
        shares with the query is in more than half of them: see :data:`SCORE_SHOWN_MIN`)."""

        fused: list[tuple[float, int, float, int, SearchHit]] = []
        lists: list[tuple[int, list[int], list[SearchHit]]] = []
        files = named_files(query)
        for order, kind in enumerate(KIND_ORDER):
            # The documents naming a file the query names first, then the others, each part in
            # BM25's order (see :func:`~.text.file_phrases`).
            naming = cls._naming(db, FEW_TABLES.get(kind, KIND_TABLES[kind]), files)
            ids: list[int] = []
            hits: list[SearchHit] = []
            for within in (naming, None) if naming else (None,):
                part_ids: list[int] = []
                part = cls._ranked(
                    db,
                    expression,
                    query=query,
                    person=person,
                    conversation=conversation,
                    kinds=(kind,),
                    limit=limit,
                    whole=False,
                    doc_ids=part_ids,
                    table=KIND_TABLES[kind],
                    within=within,
                )
                for doc, hit in zip(part_ids, part, strict=True):
                    if len(ids) < limit and doc not in ids:
                        ids.append(doc)
                        hits.append(hit)
            lists.append((order, ids, hits))
        # A kind of few documents (one entry) floors every word's IDF: such a hit is judged
        # by its BM25 among all documents instead.
        unweighed = [
            doc
            for _, ids, hits in lists
            for doc, hit in zip(ids, hits, strict=True)
            if hit.score < SCORE_SHOWN_MIN
        ]
        weighed = cls._weighed(db, expression, unweighed)
        for order, ids, hits in lists:
            for rank, (doc, hit) in enumerate(zip(ids, hits, strict=True), 1):
                said = hit.score >= SCORE_SHOWN_MIN or doc in weighed
                score = RRF_K / (RRF_K + rank) if said else 0.0
                fused.append((score, order, -hit.score, doc, hit))
        fused.sort(key=lambda f: (-f[0], f[1], f[2]))  # then the kind, then BM25's order
        kept = fused[:limit]
        doc_ids.extend(doc for _, _, _, doc, _ in kept)
        return [hit.model_copy(update={"score": round(score, 4)}) for score, _, _, _, hit in kept]

    @classmethod
    def _ranked_within(
        cls,
        db: sqlite3.Connection,
        expression: str,
        within: Collection[int],
        *,
        kind: HitKind,
        person: str | None,
        limit: int,
    ) -> list[SearchHit]:
        """The best ``limit`` of the documents ``within`` (of ``kind``) for ``expression``, as
        :meth:`_best` orders and scores them (BM25 in the kind's own table), text whole."""

        if not within:
            return []
        table = KIND_TABLES[kind]
        scores = {
            int(doc): float(score)
            for doc, score in db.execute(
                f"SELECT rowid, bm25({table}) FROM {table} WHERE {table} MATCH ? "
                "AND rowid IN (SELECT value FROM json_each(?))",
                (expression, json.dumps(sorted(within))),
            )
        }
        return cls._best(db, scores, kind=kind, person=person, limit=limit)

    @staticmethod
    def _naming(db: sqlite3.Connection, table: str, files: list[str]) -> set[int]:
        """The documents of ``table`` holding one of the phrases ``files`` (of
        :func:`~.text.file_phrases`): about a file the query names. Callers give the smallest
        table holding the kind they rank (a few kind's own, :data:`FEW_TABLES`)."""

        if not files:
            return set()
        return {
            int(doc)
            for (doc,) in db.execute(
                f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (" OR ".join(files),)
            )
        }

    @staticmethod
    def _weighed(db: sqlite3.Connection, expression: str, ids: list[int]) -> set[int]:
        """Which of the documents ``ids`` BM25 over all documents gives a score (at least
        :data:`SCORE_SHOWN_MIN`) for ``expression``."""

        if not ids:
            return set()
        return {
            int(doc)
            for doc, score in db.execute(
                "SELECT rowid, -bm25(fts) FROM fts WHERE fts MATCH ? "
                "AND rowid IN (SELECT value FROM json_each(?))",
                (expression, json.dumps(ids)),
            )
            if score >= SCORE_SHOWN_MIN
        }

    @staticmethod
    def _ranked(
        db: sqlite3.Connection,
        expression: str,
        *,
        query: str,
        person: str | None,
        conversation: str | None,
        kinds: tuple[HitKind, ...] | None,
        limit: int,
        whole: bool,
        ids: list[int] | None = None,
        doc_ids: list[int] | None = None,
        table: str = "fts",
        within: Collection[int] | None = None,
    ) -> list[SearchHit]:
        """Documents matching ``expression`` in :data:`HIT_ORDER`; text cut to a window
        around ``query``'s words unless ``whole``. With ``ids`` (document ids, best first),
        those documents instead, in that order, under the same filters (person, conversation,
        retracted items). ``within``: only these documents (ids). ``doc_ids`` receives the id
        of each hit returned."""

        head = (
            "SELECT d.kind, d.text, {score}, d.updated_at, d.conversation, "
            "d.sources, d.key, d.detail, d.path, COALESCE(u.uses, 0), d.id "
        )
        joins = (
            "LEFT JOIN usage u ON u.target = CASE WHEN d.kind = 'entry' THEN d.key "
            "ELSE d.conversation END AND u.kind = CASE WHEN d.kind = 'entry' THEN 'entry' "
            "ELSE 'conversation' END "
        )
        filters = (
            "(d.person IS NULL OR d.person = ?) "
            "AND NOT (d.kind = 'item' AND EXISTS (SELECT 1 FROM retracted r "
            "WHERE r.conversation = d.conversation "
            "AND r.item = json_extract(d.sources, '$[0].item')))"
        )
        args: list[Any]
        if ids is None:
            sql = (
                head.format(score=f"-bm25({table}) AS score")
                + f"FROM {table} JOIN docs d ON d.id = {table}.rowid "
                + joins
                + f"WHERE {table} MATCH ? AND "
                + filters
            )
            args = [expression, person]
        else:
            sql = (
                head.format(score="0.0")
                + "FROM docs d "
                + joins
                + "WHERE d.id IN (SELECT value FROM json_each(?)) AND "
                + filters
            )
            args = [json.dumps(ids), person]
        if conversation is not None:
            sql += " AND d.conversation = ?"
            args.append(conversation)
        if within is not None:
            sql += " AND d.id IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(sorted(within)))
        if kinds is not None:
            sql += " AND d.kind IN (SELECT value FROM json_each(?))"
            args.append(json.dumps(list(kinds)))
        # Ties (the same score) in a fixed order, whatever order the index was filled in:
        # see HIT_ORDER.
        if ids is None:
            sql += (
                f" ORDER BY bm25({table}), d.updated_at DESC, CASE d.kind WHEN 'entry' THEN 0 "
                "WHEN 'rollout_summary' THEN 1 ELSE 2 END, d.doc LIMIT ?"
            )
            args.append(limit)
            rows = db.execute(sql, args).fetchall()
        else:
            place = {doc: n for n, doc in enumerate(ids)}
            rows = sorted(db.execute(sql, args).fetchall(), key=lambda r: place[r[10]])
        ranked: list[SearchHit] = []
        probes: dict[str, list[str]] = {}
        for row in rows:
            kind, text, conv = row[0], row[1], row[4]
            if kind == "item" and conv is not None:
                # An item of a run a retracted entry was learned from that states it (the
                # assistant's echo, the user saying it again) is hidden with its sources.
                if conv not in probes:
                    probes[conv] = RetractedItems._retracted_probes(db, conv)
                if probes[conv] and states_any(_unpack(text), probes[conv]):
                    continue
            ranked.append(_hit_of(row[:10], query, whole=whole))
            if doc_ids is not None:
                doc_ids.append(int(row[10]))
        return ranked
