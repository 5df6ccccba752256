"""A shared memory store on PostgreSQL: one memory for sandboxes on many machines.

PostgreSQL holds the source of truth of every layout (a *namespace*): entries with their
sources, versions and status, the append-only change log, switches (conversation overrides),
phase-1 progress as a watermark per rollout, leases with fencing tokens, the recorded
(redacted) run segments, and the derived notes phase 1 writes (raw memories, rollout
summaries). The sandbox workspace keeps the seed's file layout as a working copy
(:mod:`sandbox_memory.stores.sync`).

Every write is conditional: on the version of the scope (a command) or of each entry it
read (a consolidation's changes), and, for writes made under the layout's lease, on the
lease's fencing token. A stale write raises :class:`~sandbox_memory.errors.MemoryConflict`
and changes nothing; a holder whose lease ran out raises
:class:`~sandbox_memory.errors.MemoryLeaseLost`.

The schema is created on first use and migrated by the version in ``sbm_schema``. Tables are
unqualified, so a tenant's role whose ``search_path`` is its own schema gets its own tables
(see ``docs/sharing.md``); within one set of tables, every row carries its namespace.

.. versionadded:: 0.1.0
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ..datapolicy import exc_text
from ..errors import (
    MemoryConfigError,
    MemoryConflict,
    MemoryLeaseLost,
    MemoryLockTimeout,
    MemoryStoreUnavailable,
)
from .records import Defaults, Entry, LogRecord, Overrides
from .shared import CONVERSATION_PREFIX, SETTINGS_NOTE, Fence, RolloutState, ScopeState

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("sandbox_memory")

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
"""A namespace names a tenant's layout: short, printable, no spaces or slashes."""

DEFAULT_CONNECT_TIMEOUT_SECONDS = 5.0
"""How long a connection attempt may take before the store counts as unreachable: a sandbox
that cannot reach the store goes on from its copy instead of hanging its run."""

DEFAULT_LEASE_SECONDS = 30.0
"""Lease of a layout's consolidation; renewed at a third of it while held. Past it, another
holder may take the lease over (a dead holder's, or one that stalled that long); until one
does, the lease stays its holder's: the fencing token, which every takeover changes, is what
refuses an old holder's writes, not the clock."""

LAYOUT_LEASE = "layout"
"""The one lease per namespace: one consolidation (or command) at a time."""

# --------------------------------------------------------------------------- credentials

_URI_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/?#@\s]*):(?P<pw>[^@/?#\s]*)@", re.I)
_PARAM_PASSWORD = re.compile(
    r"(?P<head>(?:^|[?&\s])password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|[^&\s]*)"
)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***`` (URI form and ``key=value`` form)."""

    out = _URI_PASSWORD.sub(lambda m: f"{m.group('head')}:***@", dsn)
    return _PARAM_PASSWORD.sub(lambda m: f"{m.group('head')}***", out)


def _passwords(dsn: str) -> list[str]:
    found = [m.group("pw") for m in _URI_PASSWORD.finditer(dsn)]
    found += [m.group("pw").strip("'") for m in _PARAM_PASSWORD.finditer(dsn)]
    env = os.environ.get("PGPASSWORD")
    if env:
        found.append(env)
    from urllib.parse import unquote

    found += [unquote(p) for p in found]
    return sorted({p for p in found if p}, key=len, reverse=True)


def scrub(text: str, dsn: str) -> str:
    """``text`` with the DSN's password (raw or URL-decoded) removed wherever it appears."""

    out = redact_dsn(text)
    for pw in _passwords(dsn):
        out = out.replace(pw, "***")
    return out


# --------------------------------------------------------------------------- schema

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
    # (``stores/postgres_search.py``): its documents with their terms as a tsvector (a GIN
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
]
"""Migration ``i`` takes the schema from version ``i`` to ``i + 1``; never edit a released one."""

SCHEMA_VERSION = len(MIGRATIONS)


# --------------------------------------------------------------------------- values


def _entry(
    key: str,
    kind: Any,
    content: str,
    sources: Any,
    status: Any,
    person: str | None,
    keywords: Any,
    updated_at: int,
    subjects: Any = None,
) -> Entry:
    """An entry from its ``sbm_entries`` columns (``kind`` to ``updated_at``, in table order)."""

    return Entry(
        key=key,
        content=content,
        kind=kind,
        sources=sources,
        status=status,
        person=person,
        keywords=keywords,
        updated_at=int(updated_at),
        subjects=subjects,
    )


class PostgresStore:
    """A layout's memory in PostgreSQL, isolated by ``namespace``.

    ``dsn`` is a libpq connection string or URI; its password never appears in a log line,
    an error or memory. One store object holds one connection, opened on first use, used by
    one operation at a time, and reopened after a failure.
    """

    def __init__(
        self,
        dsn: str,
        *,
        namespace: str,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        if not isinstance(dsn, str) or not dsn.strip():
            raise MemoryConfigError("dsn", redact_dsn(str(dsn)), "must be a PostgreSQL DSN")
        if not isinstance(namespace, str) or not NAMESPACE_RE.fullmatch(namespace):
            raise MemoryConfigError(
                "namespace",
                namespace,
                "must be 1-128 chars of letters, digits, '.', '_', ':' or '-', starting with a "
                "letter or digit",
            )
        if connect_timeout <= 0:
            raise MemoryConfigError("connect_timeout", connect_timeout, "must be > 0")
        if lease_seconds <= 0:
            raise MemoryConfigError("lease_seconds", lease_seconds, "must be > 0")
        self._dsn = dsn
        self.namespace = namespace
        self.connect_timeout = connect_timeout
        self.lease_seconds = lease_seconds
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._segment_key: bytes | None = None

    @property
    def dsn(self) -> str:
        """The DSN with its password replaced by ``***`` (safe to print)."""

        return redact_dsn(self._dsn)

    def __repr__(self) -> str:
        return f"PostgresStore({self.dsn!r}, namespace={self.namespace!r})"

    def describe(self) -> str:
        return f"PostgreSQL store {self.dsn} namespace {self.namespace}"

    # ------------------------------------------------------------ connection

    def _op_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop, self._conn = asyncio.Lock(), loop, None
        return self._lock

    def _unavailable(self, exc: BaseException, doing: str) -> MemoryStoreUnavailable:
        return MemoryStoreUnavailable(
            f"{self.describe()}: {doing} failed: {scrub(str(exc).strip(), self._dsn)}"
        )

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        try:
            import psycopg
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise MemoryConfigError(
                "store", "PostgresStore", "needs psycopg: pip install 'sandbox-memory[postgres]'"
            ) from exc
        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                application_name="sandbox-memory",
            )
        except Exception as exc:
            raise self._unavailable(exc, "connecting") from None
        try:
            await self._migrate(conn)
        except Exception as exc:
            await conn.close()
            if isinstance(exc, MemoryStoreUnavailable):
                raise
            raise self._unavailable(exc, "creating or migrating the schema") from None
        self._conn = conn
        return conn

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

    @asynccontextmanager
    async def _tx(self, doing: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One transaction on the store's connection; errors become clear store errors."""

        import psycopg

        async with self._op_lock():
            conn = await self._connect()
            try:
                async with conn.transaction():
                    yield conn
            except (MemoryConflict, MemoryConfigError):
                raise
            except psycopg.Error as exc:
                if conn.closed or isinstance(exc, psycopg.OperationalError):
                    self._conn = None
                    try:
                        await conn.close()
                    except Exception:  # noqa: BLE001 - the connection is gone anyway
                        pass
                raise self._unavailable(exc, doing) from None

    @asynccontextmanager
    async def search_tables(
        self, doing: str, fence: Fence | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One transaction on the namespace's search tables (``sbm_search_*``, read and
        written by ``stores/postgres_search.py``), checked against ``fence`` when given: the
        store's side of :class:`~sandbox_memory.stores.postgres_search.SearchTables`."""

        async with self._tx(doing) as conn:
            await self._check_fence(conn, fence)
            yield conn

    async def holds_memory(self) -> bool:
        """Whether the namespace holds any memory or recorded run."""

        async with self._tx("reading memory") as conn:
            row = await (
                await conn.execute(
                    "SELECT EXISTS (SELECT 1 FROM sbm_scopes WHERE namespace = %s) "
                    "OR EXISTS (SELECT 1 FROM sbm_rollouts WHERE namespace = %s)",
                    (self.namespace, self.namespace),
                )
            ).fetchone()
        return bool(row and row[0])

    async def ping(self) -> None:
        """Raise :class:`MemoryStoreUnavailable` unless the store answers."""

        async with self._tx("ping") as conn:
            await conn.execute("SELECT 1")

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    # ------------------------------------------------------------ leases

    async def acquire(self, *, timeout: float, holder: str | None = None) -> Fence:
        """Take the namespace's lease, waiting up to ``timeout`` seconds; a lapsed lease is
        taken over. The returned fence goes with every write made under it."""

        who = holder or f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"
        start = time.monotonic()
        warned = False
        while True:
            async with self._tx("taking the lease") as conn:
                row = await (
                    await conn.execute(
                        """
                        INSERT INTO sbm_leases AS l (namespace, name, holder, token, expires_at)
                        VALUES (%s, %s, %s, 1, clock_timestamp() + make_interval(secs => %s))
                        ON CONFLICT (namespace, name) DO UPDATE
                          SET holder = EXCLUDED.holder, token = l.token + 1,
                              expires_at = EXCLUDED.expires_at
                          WHERE l.holder IS NULL OR l.expires_at < clock_timestamp()
                        RETURNING token
                        """,
                        (self.namespace, LAYOUT_LEASE, who, self.lease_seconds),
                    )
                ).fetchone()
            if row is not None:
                if warned:
                    logger.warning(
                        "took the memory lease of namespace %s after %.1fs",
                        self.namespace,
                        time.monotonic() - start,
                    )
                return Fence(holder=who, token=int(row[0]))
            waited = time.monotonic() - start
            if waited > timeout:
                raise MemoryLockTimeout(
                    f"the memory lease of namespace {self.namespace} is held by another process "
                    f"for more than {timeout:.0f}s (generate.lock_timeout_seconds); the work "
                    "stays recorded and will be done at the next close"
                )
            if not warned and waited > 1.0:
                logger.warning(
                    "waiting for the memory lease of namespace %s held by another process",
                    self.namespace,
                )
                warned = True
            await asyncio.sleep(0.05)

    async def renew(self, fence: Fence) -> None:
        """Extend the lease; :class:`MemoryLeaseLost` when it was taken over (or released).
        A lease that ran out while its holder stalled (its event loop held by a long piece of
        work) and that nobody took over is still its holder's: it is extended."""

        async with self._tx("renewing the lease") as conn:
            cur = await conn.execute(
                "UPDATE sbm_leases SET expires_at = clock_timestamp() + make_interval(secs => %s) "
                "WHERE namespace = %s AND name = %s AND holder = %s AND token = %s",
                (self.lease_seconds, self.namespace, LAYOUT_LEASE, fence.holder, fence.token),
            )
            if cur.rowcount != 1:
                raise MemoryLeaseLost(
                    f"the memory lease of namespace {self.namespace} (token {fence.token}) ran "
                    "out and was taken over; nothing more is written under it"
                )

    # ------------------------------------------------------------ extraction claims

    async def claim(self, names: Sequence[str], *, holder: str) -> list[str]:
        """Take the named claims (``extract:<rollout-id>``) that are free, lapsed or already
        this holder's (then extended by ``lease_seconds``); the names taken. Not fenced: a
        claim only keeps other closes from doing the same work at once."""

        if not names:
            return []
        async with self._tx("claiming conversations") as conn:
            rows = await (
                await conn.execute(
                    """
                    INSERT INTO sbm_leases AS l (namespace, name, holder, token, expires_at)
                    SELECT %s, n, %s, 1, clock_timestamp() + make_interval(secs => %s)
                    FROM unnest(%s::text[]) AS n
                    ON CONFLICT (namespace, name) DO UPDATE
                      SET holder = EXCLUDED.holder, token = l.token + 1,
                          expires_at = EXCLUDED.expires_at
                      WHERE l.holder IS NULL OR l.holder = EXCLUDED.holder
                         OR l.expires_at < clock_timestamp()
                    RETURNING name
                    """,
                    (self.namespace, holder, self.lease_seconds, list(names)),
                )
            ).fetchall()
        return sorted(str(r[0]) for r in rows)

    async def claimed_by_others(self, prefix: str, *, holder: str) -> list[str]:
        """Live claims starting with ``prefix`` held by anyone but ``holder``."""

        async with self._tx("reading claims") as conn:
            rows = await (
                await conn.execute(
                    "SELECT name FROM sbm_leases WHERE namespace = %s AND starts_with(name, %s) "
                    "AND holder IS NOT NULL AND holder <> %s AND expires_at > clock_timestamp()",
                    (self.namespace, prefix, holder),
                )
            ).fetchall()
        return sorted(str(r[0]) for r in rows)

    async def unclaim(self, names: Sequence[str], *, holder: str) -> None:
        if not names:
            return
        async with self._tx("releasing claims") as conn:
            await conn.execute(
                "UPDATE sbm_leases SET holder = NULL, expires_at = clock_timestamp() "
                "WHERE namespace = %s AND holder = %s AND name = ANY(%s)",
                (self.namespace, holder, list(names)),
            )

    async def release(self, fence: Fence) -> None:
        async with self._tx("releasing the lease") as conn:
            await conn.execute(
                "UPDATE sbm_leases SET holder = NULL, expires_at = clock_timestamp() "
                "WHERE namespace = %s AND name = %s AND holder = %s AND token = %s",
                (self.namespace, LAYOUT_LEASE, fence.holder, fence.token),
            )

    async def _check_fence(self, conn: psycopg.AsyncConnection[Any], fence: Fence | None) -> None:
        if fence is None:
            return
        # FOR SHARE: a takeover (an UPDATE of this row) waits until this write commits. The
        # token, not the clock, decides: a lease past its time that nobody took over is still
        # this holder's (see DEFAULT_LEASE_SECONDS).
        row = await (
            await conn.execute(
                "SELECT 1 FROM sbm_leases WHERE namespace = %s AND name = %s AND holder = %s "
                "AND token = %s FOR SHARE",
                (self.namespace, LAYOUT_LEASE, fence.holder, fence.token),
            )
        ).fetchone()
        if row is None:
            raise MemoryLeaseLost(
                f"the memory lease of namespace {self.namespace} (token {fence.token}) ran out "
                "and was taken over; the write was refused and nothing changed"
            )

    # ------------------------------------------------------------ scopes and entries

    async def scope_versions(self) -> dict[str, int]:
        async with self._tx("reading scope versions") as conn:
            rows = await (
                await conn.execute(
                    "SELECT scope, version FROM sbm_scopes WHERE namespace = %s",
                    (self.namespace,),
                )
            ).fetchall()
        return {str(s): int(v) for s, v in rows}

    async def read_scope(self, scope: str) -> ScopeState:
        return (await self.read_scopes([scope]))[scope]

    async def read_scopes(self, scopes: Sequence[str]) -> dict[str, ScopeState]:
        """The named scopes as stored (a scope never written reads as version 0, empty)."""

        out = {
            s: ScopeState(
                scope=s, version=0, head=None, overrides=Overrides(), entries={}, entry_versions={}
            )
            for s in scopes
        }
        if not scopes:
            return out
        async with self._tx("reading memory") as conn:
            for scope, version, head, overrides in await (
                await conn.execute(
                    "SELECT scope, version, head, overrides FROM sbm_scopes "
                    "WHERE namespace = %s AND scope = ANY(%s)",
                    (self.namespace, list(scopes)),
                )
            ).fetchall():
                st = out[scope]
                st.version, st.head = int(version), head
                st.overrides = Overrides.model_validate(overrides or {})
            for row in await (
                await conn.execute(
                    "SELECT scope, key, version, kind, content, sources, status, person, "
                    "keywords, updated_at, subjects FROM sbm_entries WHERE namespace = %s "
                    "AND scope = ANY(%s)",
                    (self.namespace, list(scopes)),
                )
            ).fetchall():
                scope, key, version = row[:3]
                out[scope].entries[key] = _entry(key, *row[3:])
                out[scope].entry_versions[key] = int(version)
        return out

    async def horizon(self) -> int:
        """The oldest transaction still running: every row written by an older one is
        committed (or never will be). A copy that read the rows written from ``h`` on, with
        ``h`` taken before it read, next reads from the horizon it took then."""

        async with self._tx("reading the change horizon") as conn:
            row = await (
                await conn.execute("SELECT txid_snapshot_xmin(txid_current_snapshot())")
            ).fetchone()
        assert row is not None
        return int(row[0])

    async def changed_since(
        self, xid: int
    ) -> tuple[dict[str, int], dict[str, RolloutState], dict[str, str]]:
        """Scope versions, rollouts and conversation fingerprints written by transactions
        from ``xid`` on (``0``: all of them): what a copy fetched up to the horizon ``xid``
        has not seen yet (and a few it has, written by transactions still running then)."""

        async with self._tx("reading what changed") as conn:
            scopes = await (
                await conn.execute(
                    "SELECT scope, version FROM sbm_scopes WHERE namespace = %s AND xid >= %s",
                    (self.namespace, xid),
                )
            ).fetchall()
            rollouts = await (
                await conn.execute(
                    "SELECT rollout_id, segments, watermark, progress FROM sbm_rollouts "
                    "WHERE namespace = %s AND xid >= %s",
                    (self.namespace, xid),
                )
            ).fetchall()
            threads = await (
                await conn.execute(
                    "SELECT fingerprint, rollout_id FROM sbm_threads WHERE namespace = %s "
                    "AND xid >= %s",
                    (self.namespace, xid),
                )
            ).fetchall()
        return (
            {str(sc): int(v) for sc, v in scopes},
            {
                str(r): RolloutState(
                    rollout_id=str(r), segments=int(n), watermark=int(w), progress=pr
                )
                for r, n, w, pr in rollouts
            },
            {str(f): str(r) for f, r in threads},
        )

    async def read_changes(self, since: dict[str, int]) -> dict[str, ScopeState]:
        """Per scope, what changed after the version given (``since[scope]``; 0: all of it):
        its version, head and switches, the entries written after that version and the keys
        removed after it. One consistent snapshot of every scope named."""

        out = {
            s: ScopeState(
                scope=s,
                version=0,
                head=None,
                overrides=Overrides(),
                entries={},
                entry_versions={},
                since=v,
            )
            for s, v in since.items()
        }
        if not since:
            return out
        names, after = list(since), [since[s] for s in since]
        async with self._tx("reading memory changes") as conn:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            for scope, version, head, overrides in await (
                await conn.execute(
                    "SELECT scope, version, head, overrides FROM sbm_scopes "
                    "WHERE namespace = %s AND scope = ANY(%s)",
                    (self.namespace, names),
                )
            ).fetchall():
                st = out[scope]
                st.version, st.head = int(version), head
                st.overrides = Overrides.model_validate(overrides or {})
            for row in await (
                await conn.execute(
                    "SELECT e.scope, e.key, e.version, e.kind, e.content, e.sources, e.status, "
                    "e.person, e.keywords, e.updated_at, e.subjects FROM sbm_entries e "
                    "JOIN unnest(%s::text[], %s::bigint[]) AS w(scope, after) "
                    "ON e.scope = w.scope AND e.version > w.after WHERE e.namespace = %s",
                    (names, after, self.namespace),
                )
            ).fetchall():
                scope, key, version = row[:3]
                out[scope].entries[key] = _entry(key, *row[3:])
                out[scope].entry_versions[key] = int(version)
            for scope, key in await (
                await conn.execute(
                    "SELECT r.scope, r.key FROM sbm_removed r "
                    "JOIN unnest(%s::text[], %s::bigint[]) AS w(scope, after) "
                    "ON r.scope = w.scope AND r.version > w.after WHERE r.namespace = %s "
                    "ORDER BY r.key",
                    (names, after, self.namespace),
                )
            ).fetchall():
                if key not in out[scope].entries:
                    out[scope].removed.append(key)
        return out

    async def write_scope(
        self,
        scope: str,
        *,
        entries: dict[str, Entry] | None = None,
        remove: Sequence[str] = (),
        expected_version: int | None = None,
        expected_entries: dict[str, int | None] | None = None,
        head: str | None = None,
        overrides: Overrides | None = None,
        log: Sequence[LogRecord] = (),
        fence: Fence | None = None,
        bump: int = 1,
    ) -> int:
        """Write changed entries (and head, switches, log records) of one scope atomically.

        ``remove`` deletes entries (forgetting drops them; a retraction is a status change).
        The scope's version grows by ``bump`` (a working copy that made several changes; 0
        only creates the scope).

        Conditions, all checked before anything is written: the scope is at
        ``expected_version`` (when given); each key of ``expected_entries`` is at that entry
        version (``None``: the key must not exist); ``fence`` still holds the lease. Any that
        fails raises :class:`MemoryConflict` (:class:`MemoryLeaseLost`) and nothing changes.
        Returns the scope's new version; log records get it.
        """

        entries = entries or {}
        async with self._tx(f"writing {scope}") as conn:
            await self._check_fence(conn, fence)
            current = await self._lock_scope(conn, scope)
            if expected_version is not None and current != expected_version:
                raise self._conflict(
                    f"{scope} memory is at version {current}, not {expected_version}: re-read "
                    "it and retry",
                    current,
                )
            if expected_entries:
                entries, remove = await self._unchanged_since_read(
                    conn, scope, current, expected_entries, entries, remove
                )
            log = await self._new_log_records(conn, scope, log)
            if (
                expected_entries
                and not entries
                and not remove
                and not log
                and overrides is None
                and bump > 0
            ):
                return current  # every change of this write is in the store already
            if entries or remove:
                bump = max(1, bump)  # a changed entry's version is above every reader's base
            new = current + max(0, bump)
            await self._remove_entries(conn, scope, new, remove)
            await conn.execute(
                "UPDATE sbm_scopes SET version = %s, updated_at = %s, xid = txid_current(), "
                "head = COALESCE(%s, head), overrides = COALESCE(%s::jsonb, overrides) "
                "WHERE namespace = %s AND scope = %s",
                (
                    new,
                    int(time.time() * 1000),
                    head,
                    None if overrides is None else overrides.model_dump_json(exclude_none=True),
                    self.namespace,
                    scope,
                ),
            )
            await self._put_entries(conn, scope, new, entries)
            await self._append_log(conn, scope, new, log)
        return new

    async def _lock_scope(self, conn: psycopg.AsyncConnection[Any], scope: str) -> int:
        """The scope's version, its row created if absent and locked until the transaction
        ends (writers of one scope take turns)."""

        await conn.execute(
            "INSERT INTO sbm_scopes (namespace, scope) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (self.namespace, scope),
        )
        row = await (
            await conn.execute(
                "SELECT version FROM sbm_scopes WHERE namespace = %s AND scope = %s FOR UPDATE",
                (self.namespace, scope),
            )
        ).fetchone()
        assert row is not None
        return int(row[0])

    async def _unchanged_since_read(
        self,
        conn: psycopg.AsyncConnection[Any],
        scope: str,
        current: int,
        expected: dict[str, int | None],
        entries: dict[str, Entry],
        remove: Sequence[str],
    ) -> tuple[dict[str, Entry], Sequence[str]]:
        """Check each key of ``expected`` is at the entry version its writer read (``None``:
        absent); a key already as this write would leave it is dropped from ``entries`` and
        ``remove`` (the same write sent again by a copy that died before it noted the reply),
        any other difference raises :class:`MemoryConflict`. Returns what is left to write."""

        found: dict[str, tuple[int, Entry]] = {}
        for row in await (
            await conn.execute(
                "SELECT key, version, kind, content, sources, status, person, "
                "keywords, updated_at, subjects FROM sbm_entries WHERE namespace = %s AND "
                "scope = %s AND key = ANY(%s)",
                (self.namespace, scope, list(expected)),
            )
        ).fetchall():
            found[row[0]] = (int(row[1]), _entry(row[0], *row[2:]))
        stale: list[str] = []
        done: set[str] = set()
        for k, want in sorted(expected.items()):
            have = found.get(k)
            if (None if have is None else have[0]) == want:
                continue
            if (have is not None and entries.get(k) == have[1]) or (have is None and k in remove):
                done.add(k)
            else:
                stale.append(k)
        if stale:
            raise self._conflict(
                f"{scope}: entr{'y' if len(stale) == 1 else 'ies'} "
                f"{', '.join(map(repr, stale[:10]))} changed since read (scope now at "
                f"version {current}): re-read and retry",
                current,
            )
        if not done:
            return entries, remove
        return {k: e for k, e in entries.items() if k not in done}, [
            k for k in remove if k not in done
        ]

    async def _remove_entries(
        self, conn: psycopg.AsyncConnection[Any], scope: str, version: int, remove: Sequence[str]
    ) -> None:
        """Delete ``remove``'s entries, each kept as a removal at ``version`` (a copy reads it as
        a change)."""

        if not remove:
            return
        await conn.execute(
            "DELETE FROM sbm_entries WHERE namespace = %s AND scope = %s AND key = ANY(%s)",
            (self.namespace, scope, list(remove)),
        )
        await conn.execute(
            "INSERT INTO sbm_removed (namespace, scope, key, version) "
            "SELECT %s, %s, k, %s FROM unnest(%s::text[]) AS k "
            "ON CONFLICT (namespace, scope, key) DO UPDATE SET version = EXCLUDED.version",
            (self.namespace, scope, version, list(remove)),
        )

    async def _put_entries(
        self,
        conn: psycopg.AsyncConnection[Any],
        scope: str,
        version: int,
        entries: dict[str, Entry],
    ) -> None:
        """Insert or replace ``entries`` at ``version`` (a key written again is no longer a
        removal)."""

        if not entries:
            return
        await conn.execute(
            "DELETE FROM sbm_removed WHERE namespace = %s AND scope = %s AND key = ANY(%s)",
            (self.namespace, scope, list(entries)),
        )
        cur = conn.cursor()
        await cur.executemany(
            """
            INSERT INTO sbm_entries (namespace, scope, key, version, kind, content,
                sources, status, person, keywords, updated_at, subjects)
            VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s::jsonb, %s, %s::jsonb)
            ON CONFLICT (namespace, scope, key) DO UPDATE SET
                version = EXCLUDED.version, kind = EXCLUDED.kind,
                content = EXCLUDED.content, sources = EXCLUDED.sources,
                status = EXCLUDED.status, person = EXCLUDED.person,
                keywords = EXCLUDED.keywords, updated_at = EXCLUDED.updated_at,
                subjects = EXCLUDED.subjects
            """,
            [
                (
                    self.namespace,
                    scope,
                    e.key,
                    version,
                    e.kind,
                    e.content,
                    json.dumps([s.model_dump() for s in e.sources]),
                    e.status,
                    e.person,
                    json.dumps(e.keywords),
                    e.updated_at,
                    None if e.subjects is None else e.subjects.model_dump_json(),
                )
                for e in entries.values()
            ],
        )

    async def _append_log(
        self,
        conn: psycopg.AsyncConnection[Any],
        scope: str,
        version: int,
        log: Sequence[LogRecord],
    ) -> None:
        """Append ``log``'s records to the namespace's log at ``version``."""

        if not log:
            return
        cur = conn.cursor()
        await cur.executemany(
            "INSERT INTO sbm_log (namespace, version, at, cause, scope, keys, detail) "
            "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s)",
            [
                (self.namespace, version, r.at, r.cause, scope, json.dumps(r.keys), r.detail)
                for r in log
            ],
        )

    async def _new_log_records(
        self, conn: psycopg.AsyncConnection[Any], scope: str, log: Sequence[LogRecord]
    ) -> list[LogRecord]:
        """``log`` without the records the store holds already (a copy sending its changes
        again after it died mid-way): a change is logged once. A record is known by its scope,
        time, cause, keys and detail."""

        if not log:
            return []
        rows = await (
            await conn.execute(
                "SELECT at, cause, keys, detail FROM sbm_log WHERE namespace = %s AND "
                "scope = %s AND at = ANY(%s)",
                (self.namespace, scope, sorted({r.at for r in log})),
            )
        ).fetchall()
        held = {(int(at), cause, json.dumps(keys), detail) for at, cause, keys, detail in rows}
        return [r for r in log if (r.at, r.cause, json.dumps(r.keys), r.detail) not in held]

    def _conflict(self, message: str, current: int) -> MemoryConflict:
        # Raised to the caller, not logged: the caller decides (a working copy logs what it
        # drops; a command's caller gets the error).
        return MemoryConflict(f"namespace {self.namespace}: {message}", current_version=current)

    async def read_log(self, *, after: int = 0) -> list[tuple[int, LogRecord]]:
        """Change-log records with a sequence number above ``after``, oldest first."""

        async with self._tx("reading the change log") as conn:
            rows = await (
                await conn.execute(
                    "SELECT seq, version, at, cause, scope, keys, detail FROM sbm_log "
                    "WHERE namespace = %s AND seq > %s ORDER BY seq",
                    (self.namespace, after),
                )
            ).fetchall()
        return [
            (
                int(seq),
                LogRecord(version=v, at=at, cause=cause, scope=scope, keys=keys, detail=detail),
            )
            for seq, v, at, cause, scope, keys, detail in rows
        ]

    # ------------------------------------------------------------ run segments

    async def append_segment(self, rollout_id: str, segment_id: str, line: str) -> int:
        """Store one recorded (redacted) run segment; its number within the rollout.

        Idempotent by ``segment_id``: a segment sent twice (a retry after a lost reply) is
        stored once and keeps its number. Numbers are dense and follow commit order: the
        rollout's row is locked while a number is taken.
        """

        async with self._tx(f"recording a run of {rollout_id}") as conn:
            return await self._append_one(conn, rollout_id, segment_id, line)

    async def append_segments(self, segments: Sequence[tuple[str, str, str]]) -> list[int]:
        """:meth:`append_segment` of each ``(rollout_id, segment_id, line)``, in order, in one
        transaction (a copy sending thousands of runs at once); their numbers.

        Callers give a rollout's segments in its file's order and the rollouts in the order of
        their ids (every sender does), so two senders lock the rollouts' rows in one order.
        """

        numbers: list[int] = []
        if not segments:
            return numbers
        async with self._tx(f"recording {len(segments)} runs") as conn:
            for rollout_id, segment_id, line in segments:
                numbers.append(await self._append_one(conn, rollout_id, segment_id, line))
        return numbers

    async def _append_one(
        self, conn: psycopg.AsyncConnection[Any], rollout_id: str, segment_id: str, line: str
    ) -> int:
        row = await (
            await conn.execute(
                "SELECT n FROM sbm_segments WHERE namespace = %s AND segment_id = %s",
                (self.namespace, segment_id),
            )
        ).fetchone()
        if row is not None:
            return int(row[0])
        row = await (
            await conn.execute(
                """
                INSERT INTO sbm_rollouts AS r (namespace, rollout_id, segments)
                VALUES (%s, %s, 1)
                ON CONFLICT (namespace, rollout_id) DO UPDATE SET segments = r.segments + 1,
                    xid = txid_current()
                RETURNING segments
                """,
                (self.namespace, rollout_id),
            )
        ).fetchone()
        assert row is not None
        n = int(row[0])
        await conn.execute(
            "INSERT INTO sbm_segments (namespace, rollout_id, n, segment_id, line) "
            "VALUES (%s, %s, %s, %s, %s)",
            (self.namespace, rollout_id, n, segment_id, line),
        )
        return n

    async def segment_key(self) -> bytes:
        """The namespace's key for sealing recorded runs (made once, by the first caller).

        Read by every process holding the DSN, never written to a workspace: a sandbox that
        does not hold the DSN cannot seal a line (see ``integrity.py``).
        """

        if self._segment_key is not None:
            return self._segment_key
        fresh = secrets.token_hex(32).encode()
        async with self._tx("reading the segment key") as conn:
            await conn.execute(
                "INSERT INTO sbm_keys (namespace, name, key) VALUES (%s, 'segment', %s) "
                "ON CONFLICT (namespace, name) DO NOTHING",
                (self.namespace, fresh),
            )
            row = await (
                await conn.execute(
                    "SELECT key FROM sbm_keys WHERE namespace = %s AND name = 'segment'",
                    (self.namespace,),
                )
            ).fetchone()
        assert row is not None
        self._segment_key = bytes(row[0])
        return self._segment_key

    async def segment_ids(self, rollout_id: str) -> list[str]:
        """The stored segments' ids of one rollout, in number order."""

        async with self._tx(f"reading runs of {rollout_id}") as conn:
            rows = await (
                await conn.execute(
                    "SELECT segment_id FROM sbm_segments WHERE namespace = %s AND "
                    "rollout_id = %s ORDER BY n",
                    (self.namespace, rollout_id),
                )
            ).fetchall()
        return [str(r[0]) for r in rows]

    async def read_segments(self, rollout_id: str, *, after: int = 0) -> list[tuple[int, str, str]]:
        """``(n, segment_id, line)`` of the rollout's segments numbered above ``after``."""

        async with self._tx(f"reading runs of {rollout_id}") as conn:
            rows = await (
                await conn.execute(
                    "SELECT n, segment_id, line FROM sbm_segments WHERE namespace = %s AND "
                    "rollout_id = %s AND n > %s ORDER BY n",
                    (self.namespace, rollout_id, after),
                )
            ).fetchall()
        return [(int(n), str(sid), str(line)) for n, sid, line in rows]

    async def read_segments_many(
        self, after: Mapping[str, int]
    ) -> dict[str, list[tuple[int, str, str]]]:
        """:meth:`read_segments` of each rollout of ``after`` (its id -> the last segment number
        already held), in one statement: a copy catching up on thousands of rollouts does not
        pay a round trip and a transaction for each."""

        found: dict[str, list[tuple[int, str, str]]] = {rid: [] for rid in after}
        if not after:
            return found
        ids = list(after)
        async with self._tx(f"reading runs of {len(ids)} rollouts") as conn:
            rows = await (
                await conn.execute(
                    "SELECT s.rollout_id, s.n, s.segment_id, s.line FROM sbm_segments s "
                    "JOIN unnest(%s::text[], %s::bigint[]) AS w(rollout_id, after) "
                    "ON s.rollout_id = w.rollout_id AND s.n > w.after "
                    "WHERE s.namespace = %s ORDER BY s.rollout_id, s.n",
                    (ids, [int(after[r]) for r in ids], self.namespace),
                )
            ).fetchall()
        for rid, n, sid, line in rows:
            found[str(rid)].append((int(n), str(sid), str(line)))
        return found

    async def rollouts(self) -> dict[str, RolloutState]:
        async with self._tx("reading rollouts") as conn:
            rows = await (
                await conn.execute(
                    "SELECT rollout_id, segments, watermark, progress FROM sbm_rollouts "
                    "WHERE namespace = %s",
                    (self.namespace,),
                )
            ).fetchall()
        return {
            str(r): RolloutState(rollout_id=str(r), segments=int(s), watermark=int(w), progress=p)
            for r, s, w, p in rows
        }

    async def advance(
        self,
        rollout_id: str,
        *,
        watermark: int,
        progress: dict[str, Any],
        fence: Fence | None = None,
    ) -> int:
        """Record phase-1 progress of a rollout; the watermark never moves backwards.

        A lower ``watermark`` than stored leaves the stored one (and its progress) as is and
        is logged. Returns the stored watermark.
        """

        async with self._tx(f"recording progress of {rollout_id}") as conn:
            await self._check_fence(conn, fence)
            row = await (
                await conn.execute(
                    """
                    INSERT INTO sbm_rollouts AS r (namespace, rollout_id, watermark, progress)
                    VALUES (%s, %s, %s, %s::jsonb)
                    ON CONFLICT (namespace, rollout_id) DO UPDATE SET
                        watermark = GREATEST(r.watermark, EXCLUDED.watermark),
                        progress = CASE WHEN EXCLUDED.watermark >= r.watermark
                                        THEN EXCLUDED.progress ELSE r.progress END,
                        xid = txid_current()
                    RETURNING watermark
                    """,
                    (self.namespace, rollout_id, watermark, json.dumps(progress)),
                )
            ).fetchone()
        assert row is not None
        stored = int(row[0])
        if stored > watermark:
            logger.warning(
                "progress of %s not moved back from segment %d to %d (namespace %s)",
                rollout_id,
                stored,
                watermark,
                self.namespace,
            )
        return stored

    # ------------------------------------------------------------ threads and notes

    async def map_threads(self, threads: dict[str, str]) -> None:
        """Record conversation fingerprints (each maps to a rollout id; the first one stays)."""

        if not threads:
            return
        async with self._tx("indexing conversations") as conn:
            cur = conn.cursor()
            await cur.executemany(
                "INSERT INTO sbm_threads (namespace, fingerprint, rollout_id) "
                "VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                [(self.namespace, fp, rid) for fp, rid in threads.items()],
            )

    async def threads(self) -> dict[str, str]:
        async with self._tx("reading conversations") as conn:
            rows = await (
                await conn.execute(
                    "SELECT fingerprint, rollout_id FROM sbm_threads WHERE namespace = %s",
                    (self.namespace,),
                )
            ).fetchall()
        return {str(f): str(r) for f, r in rows}

    async def put_files(
        self,
        files: dict[str, bytes | None],
        *,
        fence: Fence | None = None,
    ) -> None:
        """Store derived notes (``raw_memories/<id>.md`` ...); ``None`` deletes one."""

        if not files:
            return
        async with self._tx("writing notes") as conn:
            await self._check_fence(conn, fence)
            # A deletion is a tombstone (no content): copies see it and remove theirs.
            await conn.cursor().executemany(
                "INSERT INTO sbm_files (namespace, path, content) VALUES (%s, %s, %s) "
                "ON CONFLICT (namespace, path) DO UPDATE SET content = EXCLUDED.content, "
                "rev = nextval('sbm_files_rev')",
                [(self.namespace, path, data) for path, data in files.items()],
            )

    async def files(self, *, after: int = 0) -> tuple[dict[str, bytes | None], int]:
        """Notes changed since revision ``after`` (``None``: deleted) and the newest revision."""

        async with self._tx("reading notes") as conn:
            rows = await (
                await conn.execute(
                    "SELECT path, content, rev FROM sbm_files WHERE namespace = %s AND rev > %s "
                    "ORDER BY rev",
                    (self.namespace, after),
                )
            ).fetchall()
        newest = max([after, *(int(r) for _, _, r in rows)])
        return {str(p): (None if c is None else bytes(c)) for p, c, _ in rows}, newest

    # ------------------------------------------------------------ conversations and settings

    async def list_conversations(self) -> list[str]:
        """Rollout ids of every conversation with memory (even empty, made by ``init``) or a
        recorded run, sorted: what the file store lists from its conversation records and
        progress, plus runs recorded but not yet extracted."""

        async with self._tx("listing conversations") as conn:
            rows = await (
                await conn.execute(
                    "SELECT substr(scope, %s) FROM sbm_scopes WHERE namespace = %s "
                    "AND starts_with(scope, %s) "
                    "UNION SELECT rollout_id FROM sbm_rollouts WHERE namespace = %s",
                    (
                        len(CONVERSATION_PREFIX) + 1,
                        self.namespace,
                        CONVERSATION_PREFIX,
                        self.namespace,
                    ),
                )
            ).fetchall()
        return sorted(str(r[0]) for r in rows)

    async def load_defaults(self) -> Defaults | None:
        """The switch defaults recorded by the last consolidation; ``None`` when none were
        (or the recorded value is unreadable, logged)."""

        async with self._tx("reading the memory settings") as conn:
            row = await (
                await conn.execute(
                    "SELECT content FROM sbm_files WHERE namespace = %s AND path = %s",
                    (self.namespace, SETTINGS_NOTE),
                )
            ).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            return Defaults.model_validate_json(bytes(row[0]))
        except ValueError as exc:
            logger.warning(
                "memory settings of namespace %s are not valid (%s); using the configured ones",
                self.namespace,
                exc_text(exc).splitlines()[0],
            )
            return None

    async def save_defaults(self, defaults: Defaults, *, fence: Fence | None = None) -> None:
        """Record the switch defaults (written only when they differ from the stored ones)."""

        if await self.load_defaults() != defaults:
            data = defaults.model_dump_json(indent=1).encode("utf-8")
            await self.put_files({SETTINGS_NOTE: data}, fence=fence)
