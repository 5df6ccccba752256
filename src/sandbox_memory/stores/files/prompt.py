"""The read prompt's entries (:class:`PromptFiles`): ``store/prompt.json``, written by phase 2,
read on a run's first turn instead of every entry.
"""

from __future__ import annotations

from pydantic import ValidationError

from ... import bounded
from ..records import Entry
from .base import FileRecords


class PromptFiles(FileRecords):
    """The entries the read prompt may show, from ``store/prompt.json``."""

    async def prompt_entries(self, *, person: str | None, budget: int) -> list[Entry] | None:
        """Layout entries the read prompt may show ``person``, from ``store/prompt.json``
        (written by phase 2, newest first, cut at twice the budget it rendered with): a run's
        first turn reads a few kilobytes, not every entry. ``None`` when that file is missing,
        unreadable or cut below ``budget`` (then the caller reads the whole store)."""

        raw = await self.read_state(f"{self.dir}/prompt.json")
        if raw is None:
            return None
        try:
            doc = bounded.loads(raw, limit=bounded.MAX_STATE_BYTES, what="store/prompt.json")
            if int(doc["budget"]) < budget:
                return None
            found = list(doc["shared"])
            if person is not None:
                found += doc["private"].get(person, [])
            return [Entry.model_validate(e) for e in found]
        except (ValueError, KeyError, TypeError, AttributeError, ValidationError):
            return None
