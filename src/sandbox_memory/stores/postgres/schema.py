"""The schema: its migrations, and the migrator that applies them on first use.

The schema is created on first use and migrated by the version in ``sbm_schema``, one
migrator at a time across every process sharing the database.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...errors import MemoryStoreUnavailable
from .base import PostgresBase

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("sandbox_memory")

MIGRATIONS: list[str] = [
    # 1: the first schema.
    """
    CREATE TABLE sbm_scopes (
        namespace text NOT NULL,
        scope text NOT NULL,
        version bigint NOT NULL DEFAULT 0,
        head text,
        overrides jsonb NOT NULL DEFAULT '{}'::jsonb,
        updated_at bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (namespace, scope)
    );
    CREATE TABLE sbm_entries (
        namespace text NOT NULL,
        scope text NOT NULL,
        key text NOT NULL,
        version bigint NOT NULL,
        kind text NOT NULL,
        content text NOT NULL,
        sources jsonb NOT NULL,
        status text NOT NULL,
        person text,
        keywords jsonb NOT NULL DEFAULT '[]'::jsonb,
        updated_at bigint NOT NULL,
        PRIMARY KEY (namespace, scope, key)
    );
    CREATE TABLE sbm_log (
        namespace text NOT NULL,
        seq bigserial,
        version bigint NOT NULL,
        at bigint NOT NULL,
        cause text NOT NULL,
        scope text NOT NULL,
        keys jsonb NOT NULL,
        detail text,
        PRIMARY KEY (namespace, seq)
    );
    CREATE TABLE sbm_rollouts (
        namespace text NOT NULL,
        rollout_id text NOT NULL,
        segments bigint NOT NULL DEFAULT 0,
        watermark bigint NOT NULL DEFAULT 0,
        progress jsonb NOT NULL DEFAULT '{}'::jsonb,
        PRIMARY KEY (namespace, rollout_id)
    );
    CREATE TABLE sbm_segments (
        namespace text NOT NULL,
        rollout_id text NOT NULL,
        n bigint NOT NULL,
        segment_id text NOT NULL,
        line text NOT NULL,
        recorded_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (namespace, rollout_id, n),
        UNIQUE (namespace, segment_id)
    );
    CREATE TABLE sbm_leases (
        namespace text NOT NULL,
        name text NOT NULL,
        holder text,
        token bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    CREATE TABLE sbm_threads (
        namespace text NOT NULL,
        fingerprint text NOT NULL,
        rollout_id text NOT NULL,
        PRIMARY KEY (namespace, fingerprint)
    );
    CREATE TABLE sbm_files (
        namespace text NOT NULL,
        path text NOT NULL,
        content bytea NOT NULL,
        PRIMARY KEY (namespace, path)
    );
    """,
    # 2: notes carry a revision, so a copy fetches only those changed since it last looked;
    # a deleted note stays as a tombstone (no content) for copies to remove theirs.
    """
    ALTER TABLE sbm_files ALTER COLUMN content DROP NOT NULL;
    CREATE SEQUENCE sbm_files_rev;
    ALTER TABLE sbm_files ADD COLUMN rev bigint NOT NULL DEFAULT nextval('sbm_files_rev');
    CREATE INDEX sbm_files_rev_idx ON sbm_files (namespace, rev);
    """,
    # 3: a copy fetches what changed since it last looked, not every row of the namespace.
    # Scopes, rollouts and threads carry the id of the transaction that last wrote them (a
    # reader lists the rows written since the oldest transaction still running when it last
    # read); an entry removed leaves its key and the scope version that removed it, so a copy
    # at version v reads the entries changed and removed after v alone.
    """
    ALTER TABLE sbm_scopes ADD COLUMN xid bigint NOT NULL DEFAULT txid_current();
    ALTER TABLE sbm_rollouts ADD COLUMN xid bigint NOT NULL DEFAULT txid_current();
    ALTER TABLE sbm_threads ADD COLUMN xid bigint NOT NULL DEFAULT txid_current();
    CREATE INDEX sbm_scopes_xid_idx ON sbm_scopes (namespace, xid);
    CREATE INDEX sbm_rollouts_xid_idx ON sbm_rollouts (namespace, xid);
    CREATE INDEX sbm_threads_xid_idx ON sbm_threads (namespace, xid);
    CREATE INDEX sbm_entries_version_idx ON sbm_entries (namespace, scope, version);
    CREATE TABLE sbm_removed (
        namespace text NOT NULL,
        scope text NOT NULL,
        key text NOT NULL,
        version bigint NOT NULL,
        PRIMARY KEY (namespace, scope, key)
    );
    CREATE INDEX sbm_removed_version_idx ON sbm_removed (namespace, scope, version);
    """,
    # 4: the key that seals recorded runs (``integrity.py``), one per namespace: every machine
    # sharing the namespace verifies the runs the others recorded. Made by the first reader.
    """
    CREATE TABLE sbm_keys (
        namespace text NOT NULL,
        name text NOT NULL,
        key bytea NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    """,
    # 5: an entry's subjects (files, commands, tests, people, tools) as a field of their own.
    """
    ALTER TABLE sbm_entries ADD COLUMN subjects jsonb;
    """,
    # 6: the search index of the namespace, one for every sandbox sharing it
    # (``search/postgres.py``): its documents with their terms as a tsvector (a GIN
    # index finds the documents holding a query's terms), the statistics BM25 needs (documents
    # and tokens per kind, documents per term), the
    # items a retracted entry hides, and the uses later runs made of memory.
    """
    CREATE TABLE sbm_search_docs (
        namespace text NOT NULL,
        doc text NOT NULL,
        kind text NOT NULL,
        scope text NOT NULL,
        conversation text,
        key text,
        person text,
        detail text,
        updated_at bigint NOT NULL,
        sources jsonb NOT NULL,
        item text,
        path text NOT NULL,
        text text NOT NULL,
        body tsvector NOT NULL,
        length integer NOT NULL,
        digest text NOT NULL,
        PRIMARY KEY (namespace, doc)
    );
    CREATE INDEX sbm_search_docs_body_idx ON sbm_search_docs USING gin (body);
    CREATE INDEX sbm_search_docs_key_idx ON sbm_search_docs (namespace, key)
        WHERE kind = 'entry';
    CREATE TABLE sbm_search_stats (
        namespace text NOT NULL,
        grp text NOT NULL,
        docs bigint NOT NULL,
        tokens bigint NOT NULL,
        PRIMARY KEY (namespace, grp)
    );
    CREATE TABLE sbm_search_terms (
        namespace text NOT NULL,
        grp text NOT NULL,
        term text NOT NULL,
        docs bigint NOT NULL,
        PRIMARY KEY (namespace, grp, term)
    );
    CREATE TABLE sbm_search_retracted (
        namespace text NOT NULL,
        scope text NOT NULL,
        key text NOT NULL,
        conversation text NOT NULL,
        item text NOT NULL,
        content text NOT NULL,
        PRIMARY KEY (namespace, scope, key, conversation, item)
    );
    CREATE TABLE sbm_search_usage (
        namespace text NOT NULL,
        target text NOT NULL,
        kind text NOT NULL,
        uses bigint NOT NULL,
        last_used_at bigint NOT NULL,
        PRIMARY KEY (namespace, target, kind)
    );
    CREATE TABLE sbm_search_meta (
        namespace text NOT NULL,
        name text NOT NULL,
        value text NOT NULL,
        PRIMARY KEY (namespace, name)
    );
    """,
    # 7: the embeddings of the search index's documents, so that a sandbox with an embedder
    # fetches the vectors another sandbox of the namespace made instead of embedding the
    # texts again (``search/postgres.py``): each is kept for the document it was sent or put
    # for, by the hash of the embedder's name and the text it embeds, and goes with that
    # document: the key makes a vector of a document the index does not hold impossible, and
    # removes a document's vectors with it (a replaced document's are removed by the sending).
    """
    CREATE TABLE sbm_search_vectors (
        namespace text NOT NULL,
        doc text NOT NULL,
        hash text NOT NULL,
        vec bytea NOT NULL,
        PRIMARY KEY (namespace, doc, hash),
        FOREIGN KEY (namespace, doc) REFERENCES sbm_search_docs (namespace, doc)
            ON DELETE CASCADE
    );
    CREATE INDEX sbm_search_vectors_hash_idx ON sbm_search_vectors (namespace, hash);
    """,
]
"""Migration ``i`` takes the schema from version ``i`` to ``i + 1``; never edit a released one."""

SCHEMA_VERSION = len(MIGRATIONS)


class SchemaTables(PostgresBase):
    """The schema brought to :data:`SCHEMA_VERSION` when a connection opens."""

    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async with conn.transaction():
            # One migrator at a time across every process sharing the database.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('sandbox_memory_schema'))")
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS sbm_schema (version integer NOT NULL, "
                "migrated_at timestamptz NOT NULL DEFAULT now())"
            )
            row = await (await conn.execute("SELECT max(version) FROM sbm_schema")).fetchone()
            current = int(row[0]) if row and row[0] is not None else 0
            if current > SCHEMA_VERSION:
                raise MemoryStoreUnavailable(
                    f"{self.describe()}: the database schema is at version {current}, newer "
                    f"than this sandbox-memory knows ({SCHEMA_VERSION}); upgrade sandbox-memory"
                )
            for version in range(current, SCHEMA_VERSION):
                await conn.execute(MIGRATIONS[version])
                await conn.execute("INSERT INTO sbm_schema (version) VALUES (%s)", (version + 1,))
                logger.info("memory store schema migrated to version %d", version + 1)
