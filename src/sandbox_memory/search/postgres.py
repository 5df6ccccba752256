"""The search index of a shared store, in PostgreSQL: one index for every sandbox of a namespace.

Without it, each sandbox attached to a shared store builds its own SQLite index
(``search/index/``) from everything its copy fetched, so a new sandbox's first search pays for
the whole history. With it, the documents live in PostgreSQL (tables ``sbm_search_*``, made by
migration 6 in ``stores/postgres/schema.py``) and a search on a sandbox attached to the store
queries them there, the copy's index untouched.

What is indexed is exactly what the SQLite index holds: its documents (entries, rollout
summaries, recorded items, after redaction, with :func:`~sandbox_memory.search.index.
settled_text` and the same privacy, layout and Forget filtering), its items hidden by a
retracted entry, and its usage counts. They come from the closes (and commands) that produce
them: each SQLite index attached to a shared store notes the documents it writes or drops
(table ``shared_out``, see :attr:`SearchIndex.shared_out
<sandbox_memory.search.index.SearchIndex.shared_out>`), and :func:`send_index` sends those,
under the namespace's lease and checked against its fence (as every other write of a close),
comparing each document's digest first, so a document another sandbox already sent is not sent
again, and two closes sending the same document leave it once. The first sending of a copy's
index is the whole index; the namespace's search is taken over by PostgreSQL only once one
whole index has been sent (meta ``complete``), and until then searches use the copy's index.

Ranking is the SQLite index's, computed on the same terms: each document's terms are those
FTS5's tokenizer makes (``porter unicode61 remove_diacritics 2``, through an in-memory SQLite
table, so stemming and word splitting are identical), stored as a ``tsvector`` with their
positions; a GIN index finds the documents holding a query's terms or phrases (``<->``), and
BM25 is computed with FTS5's formula (k1 1.2, b 0.75, IDF floored at 1e-6) from the term
positions and the per-kind statistics kept in ``sbm_search_stats``. The rest (kinds in turn,
one hit per fact, curated before raw, excerpts) is the same code path as the SQLite index's.
Limits: PostgreSQL keeps at most 256 positions of one term per document and positions up to
16,383, so a term repeated more often, or a phrase past that position, counts less than in
SQLite; vectors (an embedder's cosine ranking) are not ranked here (docs/search.md).

Vectors are kept here though (``sbm_search_vectors``, migration 7), for the sandboxes that
rank by them in their copy's index: a close sends the vectors its index holds for the
documents it sends, a search or close that embedded documents the store already holds puts
theirs (:meth:`PostgresSearch.put_vectors`), and a sandbox missing a document's vector fetches
it by the hash its index keys vectors with (the embedder's name and the text,
:meth:`PostgresSearch.fetch_vectors`) before embedding anything. A vector is kept for one
document and goes when that document is removed or replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from ..errors import MemoryConfigError
from ..stores.records import Source
from . import bm25
from .embedding import EMBED_CHARS
from .index import (
    CANDIDATES_PER_HIT,
    DEFAULT_LIMIT,
    ENTRY_TEXT_CHARS,
    KIND_ORDER,
    MAX_LIMIT,
    RRF_K,
    SCORE_SHOWN_MIN,
    STATED_MIN_CHARS,
    TOKENIZER,
    EntryCopy,
    HitKind,
    SearchHit,
    SearchIndex,
    _fts_body,
    _plain,
    _sources_of,
    _unpack,
    _window,
    all_words,
    distinct,
    excerpt_of,
    file_phrases,
    hit_text_chars,
    named_files,
    one_per_key,
    search_expression,
    states_any,
)
from .index.vectors import _vector_hash

if TYPE_CHECKING:
    import psycopg

    from ..stores.shared import Fence

logger = logging.getLogger("sandbox_memory")


@runtime_checkable
class SearchTables(Protocol):
    """What a shared store offers to keep its namespace's search index in its own tables
    (``sbm_search_*``, migration 6 in ``stores/postgres/schema.py``): the namespace, and a
    transaction on those tables checked against a lease's fence. A store that offers it is
    searched through :class:`PostgresSearch` (see :func:`store_search`); one that does not
    leaves each sandbox its copy's own index."""

    namespace: str

    def search_tables(
        self, doing: str, fence: Fence | None = None
    ) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]: ...


MAX_LEXEME_BYTES: Final = 2_047
"""Longest term a ``tsvector`` holds; a longer token (a long hash) counts in the length only."""

MAX_POSITION: Final = 16_383
"""Largest position a ``tsvector`` keeps (later ones are stored as this one)."""

SEND_BATCH: Final = 500
"""Documents sent per statement."""

GROUPS: Final[dict[HitKind, str]] = {"entry": "entry", "rollout_summary": "all", "item": "all"}
"""The statistics each kind is ranked with, as :data:`~sandbox_memory.search.index.KIND_TABLES`
says for the SQLite index: entries among entries, summaries and items among all documents."""

_COLUMNS = (
    "SELECT d.doc, d.kind, d.text, d.updated_at, d.conversation, d.sources, d.key, d.detail, "
    "d.path, COALESCE(u.uses, 0), d.length, d.scope"
)
_FROM = (
    " FROM sbm_search_docs d LEFT JOIN sbm_search_usage u ON u.namespace = d.namespace AND u.target = CASE WHEN "
    "d.kind = 'entry' THEN d.key ELSE d.conversation END AND u.kind = CASE WHEN "
    "d.kind = 'entry' THEN 'entry' ELSE 'conversation' END "
)
_SELECT = _COLUMNS + _FROM
"""A document's row as a hit needs it (see :func:`_hit`)."""

_VISIBLE = (
    "(d.person IS NULL OR d.person = %(person)s) AND NOT (d.kind = 'item' AND EXISTS "
    "(SELECT 1 FROM sbm_search_retracted r WHERE r.namespace = d.namespace "
    "AND r.conversation = d.conversation AND r.item = d.item))"
)
"""What a search may see: shared documents and the person's own, no item a retracted entry
rests on (the SQLite index's filter, see ``SearchIndex._ranked``)."""


# --------------------------------------------------------------------------- terms


class _Tokenizer:
    """FTS5's own tokenizer, through an in-memory SQLite table: the terms (and positions) of a
    text exactly as the SQLite index makes them."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:", isolation_level=None)
        self.db.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, tokenize='{TOKENIZER}')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")

    def terms(self, bodies: Sequence[str]) -> list[list[str]]:
        """Each body's tokens, in order."""

        self.db.execute("BEGIN")
        self.db.executemany(
            "INSERT INTO t(rowid, body) VALUES (?, ?)", [(n, b) for n, b in enumerate(bodies)]
        )
        out: list[list[str]] = [[] for _ in bodies]
        for term, doc, offset in self.db.execute(
            "SELECT term, doc, offset FROM v ORDER BY doc, offset"
        ):
            out[int(doc)].append(str(term))
            del offset
        self.db.execute("ROLLBACK")
        return out


def _lexeme(term: str) -> str:
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def _lexemes(tokens: list[str]) -> set[str]:
    """The distinct terms a document's ``tsvector`` holds."""

    return {t for t in tokens if len(t.encode("utf-8")) <= MAX_LEXEME_BYTES}


def tsvector_of(tokens: list[str]) -> str:
    """The ``tsvector`` literal of a document's tokens, with their positions (1-based)."""

    positions: dict[str, list[int]] = {}
    for n, term in enumerate(tokens, 1):
        if len(term.encode("utf-8")) > MAX_LEXEME_BYTES:
            continue
        positions.setdefault(term, []).append(min(n, MAX_POSITION))
    return " ".join(
        f"{_lexeme(t)}:{','.join(str(p) for p in dict.fromkeys(ps))}" for t, ps in positions.items()
    )


def tsquery_of(phrase: list[str]) -> str:
    """The ``tsquery`` literal of a query phrase (one term, or terms in a row)."""

    return " <-> ".join(_lexeme(t) for t in phrase)


def query_phrases(expression: str, tokenizer: _Tokenizer) -> list[list[str]]:
    """The phrases of an FTS5 expression (``"a" OR "b c"``, see :func:`search_expression`) as
    terms, each once, as FTS5 parses them."""

    quoted = [part.strip()[1:-1] for part in expression.split(" OR ") if part.strip()]
    phrases: list[list[str]] = []
    for tokens in tokenizer.terms(quoted):
        if tokens and tokens not in phrases:
            phrases.append(tokens)
    return phrases


@dataclass
class _Stats:
    docs: int
    tokens: int


def _bm25(
    positions: dict[str, list[int]],
    length: int,
    phrases: list[list[str]],
    idf: list[float],
    stats: _Stats,
) -> float:
    """FTS5's ``-bm25()`` of one document (:func:`~sandbox_memory.search.bm25.score`)."""

    avgdl = stats.tokens / stats.docs if stats.docs else 1.0
    counts = [bm25.phrase_count(positions, phrase) for phrase in phrases]
    return bm25.score(counts, length, idf, avgdl)


# --------------------------------------------------------------------------- sending


def _digest(row: Sequence[Any]) -> str:
    return hashlib.sha256(json.dumps(list(row), default=str).encode("utf-8")).hexdigest()


async def send_index(
    index: SearchIndex, store: SearchTables, fence: Fence | None
) -> tuple[int, int]:
    """Send what ``index`` wrote or dropped since it last sent to the namespace's search
    tables; returns ``(documents sent, documents removed)``.

    Called by a close (and a command) under the namespace's lease: every statement is in one
    transaction checked against ``fence``; a lost lease sends nothing and the notes stay for
    the next close. A document whose digest PostgreSQL already holds is not sent again."""

    db = await index._open()  # noqa: SLF001 - the index is this module's source
    async with index._lock:  # noqa: SLF001
        names = [str(r[0]) for r in db.execute("SELECT doc FROM shared_out ORDER BY doc")]
        # The whole index is compared with the store's only once it holds everything (it
        # listed every rollout): a copy's index not built yet would read as "nothing".
        full = (
            index._meta(db, "shared_full") == "1"  # noqa: SLF001
            and index._meta(db, "listed") == "1"  # noqa: SLF001
        )
        rows = {
            str(r[0]): r
            for r in db.execute(
                "SELECT doc, kind, scope, conversation, key, person, detail, updated_at, "
                "sources, path, text, terms FROM docs WHERE doc IN "
                "(SELECT doc FROM shared_out)"
            )
        }
        retracted = sorted(
            db.execute("SELECT scope, key, conversation, item, content FROM retracted")
        )
        usage = sorted(db.execute("SELECT target, kind, uses, last_used_at FROM usage"))
        # The first sending of an index is the whole of it, compared with the whole of the
        # store's (under the lease, after the copy took in the store's state): a document the
        # store holds and this index does not (dropped before the index noted its changes, or
        # never written here: retracted before this copy saw it) is removed.
        whole = {str(r[0]) for r in db.execute("SELECT doc FROM docs")} if full else None
        vectors = _vectors_of(index, db, rows)
        sent, removed = await _send(
            store, fence, names, rows, retracted, usage, whole=whole, vectors=vectors
        )
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("DELETE FROM shared_out WHERE doc = ?", [(n,) for n in names])
            if full:
                db.execute("DELETE FROM meta WHERE k = 'shared_full'")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return sent, removed


def _vectors_of(
    index: SearchIndex, db: sqlite3.Connection, rows: dict[str, Any]
) -> dict[str, tuple[str, bytes]]:
    """The vector this index holds for each of ``rows``' documents, by document: ``(hash,
    float32 bytes)`` under the index's embedder; ``{}`` without one."""

    embedder = index.embedder
    if (
        embedder is None
        or not rows
        or not db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vectors'"
        ).fetchone()
    ):
        return {}
    hashes = {
        name: _vector_hash(embedder.name, _unpack(row[10])[:EMBED_CHARS])
        for name, row in rows.items()
    }
    held = index._stored_vectors(db, sorted(set(hashes.values())), embedder.dimension)  # noqa: SLF001
    return {name: (h, held[h].tobytes()) for name, h in hashes.items() if h in held}


async def _send_batch(
    conn: psycopg.AsyncConnection[Any],
    ns: str,
    names: list[str],
    rows: dict[str, Any],
    local: dict[str, str],
    tokenizer: _Tokenizer,
    vectors: dict[str, tuple[str, bytes]],
) -> tuple[int, int]:
    """Send one batch of noted documents (caller holds the transaction): those the store
    holds with another digest or not at all are written, those this index dropped are
    removed; the statistics and term counts move with them, and so do their vectors: a
    document removed or replaced loses the ones kept for it, one written gets this index's
    (``vectors``, by document)."""

    sent = removed = 0
    held: dict[str, tuple[str, str, int]] = {}
    for doc, digest, kind, length in await (
        await conn.execute(
            "SELECT doc, digest, kind, length FROM sbm_search_docs "
            "WHERE namespace = %s AND doc = ANY(%s)",
            (ns, names),
        )
    ).fetchall():
        held[str(doc)] = (str(digest), str(kind), int(length))
    gone = [n for n in names if n not in rows and n in held]
    fresh = [n for n in names if n in rows and held.get(n, ("",))[0] != local[n]]
    delta: dict[str, list[int]] = {"entry": [0, 0], "all": [0, 0]}

    def count(kind: str, length: int, sign: int) -> None:
        for grp in {"all", GROUPS.get(kind, "all")}:  # type: ignore[call-overload]
            delta[grp][0] += sign
            delta[grp][1] += sign * length

    terms: dict[tuple[str, str], int] = {}

    def count_terms(kind: str, lexemes: Iterable[str], sign: int) -> None:
        for grp in {"all", GROUPS.get(kind, "all")}:  # type: ignore[call-overload]
            for term in lexemes:
                terms[(grp, term)] = terms.get((grp, term), 0) + sign

    for name in [*gone, *(n for n in fresh if n in held)]:
        _, kind, length = held[name]
        count(kind, length, -1)
    replaced = [*gone, *(n for n in fresh if n in held)]
    for start in range(0, len(replaced), SEND_BATCH):
        for kind, lexemes in await (
            await conn.execute(
                "SELECT kind, tsvector_to_array(body) FROM sbm_search_docs "
                "WHERE namespace = %s AND doc = ANY(%s)",
                (ns, replaced[start : start + SEND_BATCH]),
            )
        ).fetchall():
            count_terms(str(kind), lexemes, -1)
    if gone:
        await conn.execute(
            "DELETE FROM sbm_search_docs WHERE namespace = %s AND doc = ANY(%s)", (ns, gone)
        )
        removed = len(gone)
    for start in range(0, len(fresh), SEND_BATCH):
        chunk = fresh[start : start + SEND_BATCH]
        texts = [_unpack(rows[n][10]) for n in chunk]
        tokens = tokenizer.terms(
            [_fts_body(text, rows[n][11]) for n, text in zip(chunk, texts, strict=True)]
        )
        values = []
        for name, text, toks in zip(chunk, texts, tokens, strict=True):
            r = rows[name]
            sources = _sources_of(r[8])
            values.append(
                (
                    ns, name, r[1], r[2], r[3], r[4], r[5], r[6], int(r[7]),
                    json.dumps(sources), sources[0]["item"] if sources else None, r[9],
                    text.replace("\x00", ""), tsvector_of(toks), len(toks), local[name],
                )
            )  # fmt: skip
            count(str(r[1]), len(toks), 1)
            count_terms(str(r[1]), _lexemes(toks), 1)
        await conn.cursor().executemany(
            "INSERT INTO sbm_search_docs (namespace, doc, kind, scope, conversation, key, "
            "person, detail, updated_at, sources, item, path, text, body, length, digest) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::tsvector, %s, "
            "%s) ON CONFLICT (namespace, doc) DO UPDATE SET kind = EXCLUDED.kind, "
            "scope = EXCLUDED.scope, conversation = EXCLUDED.conversation, "
            "key = EXCLUDED.key, person = EXCLUDED.person, detail = EXCLUDED.detail, "
            "updated_at = EXCLUDED.updated_at, sources = EXCLUDED.sources, "
            "item = EXCLUDED.item, path = EXCLUDED.path, text = EXCLUDED.text, "
            "body = EXCLUDED.body, length = EXCLUDED.length, digest = EXCLUDED.digest",
            values,
        )
        sent += len(chunk)
    # A removed document's vectors went with its row (the table's key cascades); a replaced
    # one's are removed here, its new text's sent below.
    rewritten = [n for n in fresh if n in held]
    if rewritten:
        await conn.execute(
            "DELETE FROM sbm_search_vectors WHERE namespace = %s AND doc = ANY(%s)",
            (ns, rewritten),
        )
    with_vectors = [(ns, n, *vectors[n]) for n in fresh if n in vectors]
    if with_vectors:
        await conn.cursor().executemany(
            "INSERT INTO sbm_search_vectors (namespace, doc, hash, vec) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            with_vectors,
        )
    for grp, (docs, total) in delta.items():
        if docs or total:
            await conn.execute(
                "INSERT INTO sbm_search_stats (namespace, grp, docs, tokens) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (namespace, grp) DO UPDATE SET "
                "docs = sbm_search_stats.docs + EXCLUDED.docs, "
                "tokens = sbm_search_stats.tokens + EXCLUDED.tokens",
                (ns, grp, docs, total),
            )
    changed = sorted((g, t, n) for (g, t), n in terms.items() if n)
    for start in range(0, len(changed), SEND_BATCH * 10):
        await conn.cursor().executemany(
            "INSERT INTO sbm_search_terms (namespace, grp, term, docs) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (namespace, grp, term) DO UPDATE SET "
            "docs = sbm_search_terms.docs + EXCLUDED.docs",
            [(ns, g, t, n) for g, t, n in changed[start : start + SEND_BATCH * 10]],
        )
    for grp in ("entry", "all"):
        emptied = [t for g, t, n in changed if g == grp and n < 0]
        if emptied:
            await conn.execute(
                "DELETE FROM sbm_search_terms WHERE namespace = %s AND grp = %s "
                "AND term = ANY(%s) AND docs <= 0",
                (ns, grp, emptied),
            )
    return sent, removed


async def _send(
    store: SearchTables,
    fence: Fence | None,
    names: list[str],
    rows: dict[str, Any],
    retracted: list[Any],
    usage: list[Any],
    *,
    whole: set[str] | None,
    vectors: dict[str, tuple[str, bytes]],
) -> tuple[int, int]:
    ns = store.namespace
    tables = {"retracted": _digest(retracted), "usage": _digest(usage)}
    tokenizer = _Tokenizer()
    if whole is not None:
        async with store.search_tables("reading the search index") as conn:
            stored = await (
                await conn.execute("SELECT doc FROM sbm_search_docs WHERE namespace = %s", (ns,))
            ).fetchall()
        names = list(dict.fromkeys([*names, *(str(d) for (d,) in stored if str(d) not in whole)]))
    sent = removed = 0
    # One transaction per batch, each checked against the fence: between them the lease is
    # renewed (the renewal waits for the store's connection), so a large first sending does
    # not outlive it. A batch's documents, statistics and term counts commit together.
    # The digests too are computed batch by batch: all at once would hold the event loop, and
    # with it the lease's renewal, for seconds on a large first sending.
    for start in range(0, len(names), SEND_BATCH):
        batch = names[start : start + SEND_BATCH]
        local = {
            n: _digest([*rows[n][:10], _unpack(rows[n][10]), rows[n][11]])
            for n in batch
            if n in rows
        }
        async with store.search_tables("sending the search index", fence) as conn:
            done = await _send_batch(conn, ns, batch, rows, local, tokenizer, vectors)
        sent, removed = sent + done[0], removed + done[1]
    async with store.search_tables("sending the search index", fence) as conn:
        meta = dict(
            await (
                await conn.execute(
                    "SELECT name, value FROM sbm_search_meta WHERE namespace = %s", (ns,)
                )
            ).fetchall()
        )
        if meta.get("retracted") != tables["retracted"]:
            await conn.execute("DELETE FROM sbm_search_retracted WHERE namespace = %s", (ns,))
            await conn.cursor().executemany(
                "INSERT INTO sbm_search_retracted (namespace, scope, key, conversation, item, "
                "content) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(ns, *r) for r in retracted],
            )
        if meta.get("usage") != tables["usage"]:
            await conn.execute("DELETE FROM sbm_search_usage WHERE namespace = %s", (ns,))
            await conn.cursor().executemany(
                "INSERT INTO sbm_search_usage (namespace, target, kind, uses, last_used_at) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                [(ns, *u) for u in usage],
            )
        marks = dict(tables)
        if whole is not None:
            marks["complete"] = "1"
        await conn.cursor().executemany(
            "INSERT INTO sbm_search_meta (namespace, name, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (namespace, name) DO UPDATE SET value = EXCLUDED.value",
            [(ns, k, v) for k, v in marks.items()],
        )
    return sent, removed


# --------------------------------------------------------------------------- search


def _hit(row: Sequence[Any], score: float, query: str, *, whole: bool = False) -> SearchHit:
    """A hit from a row of :data:`_SELECT`."""

    _, kind, text, updated, conv, sources, key, detail, path, uses = row[:10]
    if whole and kind == "entry" and key is not None:
        text = text[len(key) + 2 :]  # ``<key with spaces>: <content>``, see SearchIndex
    return SearchHit(
        kind=kind,
        text=text if whole else _window(text, query, hit_text_chars(kind)),
        score=round(float(score), 4),
        updated_at=int(updated),
        conversation=conv,
        sources=[Source(**s) for s in (sources if isinstance(sources, list) else [])],
        key=key,
        detail=detail,
        path=path,
        uses=int(uses),
    )


_KIND_RANK: Final = {kind: n for n, kind in enumerate(KIND_ORDER)}


def store_search(store: object) -> PostgresSearch | None:
    """The search index a shared store keeps for its namespace: in its own tables when it
    offers them (:class:`SearchTables`), else ``None`` (each sandbox searches its copy's).
    Chosen by what the store offers, not by its class; the runtime, which builds a layout's
    working copy of the store, passes it in."""

    return PostgresSearch(store) if isinstance(store, SearchTables) else None


class PostgresSearch:
    """Searches of one namespace, on its search tables; the SQLite index's contract."""

    def __init__(self, store: SearchTables) -> None:
        self.store = store
        self._tokenizer: _Tokenizer | None = None

    @property
    def tokenizer(self) -> _Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = _Tokenizer()
        return self._tokenizer

    async def send(self, index: SearchIndex, fence: Fence | None) -> tuple[int, int]:
        """Send what ``index`` noted since it last sent (:func:`send_index`)."""

        return await send_index(index, self.store, fence)

    async def fetch_vectors(self, hashes: list[str]) -> dict[str, bytes]:
        """The vectors the namespace keeps under ``hashes`` (see
        :class:`~sandbox_memory.search.index.base.SharedVectors`)."""

        found: dict[str, bytes] = {}
        async with self.store.search_tables("reading the search index's vectors") as conn:
            cursor = conn.cursor(binary=True)  # the vectors' bytes as they are, not in hex
            for start in range(0, len(hashes), SEND_BATCH * 10):
                for digest, vec in await (
                    await cursor.execute(
                        "SELECT DISTINCT ON (hash) hash, vec FROM sbm_search_vectors "
                        "WHERE namespace = %s AND hash = ANY(%s)",
                        (self.store.namespace, hashes[start : start + SEND_BATCH * 10]),
                    )
                ).fetchall():
                    found[str(digest)] = bytes(vec)
        return found

    async def put_vectors(self, vectors: list[tuple[str, str, bytes]]) -> int:
        """Keep each ``(document, hash, vector)`` whose document the namespace's index holds
        now. The table's key makes a vector of any other document impossible and removes a
        document's vectors with its row; the documents' rows are held FOR KEY SHARE until the
        vectors are in (a close removing one waits, then removes them with it; one replacing
        its text does not wait)."""

        if not vectors:
            return 0
        ns = self.store.namespace
        kept = 0
        async with self.store.search_tables("keeping the search index's vectors") as conn:
            for start in range(0, len(vectors), SEND_BATCH):
                chunk = vectors[start : start + SEND_BATCH]
                held = {
                    str(doc)
                    for (doc,) in await (
                        await conn.execute(
                            "SELECT doc FROM sbm_search_docs WHERE namespace = %s "
                            "AND doc = ANY(%s) FOR KEY SHARE",
                            (ns, sorted({doc for doc, _, _ in chunk})),
                        )
                    ).fetchall()
                }
                rows = [(ns, doc, h, vec) for doc, h, vec in chunk if doc in held]
                if rows:
                    await conn.cursor().executemany(
                        "INSERT INTO sbm_search_vectors (namespace, doc, hash, vec) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                        rows,
                    )
                    kept += len(rows)
        return kept

    async def ready(self) -> bool:
        """Whether a whole index of the namespace has been sent (until then: the copy's)."""

        async with self.store.search_tables("reading the search index") as conn:
            row = await (
                await conn.execute(
                    "SELECT 1 FROM sbm_search_meta WHERE namespace = %s AND name = 'complete'",
                    (self.store.namespace,),
                )
            ).fetchone()
        return row is not None

    async def search(
        self,
        query: str,
        *,
        conversation: str | None = None,
        limit: int = DEFAULT_LIMIT,
        person: str | None = None,
    ) -> list[SearchHit]:
        """Ranked hits for ``query``, as :meth:`SearchIndex.search
        <sandbox_memory.search.index.SearchIndex.search>` gives them (lexical ranking)."""

        if not isinstance(query, str):
            raise MemoryConfigError("query", query, "must be a string")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise MemoryConfigError("limit", limit, f"must be an integer from 1 to {MAX_LIMIT}")
        expression = search_expression(query)
        if not expression:
            raise MemoryConfigError("query", query, "has no words to search for")
        phrases = query_phrases(expression, self.tokenizer)
        args = {"ns": self.store.namespace, "person": person, "conv": conversation}
        async with self.store.search_tables("searching") as conn:
            if not phrases:
                return []
            stats = await self._stats(conn)
            held = await self._held(conn, phrases)
            ranked = await self._lexical(
                conn, phrases, stats, held, query, args, limit * CANDIDATES_PER_HIT
            )
            ranked += await self._citing(conn, ranked, query, args)
            hits = distinct(await self._one_per_key(conn, ranked, args, query=query), limit)
            return await self._with_excerpts(conn, hits, phrases, stats, held, query, args)

    async def _stats(self, conn: psycopg.AsyncConnection[Any]) -> dict[str, _Stats]:
        rows = await (
            await conn.execute(
                "SELECT grp, docs, tokens FROM sbm_search_stats WHERE namespace = %s",
                (self.store.namespace,),
            )
        ).fetchall()
        found = {str(g): _Stats(int(d), int(t)) for g, d, t in rows}
        return {g: found.get(g, _Stats(0, 0)) for g in ("entry", "all")}

    async def _held(
        self, conn: psycopg.AsyncConnection[Any], phrases: list[list[str]]
    ) -> dict[str, list[int]]:
        """How many documents hold each phrase: among entries, among all (GIN lookups)."""

        out: dict[str, list[int]] = {"entry": [], "all": []}
        for phrase in phrases:
            row = await (
                await conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE kind = 'entry') FROM "
                    "sbm_search_docs WHERE namespace = %s AND body @@ %s::tsquery",
                    (self.store.namespace, tsquery_of(phrase)),
                )
            ).fetchone()
            assert row is not None
            out["all"].append(int(row[0]))
            out["entry"].append(int(row[1]))
        return out

    async def _candidates(
        self,
        conn: psycopg.AsyncConnection[Any],
        phrases: list[list[str]],
        where: str,
        args: dict[str, Any],
    ) -> list[tuple[Sequence[Any], dict[str, list[int]]]]:
        """The visible documents matching any phrase under ``where``, each as ``(doc, kind,
        updated_at, length)`` with the positions of the query's terms in it: what BM25 and
        the order of ties need, not the text (read for the best only, see :meth:`_rows`)."""

        terms = sorted({t for p in phrases for t in p})
        matching = " || ".join(f"%(q{n})s::tsquery" for n in range(len(phrases)))
        params = {**args, "terms": terms}
        params.update({f"q{n}": tsquery_of(p) for n, p in enumerate(phrases)})
        rows = await (
            await conn.execute(
                "SELECT d.doc, d.kind, d.updated_at, d.length, (SELECT "
                "json_object_agg(x.lexeme, x.positions) FROM unnest(d.body) x "
                "WHERE x.lexeme = ANY(%(terms)s)) FROM sbm_search_docs d "
                f"WHERE d.namespace = %(ns)s AND d.body @@ ({matching}) AND {_VISIBLE} AND "
                + where,
                params,
            )
        ).fetchall()
        return [(row[:4], {str(k): list(v) for k, v in (row[4] or {}).items()}) for row in rows]

    async def _rows(
        self, conn: psycopg.AsyncConnection[Any], docs: list[str]
    ) -> dict[str, Sequence[Any]]:
        """The rows of :data:`_SELECT` of ``docs``, by name."""

        if not docs:
            return {}
        rows = await (
            await conn.execute(
                _SELECT + "WHERE d.namespace = %s AND d.doc = ANY(%s)",
                (self.store.namespace, docs),
            )
        ).fetchall()
        return {str(r[0]): r for r in rows}

    def _scored(
        self,
        found: list[tuple[Sequence[Any], dict[str, list[int]]]],
        phrases: list[list[str]],
        stats: _Stats,
        held: list[int],
    ) -> list[tuple[float, Sequence[Any], dict[str, list[int]]]]:
        idf = [bm25.idf(stats.docs, n) for n in held]
        scored = [(_bm25(pos, int(row[3]), phrases, idf, stats), row, pos) for row, pos in found]
        # Best first, then HIT_ORDER's ties: newest, kind, the document's name.
        scored.sort(
            key=lambda s: (-s[0], -int(s[1][2]), _KIND_RANK.get(s[1][1], 3), s[1][0].encode())
        )
        return scored

    async def _probes(
        self, conn: psycopg.AsyncConnection[Any], conv: str, cache: dict[str, list[str]]
    ) -> list[str]:
        """What the entries retracted while resting on ``conv``'s items said (see
        ``SearchIndex._retracted_probes``)."""

        if conv in cache:
            return cache[conv]
        probes: list[str] = []
        for item, content in await (
            await conn.execute(
                "SELECT DISTINCT item, content FROM sbm_search_retracted "
                "WHERE namespace = %s AND conversation = %s ORDER BY item, content",
                (self.store.namespace, conv),
            )
        ).fetchall():
            probes.append(_plain(str(content)))
            row = await (
                await conn.execute(
                    "SELECT text FROM sbm_search_docs WHERE namespace = %s AND doc = %s",
                    (self.store.namespace, f"item:{conv}:{item}"),
                )
            ).fetchone()
            if row is not None:
                probes.append(_plain(str(row[0])))
        cache[conv] = [p for p in dict.fromkeys(probes) if len(p) >= STATED_MIN_CHARS]
        return cache[conv]

    async def _ranked(
        self,
        conn: psycopg.AsyncConnection[Any],
        phrases: list[list[str]],
        stats: _Stats,
        held: list[int],
        kind: HitKind,
        args: dict[str, Any],
        limit: int,
        probes: dict[str, list[str]],
        files: Sequence[Sequence[str]] = (),
    ) -> list[tuple[float, Sequence[Any], Sequence[Any], dict[str, list[int]]]]:
        """The best ``limit`` documents of ``kind`` by BM25 (``stats``: its group's), then
        the items stating a retracted entry left out, as ``SearchIndex._ranked`` reads them:
        ``(score, light row, row, positions)``. Those holding one of ``files`` (the phrases
        of the files the query names) come first, as ``SearchIndex._lexical`` puts them."""

        where = "d.kind = %(kind)s" + (
            " AND d.conversation = %(conv)s" if args["conv"] is not None else ""
        )
        found = await self._candidates(conn, phrases, where, {**args, "kind": kind})
        scored = self._scored(found, phrases, stats, held)
        if files:
            scored.sort(key=lambda s: not any(bm25.phrase_count(s[2], f) for f in files))
        best = scored[:limit]
        full = await self._rows(conn, [str(light[0]) for _, light, _ in best])
        out: list[tuple[float, Sequence[Any], Sequence[Any], dict[str, list[int]]]] = []
        for score, light, pos in best:
            row = full[str(light[0])]
            if kind == "item" and row[4] is not None:
                said = await self._probes(conn, str(row[4]), probes)
                if said and states_any(str(row[2]), said):
                    continue
            out.append((score, light, row, pos))
        return out

    async def _lexical(
        self,
        conn: psycopg.AsyncConnection[Any],
        phrases: list[list[str]],
        stats: dict[str, _Stats],
        held: dict[str, list[int]],
        query: str,
        args: dict[str, Any],
        limit: int,
    ) -> list[SearchHit]:
        """The kinds ranked each by BM25 on its own and taken in turn (``SearchIndex.
        _lexical``), the documents naming a file the query names first in each."""

        fused: list[tuple[float, int, float, SearchHit]] = []
        probes: dict[str, list[str]] = {}
        files = self._file_terms(named_files(query))
        for order, kind in enumerate(KIND_ORDER):
            grp = GROUPS[kind]
            ranked = await self._ranked(
                conn, phrases, stats[grp], held[grp], kind, args, limit, probes, files
            )
            for rank, (score, light, row, pos) in enumerate(ranked, 1):
                shown = score >= SCORE_SHOWN_MIN
                if not shown and grp != "all":
                    # A kind of few documents floors every IDF: judged among all documents.
                    idf = [bm25.idf(stats["all"].docs, n) for n in held["all"]]
                    shown = _bm25(pos, int(light[3]), phrases, idf, stats["all"]) >= SCORE_SHOWN_MIN
                fused_score = RRF_K / (RRF_K + rank) if shown else 0.0
                fused.append((fused_score, order, -score, _hit(row, score, query)))
        fused.sort(key=lambda f: (-f[0], f[1], f[2]))
        return [
            hit.model_copy(update={"score": round(score, 4)}) for score, _, _, hit in fused[:limit]
        ]

    def _file_terms(self, files: list[str]) -> list[list[str]]:
        """The phrases of :func:`~sandbox_memory.search.index.file_phrases` as terms."""

        return query_phrases(" OR ".join(files), self.tokenizer) if files else []

    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit]:
        """The best ``limit`` entries, then rollout summaries, for a run's input, as
        :meth:`SearchIndex.curated <sandbox_memory.search.index.SearchIndex.curated>` picks
        them: the rarest of ``words`` (documents per term from ``sbm_search_terms``, one
        lookup for all) beside every phrase, each kind ranked on its own, text whole."""

        if not phrases and not words:
            return []
        args = {"ns": self.store.namespace, "person": person, "conv": None}
        tokens = self.tokenizer.terms([w.strip('"') for w in words])
        async with self.store.search_tables("looking up the run's input") as conn:
            stats = await self._stats(conn)
            wanted = sorted({t for toks in tokens for t in toks})
            counts = dict(
                await (
                    await conn.execute(
                        "SELECT term, docs FROM sbm_search_terms WHERE namespace = %s "
                        "AND grp = 'all' AND term = ANY(%s)",
                        (self.store.namespace, wanted),
                    )
                ).fetchall()
            )
            held = {
                w: min(int(counts.get(t, 0)) for t in toks)
                for w, toks in zip(words, tokens, strict=True)
                if toks
            }
            total = stats["all"].docs
            useful = [w for w in words if 0 < held.get(w, 0) <= total // 2]
            useful.sort(key=lambda w: held[w])  # stable: the text's order on ties
            expression = " OR ".join([*phrases, *useful[: max(0, max_terms - len(phrases))]])
            query = query_phrases(expression, self.tokenizer) if expression else []
            if not query:
                return []
            found = await self._held(conn, query)
            files = self._file_terms(file_phrases(phrases))
            ranked: list[SearchHit] = []
            for kind in ("entry", "rollout_summary"):
                grp = GROUPS[kind]
                for score, _, row, _ in await self._ranked(
                    conn,
                    query,
                    stats[grp],
                    found[grp],
                    kind,
                    args,
                    limit,
                    {},
                    files,
                ):
                    ranked.append(_hit(row, score, "", whole=True))
            return await self._one_per_key(conn, ranked, args, whole=True)

    async def _citing(
        self,
        conn: psycopg.AsyncConnection[Any],
        ranked: list[SearchHit],
        query: str,
        args: dict[str, Any],
    ) -> list[SearchHit]:
        """The entries citing items among ``ranked`` and not ranked themselves
        (``SearchIndex._citing``)."""

        wanted = {
            (h.conversation, h.sources[0].item)
            for h in ranked
            if h.kind == "item" and h.conversation is not None and h.sources
        }
        if not wanted:
            return []
        have = {(h.conversation, h.key) for h in ranked if h.kind == "entry"}
        scopes = sorted({f"conversation:{conv}" for conv, _ in wanted} | {"layout"})
        rows = await (
            await conn.execute(
                _SELECT + "WHERE d.namespace = %(ns)s AND d.kind = 'entry' "
                "AND d.scope = ANY(%(scopes)s) AND (d.person IS NULL OR d.person = %(person)s) "
                "AND EXISTS (SELECT 1 FROM jsonb_array_elements(d.sources) s "
                "WHERE s->>'item' = ANY(%(items)s))",
                {**args, "scopes": scopes, "items": sorted({i for _, i in wanted})},
            )
        ).fetchall()
        rows.sort(key=lambda r: (-int(r[3]), str(r[0]).encode()))
        found: list[SearchHit] = []
        for row in rows:
            cites = {(c["conversation"], c["item"]) for c in _sources_of(json.dumps(row[5]))}
            if cites & wanted and (row[4], row[6]) not in have:
                found.append(_hit(row, 0.0, query))
        return found

    async def _one_per_key(
        self,
        conn: psycopg.AsyncConnection[Any],
        ranked: list[SearchHit],
        args: dict[str, Any],
        *,
        query: str = "",
        whole: bool = False,
    ) -> list[SearchHit]:
        """:func:`~sandbox_memory.search.index.one_per_key`, the copies of every entry key
        shown read in one query (their text shown as :func:`_hit` shows a hit's)."""

        keys = sorted({h.key for h in ranked if h.kind == "entry" and h.key is not None})
        if not keys:
            return ranked
        sql = (
            "SELECT d.key, d.sources, d.text, d.updated_at, d.doc FROM sbm_search_docs d "
            "WHERE d.namespace = %(ns)s AND d.kind = 'entry' AND d.key = ANY(%(keys)s) "
            "AND (d.person IS NULL OR d.person = %(person)s)"
        )
        if args["conv"] is not None:
            sql += " AND d.conversation = %(conv)s"
        rows = await (await conn.execute(sql, {**args, "keys": keys})).fetchall()
        rows.sort(key=lambda r: (-int(r[3]), str(r[4]).encode()))  # newest, then as SQLite
        copies: dict[str, list[EntryCopy]] = {}
        for key, sources, text, updated, _ in rows:
            copy = [Source(**raw) for raw in _sources_of(json.dumps(sources))]
            copies.setdefault(str(key), []).append(
                EntryCopy(
                    copy,
                    _plain(str(text)),
                    str(text)[len(str(key)) + 2 :]
                    if whole
                    else _window(str(text), query, ENTRY_TEXT_CHARS),
                    int(updated),
                )
            )
        return one_per_key(ranked, lambda key: copies.get(key, []))

    async def _with_excerpts(
        self,
        conn: psycopg.AsyncConnection[Any],
        hits: list[SearchHit],
        phrases: list[list[str]],
        stats: dict[str, _Stats],
        held: dict[str, list[int]],
        query: str,
        args: dict[str, Any],
    ) -> list[SearchHit]:
        """Each entry hit with the best matching item it cites (``SearchIndex.
        _with_excerpts``)."""

        wanted = sorted(
            {
                f"item:{s.conversation}:{s.item}"
                for h in hits
                if h.kind == "entry"
                for s in h.sources
            }
        )
        if not wanted:
            return hits
        found = await self._candidates(
            conn, phrases, "d.kind = 'item' AND d.doc = ANY(%(wanted)s)", {**args, "wanted": wanted}
        )
        best: dict[tuple[str, str], tuple[float, str]] = {}
        probes: dict[str, list[str]] = {}
        scored = self._scored(found, phrases, stats["all"], held["all"])
        full = await self._rows(conn, [str(light[0]) for _, light, _ in scored])
        for score, light, _ in scored:
            row = full[str(light[0])]
            conv, text = str(row[4]), str(row[2])
            said = await self._probes(conn, conv, probes)
            if said and states_any(text, said):
                continue
            item = _sources_of(json.dumps(row[5]))[0]["item"]
            best.setdefault((conv, item), (score, text))
        out: list[SearchHit] = []
        for hit in hits:
            cited = [
                (best[(s.conversation, s.item)], s)
                for s in hit.sources
                if hit.kind == "entry" and (s.conversation, s.item) in best
            ]
            if cited:
                (_, plain), source = max(cited, key=lambda f: f[0][0])
                excerpt = excerpt_of(plain, query)
                if not all_words(excerpt) <= all_words(hit.text):
                    hit = hit.model_copy(update={"excerpt": excerpt, "excerpt_source": source})
            out.append(hit)
        return out
