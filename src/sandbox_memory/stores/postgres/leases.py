"""The lease and its fence, and the extraction claims: rows of ``sbm_leases``.

One lease per namespace (:data:`LAYOUT_LEASE`) lets one consolidation (or command) write at a
time; its fencing token, which every takeover changes, is what refuses an old holder's writes.
Claims (``extract:<rollout-id>``) keep closes from extracting one conversation at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import MemoryLeaseLost, MemoryLockTimeout
from ..shared import Fence
from .base import PostgresBase

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger("sandbox_memory")

LAYOUT_LEASE = "layout"
"""The one lease per namespace: one consolidation (or command) at a time."""


class LeaseTables(PostgresBase):
    """The namespace's lease (taken, renewed, released, checked) and the extraction claims."""

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
