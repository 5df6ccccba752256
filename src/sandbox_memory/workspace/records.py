"""Records kept in the workspace beside the files they describe, whatever store holds memory.

The rendered files (``MEMORY.md``, the summary, skills) are this workspace's: the record of
what was rendered into them (its digests, the rendering saved for the next process, the patch
a Remember made), the copies a carry-over keeps and the digests of a conversation's items
(beside ``sessions/``) describe this workspace, so they live in it, under
``<memories_dir>/store/``, whether memory itself is in workspace files, in PostgreSQL or in
the process. :class:`LocalRecords` reads and writes them: a file replaced whole, a folder in a
file's place set aside, memory's own records sealed so that one the agent's tools wrote is
refused (kept aside, reported once) instead of read.

The workspace files store (:class:`sandbox_memory.stores.files.Store`) keeps its records the
same way, under the same folder: it is a :class:`LocalRecords` too.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..integrity import SegmentSeal
from .base import Workspace, set_aside_folder

if TYPE_CHECKING:
    from ..redact import Redactor

logger = logging.getLogger("sandbox_memory")

_SEAL_TAIL = re.compile(rb',"memory_seal":"[0-9a-f]{32}"\}\n?\Z')


def unsealed(raw: bytes | None) -> bytes | None:
    """A record's bytes without the seal :meth:`LocalRecords.write_record` put at its end."""

    if raw is None:
        return None
    found = _SEAL_TAIL.search(raw, max(0, len(raw) - 64))
    # One copy of the record (a slice and a concatenation were two: 3.2 MB each for the
    # saved rendering of 20,000 entries).
    return raw if found is None else b"".join((memoryview(raw)[: found.start()], b"}"))


def seal_of(raw: bytes) -> str | None:
    """The seal a sealed record ends with (32 hex), ``None`` when it has none."""

    found = _SEAL_TAIL.search(raw, max(0, len(raw) - 64))
    return None if found is None else raw[found.start() + 16 : found.start() + 48].decode()


class LocalRecords:
    """State files and sealed records under one folder of a workspace (``folder``)."""

    def __init__(self, workspace: Workspace, folder: str) -> None:
        self.ws = workspace
        self.dir = folder
        self.redactor_source: Callable[[], Redactor] | None = None
        """Set by the runtime: files set aside are redacted like everything else written."""
        self.record_seal: Callable[[], SegmentSeal] | None = None
        """Set by the runtime: the seal of memory's own records. Such a record whose seal
        does not verify was not written by memory (the agent's tools): it is set aside, never
        read. Without it (records read outside a runtime) seals are neither made nor checked."""
        self.refused: set[str] = set()
        """Records refused for want of a valid seal by this object (never sent on)."""

    def path(self, name: str) -> str:
        """Where the record ``name`` (relative, e.g. ``rendered.json``) lives."""

        return f"{self.dir}/{name}"

    async def read_state(self, path: str) -> bytes | None:
        """A state file's bytes, ``None`` when missing; a folder in its place is set aside."""

        try:
            return await self.ws.read_bytes(path)
        except IsADirectoryError:
            await set_aside_folder(self.ws, path)
            return None

    async def read_states(self, folder: str, names: Sequence[str]) -> list[bytes | None]:
        """:meth:`read_state` of each of ``names`` in ``folder``, the folder reached once."""

        try:
            return await self.ws.read_many(folder, names)
        except IsADirectoryError:
            return [await self.read_state(f"{folder}/{name}") for name in names]

    async def write_state(self, path: str, data: bytes) -> None:
        """Replace a state file atomically; a folder in its place is set aside first."""

        try:
            await self.ws.write_atomic(path, data)
        except IsADirectoryError:
            await set_aside_folder(self.ws, path)
            await self.ws.write_atomic(path, data)

    async def write_states(self, items: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`write_state` of each ``(path, data)``, waiting for the disk once for them all
        (:meth:`Workspace.write_atomic_many`): each file is replaced whole, in order."""

        try:
            await self.ws.write_atomic_many(items)
        except IsADirectoryError:
            # A folder where one belongs: set aside by the write of each, one by one.
            for path, data in items:
                await self.write_state(path, data)

    async def _set_aside(
        self,
        path: str,
        raw: bytes,
        why: str,
        *,
        kept: str = "broken",
        level: int = logging.ERROR,
    ) -> None:
        """Keep an unreadable state file's bytes beside it, once per content, and log it."""

        # Named by content: the file is read many times before it is next saved, and one
        # copy (and one log line) per distinct content is enough.
        broken = f"{path}.{kept}-{hashlib.sha256(raw).hexdigest()[:12]}"
        if await self.ws.size(broken) is not None:
            return
        from ..redact import redact_bytes  # imported on first use, like the runtime's redactor

        redactor = self.redactor_source() if self.redactor_source is not None else None
        await self.ws.write_atomic(broken, redact_bytes(raw, redactor))
        logger.log(
            level,
            "memory state file %s is not valid (%s); kept as %s and starting it afresh",
            path,
            why,
            broken,
        )

    def _record_context(self, path: str) -> str:
        """What a record's seal is bound to besides its bytes: its place in the folder, so a
        record copied to another place (another shard, another conversation) does not verify."""

        return "store:" + path.removeprefix(f"{self.dir}/")

    def _sealed(self, path: str, data: bytes) -> bytes:
        if self.record_seal is None:
            return data
        return self.record_seal().seal(data, self._record_context(path))

    async def write_record(self, path: str, data: bytes) -> None:
        """Write one of memory's own records (a JSON object), sealed (see :attr:`record_seal`)."""

        await self.write_state(path, self._sealed(path, data))

    def sealed_record(self, path: str, data: bytes) -> bytes:
        """The bytes :meth:`write_record` writes at ``path``, to write with others
        (:meth:`write_states`)."""

        return self._sealed(path, data)

    async def read_record(self, path: str) -> tuple[bytes | None, bool]:
        """A record's bytes without its seal, and whether it was refused. A record whose seal
        does not verify (none, another place's, another key's, edited after sealing) is kept
        aside and reported once at WARNING; it reads as missing."""

        raw = await self.read_state(path)
        if raw is None:
            return None, False
        plain = await self._verified(path, raw)
        return plain, plain is None

    async def _verified(self, path: str, raw: bytes) -> bytes | None:
        """``raw`` without its seal when the seal verifies (or seals are off); else ``None``,
        the record kept aside and reported once at WARNING."""

        if self.record_seal is None:
            return unsealed(raw)
        body = memoryview(raw)[:-1] if raw.endswith(b"\n") else raw  # not copied
        if self.record_seal().verify(body, self._record_context(path)):
            return unsealed(raw)
        await self._refuse(
            path,
            raw,
            "no valid seal: not written by memory (or by a build before records were sealed)",
        )
        return None

    async def _refuse(self, path: str, raw: bytes, why: str) -> None:
        self.refused.add(path)
        await self._set_aside(path, raw, why, kept="unsealed", level=logging.WARNING)
