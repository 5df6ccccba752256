"""Scopes and their entries: ``sbm_scopes``, ``sbm_entries`` and the removals in
``sbm_removed``.

A scope is layout memory or one conversation's memory. :meth:`ScopeTables.write_scope` writes
one scope's changes atomically, as its steps: the fence, the scope row locked, the version and
entry checks (a resend of the same write dropped), removals with their tombstones, the scope's
version and switches, the upserts, the log records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import MemoryConflict
from ..records import Entry, LogRecord, Overrides
from ..shared import CONVERSATION_PREFIX, Fence, ScopeState
from .base import PostgresBase

if TYPE_CHECKING:
    import psycopg


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


class ScopeTables(PostgresBase):
    """Scopes read and written, one scope's write at a time; the conversations listed."""

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

    def _conflict(self, message: str, current: int) -> MemoryConflict:
        # Raised to the caller, not logged: the caller decides (a working copy logs what it
        # drops; a command's caller gets the error).
        return MemoryConflict(f"namespace {self.namespace}: {message}", current_version=current)

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
