"""FTS5's BM25 for a few documents, in the statistics of a large table.

Ranking a kind of few documents (the rollout summaries: at most
``generate.max_raw_memories_for_consolidation``) by BM25 among all documents costs SQLite a
score for every document of any kind that holds a word of the query: at 20,000 entries, most of
a long first message's words are in thousands of recorded items, and ranking the summaries
alone took most of the first turn's read. Here the few documents are scored as FTS5's
``bm25()`` scores them, with the same formula, the same statistics (the large table's row
count, its average length and how many of its rows hold each phrase) and the same per-document
figures (how often each phrase occurs, the document's length), so the order and every score
are the ones the SQL ranking gives; only where they are read from changes: the phrase counts
from a table of the few documents' tokens, the statistics from the large table's totals
record, its per-row sizes and its vocabulary, each a lookup.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

K1: Final = 1.2
"""FTS5's ``bm25()`` term-frequency saturation (``k1`` in ``fts5_aux.c``)."""

B: Final = 0.75
"""FTS5's ``bm25()`` length normalisation (``b`` in ``fts5_aux.c``)."""

MIN_IDF: Final = 1e-6
"""The weight FTS5 gives a phrase held by half the rows or more (its IDF would be <= 0)."""

AVERAGES_ROWID: Final = 1
"""The ``<table>_data`` row holding an FTS5 table's totals: its row count, then the tokens of
each column (``FTS5_AVERAGES_ROWID`` in ``fts5Int.h``)."""


def idf(rows: int, holding: int) -> float:
    """FTS5's IDF of a phrase held by ``holding`` of ``rows`` rows (floored at
    :data:`MIN_IDF`)."""

    value = math.log((rows - holding + 0.5) / (holding + 0.5))
    return value if value > 0.0 else MIN_IDF


def score(counts: Sequence[int], length: int, weights: Sequence[float], avgdl: float) -> float:
    """FTS5's BM25 of one document (``-bm25()``: higher is better) of ``length`` tokens holding
    each phrase ``counts[i]`` times, each phrase weighing ``weights[i]`` (its :func:`idf`):
    ``fts5Bm25Function``'s operations in its order, so the float is SQLite's and so are the
    ties. The one formula of both indexes (the PostgreSQL index scores with it too)."""

    norm = length_norm(length, avgdl)
    total = 0.0
    for weight, count in zip(weights, counts, strict=True):
        total += term_score(weight, count, norm)
    return total


def length_norm(length: int, avgdl: float) -> float:
    """The length part of :func:`score`'s denominator for a document of ``length`` tokens."""

    return K1 * (1 - B + B * float(length) / avgdl)


def term_score(weight: float, count: int, norm: float) -> float:
    """One phrase's part of :func:`score`: ``count`` occurrences of a phrase weighing
    ``weight`` in a document of :func:`length_norm` ``norm``. A phrase a document does not
    hold adds 0.0, which leaves FTS5's sum as it was."""

    hits = float(count)
    return weight * ((hits * (K1 + 1.0)) / (hits + norm))


def phrase_count(offsets: Mapping[str, Collection[int]], phrase: Sequence[str]) -> int:
    """How often the tokens of ``phrase`` occur one after another, given each token's
    ``offsets`` in a document."""

    first = offsets.get(phrase[0], ())
    if len(phrase) == 1:
        return len(first)
    rest = [set(offsets.get(token, ())) for token in phrase[1:]]
    return sum(1 for at in first if all(at + k in later for k, later in enumerate(rest, 1)))


def _varints(blob: bytes) -> list[int]:
    """The SQLite varints of ``blob`` in order (big-endian, 7 bits a byte, the ninth byte
    whole), the format of FTS5's totals and sizes records."""

    values: list[int] = []
    at = 0
    while at < len(blob):
        value = 0
        for n in range(9):
            byte = blob[at]
            at += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values


def phrase_tokens(db: sqlite3.Connection, phrases: list[str], tokenizer: str) -> list[list[str]]:
    """Each FTS5 phrase of ``phrases`` (``"src foo py"``, quotes included) as the index's tokens,
    in order: tokenized by a temporary FTS5 table with ``tokenizer``, as a query is."""

    db.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.bm25_phrases "
        f"USING fts5(body, tokenize='{tokenizer}')"
    )
    db.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.bm25_phrase_tokens "
        "USING fts5vocab(temp, bm25_phrases, instance)"
    )
    for phrase in phrases:
        if len(phrase) < 2 or phrase[0] != '"' or phrase[-1] != '"':
            raise ValueError(f"phrases must be FTS5 strings in double quotes, got {phrase!r}")
    db.execute("DELETE FROM temp.bm25_phrases")
    db.executemany(
        "INSERT INTO temp.bm25_phrases(rowid, body) VALUES (?, ?)",
        [(n, p[1:-1].replace('""', '"')) for n, p in enumerate(phrases)],
    )
    placed: list[list[tuple[int, str]]] = [[] for _ in phrases]
    for row, term, offset in db.execute("SELECT doc, term, offset FROM temp.bm25_phrase_tokens"):
        placed[int(row)].append((int(offset), str(term)))
    db.execute("DELETE FROM temp.bm25_phrases")
    return [[term for _, term in sorted(tokens)] for tokens in placed]


def rank_few(
    db: sqlite3.Connection,
    phrases: list[str],
    *,
    table: str,
    few: str,
    tokenizer: str,
    held: Mapping[str, int] | None = None,
) -> dict[int, float]:
    """``bm25(<table>)`` for each row of the FTS5 table ``few`` that holds any of ``phrases``
    (the FTS5 expression ``phrases[0] OR phrases[1] OR ...``), by row id: the value
    ``SELECT rowid, bm25(<table>) FROM <table> WHERE <table> MATCH <expression>`` gives for
    those rows, where ``few`` indexes a subset of ``table``'s rows with the same text and
    tokenizer. Its cost follows the phrases and the rows of ``few``, not the rows of ``table``.

    ``table`` must keep its rows' sizes (FTS5's default ``columnsize=1``) and have one column.
    ``held`` may give, for phrases of one token, how many rows of ``table`` hold it (read by
    the caller already); the others are looked up.
    """

    if not phrases:
        return {}
    tokens = phrase_tokens(db, phrases, tokenizer)
    row = db.execute(f"SELECT block FROM {table}_data WHERE id = ?", (AVERAGES_ROWID,)).fetchone()
    # An empty record (as a new table writes it) is a table of no rows.
    totals = (_varints(bytes(row[0])) if row is not None else []) or [0]
    n_row, n_token = totals[0], sum(totals[1:])
    if n_row == 0:
        return {}
    avgdl = n_token / n_row

    # How often each phrase occurs in each of the few rows: a one-token phrase counted by
    # SQLite, a longer one from its tokens' offsets.
    db.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.bm25_{few}_terms "
        f"USING fts5vocab(main, {few}, instance)"
    )
    vocab = f"temp.bm25_{few}_terms"
    counted: list[list[tuple[int, int]]] = []
    for phrase in tokens:
        if len(phrase) == 1:
            counted.append(
                db.execute(
                    f"SELECT doc, count(*) FROM {vocab} WHERE term = ? GROUP BY doc", (phrase[0],)
                ).fetchall()
            )
        else:
            counted.append(list(_phrase_counts(db, vocab, phrase).items()))
    holding = {doc for rows in counted for doc, _ in rows}
    if not holding:
        return {}

    weights = [
        _weight(db, table, phrase, text, n_row, (held or {}).get(text))
        for phrase, text in zip(tokens, phrases, strict=True)
    ]
    # Summed phrase by phrase in the query's order, each row's parts as score() adds them (a
    # phrase a row does not hold adds nothing), so each float is FTS5's, at a cost that
    # follows the phrases the rows hold rather than rows times phrases.
    norms = {doc: length_norm(length, avgdl) for doc, length in _sizes(db, table, holding).items()}
    sums = dict.fromkeys(norms, 0.0)
    for weight, rows in zip(weights, counted, strict=True):
        for doc, n in rows:
            if doc in norms:
                sums[doc] += term_score(weight, n, norms[doc])
    return {doc: -1.0 * total for doc, total in sums.items()}


def _phrase_counts(db: sqlite3.Connection, vocab: str, phrase: list[str]) -> dict[int, int]:
    """How many times the tokens of ``phrase`` occur one after another in each row of the
    ``fts5vocab`` instance table ``vocab``."""

    places: dict[int, dict[str, set[int]]] = {}
    for term in dict.fromkeys(phrase):
        for doc, offset in db.execute(f"SELECT doc, offset FROM {vocab} WHERE term = ?", (term,)):
            places.setdefault(int(doc), {}).setdefault(term, set()).add(int(offset))
    counts: dict[int, int] = {}
    for doc, where in places.items():
        if all(t in where for t in phrase):
            n = phrase_count(where, phrase)
            if n:
                counts[doc] = n
    return counts


def _weight(
    db: sqlite3.Connection,
    table: str,
    tokens: list[str],
    phrase: str,
    n_row: int,
    held: int | None,
) -> float:
    """FTS5's IDF of a phrase in ``table``: from the rows holding it (one token: read from the
    vocabulary; more: counted by a phrase query, whose posting lists are the rare ones)."""

    if not tokens:
        return 0.0  # matches nothing: FTS5 weighs it, but no row has it
    if len(tokens) == 1 and held is not None:
        hits = held
    elif len(tokens) == 1:
        db.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.bm25_{table}_rows "
            f"USING fts5vocab(main, {table}, row)"
        )
        row = db.execute(
            f"SELECT doc FROM temp.bm25_{table}_rows WHERE term = ?", (tokens[0],)
        ).fetchone()
        hits = int(row[0]) if row is not None else 0
    else:
        hits = int(
            db.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ?", (phrase,)).fetchone()[
                0
            ]
        )
    return idf(n_row, hits)


def _sizes(db: sqlite3.Connection, table: str, docs: Iterable[int]) -> dict[int, int]:
    """The length in tokens of each of ``docs`` in ``table`` (its ``_docsize`` rows)."""

    return {
        int(doc): sum(_varints(bytes(sz)))
        for doc, sz in db.execute(
            f"SELECT id, sz FROM {table}_docsize WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(sorted(docs)),),
        )
    }
