"""Recording run segments: ``sessions/<rollout-id>.jsonl``, one line per run.

A line keeps the SDK's rollout payload shape (``updated_at``, ``rollout_id``, ``input``,
``generated_items``, ``terminal_metadata``, ``final_output``) and adds ``segment_id``, ``person``
and, on every item, ``memory_item_id`` (``<segment_id>:<index>``): the id memory entries cite.
Everything is redacted before it is written. Appending costs the size of the segment. Each
line ends with a seal (:mod:`.integrity`): a line is read only when memory recorded it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .. import bounded
from ..engines.base import ITEM_ID_FIELD
from ..engines.transcript import REPLAYED_ITEM_TYPE
from ..errors import MemoryConfigError
from ..integrity import SEAL_FIELD, SegmentSeal
from ..workspace import Workspace

if TYPE_CHECKING:
    from ..redact import Redactor  # built by the runtime, on first use

logger = logging.getLogger("sandbox_memory")

ROLLOUT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""The SDK's rule for a rollout id that is also a file name."""

DERIVED_MARK = "--"
"""What separates a derived id's readable part from its hash (``team-alice-chat--<hash>``).
An id kept as given never holds it (``a--b`` is derived too), so a derived id and an id kept
as given can never name one file."""

DIGEST_ID_CHARS = 12
"""Hex characters of the hash of a derived id (48 bits)."""

DERIVED_ID_RE = re.compile(
    r"^[A-Za-z0-9](?:[A-Za-z0-9._]|-(?!-))*" + DERIVED_MARK + f"[0-9a-f]{{{DIGEST_ID_CHARS}}}$"
)
"""A derived id, as memory made it (views and the command line list it)."""

MAX_ROLLOUT_ID_INPUT = 4_096
"""Ids longer than this are refused: they are not conversation ids but data."""


def text_value(field: str, value: str) -> str:
    """``value`` if it can be written as UTF-8; a lone surrogate (``"\\ud800"``, as a bad
    decode or a JSON ``"\\ud800"`` escape gives it) is refused with
    :class:`~sandbox_memory.errors.MemoryConfigError` naming ``field``, before anything is
    written."""

    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MemoryConfigError(
            field,
            value,
            f"holds a lone surrogate ({value[exc.start]!r} at position {exc.start}), which is "
            "not text: decode it with errors='replace' or drop it",
        ) from None
    return value


def safe_rollout_id(raw: object) -> str:
    """The file-safe id that names the conversation ``raw`` (as a command or a view names it).

    ``raw`` is kept when it is file-safe; ``conv/123 ü`` becomes ``conv-123--<hash>``: the same
    raw id always maps to the same file, and two raw ids never share one. An id of the derived
    form (``conv-123--<hash>``, as a view or ``sandbox-memory conversations`` lists it) names
    that conversation. An id holding a secret (a token used as ``group_id``) is redacted
    first, so no part of the secret reaches a file name, a memory header, the model input or a
    log line: ``ci-ghp_...`` becomes ``ci-redacted-github-token--<hash>``. Empty or absurd
    ids, and ids that are not text (a lone surrogate), are refused with a clear error.
    """

    if not isinstance(raw, str):
        raise MemoryConfigError("rollout_id", raw, "must be a string")
    text = raw.strip()
    if DERIVED_ID_RE.fullmatch(text) and len(text) <= 128:
        return text
    return _safe_rollout_id(raw)


def run_rollout_id(raw: object) -> str:
    """The file-safe id a run with conversation id ``raw`` is recorded under.

    As :func:`safe_rollout_id`, except that an id of the derived form is a raw id like any
    other (it is derived in turn): a run's id is never taken as the name of another
    conversation's file, so two different ids never share a rollout file and its memory.
    """

    if not isinstance(raw, str):
        raise MemoryConfigError("rollout_id", raw, "must be a string")
    return _safe_rollout_id(raw)


@functools.lru_cache(maxsize=4096)
def _safe_rollout_id(raw: str) -> str:
    text = text_value("rollout_id", raw).strip()
    if not text:
        raise MemoryConfigError("rollout_id", raw, "must not be empty")
    if len(text) > MAX_ROLLOUT_ID_INPUT:
        shown = display_id(text[:40])
        raise MemoryConfigError("rollout_id", shown + "...", "is longer than 4096 chars")
    shown = display_id(text)
    if (
        shown == text
        and ROLLOUT_ID_RE.fullmatch(text)
        and ".." not in text
        and DERIVED_MARK not in text
    ):
        return text
    readable = _MARKER_RE.sub(lambda m: f"-redacted-{m.group(1)}-", shown)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", readable).strip("-._")[:80].strip("-._") or "rollout"
    slug = re.sub(r"-{2,}", "-", slug)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_ID_CHARS]
    return f"{slug}{DERIVED_MARK}{digest}"


_MARKER_RE = re.compile(r"\[REDACTED:([a-z0-9-]{1,64})\]")


def display_id(raw: object) -> str:
    """A conversation id as it may be shown in a log line or an error: secrets redacted."""

    from ..redact import default_redactor  # imported on first use, like the runtime's

    return default_redactor().redact_text(str(raw))


def rollout_path(sessions_dir: str, rollout_id: str) -> str:
    return f"{sessions_dir}/{rollout_id}.jsonl"


def new_segment_id() -> str:
    return secrets.token_hex(4)


def now_iso() -> str:
    return datetime.now(tz=timezone.utc).isoformat()


def build_segment(
    payload: dict[str, Any],
    *,
    rollout_id: str,
    person: str | None,
    redactor: Redactor,
    segment_id: str | None = None,
) -> dict[str, Any]:
    """Turn an SDK rollout payload into a recorded, redacted segment with item ids."""

    seg_id = segment_id or new_segment_id()
    counter = 0

    def with_ids(items: Any) -> list[Any]:
        nonlocal counter
        out: list[Any] = []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        for item in items or []:
            if isinstance(item, dict):
                item = {k: v for k, v in item.items() if k != ITEM_ID_FIELD}
            else:
                item = {"type": "unknown", "value": str(item)}
            item[ITEM_ID_FIELD] = f"{seg_id}:{counter}"
            counter += 1
            out.append(item)
        return out

    # The SDK's keys first, in its order (a reader of its format finds them where it looks);
    # ours after them.
    segment: dict[str, Any] = {
        "updated_at": payload.get("updated_at") or now_iso(),
        "rollout_id": rollout_id,
        "input": with_ids(payload.get("input")),
        "generated_items": with_ids(payload.get("generated_items")),
    }
    if "interruptions" in payload:
        segment["interruptions"] = payload["interruptions"]
    segment["terminal_metadata"] = payload.get("terminal_metadata") or {
        "terminal_state": "completed",
        "has_final_output": False,
    }
    if "final_output" in payload:
        segment["final_output"] = payload["final_output"]
    segment["segment_id"] = seg_id
    segment["person"] = person
    redacted: dict[str, Any] = redactor.redact_json(segment)
    return redacted


DIGEST_CHARS = 12
"""Hex characters of an item digest (48 bits: collisions within a conversation negligible)."""

_NOT_DIGESTED = frozenset({ITEM_ID_FIELD, "id", "status", "provider_data"})


_DIGEST_JSON = json.JSONEncoder(
    sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
)
"""The canonical form an item is hashed in (one encoder: ``json.dumps`` with options builds
a new one per call, a fifth of a digest's time)."""

_LINE_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str)


def item_digest(item: dict[str, Any]) -> str:
    """Content hash of a recorded item (ids and status left out): how a replay is recognised."""

    core = {k: v for k, v in item.items() if k not in _NOT_DIGESTED}
    text = _DIGEST_JSON.encode(core)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


_ITEM_LISTS = ("input", "generated_items")


class EncodedSegment:
    """A segment being recorded, each item encoded once: the canonical JSON its digest hashes
    (:func:`item_digest`) is also the item's text in the line, its ids and status appended,
    so neither a big tool output nor any other item is encoded twice.

    The leading input items a replay may cover are all but the last, up to a non-item: the
    last is always kept (a run brings something new, and a message sent twice is said twice).
    """

    def __init__(self, segment: dict[str, Any]) -> None:
        self.segment = segment
        self._items: dict[str, list[tuple[str, str] | None]] = {}
        for key in _ITEM_LISTS:
            items = segment.get(key)
            if isinstance(items, list):
                self._items[key] = [_encode_item(item) for item in items]
        self._replayed: frozenset[int] = frozenset()

    def leading_digests(self) -> list[str]:
        """Digests of the input items a replay may cover."""

        out: list[str] = []
        for encoded in self._items.get("input", [])[:-1]:
            if encoded is None:
                break
            out.append(encoded[1])
        return out

    def mark_replayed(self, plan: list[tuple[int, str]]) -> int:
        """Replace the planned input items (see :func:`replay_plan`) by references to the items
        they replay; return how many."""

        apply_replayed(self.segment, plan)
        self._replayed = frozenset(position for position, _ in plan)
        return len(plan)

    def line(self) -> bytes:
        """The segment's JSON line: its keys in its order, each item's keys sorted with its
        ids and status last (the item's digest text, extended), ending in ``\n``."""

        parts: list[str] = []
        for key, value in self.segment.items():
            encoded = self._items.get(key)
            if encoded is None:
                text = _LINE_JSON.encode(value)
            else:
                text = "[" + ",".join(self._item_text(key, i, e) for i, e in enumerate(encoded))
                text += "]"
            parts.append(f"{_LINE_JSON.encode(key)}:{text}")
        return ("{" + ",".join(parts) + "}\n").encode("utf-8")

    def _item_text(self, key: str, position: int, encoded: tuple[str, str] | None) -> str:
        item = self.segment[key][position]
        if encoded is None or (key == "input" and position in self._replayed):
            return _LINE_JSON.encode(item)
        rest = ",".join(
            f"{_LINE_JSON.encode(k)}:{_LINE_JSON.encode(v)}"
            for k, v in item.items()
            if k in _NOT_DIGESTED
        )
        core = encoded[0]
        if not rest:
            return core
        return "{" + rest + "}" if core == "{}" else core[:-1] + "," + rest + "}"

    def new_item_digests(self) -> list[tuple[str, str]]:
        """``(digest, item id)`` of the items this segment records for the first time."""

        out: list[tuple[str, str]] = []
        for key, encoded in self._items.items():
            for item, item_encoded in zip(self.segment[key], encoded, strict=True):
                if item_encoded is None or item.get("type") == REPLAYED_ITEM_TYPE:
                    continue  # a reference (see mark_replayed), as new_item_digests skips it
                item_id = item.get(ITEM_ID_FIELD)
                if isinstance(item_id, str):
                    out.append((item_encoded[1], item_id))
        return out


def _encode_item(item: Any) -> tuple[str, str] | None:
    """``(canonical JSON, digest)`` of an item (see :func:`item_digest`); ``None`` for a
    value that is not an item."""

    if not isinstance(item, dict):
        return None
    text = _DIGEST_JSON.encode({k: v for k, v in item.items() if k not in _NOT_DIGESTED})
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def replay_plan(digests: list[str], known: dict[str, list[str]]) -> list[tuple[int, str]]:
    """``(position, original item id)`` of the leading items ``known`` already holds."""

    taken: dict[str, int] = {}
    plan: list[tuple[int, str]] = []
    for position, digest in enumerate(digests):
        ids = known.get(digest, [])
        used = taken.get(digest, 0)
        if used >= len(ids):
            break  # the replayed prefix ends here
        taken[digest] = used + 1
        plan.append((position, ids[used]))
    return plan


def apply_replayed(segment: dict[str, Any], plan: list[tuple[int, str]]) -> None:
    """Replace the planned input items by references to the items they replay."""

    items = segment["input"] if plan else []
    for position, item_id in plan:
        items[position] = {"type": REPLAYED_ITEM_TYPE, ITEM_ID_FIELD: item_id}


def new_item_digests(segment: dict[str, Any]) -> list[tuple[str, str]]:
    """``(digest, item id)`` of the items this segment records for the first time."""

    out: list[tuple[str, str]] = []
    for key in ("input", "generated_items"):
        for item in segment.get(key) or []:
            if isinstance(item, dict) and item.get("type") != REPLAYED_ITEM_TYPE:
                item_id = item.get(ITEM_ID_FIELD)
                if isinstance(item_id, str):
                    out.append((item_digest(item), item_id))
    return out


FINGERPRINT_ITEMS = 2
"""Items of a conversation's start that identify it: the first user message and the reply."""

_SKIPPED_FOR_FINGERPRINT = frozenset({"reasoning", "compaction"})


_SPACE = re.compile(r"\s")
"""Whitespace as ``str.split`` sees it (``\\s`` of ``re`` is the same set of characters)."""

_WORDS_WINDOW = 1 << 16
"""Characters split into words at a time when a fingerprint normalises whitespace."""


def _words(text: str) -> Iterator[str]:
    """``" ".join(text.split())`` as pieces to be joined by one space: windows of about
    :data:`_WORDS_WINDOW` characters cut at whitespace (no word spans two), so a huge string
    is never split into all its words at once (tens of bytes of object per word)."""

    start = 0
    while start < len(text):
        cut = start + _WORDS_WINDOW
        if cut < len(text):
            found = _SPACE.search(text, cut)
            cut = found.start() if found else len(text)
        piece = " ".join(text[start:cut].split())
        if piece:
            yield piece
        start = cut


def _item_words(item: dict[str, Any]) -> Iterator[str]:
    """An item's text for its fingerprint, whitespace normalised, in pieces (see ``_words``)."""

    content = item.get("content")
    if isinstance(content, list):
        content = " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    yield from _words(str(item.get("role") or item.get("type") or ""))
    for value in (content, item.get("name"), item.get("arguments"), item.get("output")):
        if value:
            yield from _words(value if isinstance(value, str) else json.dumps(value, default=str))


def history_fingerprint(items: Any) -> str | None:
    """Fingerprint of a conversation's first items: how a later run recognises its history.

    Only a history (two or more items) has one, so a single new message never claims a
    conversation it merely starts like.
    """

    if not isinstance(items, list):
        return None
    kept = [
        i
        for i in items
        if isinstance(i, dict)
        and i.get("type") not in _SKIPPED_FOR_FINGERPRINT
        and i.get("role") not in ("system", "developer")
    ][:FINGERPRINT_ITEMS]
    if len(kept) < FINGERPRINT_ITEMS:
        return None
    # The hash of the items' texts joined by newlines, each with its whitespace normalised,
    # taken a piece at a time.
    digest = hashlib.sha256()
    for n, item in enumerate(kept):
        if n:
            digest.update(b"\n")
        for k, piece in enumerate(_item_words(item)):
            if k:
                digest.update(b" ")
            digest.update(piece.encode("utf-8"))
    return digest.hexdigest()[:DIGEST_CHARS]


def segment_fingerprint(segment: dict[str, Any]) -> str | None:
    """The history fingerprint of a recorded segment (its input, then what the run added)."""

    return history_fingerprint(
        [*(segment.get("input") or []), *(segment.get("generated_items") or [])]
    )


async def append_segment(
    workspace: Workspace,
    *,
    sessions_dir: str,
    rollout_id: str,
    segment: dict[str, Any],
    seal: SegmentSeal,
    flag: str | None = None,
) -> bool:
    """Append one segment line, sealed; ``True`` when it is the rollout's first.

    ``flag``: the store's pending flag for this rollout (see ``Workspace.append_line``).
    """

    line = seal.seal(segment_line(segment), rollout_id)
    return await workspace.append_line(rollout_path(sessions_dir, rollout_id), line, flag=flag)


def segment_line(segment: dict[str, Any]) -> bytes:
    """A segment as the JSON line recorded for it (in the file and in a shared store)."""

    return EncodedSegment(segment).line()


@dataclass
class ParsedSegments:
    segments: list[dict[str, Any]] = field(default_factory=list)
    end_offset: int = 0
    """Offset just past the last complete line read (a torn last line is left for later)."""
    malformed: int = 0
    """Lines that are not a JSON object."""
    unverified: int = 0
    """Lines without a valid seal (:mod:`.integrity`): memory did not record them."""
    unsafe: int = 0
    """Lines longer or nested deeper than memory parses (:mod:`.bounded`)."""
    item_digests: list[tuple[str, str]] = field(default_factory=list)
    """``(digest, item id)`` of the items the segments record for the first time, from the
    items as recorded (before any clipping); filled by ``read_new_segments(digests=True)``."""

    def skipped(self) -> str | None:
        """What was skipped, in words (``None``: nothing)."""

        parts = [
            f"{n} {what}"
            for n, what in (
                (self.unverified, "not recorded by memory (no valid seal)"),
                (self.unsafe, "beyond memory's parsing bounds"),
                (self.malformed, "not valid JSON"),
            )
            if n
        ]
        return ", ".join(parts) or None


_BLANK = " \t\n\r\x0b\x0c"
"""What ``bytes.strip`` strips: a line of only these is blank (skipped), not malformed."""

_BLANK_BYTES = _BLANK.encode()
_BLANK_CHECKED = 4096
"""Longest line looked at for being blank; a longer one is not a line memory wrote blank, and
is counted as unverified like any line without a seal."""


@dataclass(frozen=True)
class LineCheck:
    """How lines of one rollout are checked: the seal they must carry, in that conversation."""

    seal: SegmentSeal
    rollout_id: str


def _take(
    result: ParsedSegments,
    raw: bytes | memoryview,
    check: LineCheck,
    *,
    digests: bool,
    clip: bool,
    keep: bool = True,
) -> None:
    """Parse one line into ``result``: skipped if blank; counted and skipped if it carries
    no valid seal, is beyond the parsing bounds, or is not a JSON object. ``keep=False``:
    only its digests are taken (the segment is not kept)."""

    if len(raw) <= _BLANK_CHECKED and not bytes(raw).strip(_BLANK_BYTES):
        return
    if not check.seal.verify(raw, check.rollout_id):
        result.unverified += 1
        return
    try:
        value = bounded.loads(_decode(raw), limit=bounded.MAX_LINE_BYTES, what="a session line")
    except bounded.UnsafeJSON:
        result.unsafe += 1
        return
    except ValueError:
        result.malformed += 1
        return
    if not isinstance(value, dict):
        result.malformed += 1
        return
    value.pop(SEAL_FIELD, None)
    if digests:
        result.item_digests += new_item_digests(value)
    if keep:
        result.segments.append(clip_strings(value) if clip else value)


def _decode(raw: bytes | memoryview) -> str:
    # Straight from a view too (no copy of the bytes first); bytes that are not UTF-8 are
    # replaced (U+FFFD).
    return str(raw, "utf-8", "replace")


def parse_segments(data: bytes, *, start_offset: int, check: LineCheck) -> ParsedSegments:
    """Parse complete JSONL lines; skip (and count) lines memory did not record, or cannot
    parse; leave a torn tail unread."""

    result = ParsedSegments(end_offset=start_offset)
    last_newline = data.rfind(b"\n")
    if last_newline < 0:
        return result
    result.end_offset = start_offset + last_newline + 1
    view = memoryview(data)
    start = 0
    while start <= last_newline:
        end = data.find(b"\n", start)
        _take(result, view[start:end], check, digests=False, clip=False)
        start = end + 1
    return result


def last_item_id(segments: list[dict[str, object]]) -> str | None:
    """The id of the last recorded item of ``segments``."""

    for seg in reversed(segments):
        for key in ("generated_items", "input"):
            items = seg.get(key)
            if isinstance(items, list):
                for item in reversed(items):
                    if isinstance(item, dict) and isinstance(item.get("memory_item_id"), str):
                        return str(item["memory_item_id"])
    return None


READ_CHUNK_BYTES = 1 << 20
"""Bytes read at a time when extracting: a rollout never sits in memory whole. Measured on the
close of a 20 MB rollout (``bench/scenario_bigrollout.py``): peak RSS growth 39 MB with 8 MiB
chunks, 31 MB with 2 to 4 MiB, 27 MB with 1 MiB (one chunk, one line and its parse are held)."""

MAX_STRING_CHARS = 64_000
"""Longest string kept from a recorded item for extraction (head and tail): engines clip item
text far below this (a transcript line is at most a few thousand characters), so clipping at
parse time bounds memory without changing what an engine sees."""


def clip_strings(value: Any, limit: int = MAX_STRING_CHARS) -> Any:
    """``value`` with every string longer than ``limit`` cut to its head and tail."""

    if isinstance(value, str):
        if len(value) <= limit:
            return value
        head = limit * 2 // 5
        tail = limit - head
        omitted = len(value) - head - tail
        return f"{value[:head]}\n[... {omitted} characters omitted ...]\n{value[-tail:]}"
    if isinstance(value, dict):
        return {k: clip_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [clip_strings(v, limit) for v in value]
    return value


async def read_new_segments(
    workspace: Workspace,
    path: str,
    *,
    offset: int,
    check: LineCheck,
    chunk: int = READ_CHUNK_BYTES,
    digests: bool = False,
    segments: bool = True,
) -> ParsedSegments | None:
    """Segments after ``offset``, long strings clipped; ``None`` if no file.

    Only lines memory recorded are taken (``check``: the seal they carry, see
    :mod:`.integrity`); a line without a valid seal, longer than
    :data:`~.bounded.MAX_LINE_BYTES` or nested deeper than :data:`~.bounded.MAX_DEPTH` is
    counted in the result and skipped. Read in chunks of ``chunk`` bytes and parsed a line at
    a time, each line clipped as soon as it is parsed: memory holds one chunk, the line being
    parsed (a line longer than a chunk is joined from its pieces once, unless it is longer
    than the bound: then its pieces are dropped as they come) and the clipped segments,
    however big the rollout. ``digests``: also the digests of the recorded items, from each
    item before it is clipped (what a replay of it will match). ``segments=False``: only the
    digests are wanted, and no segment is kept (memory holds one line, however many the
    rollout has). Only complete lines are taken: a torn last line is left for a later read.
    """

    result = ParsedSegments(end_offset=offset)
    pos = offset
    pending: list[memoryview] = []
    """The start of a line that goes on in the next chunk."""
    pending_bytes = 0
    too_long = False
    """The line being read is longer than the bound: its pieces are not kept."""
    while True:
        data = await workspace.read_range(path, pos, chunk)
        if data is None:
            return None if pos == offset else result
        view = memoryview(data)
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            if too_long:
                result.unsafe += 1
                too_long = False
            elif pending:
                # Joined from the pieces; the pieces go before the line is parsed.
                line = b"".join([*pending, view[start:end]])
                pending = []
                pending_bytes = 0
                _take(result, line, check, digests=digests, clip=True, keep=segments)
                del line
            else:
                _take(result, view[start:end], check, digests=digests, clip=True, keep=segments)
            start = end + 1
            result.end_offset = pos + start
        if start < len(data) and not too_long:
            pending.append(view[start:])
            pending_bytes += len(data) - start
            if pending_bytes > bounded.MAX_LINE_BYTES:
                pending, pending_bytes, too_long = [], 0, True
        del view
        pos += len(data)
        if len(data) < chunk:
            return result
