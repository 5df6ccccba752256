"""Keeping the derived search index in step with the workspace: after runs, in phase 2, at close.

Not a step of its own: extract, consolidate and the commands call these. The index is derived
data (``search/index/``), so a failure here is logged and never fails a run or a close.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from ..datapolicy import exc_text
from .index import SearchIndex

logger = logging.getLogger("sandbox_memory")


async def sync_index(
    index: SearchIndex, *, rollouts: Collection[str] | None = None, flagged: bool = False
) -> bool:
    """Bring the search index up to date (only ``rollouts``' items and summaries, when
    given; with ``flagged``, those of the rollouts flagged since the last sync, see
    :meth:`SearchIndex.sync`); ``False`` (logged) when it could not be.

    The index is derived: a failure here never fails a run or a close, the next sync
    catches up.
    """

    try:
        await index.sync(rollouts, flagged=flagged)
    except Exception as exc:  # noqa: BLE001
        logger.warning(
            "memory search index %s could not be updated (%s); it catches up at the "
            "next search or close",
            index.rel_path,
            exc_text(exc),
        )
        return False
    return True


async def save_index(index: SearchIndex) -> None:
    """Write the index back to the workspace (backends other than a local folder)."""

    try:
        await index.save()
    except Exception as exc:  # noqa: BLE001
        logger.warning(
            "memory search index could not be written to %s (%s); it is rebuilt from the "
            "workspace when next needed",
            index.rel_path,
            exc_text(exc),
        )


async def embed_index(index: SearchIndex, *, deadline: float) -> int:
    """Embed what the index holds and has no vector for yet (with an embedder configured),
    by ``deadline``: the close runs it so the first search after pays nothing for it.
    Returns the texts embedded; a failure is logged and never fails the close (the first
    search embeds what is left, or ranks by BM25 alone)."""

    try:
        return await index.embed_new(deadline=deadline)
    except Exception as exc:  # noqa: BLE001
        logger.warning(
            "memory search vectors could not be made at close (%s); the first search makes them",
            exc_text(exc),
        )
        return 0
