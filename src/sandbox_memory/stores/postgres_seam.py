"""PostgreSQL behind the store seam: :class:`PostgresMemoryStore` meets
:class:`~sandbox_memory.stores.files.MemoryStore` one record at a time, on the tables of
:class:`~sandbox_memory.stores.postgres.PostgresStore` (same namespace, same meaning).

- layout memory: the ``layout`` scope (``sbm_scopes``: version, and the change stamp in
  ``head``) and its entries (``sbm_entries``); a removed key is written to ``sbm_removed``.
- conversation memory: one ``conversation:<id>`` scope each, its entries beside it.
- the change log: ``sbm_log``; switch defaults and the registry: notes (``sbm_files``).
- progress: ``sbm_rollouts.progress`` (a forgotten rollout keeps its offset with
  ``forgotten``); recorded segments: ``sbm_segments`` (:meth:`PostgresMemoryStore.
  append_segment`), their bytes counted the way the file store counts ``sessions/<id>.jsonl``.
- threads: ``sbm_threads``; the lease: the namespace's lease row with its fencing token.

Pending rollouts are computed from the segments and progress on every call (no flags kept:
:meth:`~sandbox_memory.stores.files.MemoryStore.changed_rollouts` is ``None``, the search index looks
at every rollout). :meth:`layout_changes` names no keys (any entry may differ), so a reader
that last saw another stamp reads layout memory afresh.

.. versionadded:: 0.2.0
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .postgres import PostgresStore
from .postgres.scopes import _entry
from .records import (
    TAIL_BYTES,
    ConversationMemory,
    CopyRetraction,
    Defaults,
    Entry,
    LayoutHead,
    LayoutMemory,
    LogRecord,
    Overrides,
    Registry,
    RolloutProgress,
)
from .seam import Lease, MemoryStore, StoredRecords
from .shared import LAYOUT_SCOPE, Fence, conversation_scope

REGISTRY_NOTE = "store/registry.json"
"""The registry phase 2 derives, kept as a note (as the working copy keeps it)."""

_ENTRY_COLUMNS = "key, kind, content, sources, status, person, keywords, updated_at, subjects"


def _entry_row(entry: Entry) -> tuple[Any, ...]:
    data = entry.model_dump(mode="json")
    return (
        entry.key,
        data["kind"],
        entry.content,
        json.dumps(data["sources"]),
        data["status"],
        entry.person,
        json.dumps(data["keywords"]),
        entry.updated_at,
        None if data.get("subjects") is None else json.dumps(data["subjects"]),
    )


class PostgresLease(Lease):
    """The namespace's lease as the seam hands it out (:class:`~sandbox_memory.stores.files.Lease`);
    :meth:`check` fails with :class:`~sandbox_memory.errors.MemoryLeaseLost` once it was
    taken over."""

    def __init__(self, pg: PostgresStore, *, timeout: float) -> None:
        self._pg = pg
        self._timeout = timeout
        self.fence: Fence | None = None

    async def acquire(self) -> None:
        self.fence = await self._pg.acquire(timeout=self._timeout)

    async def release(self) -> None:
        fence, self.fence = self.fence, None
        if fence is not None:
            await self._pg.release(fence)

    async def check(self) -> None:
        if self.fence is not None:
            await self._pg.renew(self.fence)


class PostgresMemoryStore(MemoryStore):
    """The seam's records in PostgreSQL, through ``pg``'s connection (see the module
    docstring)."""

    def __init__(self, pg: PostgresStore) -> None:
        self.pg = pg
        self.namespace = pg.namespace

    def describe(self) -> str:
        return self.pg.describe()

    # ------------------------------------------------------------ segments

    async def append_segment(self, rollout_id: str, line: bytes) -> None:
        """Record one segment line of ``rollout_id`` (what the recorder appends to
        ``sessions/<id>.jsonl`` on the workspace store)."""

        await self.pg.append_segment(rollout_id, secrets.token_hex(16), line.decode("utf-8"))

    async def read_segments(self, rollout_id: str, offset: int = 0) -> bytes:
        """The recorded bytes of ``rollout_id`` from ``offset`` on."""

        rows = await self.pg.read_segments(rollout_id)
        return "".join(line for _, _, line in rows).encode("utf-8")[offset:]

    async def tail(self, rollout_id: str, offset: int) -> str | None:
        """:func:`~sandbox_memory.stores.files.tail_hash` of the recorded bytes before ``offset``."""

        data = await self.read_segments(rollout_id)
        if offset <= 0 or offset > len(data):
            return None
        return hashlib.sha256(data[max(0, offset - TAIL_BYTES) : offset]).hexdigest()[:16]

    # -------------------------------------------------------------- layout

    async def layout_head(self) -> LayoutHead:
        async with self.pg._tx("reading the layout head") as conn:
            row = await (
                await conn.execute(
                    "SELECT version, head FROM sbm_scopes WHERE namespace = %s AND scope = %s",
                    (self.namespace, LAYOUT_SCOPE),
                )
            ).fetchone()
        if row is None:
            return LayoutHead(format=2)
        return LayoutHead(version=int(row[0]), stamp=row[1] or "", format=2)

    async def _entries(self, scope: str, keys: list[str] | None) -> dict[str, Entry]:
        query = f"SELECT {_ENTRY_COLUMNS} FROM sbm_entries WHERE namespace = %s AND scope = %s"
        args: list[Any] = [self.namespace, scope]
        if keys is not None:
            query += " AND key = ANY(%s)"
            args.append(keys)
        async with self.pg._tx(f"reading entries of {scope}") as conn:
            rows = await (await conn.execute(query + " ORDER BY key", args)).fetchall()
        return {str(r[0]): _entry(*r) for r in rows}

    async def layout_entries(self, keys: Iterable[str]) -> dict[str, Entry]:
        wanted = list(dict.fromkeys(keys))
        return await self._entries(LAYOUT_SCOPE, wanted) if wanted else {}

    async def layout_for_reading(self) -> LayoutMemory:
        head = await self.layout_head()
        return LayoutMemory(version=head.version, entries=await self._entries(LAYOUT_SCOPE, None))

    async def layout_changes(self, since: str) -> tuple[str, set[str] | None]:
        now = (await self.layout_head()).stamp
        if since and since == now:
            return now, set()
        return now, None

    async def layout_citing(self, conversations: Iterable[str]) -> set[str]:
        cites = [json.dumps([{"conversation": c}]) for c in dict.fromkeys(conversations)]
        if not cites:
            return set()
        async with self.pg._tx("reading entries citing conversations") as conn:
            rows = await (
                await conn.execute(
                    "SELECT key FROM sbm_entries WHERE namespace = %s AND scope = %s "
                    "AND sources @> ANY(%s::jsonb[])",
                    (self.namespace, LAYOUT_SCOPE, cites),
                )
            ).fetchall()
        return {str(r[0]) for r in rows}

    async def commit_layout(
        self,
        *,
        version: int,
        put: Mapping[str, Entry],
        delete: Iterable[str] = (),
        log: Iterable[LogRecord] = (),
        copies: Iterable[CopyRetraction] = (),
        whole: bool = False,
    ) -> LayoutHead:
        _ = whole  # changes name no keys anyway
        gone = [k for k in dict.fromkeys(delete) if k not in put]
        stamp = secrets.token_hex(8)
        async with self.pg._tx("committing layout memory") as conn:
            await self._put_scope(conn, LAYOUT_SCOPE, version, stamp, None, put, gone)
            await self._append_log(conn, list(log))
        # After the layout's transaction: a writer killed before these leaves the copies of
        # a retracted entry active in conversation memory until the entry is forgotten again.
        await self._retract(put, copies)
        return LayoutHead(version=version, stamp=stamp, format=2)

    async def _put_scope(
        self,
        conn: Any,
        scope: str,
        version: int,
        head: str | None,
        overrides: Overrides | None,
        put: Mapping[str, Entry],
        gone: list[str],
    ) -> None:
        await conn.execute(
            """
            INSERT INTO sbm_scopes AS s (namespace, scope, version, head, overrides, updated_at)
            VALUES (%s, %s, %s, %s, COALESCE(%s::jsonb, '{}'::jsonb), %s)
            ON CONFLICT (namespace, scope) DO UPDATE SET version = EXCLUDED.version,
                head = EXCLUDED.head, overrides = COALESCE(%s::jsonb, s.overrides),
                updated_at = EXCLUDED.updated_at, xid = txid_current()
            """,
            (
                self.namespace,
                scope,
                version,
                head,
                None if overrides is None else overrides.model_dump_json(),
                int(time.time() * 1000),
                None if overrides is None else overrides.model_dump_json(),
            ),
        )
        if gone:
            await conn.execute(
                "DELETE FROM sbm_entries WHERE namespace = %s AND scope = %s AND key = ANY(%s)",
                (self.namespace, scope, gone),
            )
            await conn.cursor().executemany(
                "INSERT INTO sbm_removed (namespace, scope, key, version) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (namespace, scope, key) DO UPDATE SET version = EXCLUDED.version",
                [(self.namespace, scope, key, version) for key in gone],
            )
        if put:
            await conn.cursor().executemany(
                f"""
                INSERT INTO sbm_entries (namespace, scope, version, {_ENTRY_COLUMNS})
                VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s::jsonb, %s, %s::jsonb)
                ON CONFLICT (namespace, scope, key) DO UPDATE SET version = EXCLUDED.version,
                    kind = EXCLUDED.kind, content = EXCLUDED.content,
                    sources = EXCLUDED.sources, status = EXCLUDED.status,
                    person = EXCLUDED.person, keywords = EXCLUDED.keywords,
                    updated_at = EXCLUDED.updated_at, subjects = EXCLUDED.subjects
                """,
                [(self.namespace, scope, version, *_entry_row(e)) for e in put.values()],
            )
            await conn.execute(
                "DELETE FROM sbm_removed WHERE namespace = %s AND scope = %s AND key = ANY(%s)",
                (self.namespace, scope, list(put)),
            )

    async def recover_layout(self) -> None:
        """Nothing to recover: a commit is one transaction, applied whole or not at all."""

    # ------------------------------------------------------- conversations

    async def _note(self, path: str) -> bytes | None:
        async with self.pg._tx(f"reading {path}") as conn:
            row = await (
                await conn.execute(
                    "SELECT content FROM sbm_files WHERE namespace = %s AND path = %s",
                    (self.namespace, path),
                )
            ).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    async def load_registry(self) -> Registry:
        raw = await self._note(REGISTRY_NOTE)
        return Registry() if raw is None else Registry.model_validate_json(raw)

    async def save_registry(self, registry: Registry) -> None:
        await self.pg.put_files({REGISTRY_NOTE: registry.model_dump_json().encode("utf-8")})

    async def load_conversation(self, rollout_id: str) -> ConversationMemory:
        scope = conversation_scope(rollout_id)
        async with self.pg._tx(f"reading conversation {rollout_id}") as conn:
            row = await (
                await conn.execute(
                    "SELECT version, head, overrides, updated_at FROM sbm_scopes "
                    "WHERE namespace = %s AND scope = %s",
                    (self.namespace, scope),
                )
            ).fetchone()
        if row is None:
            return ConversationMemory(rollout_id=rollout_id)
        return ConversationMemory(
            rollout_id=rollout_id,
            version=int(row[0]),
            head=row[1],
            overrides=Overrides.model_validate(row[2]),
            updated_at=int(row[3]),
            entries=await self._entries(scope, None),
        )

    async def save_conversation(self, memory: ConversationMemory) -> None:
        scope = conversation_scope(memory.rollout_id)
        memory.updated_at = int(time.time() * 1000)
        async with self.pg._tx(f"saving conversation {memory.rollout_id}") as conn:
            rows = await (
                await conn.execute(
                    "SELECT key FROM sbm_entries WHERE namespace = %s AND scope = %s",
                    (self.namespace, scope),
                )
            ).fetchall()
            gone = [str(r[0]) for r in rows if str(r[0]) not in memory.entries]
            await self._put_scope(
                conn,
                scope,
                memory.version,
                memory.head,
                memory.overrides,
                memory.entries,
                gone,
            )

    async def conversation_exists(self, rollout_id: str) -> bool:
        async with self.pg._tx(f"reading conversation {rollout_id}") as conn:
            row = await (
                await conn.execute(
                    "SELECT 1 FROM sbm_scopes WHERE namespace = %s AND scope = %s",
                    (self.namespace, conversation_scope(rollout_id)),
                )
            ).fetchone()
        return row is not None

    async def scopes_with_memory(self) -> set[str]:
        async with self.pg._tx("listing conversations") as conn:
            rows = await (
                await conn.execute(
                    "SELECT scope FROM sbm_scopes WHERE namespace = %s "
                    "AND starts_with(scope, 'conversation:')",
                    (self.namespace,),
                )
            ).fetchall()
        return {str(r[0]) for r in rows}

    async def conversations_holding(self, key: str) -> list[str] | None:
        async with self.pg._tx(f"reading conversations holding {key}") as conn:
            rows = await (
                await conn.execute(
                    "SELECT substr(scope, 14) FROM sbm_entries WHERE namespace = %s "
                    "AND starts_with(scope, 'conversation:') AND key = %s ORDER BY 1",
                    (self.namespace, key),
                )
            ).fetchall()
        return [str(r[0]) for r in rows]

    async def list_conversations(self) -> list[str]:
        return await self.pg.list_conversations()

    async def load_defaults(self) -> Defaults | None:
        return await self.pg.load_defaults()

    async def save_defaults(self, defaults: Defaults) -> None:
        await self.pg.save_defaults(defaults)

    # ----------------------------------------------------------------- log

    async def _append_log(self, conn: Any, records: list[LogRecord]) -> None:
        if records:
            await conn.cursor().executemany(
                "INSERT INTO sbm_log (namespace, version, at, cause, scope, keys, detail) "
                "VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s)",
                [
                    (
                        self.namespace,
                        r.version,
                        r.at,
                        r.cause,
                        r.scope,
                        json.dumps(r.keys),
                        r.detail,
                    )
                    for r in records
                ],
            )

    async def append_log(self, record: LogRecord) -> None:
        async with self.pg._tx("appending to the change log") as conn:
            await self._append_log(conn, [record])

    async def read_log(self) -> list[LogRecord]:
        return [record for _, record in await self.pg.read_log()]

    async def replace_log(self, records: Iterable[LogRecord]) -> None:
        async with self.pg._tx("replacing the change log") as conn:
            await conn.execute("DELETE FROM sbm_log WHERE namespace = %s", (self.namespace,))
            await self._append_log(conn, list(records))

    async def every_record(self) -> StoredRecords:
        async with self.pg._tx("listing records") as conn:
            found = []
            for query in (
                "SELECT substr(scope, 14) FROM sbm_scopes WHERE namespace = %s "
                "AND starts_with(scope, 'conversation:') ORDER BY 1",
                "SELECT rollout_id FROM sbm_rollouts WHERE namespace = %s ORDER BY 1",
                "SELECT fingerprint FROM sbm_threads WHERE namespace = %s ORDER BY 1",
            ):
                rows = await (await conn.execute(query, (self.namespace,))).fetchall()
                found.append([str(r[0]) for r in rows])
        return StoredRecords(conversations=found[0], rollouts=found[1], threads=found[2])

    # ------------------------------------------------------------ progress

    async def _progress_rows(self, rollout_id: str | None) -> dict[str, Any]:
        query = "SELECT rollout_id, progress FROM sbm_rollouts WHERE namespace = %s"
        args: list[Any] = [self.namespace]
        if rollout_id is not None:
            query += " AND rollout_id = %s"
            args.append(rollout_id)
        async with self.pg._tx("reading progress") as conn:
            rows = await (
                await conn.execute(query + " AND progress <> '{}'::jsonb", args)
            ).fetchall()
        return {str(r[0]): r[1] for r in rows}

    async def get_progress(self, rollout_id: str) -> RolloutProgress | None:
        raw = (await self._progress_rows(rollout_id)).get(rollout_id)
        return None if raw is None else RolloutProgress.model_validate(raw)

    async def _put(self, rollout_id: str, progress: RolloutProgress) -> None:
        async with self.pg._tx(f"recording progress of {rollout_id}") as conn:
            await conn.execute(
                """
                INSERT INTO sbm_rollouts AS r (namespace, rollout_id, progress)
                VALUES (%s, %s, %s::jsonb)
                ON CONFLICT (namespace, rollout_id) DO UPDATE SET progress = EXCLUDED.progress,
                    xid = txid_current()
                """,
                (self.namespace, rollout_id, progress.model_dump_json()),
            )

    async def put_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        await self._put(rollout_id, progress.model_copy(update={"forgotten": False}))

    async def forget_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        await self._put(
            rollout_id,
            RolloutProgress(offset=progress.offset, updated_at=progress.updated_at, forgotten=True),
        )

    async def list_progress(self) -> dict[str, RolloutProgress]:
        found = {
            rid: RolloutProgress.model_validate(raw)
            for rid, raw in (await self._progress_rows(None)).items()
        }
        return {rid: p for rid, p in found.items() if not p.forgotten}

    async def pending_rollouts(self) -> list[str]:
        async with self.pg._tx("reading pending rollouts") as conn:
            rows = await (
                await conn.execute(
                    """
                    SELECT s.rollout_id, sum(octet_length(s.line)), r.progress
                    FROM sbm_segments s JOIN sbm_rollouts r
                      ON r.namespace = s.namespace AND r.rollout_id = s.rollout_id
                    WHERE s.namespace = %s GROUP BY s.rollout_id, r.progress
                    ORDER BY s.rollout_id
                    """,
                    (self.namespace,),
                )
            ).fetchall()
        pending: list[str] = []
        for rid, size, raw in rows:
            if raw == {}:
                pending.append(str(rid))
                continue
            prog = RolloutProgress.model_validate(raw)
            if int(size) != prog.offset or (
                prog.tail is not None and await self.tail(str(rid), prog.offset) != prog.tail
            ):
                pending.append(str(rid))
        return pending

    async def mark_pending(self, rollout_id: str) -> None:
        """Nothing to mark: :meth:`pending_rollouts` compares every rollout's segments with
        its progress."""

        _ = rollout_id

    # ------------------------------------------------------------- threads

    async def thread_for(self, fingerprint: str) -> str | None:
        async with self.pg._tx("reading conversations") as conn:
            row = await (
                await conn.execute(
                    "SELECT rollout_id FROM sbm_threads WHERE namespace = %s AND fingerprint = %s",
                    (self.namespace, fingerprint),
                )
            ).fetchone()
        return None if row is None else str(row[0])

    async def index_thread(self, fingerprint: str, rollout_id: str) -> None:
        await self.pg.map_threads({fingerprint: rollout_id})

    # --------------------------------------------------------------- lease

    def lease(self, *, timeout: float, lease: float) -> PostgresLease:
        _ = lease  # the store's lease_seconds, renewed by check()
        return PostgresLease(self.pg, timeout=timeout)
