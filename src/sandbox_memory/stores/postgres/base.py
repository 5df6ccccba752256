"""The connection every room of :class:`~.PostgresStore` stands on.

:class:`PostgresBase` holds what the rooms share (the DSN, the namespace, the lease length,
the one connection and the lock that gives it to one operation at a time) and does what every
statement needs: connect (migrating the schema first), run one transaction with its errors
turned into clear store errors. What one room calls of another is declared here, abstract:
the schema's migration (:mod:`.schema`), the fence check (:mod:`.leases`) and the log's
append (:mod:`.log`).
"""

from __future__ import annotations

import abc
import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ...errors import MemoryConfigError, MemoryConflict, MemoryStoreUnavailable
from ..records import LogRecord
from ..shared import Fence
from .credentials import redact_dsn, scrub

if TYPE_CHECKING:
    import psycopg

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


class PostgresBase(abc.ABC):
    """The connection and the attributes the rooms of :class:`~.PostgresStore` share.

    Each room (:mod:`.schema`, :mod:`.leases`, :mod:`.scopes`, :mod:`.changes`, :mod:`.log`,
    :mod:`.segments`, :mod:`.progress`, :mod:`.threads`, :mod:`.notes`) is a subclass;
    :class:`~.PostgresStore` inherits them all. What one room calls of another is declared
    here.
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
        written by ``search/postgres.py``), checked against ``fence`` when given: the
        store's side of :class:`~sandbox_memory.search.postgres.SearchTables`."""

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

    # ------------------------------------------------------------ what rooms call of others

    @abc.abstractmethod
    async def _migrate(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Bring the schema to :data:`~.schema.SCHEMA_VERSION` (:mod:`.schema`)."""

    @abc.abstractmethod
    async def _check_fence(self, conn: psycopg.AsyncConnection[Any], fence: Fence | None) -> None:
        """Refuse the write unless ``fence`` still holds the lease (:mod:`.leases`)."""

    @abc.abstractmethod
    async def _append_log(
        self,
        conn: psycopg.AsyncConnection[Any],
        scope: str,
        version: int,
        log: Sequence[LogRecord],
    ) -> None:
        """Append ``log``'s records at ``version`` (:mod:`.log`)."""

    @abc.abstractmethod
    async def _new_log_records(
        self, conn: psycopg.AsyncConnection[Any], scope: str, log: Sequence[LogRecord]
    ) -> list[LogRecord]:
        """``log`` without the records the store holds already (:mod:`.log`)."""
