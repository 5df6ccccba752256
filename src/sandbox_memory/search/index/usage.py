"""Usage: how often later runs used what memory holds, counted as their items are indexed.

A tool call reading a rollout summary, raw memory or rollout file of a conversation
(:data:`USAGE_PATHS_RE`), an entry line of ``MEMORY.md`` shown in that call's result
(:data:`ENTRY_SHOWN_RE`), an entry key cited in an assistant message: each is a use
(:func:`_uses_in`), counted in table ``usage`` by the sync. Phase 2 reads the counts per
conversation (:meth:`UsageCounts.usage`) when it selects which rollouts to keep.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from ...engines.transcript import output_call_id
from .base import IndexBase
from .schema import _sources_of

USAGE_PATHS_RE = re.compile(
    r"(?:rollout_summaries/(?P<summary>[A-Za-z0-9][A-Za-z0-9._-]*)\.md"
    r"|raw_memories/(?P<raw>[A-Za-z0-9][A-Za-z0-9._-]*?)\.md"
    r"|sessions/(?P<session>[A-Za-z0-9][A-Za-z0-9._-]*?)\.jsonl)"
)
"""A memory file of one conversation named in a tool call: reading it is a use."""


ENTRY_SHOWN_RE = re.compile(r"\*\*(?P<key>[a-z0-9][a-z0-9._-]{0,63})\*\* \(")
"""An entry line of ``MEMORY.md`` (``- **key** (kind): ...``) in a tool result."""


def _active_keys(db: sqlite3.Connection, words: Iterable[str]) -> set[str]:
    """Which of ``words`` are keys of active entries in the index (through ``docs_entry_key``)."""

    wanted = sorted(set(words))
    if not wanted:
        return set()
    return {
        str(k)
        for (k,) in db.execute(
            "SELECT DISTINCT key FROM docs WHERE kind = 'entry' "
            "AND key IN (SELECT value FROM json_each(?))",
            (json.dumps(wanted),),
        )
    }


def _is_assistant_text(item: dict[str, Any]) -> bool:
    return item.get("role") == "assistant" and item.get("type") in (None, "message")


def _uses_in(
    item: dict[str, Any],
    text: str,
    calls_reading: set[str],
    active_keys: Callable[[Iterable[str]], set[str]],
    known: Callable[[str], bool],
) -> list[tuple[str, str]]:
    """Uses of memory one recorded item shows: ``(target, "conversation" | "entry")``.

    ``calls_reading`` collects the ids of tool calls that read memory files, so that their
    results can be checked for the entry lines they showed. ``active_keys`` tells which of
    some words are keys of active entries (an index lookup: the cost follows the item, not
    the number of entries).
    """

    found: list[tuple[str, str]] = []
    kind = item.get("type")
    is_output = isinstance(kind, str) and kind.endswith("_output")
    is_call = isinstance(kind, str) and not is_output and kind.endswith("_call")
    if is_call:
        reads_memory = False
        for match in USAGE_PATHS_RE.finditer(text):
            rid = match.group("raw") or match.group("session")
            if match.group("summary"):
                # ``<rollout-id>_<slug>``: the id may itself hold '_', so try each split.
                name = match.group("summary")
                splits = [name[:i] for i, ch in enumerate(name) if ch == "_"]
                rid = next((r for r in splits if known(r)), None)
            if rid is not None and known(rid):
                found.append((rid, "conversation"))
                reads_memory = True
        if reads_memory or "MEMORY.md" in text or "memory_summary.md" in text:
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                calls_reading.add(call_id)
    elif is_output:
        if output_call_id(item) in calls_reading:
            shown = list(dict.fromkeys(ENTRY_SHOWN_RE.findall(text)))
            active = active_keys(shown) if shown else set()
            found += [(key, "entry") for key in shown if key in active]
    elif _is_assistant_text(item):
        words = set(re.findall(r"[a-z0-9][a-z0-9._-]*[a-z0-9]", text.lower()))
        for key in sorted(active_keys(words)):
            # One-word keys are ordinary words too: cited only when marked as a key.
            if any(c in key for c in "-_.") or f"`{key}`" in text or f"**{key}**" in text:
                found.append((key, "entry"))
    return found


class UsageCounts(IndexBase):
    """The usage counts phase 2 reads."""

    async def usage(self) -> dict[str, tuple[int, int]]:
        """Per conversation: ``(uses, last use in ms)`` by later runs, from the synced index.

        A use of an entry counts for every conversation the entry rests on.
        """

        db = await self._open()
        result: dict[str, tuple[int, int]] = {}

        def add(rid: str, uses: int, at: int) -> None:
            n, last = result.get(rid, (0, 0))
            result[rid] = (n + uses, max(last, at))

        for target, uses, at in db.execute(
            "SELECT target, uses, last_used_at FROM usage WHERE kind = 'conversation'"
        ):
            add(str(target), int(uses), int(at))
        # From the usage rows to their entries (CROSS JOIN keeps that order: SQLite would
        # otherwise scan every entry to look each up in the usage table).
        for uses, at, sources in db.execute(
            "SELECT u.uses, u.last_used_at, d.sources FROM usage u CROSS JOIN docs d "
            "ON d.kind = 'entry' AND d.key = u.target WHERE u.kind = 'entry'"
        ):
            for rid in {s["conversation"] for s in _sources_of(sources)}:
                add(str(rid), int(uses), int(at))
        return result
