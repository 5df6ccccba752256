"""What phase 1 has read of each rollout, as files (:class:`ProgressFiles`):
``progress/<id>.json``, ``forgotten/<id>.json``, and the ``pending/`` and ``unindexed/`` flags
that say which rollouts grew since they were read and which the search index has yet to see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import ValidationError

from ..records import RolloutProgress, tail_hash
from ..seam import RolloutFlags
from .base import _JSON, FileRecords, _why

_ROLLOUT = ".jsonl"


def _swap_suffix(names: list[str], old: str, new: str) -> list[str]:
    """``names`` with ``old`` at the end of a name replaced by ``new``, the others as they
    are: one replace over them all joined by NUL, which no file name holds."""

    if not names:
        return []
    return ("\0".join(names) + "\0").replace(old + "\0", new + "\0").split("\0")[:-1]


class ProgressFiles(FileRecords):
    """Rollout progress, forgotten progress, and the ``pending/`` and ``unindexed/`` flags."""

    def pending_flag(self, rollout_id: str) -> str:
        """The empty file the recorder creates around each append to ``rollout_id``."""

        return f"{self.dir}/pending/{rollout_id}"

    async def _read_progress(self, path: str) -> RolloutProgress | None:
        raw = await self.read_state(path)
        if raw is None:
            return None
        try:
            return RolloutProgress.model_validate_json(raw)
        except ValidationError as exc:
            await self._set_aside(path, raw, _why(exc))
            # Gone once kept aside: the rollout is unknown again, so it is read afresh.
            await self.ws.remove(path)
            return None

    async def get_progress(self, rollout_id: str) -> RolloutProgress | None:
        await self._split_legacy()
        live = await self._read_progress(self.progress_path(rollout_id))
        if live is not None:
            return live
        gone = await self._read_progress(self.forgotten_path(rollout_id))
        if gone is not None:
            gone.forgotten = True
        return gone

    async def put_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        await self.put_progress_many({rollout_id: progress})

    async def put_progress_many(self, progress: Mapping[str, RolloutProgress]) -> None:
        """One check of the lock, then every record, waiting for the disk once for them all."""

        if not progress:
            return
        if self.fence is not None:
            await self.fence()
        await self.write_states(
            [
                (
                    self.progress_path(rid),
                    prog.model_copy(update={"forgotten": False}).model_dump_json().encode(),
                )
                for rid, prog in progress.items()
            ]
        )
        for rid, prog in progress.items():
            if prog.forgotten:
                # Only once the live record is on disk: a crash in between leaves both, and
                # the live one wins.
                await self.ws.remove(self.forgotten_path(rid))

    async def forget_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        await self.forget_progress_many({rollout_id: progress})

    async def forget_progress_many(self, progress: Mapping[str, RolloutProgress]) -> None:
        """Every pruned record written (waiting for the disk once), then the live ones go: a
        crash in between leaves both, and the live one wins."""

        await self.write_states(
            [
                (
                    self.forgotten_path(rid),
                    RolloutProgress(offset=prog.offset, updated_at=prog.updated_at)
                    .model_dump_json(include={"offset", "updated_at"})
                    .encode(),
                )
                for rid, prog in progress.items()
            ]
        )
        for rid in progress:
            await self.ws.remove(self.progress_path(rid))

    async def list_progress(self) -> dict[str, RolloutProgress]:
        await self._split_legacy()
        found: dict[str, RolloutProgress] = {}
        for name in await self.ws.listdir(f"{self.dir}/progress"):
            if not name.endswith(_JSON) or name.startswith("."):
                continue
            rid = name[: -len(_JSON)]
            prog = await self._read_progress(f"{self.dir}/progress/{name}")
            if prog is not None:
                found[rid] = prog
        return found

    async def pending_rollouts(self) -> list[str]:
        """Rollouts never read, and flagged rollouts that grew past their progress.

        No rollout file is opened or sized unless flagged: the recorder flags a rollout before
        and after every append, and a flag is cleared here once the rollout is read to its end.
        Rollouts written by something else (the SDK's own memory, a copied folder) have no
        progress at all and are found by name.
        """

        await self._split_legacy()
        # Whole sets of names compared (10,000 of each at 20,000 entries), not each name
        # filtered: ``<id>.jsonl`` is known when ``progress/<id>.json`` or
        # ``forgotten/<id>.json`` is there, so the listing of rollouts is renamed to records
        # and what no record names is left.
        listed = await self.ws.names(self.sessions_dir)
        records = _swap_suffix(listed, _ROLLOUT, _JSON)
        unknown = set(records).difference(
            await self.ws.names(f"{self.dir}/progress"),
            await self.ws.names(f"{self.dir}/forgotten"),
        )
        rollouts = set(listed)
        new = {
            rid
            for name in unknown
            if name.endswith(_JSON)
            and not name.startswith(".")
            and (rid := name[: -len(_JSON)]) + _ROLLOUT in rollouts
        }
        flagged = set(await self._names(f"{self.dir}/pending", ""))
        pending: list[str] = []
        for rid in sorted(new | {r for r in flagged if r + _ROLLOUT in rollouts}):
            if rid in new:
                if rid not in flagged:
                    # Flagged until read to its end, even if its first extraction fails.
                    await self.mark_pending(rid)
                await self._recover_thread(rid)
                pending.append(rid)
            elif rid in flagged and await self._grew(rid):
                pending.append(rid)
        return pending

    async def mark_pending(self, rollout_id: str) -> None:
        await self.write_state(self.pending_flag(rollout_id), b"")

    async def mark_pending_many(self, rollout_ids: Iterable[str]) -> None:
        await self.write_states([(self.pending_flag(rid), b"") for rid in rollout_ids])

    def unindexed_flag(self, rollout_id: str) -> str:
        """The empty file set when ``rollout_id``'s pending flag is cleared, until the search
        index has looked at the rollout (see :meth:`changed_rollouts`)."""

        return f"{self.dir}/unindexed/{rollout_id}"

    async def changed_rollouts(self) -> RolloutFlags | None:
        # Two small folders: the flags of rollouts recorded (or found) since their last
        # extraction, and of those read to their end since the index last looked.
        return RolloutFlags(
            pending=set(await self._names(f"{self.dir}/pending", "")),
            unindexed=set(await self._names(f"{self.dir}/unindexed", "")),
        )

    async def rollouts_indexed(self, rollout_ids: Iterable[str]) -> None:
        for rid in rollout_ids:
            await self.ws.remove(self.unindexed_flag(rid))

    async def flag_unindexed(self, rollout_ids: Iterable[str]) -> None:
        for rid in rollout_ids:
            await self.ws.write_derived(self.unindexed_flag(rid), b"")

    async def _grew(self, rollout_id: str) -> bool:
        """Whether a flagged rollout holds bytes past its progress; clears a stale flag."""

        prog = await self.get_progress(rollout_id)
        offset = prog.offset if prog is not None else 0
        path = f"{self.sessions_dir}/{rollout_id}.jsonl"
        if (await self.ws.size(path) or 0) != offset:
            return True  # grew, or shrank: cleared or restored from an older copy
        if prog is not None and prog.tail is not None:
            if await tail_hash(self.ws, path, offset) != prog.tail:
                return True  # as long as what was read, but other bytes
        # Read to its end: drop the flag, then look again, so an append that raced with the
        # check (its flag was set before the removal) is not missed. The search index still
        # has to look at what was read (its own sync after the extraction may have failed, or
        # happened in a copy never written back): the flag passes to it first.
        await self.ws.write_derived(self.unindexed_flag(rollout_id), b"")
        await self.ws.remove(self.pending_flag(rollout_id))
        if (await self.ws.size(path) or 0) > offset:
            await self.mark_pending(rollout_id)
            return True
        return False
