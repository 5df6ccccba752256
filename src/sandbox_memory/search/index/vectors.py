"""Ranking by meaning: the documents' embeddings, the cosine ranking, its fusion with BM25.

With an embedder (:class:`~..embedding.Embedder`), each document's text is embedded once and
cached in the index by a hash of the embedder's name and the text (table ``vectors``); the close
embeds what is new (:meth:`VectorRanking.embed_new`), a search embeds its query and what the
close left (:meth:`VectorRanking._vector_ranked`) and fuses the cosine ranking with BM25's
(:meth:`VectorRanking._fused`: reciprocal rank fusion, ``fusion="rrf"``, or BM25's first
:data:`RERANK_POOL` reordered, ``fusion="rerank"``). An embedder that fails is warned about
once and the search is BM25 alone until it works again.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import sqlite3
import time
from array import array
from operator import mul
from typing import Any

from ...datapolicy import exc_text
from ..embedding import EMBED_BATCH, EMBED_CHARS, EmbedderError, normalized
from .hits import SearchHit
from .rank import RRF_K, LexicalRanking
from .schema import _VECTORS_TABLE, _unpack

logger = logging.getLogger("sandbox_memory")

RERANK_POOL = 50
"""BM25's documents that ``fusion="rerank"`` reorders (at least: a larger search reads more)."""


def _vector_hash(embedder: str, text: str) -> str:
    return hashlib.sha256(f"{embedder}\x00{text}".encode()).hexdigest()


_EMBEDDED = (
    "NOT (d.kind = 'item' AND EXISTS (SELECT 1 FROM retracted r "
    "WHERE r.conversation = d.conversation "
    "AND r.item = json_extract(d.sources, '$[0].item')))"
)
"""The documents a search may rank by cosine (and so the close embeds): all but the items
retracted."""


def _check_vectors(vectors: list[list[float]], count: int, dimension: int) -> None:
    """Raise :class:`EmbedderError` unless ``vectors`` are ``count`` of ``dimension`` numbers."""

    if len(vectors) != count:
        raise EmbedderError(f"{len(vectors)} vectors for {count} texts")
    for vector in vectors:
        if len(vector) != dimension:
            raise EmbedderError(f"a vector of {len(vector)} numbers, {dimension} expected")


class VectorRanking(LexicalRanking):
    """The embeddings of the index's documents and the cosine ranking fused with BM25's."""

    def _fused(
        self,
        db: sqlite3.Connection,
        query: str,
        lexical: list[SearchHit],
        lexical_ids: list[int],
        nearest: list[int],
        *,
        person: str | None,
        conversation: str | None,
    ) -> list[SearchHit]:
        """BM25's hits and the ``nearest`` documents (by cosine, best first) fused by
        reciprocal rank (:data:`RRF_K`; the cosine rank weighted by ``vector_weight``), best
        first. The nearest documents are read under the
        same filters as BM25's (person, conversation, retracted items), and everything after
        (one hit per key, :func:`distinct`) applies to the fused list as to the lexical one.

        The lexical side is already a reciprocal rank fusion: each kind ranked by BM25 on its
        own (:meth:`_lexical`), a hit's score ``RRF_K / (RRF_K + rank in its kind)``, 0 where
        BM25 gives it nothing. The cosine ranking is one more ranking of that same fusion, so
        a hit's lexical share is that score as it is, not its position in the interleaved
        list (which would rank the per-kind fusion a second time and give a document BM25
        says nothing for a share by where it happens to stand)."""

        assert self.embedder is not None
        label = f"bm25+{self.embedder.name}"
        score: dict[int, float] = {}
        hits: dict[int, SearchHit] = {}
        for doc, hit in zip(lexical_ids, lexical, strict=True):
            score[doc] = hit.score
            hits[doc] = hit
        vector_ids: list[int] = []
        vector_hits = self._ranked(
            db,
            "",
            query=query,
            person=person,
            conversation=conversation,
            kinds=None,
            limit=len(nearest),
            whole=False,
            ids=nearest,
            doc_ids=vector_ids,
        )
        for rank, (doc, hit) in enumerate(zip(vector_ids, vector_hits, strict=True), 1):
            score[doc] = score.get(doc, 0.0) + self.vector_weight * RRF_K / (RRF_K + rank)
            hits.setdefault(doc, hit)
        order = sorted(score, key=lambda d: -score[d])  # stable: BM25's order on ties
        return [
            hits[d].model_copy(update={"score": round(score[d], 4), "ranking": label})
            for d in order
        ]

    async def embed_new(self, *, deadline: float) -> int:
        """Embed the indexed documents that have no vector yet, by ``deadline``
        (``time.monotonic()``), so that the first search after a close pays only for what
        came after it; returns how many texts were embedded.

        Run by the close after the index is synced (``search/step.py``). The same texts as
        a search embeds (every document it could rank, redacted when recorded, cut to
        :data:`EMBED_CHARS`), the same cache by content hash: unchanged text is never sent
        again. Batches of :data:`EMBED_BATCH`; past ``deadline`` the batch under way is
        abandoned and the rest is left to the first search. An embedder that fails is logged
        once as a WARNING (as a search logs it) and the close goes on: search is then BM25
        alone until the embedder works again. Without an embedder, nothing."""

        embedder = self.embedder
        if embedder is None:
            return 0
        db = await self._open()
        await self._vectors_table(db)
        texts: dict[str, str] = {}
        names: dict[str, list[str]] = {}
        for name, packed in db.execute(
            f"SELECT d.doc, d.text FROM docs d WHERE {_EMBEDDED}"
        ).fetchall():
            text = _unpack(packed)[:EMBED_CHARS]
            digest = _vector_hash(embedder.name, text)
            texts.setdefault(digest, text)
            names.setdefault(digest, []).append(str(name))
        digests = sorted(texts)
        have = self._stored_vectors(db, digests, embedder.dimension)
        missing = [d for d in digests if d not in have]
        fetched = await self._from_shared(db, missing, embedder.dimension)
        missing = [d for d in missing if d not in fetched]
        done = 0
        for start in range(0, len(missing), EMBED_BATCH):
            chunk = missing[start : start + EMBED_BATCH]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                vectors = await asyncio.wait_for(
                    embedder.embed([texts[d] for d in chunk]), remaining
                )
                _check_vectors(vectors, len(chunk), embedder.dimension)
            except Exception as exc:  # noqa: BLE001
                if time.monotonic() >= deadline:
                    break  # the close's time is up (the request cut off), not a fault
                self._embedder_failed(exc)
                return done
            self.embed_failed = False
            stored = await self._store_vectors(db, chunk, vectors)
            await self._to_shared(stored, names)
            self.texts_embedded += len(chunk)
            done += len(chunk)
        if done < len(missing):
            logger.info(
                "memory close: embedded %d of %d new search text(s) before its deadline; "
                "the first search embeds the rest",
                done,
                len(missing),
            )
        return done

    async def _vectors_table(self, db: sqlite3.Connection) -> None:
        if not db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vectors'"
        ).fetchone():
            async with self._lock:
                db.execute(_VECTORS_TABLE)

    @staticmethod
    def _stored_vectors(
        db: sqlite3.Connection, digests: list[str], dimension: int
    ) -> dict[str, array[float]]:
        """The cached vectors of ``digests`` (of ``dimension`` numbers: others are stale)."""

        have: dict[str, array[float]] = {}
        for start in range(0, len(digests), 500):
            chunk = digests[start : start + 500]
            for digest, blob in db.execute(
                "SELECT hash, vec FROM vectors WHERE hash IN (SELECT value FROM json_each(?))",
                (json.dumps(chunk),),
            ):
                vec = array("f")
                vec.frombytes(blob)
                if len(vec) == dimension:
                    have[digest] = vec
        return have

    async def _store_vectors(
        self, db: sqlite3.Connection, digests: list[str], vectors: list[list[float]]
    ) -> dict[str, array[float]]:
        """Cache ``vectors`` (normalized) under ``digests``, in one transaction; returns them."""

        stored = {
            digest: array("f", normalized(vector))
            for digest, vector in zip(digests, vectors, strict=False)
        }
        await self._keep_vectors(db, stored)
        return stored

    async def _keep_vectors(self, db: sqlite3.Connection, vectors: dict[str, array[float]]) -> None:
        """Write ``vectors`` (normalized already) into the index's cache, in one transaction."""

        if not vectors:
            return
        async with self._lock:  # a sync may hold a transaction open across its awaits
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(
                    "INSERT OR REPLACE INTO vectors(hash, vec) VALUES (?, ?)",
                    [(digest, vec.tobytes()) for digest, vec in vectors.items()],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self._unsaved = True

    async def _from_shared(
        self, db: sqlite3.Connection, digests: list[str], dimension: int
    ) -> dict[str, array[float]]:
        """The vectors of ``digests`` that the shared store holds (another sandbox of the
        namespace embedded those texts with this embedder), kept in this index too; ``{}``
        without a shared store's vectors or when it cannot be reached (warned once: the
        texts are then embedded here)."""

        shared = self.shared_vectors
        if shared is None or not digests:
            return {}
        try:
            held = await shared.fetch_vectors(digests)
        except Exception as exc:  # noqa: BLE001
            self._shared_vectors_failed(exc)
            return {}
        self.shared_vectors_failed = False
        got: dict[str, array[float]] = {}
        for digest, blob in held.items():
            vec = array("f")
            vec.frombytes(blob)
            if len(vec) == dimension:  # another dimension under the same name: stale
                got[digest] = vec
        await self._keep_vectors(db, got)
        self.vectors_fetched += len(got)
        return got

    async def _to_shared(
        self, stored: dict[str, array[float]], names: dict[str, list[str]]
    ) -> None:
        """Put the vectors this index just made into the shared store, for each document of
        the namespace that holds their text (the store keeps them only for documents it
        holds: a document not sent yet gets its vector when the close sends it)."""

        shared = self.shared_vectors
        if shared is None or not stored:
            return
        rows = [
            (name, digest, vec.tobytes())
            for digest, vec in stored.items()
            for name in names.get(digest, ())
        ]
        try:
            await shared.put_vectors(rows)
        except Exception as exc:  # noqa: BLE001
            self._shared_vectors_failed(exc)
            return
        self.shared_vectors_failed = False

    def _shared_vectors_failed(self, exc: BaseException) -> None:
        """Log once (until it works again) that the shared store's vectors are out of reach."""

        if not self.shared_vectors_failed:
            logger.warning(
                "memory search: the shared store's vectors could not be reached (%s); texts "
                "are embedded here until it can be",
                exc_text(exc),
            )
        self.shared_vectors_failed = True

    def _embedder_failed(self, exc: BaseException) -> None:
        """Log an embedder's failure once (until it works again); search is BM25 alone."""

        assert self.embedder is not None
        if not self.embed_failed:
            logger.warning(
                "memory search: embedder %s failed (%s); ranking by BM25 alone until it "
                "works again",
                self.embedder.name,
                exc_text(exc),
            )
        self.embed_failed = True

    async def _vector_ranked(
        self,
        db: sqlite3.Connection,
        query: str,
        *,
        person: str | None,
        conversation: str | None,
        limit: int | None,
    ) -> list[int] | None:
        """The ids of the ``limit`` (``None``: all) documents (this search may see) nearest to ``query`` by
        cosine similarity of their embeddings, best first; ``None`` when the embedder failed
        (logged once as a WARNING until it works again): the search is then BM25 alone.

        Each document's text (redacted when recorded) is embedded once: vectors are kept in
        the index by a hash of the embedder's name and the text. Similarity is computed over
        every eligible document in Python (see ``docs/search.md`` for its cost)."""

        embedder = self.embedder
        assert embedder is not None
        sql = (
            f"SELECT d.id, d.doc, d.text FROM docs d WHERE {_EMBEDDED} "
            "AND (d.person IS NULL OR d.person = ?)"
        )
        args: list[Any] = [person]
        if conversation is not None:
            sql += " AND d.conversation = ?"
            args.append(conversation)
        await self._vectors_table(db)
        docs: list[tuple[int, str]] = []
        texts: dict[str, str] = {}
        names: dict[str, list[str]] = {}
        for doc, name, packed in db.execute(sql, args).fetchall():
            text = _unpack(packed)[:EMBED_CHARS]
            digest = _vector_hash(embedder.name, text)
            docs.append((int(doc), digest))
            texts.setdefault(digest, text)
            names.setdefault(digest, []).append(str(name))
        digests = sorted(texts)
        have = self._stored_vectors(db, digests, embedder.dimension)
        missing = [d for d in digests if d not in have]
        have.update(await self._from_shared(db, missing, embedder.dimension))
        missing = [d for d in missing if d not in have]
        try:
            vectors = await embedder.embed([*(texts[d] for d in missing), query[:EMBED_CHARS]])
            self.texts_embedded += len(missing) + 1
            _check_vectors(vectors, len(missing) + 1, embedder.dimension)
        except Exception as exc:  # noqa: BLE001
            self._embedder_failed(exc)
            return None
        self.embed_failed = False
        stored = await self._store_vectors(db, missing, vectors)
        have.update(stored)
        await self._to_shared(stored, names)
        probe = normalized(vectors[-1])
        sims = [(sum(map(mul, probe, have[digest])), doc) for doc, digest in docs]
        sims.sort(key=lambda p: (-p[0], p[1]))
        return [doc for _, doc in sims[:limit]]
