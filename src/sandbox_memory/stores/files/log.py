"""The change log as a file (:class:`LogFiles`): ``log.jsonl``, one sealed line per change;
appended, replaced, read, and asked which scopes changed after a mark.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pydantic import ValidationError

from ... import bounded
from ..records import LogRecord
from .base import FileRecords

logger = logging.getLogger("sandbox_memory")


class LogFiles(FileRecords):
    """The change log, ``log.jsonl``."""

    async def append_log(self, record: LogRecord) -> None:
        await self.ws.append_line(self.log_path, self._log_line(record))

    async def replace_log(self, records: Iterable[LogRecord]) -> None:
        """The whole log replaced by ``records`` (a shared store's copy takes the store's)."""

        body = b"".join(self._log_line(r) for r in records)
        await self.ws.write_atomic(self.log_path, body)

    async def log_scopes_after(self, mark: str | None) -> tuple[set[str] | None, str]:
        """Reads only the log's bytes after ``mark`` (a byte offset into ``log.jsonl``)."""

        log_path = f"{self.dir}/log.jsonl"
        size = await self.ws.size(log_path) or 0
        offset = int(mark) if mark is not None and mark.isdigit() else -1
        if offset < 0 or size < offset:
            return None, str(size)
        scopes: set[str] = set()
        if size == offset:
            return scopes, mark or "0"
        data = await self.ws.read_range(log_path, offset, size - offset) or b""
        cut = data.rfind(b"\n") + 1
        for line in data[:cut].splitlines():
            try:
                record = bounded.loads(line, limit=bounded.MAX_FIELD_BYTES, what="a log line")
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("scope"), str):
                scopes.add(record["scope"])
        return scopes, str(offset + cut)

    async def scopes_with_memory(self) -> set[str]:
        """One scope per conversation record under ``conversations/``."""

        return {
            f"conversation:{name[: -len('.json')]}"
            for name in await self.ws.listdir(f"{self.dir}/conversations")
            if name.endswith(".json") and not name.startswith(".")
        }

    async def read_log(self) -> list[LogRecord]:
        raw = await self.read_state(self.log_path)
        records: list[LogRecord] = []
        seen: set[tuple[str, int, str, tuple[str, ...]]] = set()
        refused = 0
        seal = self.record_seal() if self.record_seal is not None else None
        context = self._record_context(self.log_path)
        for line in (raw or b"").splitlines():
            if not line.strip():
                continue
            if seal is not None and not seal.verify(line, context):
                # Not written by memory: a line the agent forged would otherwise show as a
                # person's change in ``sandbox-memory log`` and be sent to a shared store.
                refused += 1
                continue
            try:
                record = LogRecord.model_validate_json(line)
            except ValidationError:
                logger.warning("skipping an unreadable line of the memory log")
                continue
            # A change is logged before it is saved; a close killed in between redoes it and
            # logs it again with the same version: one change, read once.
            ident = (record.scope, record.version, record.cause, tuple(record.keys))
            if ident in seen:
                continue
            seen.add(ident)
            records.append(record)
        if refused and refused != self._log_refused:
            logger.warning(
                "%d line(s) of %s hold no valid seal: not written by memory, skipped",
                refused,
                self.log_path,
            )
        self._log_refused = refused
        return records
