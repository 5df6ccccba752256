"""The file store's record plumbing, which every room of :class:`~.Store` stands on.

:class:`FileRecords` declares what the rooms share (the workspace, the folders, the caches,
the hooks the runtime sets) and does the work every record needs: read and write a state
file (a folder in a file's place set aside), load and save a record model, seal memory's own
records and refuse one whose seal does not verify, adopt records a person vouches for, and in
a shared store's working copy note each record before it changes (``shared.touched``). It also
says where the records the rooms read of one another live (the layout folder, the log,
progress, forgotten progress, thread records).
"""

from __future__ import annotations

import abc
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from ... import bounded
from ...workspace import LeaseLock, Workspace
from ...workspace.records import LocalRecords, unsealed
from ..segments import ROLLOUT_ID_RE, LineCheck

if TYPE_CHECKING:
    pass

from ..records import Entry, LayoutCommit, LayoutHead, LayoutMemory, LogRecord
from ..seam import MemoryStore, StoredRecords

logger = logging.getLogger("sandbox_memory")


def _why(exc: ValidationError) -> str:
    """The first problem pydantic found, for the log line about an unreadable file."""

    return str(exc.errors()[0].get("msg", "invalid")) if exc.errors() else str(exc)


@dataclass
class _Shard:
    raw: bytes | None
    """The shard's bytes as stored (``None``: no file)."""
    seen: object
    """The head (bytes) under which ``raw`` was read: valid while the head is the same."""
    entries: dict[str, Entry] | None = None
    """Parsed whole, for a shard not one entry a line: written by an earlier release (format
    1), part of the old single file, or unreadable (then empty). ``None``: entries are found
    in ``raw`` one line at a time, and only those asked for are parsed."""

    @property
    def size(self) -> int:
        return len(self.raw or b"") * (1 if self.entries is None else 3)


class SealedShard:
    """A shard's bytes as stored, seal and all, whose seal is checked (an HMAC of every byte)
    when an entry of it is first asked for: a view whose caller wants the version or one key
    checks one shard, not every one (128 at 20,000 entries). Only a shard whose seal is the
    one the sealed head names is held so; ``check`` gives its bytes without the seal, or
    ``None`` (reported by it) when the seal does not verify."""

    __slots__ = ("_stored", "_check", "_raw")

    def __init__(self, stored: bytes, check: Callable[[bytes], bytes | None]) -> None:
        self._stored = stored
        self._check: Callable[[bytes], bytes | None] | None = check
        self._raw: bytes | None = None

    def opened(self) -> bytes | None:
        """The shard's bytes without their seal (``None``: refused), checked once."""

        if self._check is not None:
            self._raw, self._check, self._stored = self._check(self._stored), None, b""
        return self._raw


ViewedShard = bytes | dict[str, Entry] | SealedShard
"""A shard as a view holds it: its bytes one entry a line, its entries parsed (an earlier
format), or its bytes with the seal not checked yet."""


class _ShardCache(OrderedDict[int, _Shard]):
    """Shards read, least recently used first, within a budget of bytes
    (:data:`~..records.SHARD_CACHE_BYTES`): the bytes kept are counted as shards come and go,
    not summed over all of them at each read (which made reading 512 shards quadratic)."""

    def __init__(self) -> None:
        super().__init__()
        self.used = 0
        self._sizes: dict[int, int] = {}

    def keep(self, sid: int, shard: _Shard, budget: int) -> None:
        """Cache a shard read or written, dropping the least recently used past ``budget``."""

        self.used += shard.size - self._sizes.get(sid, 0)
        self._sizes[sid] = shard.size
        self[sid] = shard
        self.move_to_end(sid)
        while self.used > budget and len(self) > 1:
            dropped, _ = self.popitem(last=False)
            self.used -= self._sizes.pop(dropped)

    def clear(self) -> None:
        super().clear()
        self._sizes.clear()
        self.used = 0


_UNSET = object()


def _citable(rid: str) -> bool:
    return bool(ROLLOUT_ID_RE.fullmatch(rid)) and ".." not in rid


_JSON = ".json"

SHARED_COPY_FILE = "shared.json"
"""Under ``<memories_dir>/store/``: a shared store's working copy keeps its bookkeeping here."""

TOUCHED_FILE = "shared.touched"
"""Under ``<memories_dir>/store/``: in a working copy, the records changed since it was last
brought up to date, one path a line (see :meth:`FileRecords.changed_records`)."""


class FileRecords(LocalRecords, MemoryStore):
    """The record plumbing of the file store, and the attributes its rooms share.

    Each room (:mod:`.layout`, :mod:`.conversations`, :mod:`.progress`, :mod:`.threads`,
    :mod:`.legacy`, :mod:`.prompt`, :mod:`.log`) is a subclass; :class:`~.Store` inherits
    them all. What one room calls of another is either part of the seam
    (:class:`~..seam.MemoryStore`) or declared here.
    """

    def __init__(
        self, workspace: Workspace, memories_dir: str, sessions_dir: str = "sessions"
    ) -> None:
        super().__init__(workspace, f"{memories_dir}/store")
        self.memories_dir = memories_dir
        self.sessions_dir = sessions_dir
        self._legacy_checked = False
        self._head_raw: object = _UNSET
        """Bytes of ``layout/head.json`` last read (``None``: missing)."""
        self._head = LayoutHead()
        self._journal_raw: object = _UNSET
        self._journal: LayoutCommit | None = None
        self._shards = _ShardCache()
        self._whole: tuple[object, object, LayoutMemory] | None = None
        self._viewed: tuple[object, dict[int, ViewedShard]] | None = None
        """The shards the last :meth:`layout_view` read, with the head they are of: kept up to
        date by this store's own commits (copied, never changed in place: a view holds them),
        so the view after a command reads no shard again."""
        self._legacy_layout: dict[int, _Shard] | None = None
        """``layout.json`` read before a writer split it (readers never write)."""
        self._damaged: set[int] = set()
        """Shards set aside as unreadable since the last commit (rewritten by it)."""
        self._head_damaged = False
        self._legacy_broken = False
        """``layout.json`` was unreadable (kept aside): nothing to split, phase 2 rebuilds."""
        self._cited: set[tuple[str, str]] = set()
        self._held: set[tuple[str, str]] = set()
        self._held_checked = False
        self._shards_swept = False
        """Shards of another count than the head's looked for (see ``_sweep_shards``)."""
        self._threads_checked: set[str] = set()
        """Never-read rollouts whose thread record :meth:`_recover_thread` found or put back:
        their first line does not change (appends only), so a later pending check of this
        store object does not read it again (a close defers what its budget leaves, every
        time, and each close looked at every rollout deferred so far)."""
        self._written_seals: dict[str, str] = {}
        """Seals of the shards written since the head was (named by the next head)."""
        self._commits: dict[str, tuple[str, set[str]]] = {}
        """Stamp of each recent commit of this store object -> (the stamp before, its keys)."""
        """(conversation, key) pairs known to be in ``held/`` (see :meth:`_hold`)."""
        self.line_check: Callable[[str], LineCheck] | None = None
        """Set by the runtime: how a rollout's lines are checked (only lines memory recorded
        are read; without it, no rollout line is)."""
        self._log_refused = 0
        self._log_layout_version = 0
        """The newest layout version the sealed log holds (read with :meth:`_logged_changes`)."""
        self._refused_conversations: set[str] = set()
        """Conversations whose record was last read refused (see
        :meth:`conversation_refused`)."""
        self._log_seen: tuple[int, str | None, dict[str, list[LogRecord]]] = (0, None, {})
        """How far the log was read for :meth:`_logged_changes`, its tail hash there, and
        what was found."""
        """Lines of the log last found without a valid seal (reported when it changes)."""
        self.shared_copy: bool | None = None
        """Whether this folder is a shared store's working copy (``store/shared.json``;
        looked up once, or set by the copy): then each record about to change is noted first
        in :data:`TOUCHED_FILE`, so the copy sends what changed without reading every record."""

    @property
    def lock_path(self) -> str:
        return f"{self.dir}/lock"

    def lease(self, *, timeout: float, lease: float) -> LeaseLock:
        return LeaseLock(self.ws, self.lock_path, timeout=timeout, lease=lease)

    async def write_state(self, path: str, data: bytes) -> None:
        await self._touch(path)
        await super().write_state(path, data)

    async def write_states(self, items: Sequence[tuple[str, bytes]]) -> None:
        await self._touch_many([path for path, _ in items])
        await super().write_states(items)

    async def _touch(self, path: str) -> None:
        """In a shared store's working copy: note a record (conversation memory, progress,
        a conversation's fingerprint) before it changes. A close killed after the note and
        before the change leaves a note of a record as sent: compared, nothing is sent. A
        fingerprint is noted only when the copy said so (:attr:`shared_copy`): a record by a
        runtime without the store looks nothing up."""

        await self._touch_many([path])

    async def _touch_many(self, paths: list[str]) -> None:
        """:meth:`_touch` of each path, the notes in one append (a fingerprint alone, when
        the copy has not said so yet, looks nothing up)."""

        noted = [p for p in paths if p.startswith(self._touched_prefixes)]
        if not noted:
            return
        if self.shared_copy is None and all(p.startswith(f"{self.dir}/threads/") for p in noted):
            return  # as _touch: a first record looks nothing up
        if self.shared_copy is None:
            self.shared_copy = await self.ws.size(f"{self.dir}/{SHARED_COPY_FILE}") is not None
        if self.shared_copy:
            await self.ws.append_line(
                f"{self.dir}/{TOUCHED_FILE}", "".join(f"{p}\n" for p in noted).encode()
            )

    def note_changes(self) -> None:
        self.shared_copy = True

    async def changed_records(self) -> StoredRecords | None:
        # The notes of :meth:`_touch`; ``None`` when this folder has no note file (a copy
        # written before notes were kept).
        raw = await self.read_state(f"{self.dir}/{TOUCHED_FILE}")
        if raw is None:
            return None
        lines = raw.decode("utf-8", "replace").split("\n")[:-1]  # a torn last line: no change
        return self._records_of(x for x in lines if x.startswith(self._touched_prefixes))

    async def clear_changed(self) -> None:
        await self.write_state(f"{self.dir}/{TOUCHED_FILE}", b"")

    async def every_record(self) -> StoredRecords:
        paths = [
            prefix + n
            for prefix in self._touched_prefixes
            for n in await self.ws.listdir(prefix.rstrip("/"))
            if not n.startswith(".")
        ]
        return self._records_of(paths)

    def _records_of(self, paths: Iterable[str]) -> StoredRecords:
        """The records named by their paths, each once, in the order given."""

        found = StoredRecords(conversations=[], rollouts=[], threads=[])
        for path in dict.fromkeys(paths):
            folder, _, name = path[len(self.dir) + 1 :].partition("/")
            if folder == "threads":
                found.threads.append(name)
            elif name.endswith(_JSON):
                rid = name[: -len(_JSON)]
                (found.conversations if folder == "conversations" else found.rollouts).append(rid)
        found.rollouts = list(dict.fromkeys(found.rollouts))  # progress and forgotten: once
        return found

    def layout_refused(self) -> bool:
        return any(p.startswith(f"{self.layout_dir}/") for p in self.refused)

    @property
    def _touched_prefixes(self) -> tuple[str, ...]:
        return tuple(
            f"{self.dir}/{d}/" for d in ("conversations", "progress", "forgotten", "threads")
        )

    async def _load(
        self, path: str, model: type[BaseModel], default: BaseModel | None, *, sealed: bool = True
    ) -> Any:
        raw = (await self.read_record(path))[0] if sealed else await self.read_state(path)
        if raw is None:
            return default
        try:
            bounded.check_size(raw, limit=bounded.MAX_STATE_BYTES, what=path)
            return model.model_validate_json(raw)
        except bounded.UnsafeJSON as exc:
            await self._set_aside(path, raw, str(exc))
            return default
        except ValidationError as exc:
            await self._set_aside(path, raw, _why(exc))
            return default

    async def _save(self, path: str, value: BaseModel) -> None:
        await self.write_record(path, value.model_dump_json(indent=1).encode("utf-8"))

    def sealed_record_paths(self) -> tuple[str, ...]:
        """Folders and files of the records memory seals (see :attr:`record_seal`)."""

        return (
            f"{self.layout_dir}/",
            f"{self.dir}/conversations/",
            f"{self.dir}/registry.json",
            f"{self.dir}/layout.json",
            f"{self.dir}/settings.json",
            self.log_path,
        )

    async def adopt_records(self) -> dict[str, int]:
        """A person vouches for the records here: each record (a layout shard, a conversation
        record, the registry, ``layout.json``) whose seal does not verify is sealed with this
        host's key. Counts of records ``adopted`` and ``verified``."""

        counts = {"adopted": 0, "verified": 0}
        if self.record_seal is None:
            return counts
        paths = [f"{self.dir}/registry.json", f"{self.dir}/layout.json"]
        paths += [f"{self.dir}/settings.json", f"{self.layout_dir}/head.json"]
        paths += [
            f"{self.layout_dir}/{n}"
            for n in await self.ws.listdir(self.layout_dir)
            if n.startswith("shard-") and n.endswith(_JSON)
        ]
        paths += [
            f"{self.dir}/conversations/{n}"
            for n in await self.ws.listdir(f"{self.dir}/conversations")
            if n.endswith(_JSON) and not n.startswith(".")
        ]
        for path in paths:
            raw = await self.read_state(path)
            if raw is None:
                continue
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if self.record_seal().verify(body, self._record_context(path)):
                counts["verified"] += 1
                continue
            plain = unsealed(raw) or b""
            plain = plain.rstrip(b"\r\n")
            if not plain.endswith(b"}") or plain == b"{}":
                continue  # not a JSON object: refused (and kept aside) when read
            await self.write_record(path, plain)
            counts["adopted"] += 1
        counts["adopted"] += await self._adopt_log()
        self._shards.clear()
        self._head_raw = _UNSET
        return counts

    async def _adopt_log(self) -> int:
        """The log's lines without a valid seal that are records, sealed; how many."""

        raw = await self.read_state(self.log_path)
        if not raw or self.record_seal is None:
            return 0
        seal, context = self.record_seal(), self._record_context(self.log_path)
        lines, adopted = [], 0
        for line in raw.splitlines():
            if not line.strip() or seal.verify(line, context):
                lines.append(line + b"\n")
                continue
            try:
                record = LogRecord.model_validate_json(unsealed(line) or b"")
            except ValidationError:
                lines.append(line + b"\n")  # still skipped when read
                continue
            lines.append(self._log_line(record))
            adopted += 1
        if adopted:
            await self.ws.write_atomic(self.log_path, b"".join(lines))
        return adopted

    # Where the records live that one room reads of another's.

    @property
    def layout_dir(self) -> str:
        return f"{self.dir}/layout"

    def held_path(self, key: str) -> str:
        return f"{self.dir}/held/{key}"

    def progress_path(self, rollout_id: str) -> str:
        return f"{self.dir}/progress/{rollout_id}{_JSON}"

    def forgotten_path(self, rollout_id: str) -> str:
        return f"{self.dir}/forgotten/{rollout_id}{_JSON}"

    async def _names(self, folder: str, suffix: str) -> list[str]:
        return [
            name[: len(name) - len(suffix)]
            for name in await self.ws.listdir(folder)
            if name.endswith(suffix) and not name.startswith(".")
        ]

    def thread_path(self, fingerprint: str) -> str:
        return f"{self.dir}/threads/{fingerprint}"

    @property
    def log_path(self) -> str:
        return f"{self.dir}/log.jsonl"

    def _log_line(self, record: LogRecord) -> bytes:
        """One sealed line of the change log: the seal binds it to the log (a line of another
        record does not verify here); lines are sealed alone, so an append stays one write."""

        return self._sealed(self.log_path, (record.model_dump_json() + "\n").encode("utf-8"))

    # What one room calls of another's beyond the seam, implemented by that room.

    @abc.abstractmethod
    async def _logged_changes(self) -> dict[str, list[LogRecord]]:
        """The sealed log's conversation changes that can be applied again, by scope, read on
        from where it was last read (:class:`~.conversations.ConversationFiles`); sets
        :attr:`_log_layout_version`, which the check of the layout head against the log reads."""

    @abc.abstractmethod
    async def _split_legacy(self) -> None:
        """Split the whole-file forms of an earlier release into records, once per store
        object (:class:`~.legacy.LegacyFiles`); progress and thread lookups call it first."""

    @abc.abstractmethod
    async def _recover_thread(self, rollout_id: str) -> None:
        """Put back a never-read rollout's thread record if it is missing
        (:class:`~.threads.ThreadFiles`); the pending check calls it."""
