"""Conversation fingerprints, each mapped to its rollout id: ``sbm_threads``."""

from __future__ import annotations

from .base import PostgresBase


class ThreadTables(PostgresBase):
    """Conversation fingerprints (the first mapping of one stays)."""

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
