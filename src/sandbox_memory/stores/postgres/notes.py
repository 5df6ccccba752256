"""Derived notes (``raw_memories/<id>.md``, ``rollout_summaries/...``, the registry) and the
switch defaults kept as a note: ``sbm_files``, a deletion kept as a tombstone."""

from __future__ import annotations

import logging

from ...datapolicy import exc_text
from ..records import Defaults
from ..shared import SETTINGS_NOTE, Fence
from .base import PostgresBase

logger = logging.getLogger("sandbox_memory")


class NoteTables(PostgresBase):
    """Notes written and read by revision; the switch defaults among them."""

    async def put_files(
        self,
        files: dict[str, bytes | None],
        *,
        fence: Fence | None = None,
    ) -> None:
        """Store derived notes (``raw_memories/<id>.md`` ...); ``None`` deletes one."""

        if not files:
            return
        async with self._tx("writing notes") as conn:
            await self._check_fence(conn, fence)
            # A deletion is a tombstone (no content): copies see it and remove theirs.
            await conn.cursor().executemany(
                "INSERT INTO sbm_files (namespace, path, content) VALUES (%s, %s, %s) "
                "ON CONFLICT (namespace, path) DO UPDATE SET content = EXCLUDED.content, "
                "rev = nextval('sbm_files_rev')",
                [(self.namespace, path, data) for path, data in files.items()],
            )

    async def files(self, *, after: int = 0) -> tuple[dict[str, bytes | None], int]:
        """Notes changed since revision ``after`` (``None``: deleted) and the newest revision."""

        async with self._tx("reading notes") as conn:
            rows = await (
                await conn.execute(
                    "SELECT path, content, rev FROM sbm_files WHERE namespace = %s AND rev > %s "
                    "ORDER BY rev",
                    (self.namespace, after),
                )
            ).fetchall()
        newest = max([after, *(int(r) for _, _, r in rows)])
        return {str(p): (None if c is None else bytes(c)) for p, c, _ in rows}, newest

    async def load_defaults(self) -> Defaults | None:
        """The switch defaults recorded by the last consolidation; ``None`` when none were
        (or the recorded value is unreadable, logged)."""

        async with self._tx("reading the memory settings") as conn:
            row = await (
                await conn.execute(
                    "SELECT content FROM sbm_files WHERE namespace = %s AND path = %s",
                    (self.namespace, SETTINGS_NOTE),
                )
            ).fetchone()
        if row is None or row[0] is None:
            return None
        try:
            return Defaults.model_validate_json(bytes(row[0]))
        except ValueError as exc:
            logger.warning(
                "memory settings of namespace %s are not valid (%s); using the configured ones",
                self.namespace,
                exc_text(exc).splitlines()[0],
            )
            return None

    async def save_defaults(self, defaults: Defaults, *, fence: Fence | None = None) -> None:
        """Record the switch defaults (written only when they differ from the stored ones)."""

        if await self.load_defaults() != defaults:
            data = defaults.model_dump_json(indent=1).encode("utf-8")
            await self.put_files({SETTINGS_NOTE: data}, fence=fence)
