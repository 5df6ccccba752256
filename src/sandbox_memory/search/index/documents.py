"""What each document of the index holds, made from what memory keeps.

An entry's text and subjects (:func:`subject_terms`) with the stamp that tells it changed
(:func:`_entry_stamp`); a recorded item's label (who said it, which tool) and its text cut to
:data:`MAX_ITEM_CHARS` (:func:`_clip`); and, for items and rollout summaries, the text without
what differs from one run of the same work to the next (:func:`settled_text`). The
``memory_search`` tool's own calls are never documents (:data:`SEARCH_TOOL_NAME`).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any

from ...engines.transcript import output_call_id
from ...stores.records import Entry
from .schema import HitKind

MAX_ITEM_CHARS = 3_000
"""Characters of one recorded item that are indexed (its first 2,000 and last 1,000 when
longer): a message is indexed whole, a tool output dumping a large file is found by its start
and its end (where errors and summaries are), and the index stays a small fraction of the
rollout."""


SEARCH_TOOL_NAME = "memory_search"
"""The agent tool's name; its own calls and results are not indexed (no echo of old hits)."""


MIXED_PERSONS = "\x00several people"
"""``person`` of a summary of a conversation with runs for several people: shown to none."""


_RUN_STAMP_LINE_RE = re.compile(
    r"^(?:Chunk ID: \w+|Wall time: [\d.]+ seconds|Process running with session ID \d+"
    r"|session_id: \S+|updated_at: \S+|## Segment\(s\) up to \S+|<!-- segments from byte \d+ -->)"
    r"[ \t]*(?:\n|$)",
    re.MULTILINE,
)
"""Lines that say when or in which process something ran, never what: the header of a shell
tool's output (``Chunk ID: 3fa1c2``, ``Wall time: 0.0115 seconds``, the process's id), and a
rollout summary's stamps (its session id, its ``updated_at``, the time and byte offset of each
block of segments)."""


_ITEM_REFS_RE = re.compile(
    r" ?\[(?:[0-9a-f]{8}|segment-\d+)(?::\d+)?(?:, (?:[0-9a-f]{8}|segment-\d+)(?::\d+)?)*\]"
)
"""The item ids a rollout summary line cites (``[28178a5d:0, 28178a5d:5]``): random ids given
by the recorder (``stores/segments.py``); the hit's sources name them."""


_SUMMARY_HEADER_LINE_RE = re.compile(
    r"^(?:rollout_path|rollout_id|terminal_state|conversation): \S+[ \t]*(?:\n|$)", re.MULTILINE
)
"""A rollout summary's header lines (the SDK's front matter and the summary's own heading
block, which both name the rollout file): the hit carries them as its ``path`` and
``conversation``, and their words (``sessions``, ``jsonl``, ``completed``) say nothing the
conversation did."""


def settled_text(text: str, kind: HitKind) -> str:
    """The text of a document as it is indexed and shown: without what differs from one run of
    the same work to the next (random ids, clock times, durations: see
    :data:`_RUN_STAMP_LINE_RE`, :data:`_ITEM_REFS_RE`), and a rollout summary without the header
    lines its hit carries as fields (:data:`_SUMMARY_HEADER_LINE_RE`). Such tokens match a query's numbers
    and versions by chance ("3.8.2" against ``23:30:44``), and they made the ranking of the
    same memory, built twice from the same work, differ (two documents' scores a few
    thousandths apart swapped places). An entry's text is its own and is kept as it is."""

    if kind == "entry":
        return text
    text = _RUN_STAMP_LINE_RE.sub("", text)
    if kind == "rollout_summary":
        text = _SUMMARY_HEADER_LINE_RE.sub("", _ITEM_REFS_RE.sub("", text))
    return text.strip()


def _clip(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return text[:head] + "\n…\n" + text[-(limit - head) :]


def timestamp_ms(value: object) -> int:
    """``updated_at`` of a segment or progress (ISO text) as milliseconds; 0 when unknown."""

    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value:
        try:
            return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return 0
    return 0


def subject_terms(entry: Entry) -> str:
    """What an entry is about (:attr:`Entry.subjects`: its files, commands, tests, people,
    tools), one per line: indexed with its text though not shown in it, so that a query naming
    a file finds the entries about that file (its history of fixes) even where their content
    names it otherwise, or not at all."""

    subjects = entry.subjects
    if subjects is None:
        return ""
    values = [
        *subjects.files,
        *subjects.commands,
        *subjects.tests,
        *subjects.people,
        *subjects.tools,
    ]
    return "\n".join(dict.fromkeys(v for v in values if v.strip()))


def _entry_stamp(entry: Entry) -> str:
    said = f"{entry.content}\x00{subject_terms(entry)}"
    digest = hashlib.sha256(said.encode("utf-8")).hexdigest()[:16]
    return f"{entry.updated_at}:{entry.status}:{entry.kind}:{entry.person}:{digest}"


def _item_label(item: dict[str, Any], names: dict[str, str]) -> str:
    role = item.get("role")
    kind = item.get("type")
    if isinstance(role, str) and kind in (None, "message"):
        return role
    call_id = output_call_id(item)
    name = item.get("name") if isinstance(item.get("name"), str) else names.get(call_id or "")
    if isinstance(kind, str) and kind.endswith("_output"):
        return f"tool result {name}" if name else kind
    return f"tool {name}" if name else str(kind or "item")
