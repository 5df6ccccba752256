"""What a client shows of memory: a conversation's or the layout's view, a conversation's summary, and whether an entry exists for a person."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel, field_serializer

from ..stores.records import (
    Entry,
)

if TYPE_CHECKING:
    pass


class ConversationView(BaseModel):
    rollout_id: str
    version: int
    head: str | None
    entries: dict[str, Entry]
    processed: list[str]
    settings: dict[str, bool]
    overrides: dict[str, bool]


class LayoutView(BaseModel):
    version: int
    entries: Mapping[str, Entry]
    """Read only; each entry is parsed when first asked for (a view of 20,000 entries whose
    caller wants its version or one key parses one entry)."""

    @field_serializer("entries")
    def _entries(self, entries: Mapping[str, Entry]) -> dict[str, Entry]:
        return dict(entries)


class ConversationSummary(BaseModel):
    """One line of :meth:`MemoryClient.conversations`."""

    rollout_id: str
    active: int
    """Active entries of its conversation memory."""
    retracted: int
    version: int
    updated_at: int | None
    """Last change of its memory or its recorded history (ms), ``None`` if never."""
    recorded: bool
    """Whether ``sessions/<rollout_id>.jsonl`` exists."""


def visible_to(entry: Entry, person: str | None) -> bool:
    """Whether ``person`` (``None``: no one in particular) may see ``entry``, active or
    retracted: shared entries and their own private ones. Another person's private entry does
    not exist for them (:meth:`MemoryClient.view_for`, :meth:`MemoryClient.apply_for`)."""

    return entry.exists_for(person)
