"""Phase-1 progress of each rollout: ``sbm_rollouts``' watermark and progress."""

from __future__ import annotations

import json
import logging
from typing import Any

from ..shared import Fence, RolloutState
from .base import PostgresBase

logger = logging.getLogger("sandbox_memory")


class ProgressTables(PostgresBase):
    """Rollouts' progress: read, and advanced (never backwards)."""

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
