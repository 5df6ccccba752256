"""Formats of an earlier release (:class:`LegacyFiles`): ``progress.json`` and
``threads.json``, one file for every rollout written whole per change, split once into their
per-rollout records.
"""

from __future__ import annotations

from ... import bounded
from ..records import Progress
from .base import FileRecords


class LegacyFiles(FileRecords):
    """The split of ``progress.json`` and ``threads.json`` into per-rollout records."""

    async def _split_legacy(self) -> None:
        """Split ``progress.json`` and ``threads.json`` (the old whole-file forms) into records.

        Records already present win (they are newer); the old file goes once split, so this
        costs one check per store object afterwards.
        """

        if self._legacy_checked:
            return
        self._legacy_checked = True
        legacy = f"{self.dir}/progress.json"
        if await self.ws.size(legacy) is not None:
            old: Progress = await self._load(legacy, Progress, Progress(), sealed=False)
            for rid, prog in old.rollouts.items():
                if await self.ws.size(self.progress_path(rid)) is not None:
                    continue
                if await self.ws.size(self.forgotten_path(rid)) is not None:
                    continue
                if prog.slug is None and prog.consolidated:
                    await self.forget_progress(rid, prog)
                else:
                    await self.put_progress(rid, prog)
            await self.ws.remove(legacy)
        threads = f"{self.dir}/threads.json"
        if await self.ws.size(threads) is not None:
            for fingerprint, rid in (await self._load_legacy_threads(threads)).items():
                if await self.ws.size(self.thread_path(fingerprint)) is None:
                    await self.index_thread(fingerprint, rid)
            await self.ws.remove(threads)

    async def _load_legacy_threads(self, path: str) -> dict[str, str]:
        raw = await self.read_state(path)
        if not raw:
            return {}
        try:
            data = bounded.loads(raw, limit=bounded.MAX_STATE_BYTES, what=path)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            await self._set_aside(
                path,
                raw,
                "not a JSON object; runs of earlier conversations start a new conversation memory",
            )
            return {}
        return {str(k): str(v) for k, v in data.items()}
