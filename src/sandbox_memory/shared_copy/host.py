"""What the working copy is given besides the shared store: the layout's runtime
(:class:`CopyHost`) and the store's own search index (:class:`StoreSearch`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from ..integrity import SegmentSeal
from ..stores.shared import Fence

if TYPE_CHECKING:
    from ..config import MemoryGenerateConfig, MemoryLayoutConfig
    from ..search.index import SearchHit, SearchIndex
    from ..stores.seam import MemoryStore
    from ..stores.segments import LineCheck
    from ..workspace import Workspace
    from ..workspace.records import LocalRecords


class _SealedState(Protocol):
    seal: SegmentSeal
    local: LocalRecords

    def line_check(self, rollout_id: str) -> LineCheck: ...


class StoreSearch(Protocol):
    """A shared store's own search index of its namespace (``search/postgres.py``'s
    :class:`~sandbox_memory.search.postgres.PostgresSearch` is one): what the working
    copy sends its index's changes to, and searches instead of the copy's once whole."""

    async def ready(self) -> bool: ...

    async def send(self, index: SearchIndex, fence: Fence | None) -> tuple[int, int]: ...

    async def search(
        self, query: str, *, conversation: str | None, limit: int, person: str | None
    ) -> list[SearchHit]: ...

    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit]: ...


class CopyHost(Protocol):
    """What the working copy needs of the layout's runtime (``runtime.LayoutRuntime`` is one):
    its workspace and store, its settings, and the steps a send or a fetch runs."""

    @property
    def ws(self) -> Workspace: ...

    @property
    def working_copy(self) -> MemoryStore: ...

    @property
    def layout(self) -> MemoryLayoutConfig: ...

    @property
    def generate(self) -> MemoryGenerateConfig: ...

    @property
    def state(self) -> _SealedState: ...

    @property
    def search_index(self) -> SearchIndex: ...

    def bump(self) -> None: ...

    def session_file_lock(self, rollout_id: str) -> asyncio.Lock: ...

    async def pending_rollouts(self) -> list[str]: ...

    async def sync_search(self) -> bool: ...

    async def consolidate_conversation(self, rollout_id: str) -> bool: ...

    async def render_current(self) -> None: ...

    async def memory_md_edited(self) -> str | None: ...

    async def take_live_edits(self) -> None: ...
