"""The change log: ``sbm_log``, appended to in a scope's write, read by sequence number."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..records import LogRecord
from .base import PostgresBase

if TYPE_CHECKING:
    import psycopg


class LogTables(PostgresBase):
    """The change log: appended once per change, read in order."""

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
