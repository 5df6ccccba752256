"""Recorded runs sent to the store: each as it is recorded, and every one the store may not
have yet (recorded while it was away, or before the copy had it); the namespace's key that
seals them."""

from __future__ import annotations

from typing import Any

from ..errors import MemoryStoreUnavailable
from ..integrity import SegmentSeal, host_keys
from ..stores.segments import rollout_path
from .base import CopyBase, _lines_with_ends, _segment_id

PUSH_BATCH = 512
"""Recorded segments a copy sends in one transaction (whole rollouts: a batch may run over)."""


class CopySegments(CopyBase):
    """Recorded run segments, copy to store; the segment key in use."""

    async def use_store_key(self) -> None:
        """Seal and verify with the namespace's key (:meth:`PostgresStore.segment_key`), so
        every machine sharing the store verifies the runs the others recorded; this host's
        own key still verifies what was recorded before the store was first reached."""

        if self._keyed:
            return
        key = await self.store.segment_key()
        self.rt.state.seal = SegmentSeal([key, *host_keys()])
        self._keyed = True

    async def after_record(self, rollout_id: str, segment: dict[str, Any], line: bytes) -> None:
        """Send one recorded segment; an unreachable store leaves it in the file for later."""

        sid = segment.get("segment_id")
        if not sid:
            return
        try:
            if self.offline:
                await self.push_segments()  # a catch-up sends this one too
            else:
                await self.store.append_segment(rollout_id, str(sid), line.decode("utf-8"))
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, f"recording a run of {rollout_id}")
            return
        self._came_back()

    async def push_segments(self) -> int:
        """Send every recorded segment of the copy the store may not have; how many were sent.

        Only lines memory recorded (a valid seal) are sent: a line the agent wrote stays in
        its sandbox's file, skipped there, and never reaches another machine.
        """

        await self.use_store_key()
        base = await self._base(to_change=False)
        sdir = self.rt.layout.sessions_dir
        batch: list[tuple[str, str, str]] = []
        sent = 0
        for name, size in sorted((await self.rt.ws.sizes(sdir)).items()):
            if not name.endswith(".jsonl") or name.startswith("."):
                continue
            rid = name[: -len(".jsonl")]
            known = base["rollouts"].get(rid, {})
            offset = int(known.get("offset", 0))
            path = rollout_path(sdir, rid)
            if size <= offset:
                continue
            data = await self.rt.ws.read_range(path, offset, size - offset) or b""
            check = self.rt.state.line_check(rid)
            for line in _lines_with_ends(data):
                if not check.seal.verify(line.rstrip(b"\n"), rid):
                    continue
                sid = _segment_id(line)
                if sid is not None:
                    batch.append((rid, sid, line.decode("utf-8")))
            if len(batch) >= PUSH_BATCH:
                # In the rollouts' name order, each one's in its file's: see append_segments.
                sent += len(await self.store.append_segments(batch))
                batch = []
        if batch:
            sent += len(await self.store.append_segments(batch))
        return sent
