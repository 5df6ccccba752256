"""Thread records as files (:class:`ThreadFiles`): ``threads/<fingerprint>`` names the
rollout of a conversation known by its first items, sealed; one lost to a kill is put back
from the rollout's first line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ... import bounded
from ...datapolicy import exc_text
from ...workspace import set_aside_folder
from ..segments import ROLLOUT_ID_RE, segment_fingerprint
from .base import FileRecords

logger = logging.getLogger("sandbox_memory")


def _thread_data(fingerprint: str, rollout_id: str) -> bytes:
    """What a conversation index record's seal covers: the history and the conversation."""

    return f"{fingerprint}\n{rollout_id}".encode()


FIRST_LINE_MAX_BYTES = 16 << 20
"""How far a rollout's first line is looked for when its thread record is rebuilt."""


class ThreadFiles(FileRecords):
    """Thread records: a conversation's rollout, known by the fingerprint of its first items."""

    async def thread_for(self, fingerprint: str) -> str | None:
        await self._split_legacy()
        path = self.thread_path(fingerprint)
        raw = await self.read_state(path)
        if raw is None:
            return None
        if not raw.strip():
            # Written without waiting for the disk, then a power loss: rebuilt by the next
            # close from the rollout's first line (see _recover_thread).
            await self.ws.remove(path)
            return None
        rid, _, seal = raw.decode("utf-8", errors="replace").strip().partition(" ")
        if ROLLOUT_ID_RE.fullmatch(rid) and ".." not in rid:
            if self.line_check is None:
                return rid
            if self.line_check(rid).seal.check("thread", _thread_data(fingerprint, rid), seal):
                return rid
            # Not written by memory (the agent's tools, or a release before records were
            # sealed): it would send a run replaying this history into that conversation.
            logger.warning(
                "conversation index record %s holds no valid seal; it is removed, and a run "
                "replaying that history is recorded on its own",
                path,
            )
            await self.ws.remove(path)
            return None
        await self._set_aside(
            path, raw, "not a rollout id; that conversation's next run starts afresh"
        )
        await self.ws.remove(path)
        return None

    async def index_thread(self, fingerprint: str, rollout_id: str) -> None:
        # Not waited for on disk (an fsync was most of a first record's time): a record lost
        # to a crash is rebuilt from the rollout by the next close (_recover_thread).
        path = self.thread_path(fingerprint)
        data = rollout_id.encode("utf-8")
        if self.line_check is not None:
            seal = self.line_check(rollout_id).seal.sign(
                "thread", _thread_data(fingerprint, rollout_id)
            )
            data += b" " + seal.encode()
        await self._touch(path)
        try:
            await self.ws.write_derived(path, data)
        except IsADirectoryError:
            await set_aside_folder(self.ws, path)
            await self.ws.write_derived(path, data)

    async def index_threads(self, threads: Mapping[str, str]) -> None:
        """A record a fingerprint that names no conversation yet, all written in one go off
        the event loop (a copy fetching 10,000 conversations wrote them one a time on it); a
        fingerprint whose record exists goes through :meth:`thread_for` (its checks) first."""

        await self._split_legacy()
        present = set(await self.ws.listdir(f"{self.dir}/threads"))
        new: dict[str, str] = {}
        writes: list[tuple[str, bytes]] = []
        for fingerprint, rollout_id in threads.items():
            if fingerprint in present and await self.thread_for(fingerprint) is not None:
                continue
            data = rollout_id.encode("utf-8")
            if self.line_check is not None:
                seal = self.line_check(rollout_id).seal.sign(
                    "thread", _thread_data(fingerprint, rollout_id)
                )
                data += b" " + seal.encode()
            new[fingerprint] = rollout_id
            writes.append((self.thread_path(fingerprint), data))
        if not writes:
            return
        await self._touch_many([path for path, _ in writes])
        try:
            await self.ws.write_derived_many(writes)
        except IsADirectoryError:
            for fingerprint, rollout_id in new.items():  # a folder where a record belongs
                await self.index_thread(fingerprint, rollout_id)

    async def _recover_thread(self, rollout_id: str) -> None:
        """Index a never-read rollout's conversation if its thread record is missing.

        The recorder writes the record just after the rollout's first line; a kill in between,
        or a power loss before the record reached the disk, loses it. Its content is the
        fingerprint of that first line, so it is put back from there: a later run replaying
        the conversation's history still joins it. Never fails the close.
        """

        if rollout_id in self._threads_checked:
            return
        try:
            first = await self._first_line(f"{self.sessions_dir}/{rollout_id}.jsonl")
            if first is None or self.line_check is None:
                return
            check = self.line_check(rollout_id)
            if not check.seal.verify(first, rollout_id):
                return  # not recorded by memory: it claims no conversation
            segment = bounded.loads(first, limit=bounded.MAX_LINE_BYTES, what="a session line")
            fp = segment_fingerprint(segment) if isinstance(segment, dict) else None
            if fp is not None and await self.thread_for(fp) is None:
                await self.index_thread(fp, rollout_id)
                logger.info("conversation %s indexed again from its first run", rollout_id)
            self._threads_checked.add(rollout_id)
        except (OSError, ValueError) as exc:
            logger.debug("could not check the thread record of %s: %s", rollout_id, exc_text(exc))

    async def _first_line(self, path: str) -> bytes | None:
        data = b""
        chunk = 1 << 16
        while len(data) < FIRST_LINE_MAX_BYTES:
            part = await self.ws.read_range(path, len(data), chunk)
            if not part:
                return None
            data += part
            cut = data.find(b"\n")
            if cut >= 0:
                return data[:cut]
            chunk = min(chunk * 4, 8 << 20)
        return None
