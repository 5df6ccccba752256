"""The records memory keeps, whatever store holds them: entries and their sources,
conversation and layout memory, the registry, progress, the change log, and layout memory's
head, shards and commits, with the rules every store checks them by (keys, sizes, kinds).

A backend (:mod:`.files`, :mod:`.postgres_seam`, :mod:`.memory`) stores these; nothing here
reads or writes.
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr

from ..engines.base import EntryKind, Subjects
from ..errors import MemoryConfigError
from ..workspace import Workspace

KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
"""Keys are short stable slugs: no '/', no '..', safe as file names (skills/<key>/)."""

MAX_CONTENT_CHARS = 2_000
"""An entry is a compact fact, not a document; longer content is refused."""

LONG_LIVED_KINDS: frozenset[str] = frozenset({"procedure", "preference", "decision"})
"""Kinds promoted from conversation memory to layout memory (the specification's agent memory)."""

Cause = Literal["consolidation", "person", "promotion", "live_update", "forgetting", "migration"]


def now_ms() -> int:
    return int(time.time() * 1000)


def iso_to_ms(stamp: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 time (a segment's ``updated_at``); 0 if bad."""

    from datetime import datetime

    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1000)
    except ValueError:
        return 0


def validate_key(key: object) -> str:
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        raise MemoryConfigError(
            "key", key, "must be 1-64 chars of a-z, 0-9, '.', '_' or '-', starting alphanumeric"
        )
    if ".." in key:
        raise MemoryConfigError("key", key, "must not contain '..'")
    return key


COPY_RETRACTED = "retracted with its layout copy"
"""The detail of a conversation's log record retracting a layout entry's copy."""


class Source(BaseModel):
    """An item a fact rests on: the conversation (rollout id) and the item's id."""

    conversation: str
    item: str


class Entry(BaseModel):
    key: str
    content: str
    kind: EntryKind
    sources: list[Source] = Field(default_factory=list)
    updated_at: int = Field(default_factory=now_ms)
    """Milliseconds since the epoch, like the specification's ``updatedAt``."""
    status: Literal["active", "retracted"] = "active"
    person: str | None = None
    """Whose entry this is; ``None`` means shared work, shown to everyone."""
    keywords: list[str] = Field(default_factory=list)
    subjects: Subjects | None = None
    """What the entry is about (files, commands, tests, people, tools), as fields."""

    def exists_for(self, person: str | None) -> bool:
        """Whether this entry exists at all for someone acting for ``person`` (a run for them,
        a client made with ``person=``): shared, or theirs. Another person's private entry does
        not exist for them: not shown, not found, not forgotten, not replaced. The one rule
        every door applies (views, commands, the agent's tools, live edits, extraction, search
        and the injected prompt)."""

        return self.person is None or self.person == person


class Overrides(BaseModel):
    use: bool | None = None
    generate: bool | None = None


class ConversationMemory(BaseModel):
    rollout_id: str
    version: int = 0
    head: str | None = None
    """Id of the last history item recorded for this conversation."""
    entries: dict[str, Entry] = Field(default_factory=dict)
    overrides: Overrides = Field(default_factory=Overrides)
    updated_at: int = 0


class LayoutMemory(BaseModel):
    version: int = 0
    entries: dict[str, Entry] = Field(default_factory=dict)


class Defaults(BaseModel):
    """The switch defaults of the ``Memory`` configuration that last consolidated this memory.

    Recorded so the command line shows the settings in force (a workspace made with
    ``Memory(read=None)`` has ``use`` off by default) instead of guessing.
    """

    use: bool
    generate: bool
    max_summary_chars: int


class Registry(BaseModel):
    """Short-lived entries (facts, hypotheses) of the selected conversations, by conversation.

    Derived by phase 2 from conversation memory, like ``MEMORY.md``; kept so a run's prompt is
    built from three small files instead of every conversation's.
    """

    conversations: dict[str, list[Entry]] = Field(default_factory=dict)

    def entries(self) -> list[Entry]:
        return [e for group in self.conversations.values() for e in group]


MAX_ROLLOUT_BYTES = 1 << 53
"""Largest offset a progress record may hold: beyond any file, and exact as a JSON number."""

SLUG_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,98}[a-z0-9])?$"
"""A rollout summary's short name as ``extract.rollout.normalize_slug`` makes it (a file-name part)."""


class RolloutProgress(BaseModel):
    """One rollout's progress (``store/progress/<id>.json``). Validated on load: the agent can
    write the file, so an offset outside a file or a slug that is not a file-name part (``x/../
    ../ESCAPED``) makes the record unreadable (set aside, the rollout read afresh), never an
    error at every close."""

    offset: int = Field(default=0, ge=0, le=MAX_ROLLOUT_BYTES)
    """Bytes of ``sessions/<id>.jsonl`` already extracted."""
    updated_at: str = Field(default="", max_length=64)
    """``updated_at`` of the newest segment extracted (orders phase-2 selection)."""
    slug: str | None = Field(default=None, pattern=SLUG_PATTERN)
    attempts: int = 0
    last_error: str | None = None
    next_attempt_at: float = 0.0
    status: Literal["ok", "retrying", "failed"] = "ok"
    consolidated: bool = False
    """Whether phase 2 has taken this rollout's latest extraction into layout memory."""
    tail: str | None = None
    """Hash of the last bytes read (up to 256 before ``offset``): tells a rollout file that was
    replaced (cleared, an older copy restored) from the one read, at the cost of one small read."""
    forgotten: bool = False
    """Phase 2 forgot this rollout: only ``offset`` and ``updated_at`` are kept, so its old
    segments are not extracted again and a later run of the conversation starts after them."""

    def read_to(self, offset: int, tail: str | None) -> None:
        """Mark the rollout's bytes before ``offset`` as read; ``tail`` is
        :func:`tail_hash` at ``offset``. The two move together, always: an offset moved
        without its hash makes the next close take the file for a replaced one."""

        self.offset = offset
        self.tail = tail


TAIL_BYTES = 256


async def tail_hash(ws: Workspace, path: str, offset: int) -> str | None:
    """Hash of the bytes of ``path`` just before ``offset`` (see ``RolloutProgress.tail``)."""

    if offset <= 0:
        return None
    start = max(0, offset - TAIL_BYTES)
    data = await ws.read_range(path, start, offset - start)
    return None if data is None else hashlib.sha256(data).hexdigest()[:16]


class Progress(BaseModel):
    """The legacy single-file form (``progress.json``), read once and split into records."""

    rollouts: dict[str, RolloutProgress] = Field(default_factory=dict)


class LogRecord(BaseModel):
    version: int
    at: int
    cause: Cause
    scope: str
    """``layout`` or ``conversation:<rollout-id>``."""
    keys: list[str]
    detail: str | None = None


LAYOUT_SHARDS = 64
"""Records layout memory's entries are spread over, by key hash, while it is small (and in a
head written before the count was named, :attr:`LayoutHead.shards`): a change of one entry
reads and writes one of them, and reading all of layout memory is 64 small reads, not one per
entry."""

SHARD_ENTRIES = 96
"""Entries a shard holds on average before their count doubles: a shard stays under a
hundred entries however large layout memory grows, so a change of a few entries reads,
checks, seals and writes about as many bytes at 20,000 entries as at 2,000 (with 64 shards
for all, each held 235 entries at 20,000, and a close forgetting a conversation's 60 entries
rewrote 40 of them whole). Not fewer: each shard read costs about 40 microseconds whatever
its size, and a new process's view reads them all (at 15,000 entries, 256 shards cost 8 ms
more than 64, 512 cost 17 ms more, and the close gained as much with 256 as with 512)."""


def layout_shard_count(entries: int) -> int:
    """The shards for ``entries`` layout entries: :data:`LAYOUT_SHARDS`, doubled until each
    holds at most :data:`SHARD_ENTRIES` on average."""

    count = LAYOUT_SHARDS
    while entries > count * SHARD_ENTRIES:
        count *= 2
    return count


def layout_shard(key: str, shards: int = LAYOUT_SHARDS) -> int:
    """The shard holding ``key`` among ``shards`` (the low bytes of its hash first, so with
    :data:`LAYOUT_SHARDS` it is the shard every earlier release put it in)."""

    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little") % shards


LAYOUT_CHANGES_KEPT = 64
"""Latest commits whose keys the head names (:attr:`LayoutHead.changes`)."""

LAYOUT_CHANGE_KEYS_KEPT = 2_000
"""Keys named by those commits at most: a commit changing more is named as changing every
entry (it read and wrote about as many), and the oldest are dropped to keep the head small."""


class LayoutChange(BaseModel):
    """One commit of layout memory, as the head names it: from stamp ``before`` to ``stamp``,
    the entries of ``keys`` were put or removed."""

    stamp: str
    before: str
    keys: list[str] | None = None
    """``None``: any entry may have changed (a rebuild, a shard rewritten, many keys)."""


LAYOUT_FORMAT = 4
"""Shards one entry a line (:func:`_shard_bytes`): a key is found in a shard's bytes and only
its entry parsed; the head names each shard's seal (:attr:`LayoutHead.seals`) and the keys
removed from a shard not rewritten yet (:attr:`LayoutHead.removed`). Format 1 (every entry on
one line) and 2 (no seals named) are rewritten by the first writer; a head of format 3 names
no removed key, and its next writer writes format 4 (the shards stay as they are). A head of a
later format is refused (:func:`check_layout_format`): a build that does not know its records
would read entries it removed as present."""

LAYOUT_SEALED_FORMAT = 3
"""The first format whose head names each shard's seal (and whose shards are one entry a
line)."""

LAYOUT_REMOVED_SHARE = 8
"""A shard whose removed keys reach one in :data:`LAYOUT_REMOVED_SHARE` of the entries a shard
holds on average (at least two keys) is rewritten without them. A commit that only deletes
keys from a shard names them in the head instead of rewriting it: a close that forgets a
conversation's 60 entries spread over 256 shards writes the head and the few shards whose
removed keys reach their share, not 50 shards. Rewriting a
shard once it holds that share of removed keys keeps the bytes rewritten per removed entry
about eight entries' worth whatever the size of layout memory (a shard holds 48-96 entries
once spread, so the share is 6-12 keys): as many at 2,000 entries as at 20,000, while the
head's list stays under one in eight of the entries (under 2,500 keys at 20,000 entries, about
half that on average). A smaller share would write more shards per close; a larger one would
make the head, read by every process, larger."""

LAYOUT_REMOVED_KEPT = 4_096
"""Removed keys the head names at most: past it, the shards holding most of them are
rewritten (first those with more keys, then by number), so the head stays small when
layout memory is very large."""

SHARD_CACHE_BYTES = 1 << 20
"""Bytes of shards kept read (least recently used first out): what a close holds of layout
memory does not grow with it."""


class LayoutHead(BaseModel):
    """Layout memory's version and change stamp (``store/layout/head.json``)."""

    version: int = 0
    stamp: str = ""
    """New at every commit: a reader holding the same stamp holds the same layout memory."""
    changes: list[LayoutChange] = Field(default_factory=list)
    """The latest commits, oldest first, each naming the keys it changed: a reader that last
    saw an earlier stamp reads those entries again, not all of them (see
    :meth:`MemoryStore.layout_changes`). Written with the head, so no commit is without it."""
    format: int = 1
    """:data:`LAYOUT_FORMAT` once every shard is written one entry a line (a head written
    by an earlier release lacks it: its shards are rewritten by the next writer)."""
    seals: dict[str, str] = Field(default_factory=dict)
    """The seal of each shard as its last commit wrote it (``"07"`` -> 32 hex), from format
    3 on. The head is sealed too, so a shard is bound to the head: an older sealed copy of a
    shard put back in its place (a shard from before a Forget) verifies as a record but is not
    the one the head names, and is refused like an unsealed one."""
    shards: int = LAYOUT_SHARDS
    """How many shards hold the entries (:func:`layout_shard_count`); a head written before
    the count grew lacks it, and names :data:`LAYOUT_SHARDS`."""
    entries: int | None = None
    """About how many entries the shards hold, kept by each commit from the shards it
    rewrites (counted again when the shards are spread over more); ``None`` in a head written
    before it was kept: counted once by the next writer."""
    removed: dict[str, list[str]] = Field(default_factory=dict)
    """Keys removed from a shard that was not rewritten since (``"07"`` -> sorted keys), from
    format 4 on: their lines are still in the shard's bytes, and every reader treats them as
    absent. The shard is rewritten without them when a later commit puts into it, or when they
    reach :data:`LAYOUT_REMOVED_SHARE` (see there); a key put again is in no list."""

    _removed_sets: tuple[object, dict[int, frozenset[str]]] | None = PrivateAttr(default=None)
    """:attr:`removed` as sets, with the dict they were made of (a copy of the head with
    another list does not reuse them)."""

    def removed_in(self, shard: int) -> frozenset[str]:
        """The keys removed from shard ``shard`` (of :attr:`shards`) that its bytes still hold."""

        cached = self._removed_sets
        if cached is None or cached[0] is not self.removed:
            sets = {int(sid): frozenset(keys) for sid, keys in self.removed.items()}
            cached = self._removed_sets = (self.removed, sets)
        return cached[1].get(shard, frozenset())

    def removed_keys(self) -> frozenset[str]:
        """Every key :attr:`removed` names."""

        return frozenset(k for keys in self.removed.values() for k in keys)


def check_layout_format(head: LayoutHead, path: str) -> None:
    """Refuse a head written by a later release (:data:`LAYOUT_FORMAT`): its records may hold
    what this build would misread (entries removed read as present)."""

    if head.format > LAYOUT_FORMAT:
        raise MemoryConfigError(
            f"{path} format",
            head.format,
            f"is newer than this release of sandbox-memory reads ({LAYOUT_FORMAT}); "
            "upgrade sandbox-memory to read this memory",
        )


class LayoutShard(BaseModel):
    entries: dict[str, Entry] = Field(default_factory=dict)


class CopyRetraction(BaseModel):
    key: str
    source: Source
    stamp: int
    cause: Cause


class LayoutCommit(BaseModel):
    """One change of layout memory (``store/layout/commit.json``): written whole before any
    record it changes, so a writer killed while applying it leaves it for the next writer to
    finish; readers see it as applied."""

    version: int
    stamp: str
    put: dict[str, Entry] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)
    log: list[LogRecord] = Field(default_factory=list)
    """Appended when applied (again, after a crash: the log reads a change logged twice once)."""
    rewrite: list[int] = Field(default_factory=list)
    """Shards written even if no entry of theirs changed (one set aside as unreadable)."""
    copies: list[CopyRetraction] = Field(default_factory=list)
    """Layout entries retracted by this change whose copies in conversation memory go too
    (:attr:`Store.retract_copies`), done before the commit is dropped."""
    whole: bool = False
    """A rebuild: any entry may have changed, not only those of ``put`` and ``delete``."""
    before: str = ""
    """The head's stamp this commit applies to: a commit is only ever pending on that head
    or on its own (applied, not yet dropped); an older sealed commit put back is refused."""

    _shards: tuple[int, frozenset[int]] | None = PrivateAttr(default=None)

    def shards(self, count: int = LAYOUT_SHARDS) -> frozenset[int]:
        """The shards (of ``count``) this commit writes (worked out once: readers ask it of
        every shard they read while the commit is pending, and it hashes every key it puts or
        deletes)."""

        if self._shards is None or self._shards[0] != count:
            self._shards = (
                count,
                frozenset(
                    {
                        *self.rewrite,
                        *(layout_shard(k, count) for k in self.put),
                        *(layout_shard(k, count) for k in self.delete),
                    }
                ),
            )
        return self._shards[1]

    def changed_keys(self) -> list[str] | None:
        """The keys this commit changes, ``None`` when any may change (see
        :attr:`LayoutChange.keys`)."""

        keys = sorted({*self.put, *self.delete})
        if self.whole or self.rewrite or len(keys) > LAYOUT_CHANGE_KEYS_KEPT:
            return None
        return keys
