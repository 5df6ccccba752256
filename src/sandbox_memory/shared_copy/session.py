"""The copy's entry points under the namespace's lease: a run start (:meth:`~CopySession.
refresh`), a session (:meth:`~CopySession.session`: catch up both ways, work locally, send),
and a close (:meth:`~CopySession.close`: the conversations recorded here extracted under
claims first, the rest under the lease)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any

from ..datapolicy import exc_text
from ..errors import MemoryConflict, MemoryLockTimeout, MemoryStoreUnavailable
from ..stores.shared import Fence
from .base import CopyBase

logger = logging.getLogger("sandbox_memory")

CLAIM = "extract:"
"""Prefix of a conversation's extraction claim in the store's lease table."""

REFRESH_LEASE_WAIT_SECONDS = 2.0
"""How long a run start waits for the lease to send its copy's changes: a run never waits long
for memory; past it, the run starts from the copy and the changes go at the close."""


class CopySession(CopyBase):
    """Run start, sessions under the lease, and the close with its claims."""

    async def refresh(self) -> bool:
        """Run start: send runs recorded meanwhile, bring ``memories/`` up to date.

        Returns whether the copy changed. Never raises for an unreachable store.
        """

        try:
            await self.push_segments()
            if await self.has_unsent_changes():
                # Changes of this copy (an extraction after the last run, a live edit): send
                # them under the lease, if it comes soon, then take in the store's state.
                try:
                    async with self.session(timeout=REFRESH_LEASE_WAIT_SECONDS) as fence:
                        pass
                except MemoryLockTimeout:
                    fence = None
                if fence is None:
                    logger.info(
                        "memory copy has changes the store has not taken yet; they are sent "
                        "at the next close, and this run starts from the copy"
                    )
                    return False
                self.rt.bump()
                return True
            changed = await self.pull()
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "bringing memory up to date at run start")
            return False
        self._came_back()
        return changed

    @contextlib.asynccontextmanager
    async def session(self, *, timeout: float | None = None) -> AsyncIterator[Fence | None]:
        """Under the lease: catch up both ways, let the caller work locally, send its changes.

        ``timeout``: how long to wait for the lease (default ``generate.lock_timeout_seconds``;
        then :class:`~sandbox_memory.errors.MemoryLockTimeout`).

        Yields the fence, or ``None`` when the store is unreachable (the caller works on the
        copy alone; its changes are sent at the next session).
        """

        async with self._session_lock:
            try:
                fence = await self.store.acquire(
                    timeout=self.rt.generate.lock_timeout_seconds if timeout is None else timeout
                )
            except MemoryStoreUnavailable as exc:
                self._went_away(exc, "taking the layout lease")
                yield None
                return
            renewer = asyncio.create_task(self._renew(fence))
            try:
                try:
                    await self.push_segments()
                    await self.rt.take_live_edits()
                    await self.push_state(fence)
                    await self.pull()
                except MemoryStoreUnavailable as exc:
                    self._went_away(exc, "catching up before a close")
                    yield None
                    return
                self._came_back()
                yield fence
                try:
                    await self.push_segments()
                    await self.push_state(fence)
                    await self.pull()
                except MemoryStoreUnavailable as exc:
                    self._went_away(exc, "sending a close's changes")
                else:
                    await self.send_search(fence)
            finally:
                renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await renewer
                with contextlib.suppress(Exception):
                    await self.store.release(fence)

    async def _renew(self, fence: Fence) -> None:
        while True:
            await asyncio.sleep(self.store.lease_seconds / 3)
            try:
                await self.store.renew(fence)
            except MemoryConflict:
                logger.warning(
                    "memory lease of namespace %s was lost; this close's writes are refused",
                    self.store.namespace,
                )
                return
            except MemoryStoreUnavailable as exc:
                logger.warning("could not renew the memory lease: %s", exc_text(exc))

    async def close(
        self, local_close: Callable[[Collection[str]], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """A close: phase 1 of the runs recorded here first, without the lease, then the rest
        under it (``local_close(skip)``: phase 1 of what is still pending but ``skip``, then
        phase 2).

        Extracting a conversation touches that conversation alone and its results go to the
        store with conditional writes, so it needs no lease: closes of several sandboxes
        extract at the same time, and each holds the lease only to send, fetch and
        consolidate. So that two closes do not extract one run twice, each claims the
        conversations it extracts (``extract:<rollout-id>`` in the lease table, renewed while
        held, lapsing with a dead holder), and a close under the lease leaves out those
        another close claimed: that one sends them at its turn.
        """

        unjudged: list[str] = []
        try:
            # Before any run of the copy is read: its lines were sealed with the namespace's
            # key, and a new process verifies with this host's alone until keyed.
            await self.use_store_key()
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "reading the namespace's segment key")
            if await self.rt.ws.size(self.state_path) is not None:
                # The copy reached the store before, so its runs may be sealed with the key
                # this process lacks: one would read as forged and be passed over for good.
                # Left pending for a close that holds the key.
                unjudged = await self.rt.pending_rollouts()
                if unjudged:
                    logger.info(
                        "memory close leaves %d rollout(s) for a close that reaches the store "
                        "(their lines are sealed with its key): %s",
                        len(unjudged),
                        ", ".join(unjudged),
                    )
        own = [r for r in await self.recorded_here() if r not in unjudged]
        taken: list[str] = []
        keeper: asyncio.Task[None] | None = None
        try:
            if own:
                try:
                    taken = await self.store.claim([CLAIM + r for r in own], holder=self.holder)
                    keeper = asyncio.create_task(self._keep_claims(taken))
                except MemoryStoreUnavailable as exc:
                    self._went_away(exc, "claiming conversations to extract")
                    taken = []
                    mine = own  # the copy is all there is: extract them here
                else:
                    mine = [r for r in own if CLAIM + r in taken]
                sem = asyncio.Semaphore(self.rt.generate.phase_one_concurrency)

                async def one(rid: str) -> None:
                    async with sem:
                        await self.rt.consolidate_conversation(rid)

                await asyncio.gather(*(one(r) for r in mine))
            async with self.session() as fence:
                skip: list[str] = list(unjudged)
                if fence is not None:
                    try:
                        # What was extracted under the claims is in the store now.
                        await self.store.unclaim(taken, holder=self.holder)
                        taken = []
                        skip += [
                            n[len(CLAIM) :]
                            for n in await self.store.claimed_by_others(CLAIM, holder=self.holder)
                        ]
                    except MemoryStoreUnavailable as exc:
                        self._went_away(exc, "reading which conversations others extract")
                report = await local_close(skip)
                if fence is not None:
                    await self._whole_index_for_store()
                return report
        finally:
            if keeper is not None:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await keeper
            if taken:
                with contextlib.suppress(Exception):
                    await self.store.unclaim(taken, holder=self.holder)

    async def _keep_claims(self, names: list[str]) -> None:
        while True:
            await asyncio.sleep(self.store.lease_seconds / 3)
            try:
                await self.store.claim(names, holder=self.holder)
            except MemoryStoreUnavailable as exc:
                logger.warning("could not renew the memory claims: %s", exc_text(exc))
