"""The index's SQLite file: its name, tables and version, and how a row holds its text.

One file, ``<memories_dir>/store/search.sqlite`` (:data:`INDEX_FILE`), of the tables in
:data:`_SCHEMA` (documents, their FTS5 tables, rollouts' watermarks, retracted entries' items,
usage counts), the vectors of an embedder (:data:`_VECTORS_TABLE`) and, for a shared store,
the documents not yet sent (:data:`SHARED_OUT_TABLE`). An index of another
:data:`SCHEMA_VERSION` is rebuilt. A row's text is stored compressed (:func:`_unpack`), its
sources as JSON (:func:`_sources_of`).
"""

from __future__ import annotations

import sqlite3
import zlib
from typing import Final, Literal

from ... import bounded

INDEX_FILE = "search.sqlite"
"""Name of the index under ``<memories_dir>/store/``."""


SCHEMA_VERSION = "8"
"""Bumped when the index's tables or its tokens change; an index of another version is
rebuilt (5: text is NFKC-normalised before it is tokenised; 6: what differs from one run of
the same work to the next is left out, see :func:`settled_text`, and an entry's subjects are
indexed with its text, see :func:`subject_terms`; 7: a rollout summary without the header
lines naming its file and conversation, see :data:`_SUMMARY_HEADER_LINE_RE`; 8: the rollout
summaries' tokens in a table of their own, see :data:`FEW_TABLES`)."""


TOKENIZER = "porter unicode61 remove_diacritics 2"
"""FTS5 tokenizer: Unicode word splitting with accents folded, then English stemming."""


SYNCHRONOUS = "OFF"
"""SQLite's ``synchronous`` setting for the index: the index is rebuilt from the workspace, so
a commit need not wait for the disk (on a busy machine a flush costs tens of milliseconds, and
a close commits at least twice)."""


TEXT_COMPRESSION = 6
"""zlib level of the stored text: recorded items repeat themselves (logs, test output), and
compressed text makes the index a fraction of the rollouts instead of more than them."""


HitKind = Literal["entry", "rollout_summary", "item"]


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs(
    id INTEGER PRIMARY KEY,
    doc TEXT UNIQUE NOT NULL,
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    conversation TEXT,
    key TEXT,
    person TEXT,
    detail TEXT,
    updated_at INTEGER NOT NULL,
    sources TEXT NOT NULL,
    path TEXT NOT NULL,
    stamp TEXT NOT NULL,
    text BLOB NOT NULL,
    terms TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS docs_scope ON docs(scope);
CREATE INDEX IF NOT EXISTS docs_entry_key ON docs(key) WHERE kind = 'entry';
CREATE INDEX IF NOT EXISTS docs_entry_time ON docs(updated_at) WHERE kind = 'entry';
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(body, content='', tokenize='{TOKENIZER}');
CREATE VIRTUAL TABLE IF NOT EXISTS entry_fts USING fts5(
    body, content='', tokenize='{TOKENIZER}'
);
CREATE VIRTUAL TABLE IF NOT EXISTS summary_fts USING fts5(
    body, content='', columnsize=0, tokenize='{TOKENIZER}'
);
CREATE TABLE IF NOT EXISTS rollouts(
    rid TEXT PRIMARY KEY,
    items_offset INTEGER NOT NULL DEFAULT 0,
    summary_stamp TEXT,
    persons TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS retracted(
    scope TEXT NOT NULL,
    key TEXT NOT NULL,
    conversation TEXT NOT NULL,
    item TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (scope, key, conversation, item)
);
CREATE INDEX IF NOT EXISTS retracted_item ON retracted(conversation, item);
CREATE TABLE IF NOT EXISTS usage(
    target TEXT NOT NULL,
    kind TEXT NOT NULL,
    uses INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL,
    PRIMARY KEY (target, kind)
);
"""


_VECTORS_TABLE = "CREATE TABLE IF NOT EXISTS vectors(hash TEXT PRIMARY KEY, vec BLOB NOT NULL)"
"""Embeddings by content hash (embedder name and text): created by the first search with an
embedder, in an index old or new (turning an embedder on does not rebuild the index; without
one, the index holds no such table). Never pruned by a sync: a text that
comes back (a re-extracted entry) is not embedded again; a rebuild of the index drops them."""


KIND_TABLES: Final[dict[HitKind, str]] = {
    "entry": "entry_fts",
    "rollout_summary": "fts",
    "item": "fts",
}
"""The FTS5 table each kind of document is ranked in (see :meth:`SearchIndex._lexical`): entries
have a table of their own; ``fts`` holds every document, most of them items, so its statistics
are the items'. A table of summaries alone ranked them no differently on either dev data set
(one summary per conversation; their words are the items'), and each FTS5 table costs the index
a few pages however few its documents."""


FEW_TABLES: Final[dict[HitKind, str]] = {"rollout_summary": "summary_fts"}
"""The FTS5 table holding the tokens of each kind of few documents (at most
``generate.max_raw_memories_for_consolidation`` rollout summaries) that is ranked in a large
table's statistics (:data:`KIND_TABLES`): the run's first read scores them from here
(:func:`.bm25.rank_few`), at a cost that follows their number, where a ranking in the large
table scores every document of any kind that holds a word of the query."""


def _own_tables(kind: HitKind) -> list[str]:
    """The FTS5 tables a document of ``kind`` is in besides ``fts`` (which holds every one)."""

    tables = [KIND_TABLES.get(kind, "fts"), FEW_TABLES.get(kind, "fts")]
    return [t for t in dict.fromkeys(tables) if t != "fts"]


def _unpack(packed: bytes) -> str:
    # Bounded: the index file is in the workspace, where the agent can write.
    return (
        zlib.decompressobj().decompress(packed, bounded.MAX_STATE_BYTES).decode("utf-8", "replace")
    )


def _sources_of(raw: str | bytes) -> list[dict[str, str]]:
    """The sources a row of the index holds (an unreadable or hostile value holds none: the
    index is in the workspace, and a search must not fail on it)."""

    try:
        found = bounded.loads(raw, limit=bounded.MAX_FIELD_BYTES, what="an index row's sources")
    except ValueError:
        return []
    if not isinstance(found, list):
        return []
    return [
        {"conversation": s["conversation"], "item": s["item"]}
        for s in found
        if isinstance(s, dict)
        and isinstance(s.get("conversation"), str)
        and isinstance(s.get("item"), str)
    ]


SHARED_OUT_TABLE = "CREATE TABLE shared_out(doc TEXT PRIMARY KEY)"
"""The documents written or dropped since a shared store's search index last took them in
(``search/postgres.py``): made with the first use of an index attached to a shared
store, holding then every document the index had (and meta ``shared_full``: the first
sending is the whole index)."""


def _note_shared_out(db: sqlite3.Connection) -> None:
    """Make the ``shared_out`` table of an index attached to a shared store, once."""

    if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'shared_out'").fetchone():
        return
    db.executescript(
        f"BEGIN; {SHARED_OUT_TABLE}; INSERT INTO shared_out(doc) SELECT doc FROM docs; "
        "INSERT OR REPLACE INTO meta(k, v) VALUES ('shared_full', '1'); COMMIT;"
    )
