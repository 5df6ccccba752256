"""What changed since a working copy last looked: the horizon it reads from, the scopes,
rollouts and conversation fingerprints written since, and each scope's changes after the
version the copy holds."""

from __future__ import annotations

from ..records import Overrides
from ..shared import RolloutState, ScopeState
from .base import PostgresBase
from .scopes import _entry


class ChangeTables(PostgresBase):
    """The reads a working copy catches up with."""

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
