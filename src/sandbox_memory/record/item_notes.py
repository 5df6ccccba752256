"""Notes of a rollout's recorded items by digest (``store/items/<id>.txt``): how a run that
replays items already recorded is recognised. Written by extraction once it has read a
segment, read by the recorder."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..datapolicy import exc_text

if TYPE_CHECKING:
    from ..layout_state import LayoutState

logger = logging.getLogger("sandbox_memory")


async def note_items(rt: LayoutState, rollout_id: str, digests: list[tuple[str, str]]) -> None:
    """Note the digests of a rollout's items (``ParsedSegments.item_digests``: taken before
    long strings were clipped) in ``store/items/<id>.txt`` (one line per segment: ``<segment
    id> <position>:<digest> ...``, some 15 bytes an item): a later run that replays them is
    recognised (see ``stores.segments.EncodedSegment.mark_replayed``). Best effort: a failure only costs a replay
    recorded again."""

    by_segment: dict[str, list[str]] = {}
    for digest, item_id in digests:
        seg, _, position = item_id.rpartition(":")
        by_segment.setdefault(seg, []).append(f"{position}:{digest}")
    lines = [f"{seg} {' '.join(parts)}\n" for seg, parts in by_segment.items()]
    if not lines:
        return
    try:
        await rt.ws.append_line(rt.items_path(rollout_id), "".join(lines).encode())
    except Exception as exc:  # noqa: BLE001
        logger.warning(
            "could not note the items of conversation %s (%s); a replay of them is recorded again",
            rollout_id,
            exc_text(exc),
        )


def parse_item_notes(raw: bytes) -> list[tuple[str, str]]:
    """``(digest, item id)`` pairs of notes written by :func:`note_items`."""

    pairs: list[tuple[str, str]] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        seg, _, rest = line.partition(" ")
        for part in rest.split():
            position, _, digest = part.partition(":")
            if digest:
                pairs.append((digest, f"{seg}:{position}"))
    return pairs
