"""The store's own search index (:class:`~.host.StoreSearch`): what the copy's index wrote is
sent to it at a close, and searches go to it once it holds a whole index."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..datapolicy import exc_text
from ..errors import MemoryConflict, MemoryStoreUnavailable
from ..stores.shared import Fence
from .base import CopyBase

logger = logging.getLogger("sandbox_memory")

if TYPE_CHECKING:
    from ..search.index import SearchHit


class CopySearch(CopyBase):
    """Searches on, and sends to, the store's search index."""

    async def send_search(self, fence: Fence) -> None:
        """Under the lease, after the copy is sent and brought up to date: send what its
        search index wrote or dropped to the store's search index
        (:meth:`StoreSearch.send`). Derived data: a failure
        is logged and never fails the close; the notes stay for the next one."""

        if self.store_search is None:
            return
        # What the close's (or command's) own syncs of the index noted: the index is not
        # synced again here (a copy whose index was never built would build it whole).
        try:
            await self.store_search.send(self.rt.search_index, fence)
        except (MemoryStoreUnavailable, MemoryConflict) as exc:
            logger.warning(
                "memory search index could not be sent to %s (%s); the next close sends it",
                self.store.describe(),
                exc_text(exc),
            )

    async def _whole_index_for_store(self) -> None:
        """A close on a namespace whose store holds no whole search index yet (made before
        it had one, or no close has sent one): bring this copy's index wholly up to date, so
        the close sends all of it (its first sending is compared with the store's whole)."""

        if self.store_search is None:
            return
        try:
            if await self.store_search.ready():
                return
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "reading the store's search index")
            return
        await self.rt.sync_search()

    async def search(
        self, query: str, *, conversation: str | None, limit: int, person: str | None
    ) -> list[SearchHit] | None:
        """Hits from the store's search index; ``None`` when the store holds none yet (no
        close sent a whole index) or cannot be reached, or when an embedder is configured
        (the store's index ranks by BM25 alone): the caller searches the copy's."""

        if self.store_search is None or self.rt.search_index.embedder is not None:
            return None
        try:
            if not await self.store_search.ready():
                return None
            hits = await self.store_search.search(
                query, conversation=conversation, limit=limit, person=person
            )
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "searching")
            return None
        self._came_back()
        return hits

    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit] | None:
        """The lookup at run start (section "relevant to this task") on the store's search
        index; ``None`` as for :meth:`search`."""

        if self.store_search is None:
            return None
        try:
            if not await self.store_search.ready():
                return None
            hits = await self.store_search.curated(
                phrases, words, person=person, limit=limit, max_terms=max_terms
            )
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "looking up the run's input")
            return None
        self._came_back()
        return hits
