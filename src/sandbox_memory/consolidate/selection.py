"""Consolidation (phase 2): promotion into layout memory, selection of rollouts, forgetting.

The rules every change must pass live in :mod:`sandbox_memory.rules`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..search.index import timestamp_ms
from ..stores.records import (
    LONG_LIVED_KINDS,
    ConversationMemory,
    Entry,
    LayoutMemory,
    RolloutProgress,
)
from ..stores.seam import LayoutEdit

if TYPE_CHECKING:
    pass  # built by the runtime, on first use

from ..rules import merged_sources, plausible_ms, retract

logger = logging.getLogger("sandbox_memory")


def promote(
    layout: LayoutMemory | LayoutEdit, conversation: ConversationMemory, since: int
) -> list[str]:
    """Copy long-lived entries changed after ``since`` into layout memory, and carry a
    conversation's retraction of a shared entry to it (newer wins); return changed keys.

    A :class:`LayoutEdit` must have the conversation's keys loaded."""

    promoted: list[str] = []
    for entry in conversation.entries.values():
        if entry.updated_at <= since:
            continue
        current = layout.entries.get(entry.key)
        if entry.status == "retracted":
            if (
                current is not None
                and current.status == "active"
                and current.person == entry.person
                and plausible_ms(current.updated_at) < entry.updated_at
            ):
                retract(
                    current,
                    [s for s in entry.sources if s not in current.sources],
                    entry.updated_at,
                )
                promoted.append(entry.key)
            continue
        if entry.kind not in LONG_LIVED_KINDS or entry.status != "active":
            continue
        if current is not None and current.status == "retracted":
            continue  # a person retracted it; only a person restores it
        if current is not None and current.person != entry.person:
            # One key, two owners: another person's private entry is never replaced (nor a
            # shared one by a private one); the entry stays in its conversation.
            logger.warning(
                "memory did not promote %r from conversation %s: layout memory holds an entry "
                "of another owner under that key",
                entry.key,
                conversation.rollout_id,
            )
            continue
        if current is not None and plausible_ms(current.updated_at) >= entry.updated_at:
            continue
        copy = entry.model_copy(deep=True)
        if current is not None and current.person == entry.person:
            copy.sources = merged_sources(current, copy.sources)
        layout.entries[entry.key] = copy
        promoted.append(entry.key)
    return promoted


def shown_entries(
    layout: LayoutMemory | LayoutEdit, registry: Any
) -> dict[str, tuple[Entry, str | None]]:
    """One entry per key, as memory shows it: the newest active shared entry among the layout's
    and the selected conversations' facts, with the conversation that owns it (``None`` for a
    layout entry). Two conversations that used one key show one fact, never two lines."""

    shown: dict[str, tuple[Entry, str | None]] = {}

    def consider(entry: Entry, owner: str | None) -> None:
        if entry.status != "active" or entry.person is not None:
            return
        held = shown.get(entry.key)
        if held is None or held[0].updated_at < entry.updated_at:
            shown[entry.key] = (entry, owner)

    for rid, group in registry.conversations.items():
        for entry in group:
            consider(entry, rid)
    for entry in layout.entries.values():
        consider(entry, None)
    return shown


def displayed_entries(layout: LayoutMemory, registry: Any) -> list[Entry]:
    """What the rendered files and the read prompt show: :func:`shown_entries`, plus the layout's
    private entries (shown only to their person)."""

    private = [e for e in layout.entries.values() if e.person is not None]
    return [e for e, _ in shown_entries(layout, registry).values()] + private


@dataclass
class Selection:
    selected: list[tuple[str, RolloutProgress]]
    forgotten: list[tuple[str, RolloutProgress]]


def select_rollouts(
    rollouts: dict[str, RolloutProgress],
    limit: int,
    *,
    usage: Mapping[str, tuple[int, int]] | None = None,
) -> Selection:
    """The ``limit`` extracted rollouts active last; the rest are forgotten.

    A rollout is active when it is updated (a run recorded and extracted) and when a later run
    uses its memory (``usage``: rollout id to ``(uses, last use in ms)``, see
    :meth:`SearchIndex.usage <sandbox_memory.search.index.SearchIndex.usage>`). So a rollout that
    runs keep using is kept over one that is merely newer and never used; ties go to the one
    used more often. Without usage this is plain newest-first.
    """

    used = usage or {}

    def activity(pair: tuple[str, RolloutProgress]) -> tuple[int, int, str]:
        rid, prog = pair
        uses, last_used = used.get(rid, (0, 0))
        return (max(timestamp_ms(prog.updated_at), last_used), uses, rid)

    extracted = [(rid, p) for rid, p in rollouts.items() if p.slug is not None]
    extracted.sort(key=activity, reverse=True)
    return Selection(selected=extracted[:limit], forgotten=extracted[limit:])


def forget_conversations(layout: LayoutMemory | LayoutEdit, forgotten: set[str]) -> list[str]:
    """Drop layout entries whose every source lies in a forgotten conversation (of a
    :class:`LayoutEdit`: among those loaded, the ones citing a forgotten conversation)."""

    dropped: list[str] = []
    for key, entry in list(layout.entries.items()):
        convs = {s.conversation for s in entry.sources}
        if convs and convs <= forgotten and entry.status == "active":
            del layout.entries[key]
            dropped.append(key)
    return dropped
