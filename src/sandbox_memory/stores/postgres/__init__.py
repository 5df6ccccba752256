"""A shared memory store on PostgreSQL: one memory for sandboxes on many machines.

PostgreSQL holds the source of truth of every layout (a *namespace*): entries with their
sources, versions and status, the append-only change log, switches (conversation overrides),
phase-1 progress as a watermark per rollout, leases with fencing tokens, the recorded
(redacted) run segments, and the derived notes phase 1 writes (raw memories, rollout
summaries). The sandbox workspace keeps the seed's file layout as a working copy
(:mod:`sandbox_memory.shared_copy`).

Every write is conditional: on the version of the scope (a command) or of each entry it
read (a consolidation's changes), and, for writes made under the layout's lease, on the
lease's fencing token. A stale write raises :class:`~sandbox_memory.errors.MemoryConflict`
and changes nothing; a holder whose lease ran out raises
:class:`~sandbox_memory.errors.MemoryLeaseLost`.

The schema is created on first use and migrated by the version in ``sbm_schema``. Tables are
unqualified, so a tenant's role whose ``search_path`` is its own schema gets its own tables
(see ``docs/sharing.md``); within one set of tables, every row carries its namespace.

The store is built of one room per job, each a class :class:`PostgresStore` inherits, all
standing on the connection of :mod:`.base` (connecting, one transaction at a time, errors
made clear; what one room calls of another is declared there):

- :mod:`.credentials`  the DSN's password kept out of every log line and error
- :mod:`.schema`       the migrations (``MIGRATIONS``) and the migrator
- :mod:`.leases`       the namespace's lease and its fence, the extraction claims
- :mod:`.scopes`       scopes and their entries; ``write_scope`` and its steps
- :mod:`.changes`      what changed since a working copy last looked
- :mod:`.log`          the change log
- :mod:`.segments`     recorded run segments and the key that seals them
- :mod:`.progress`     phase-1 progress of each rollout
- :mod:`.threads`      conversation fingerprints
- :mod:`.notes`        derived notes and the switch defaults kept as one

.. versionadded:: 0.1.0
"""

from __future__ import annotations

from .base import DEFAULT_CONNECT_TIMEOUT_SECONDS, DEFAULT_LEASE_SECONDS, NAMESPACE_RE
from .changes import ChangeTables
from .credentials import redact_dsn, scrub
from .leases import LAYOUT_LEASE, LeaseTables
from .log import LogTables
from .notes import NoteTables
from .progress import ProgressTables
from .schema import MIGRATIONS, SCHEMA_VERSION, SchemaTables
from .scopes import ScopeTables
from .segments import SegmentTables
from .threads import ThreadTables


class PostgresStore(
    SchemaTables,
    LeaseTables,
    ScopeTables,
    ChangeTables,
    LogTables,
    SegmentTables,
    ProgressTables,
    ThreadTables,
    NoteTables,
):
    """A layout's memory in PostgreSQL, isolated by ``namespace``.

    ``dsn`` is a libpq connection string or URI; its password never appears in a log line,
    an error or memory. One store object holds one connection, opened on first use, used by
    one operation at a time, and reopened after a failure.
    """


__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_SECONDS",
    "DEFAULT_LEASE_SECONDS",
    "LAYOUT_LEASE",
    "MIGRATIONS",
    "NAMESPACE_RE",
    "SCHEMA_VERSION",
    "PostgresStore",
    "redact_dsn",
    "scrub",
]
