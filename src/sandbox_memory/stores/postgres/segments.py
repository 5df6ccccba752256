"""Recorded run segments (``sbm_segments``, numbered per rollout in ``sbm_rollouts``) and the
namespace's key that seals them (``sbm_keys``)."""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .base import PostgresBase

if TYPE_CHECKING:
    import psycopg


class SegmentTables(PostgresBase):
    """Recorded (redacted) run segments, stored once each, and their sealing key."""

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
