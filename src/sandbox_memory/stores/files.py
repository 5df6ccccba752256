"""The file backend of the store: entries, versions, the change log, progress, leases.

The store is the source of truth; ``MEMORY.md``, ``memory_summary.md`` and ``skills/`` are
rendered from it. :class:`~.seam.MemoryStore` is the seam: per-record operations (one
conversation's memory, one rollout's progress, one log line), so each costs the record it
touches, never the whole history; the records are those of :mod:`.records`. :class:`Store`
implements the seam with files, all under ``<memories_dir>/store/``:

- ``layout/head.json``            layout memory's version and change stamp
- ``layout/shard-NN.json``        layout memory's entries (the specification's agent memory),
                                  spread over :data:`LAYOUT_SHARDS` records by key hash
- ``layout/commit.json``          a change of layout memory being applied (see
                                  :meth:`Store.commit_layout`)
- ``layout/cites/<id>``           keys of layout entries citing a conversation, one commit a line
- ``conversations/<id>.json``     conversation memory (the specification's session memory)
- ``log.jsonl``                   every change: version, time, cause, scope, keys
- ``progress/<id>.json``          what phase 1 has read of one rollout; attempts and errors
- ``forgotten/<id>.json``         bytes read of a rollout phase 2 forgot (its progress, pruned)
- ``pending/<id>``                empty flag: the rollout grew since its progress was checked
- ``unindexed/<id>``              empty flag: the rollout was read to its end (its ``pending``
                                  flag cleared) since the search index last looked at it
- ``threads/<fingerprint>``       the rollout id of a conversation, known by its first items
- ``settings.json``               the switch defaults of the ``Memory`` configuration in use
- ``lock``                        the layout's lease lock

``progress.json`` and ``threads.json`` (one file for every rollout, written whole per change)
are read once and split into those records; ``layout.json`` (all of layout memory in one file,
parsed and written whole per change) is split into the layout records by the first writer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
from collections import OrderedDict
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from json.decoder import scanstring as _scanstring  # type: ignore[attr-defined]
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from .. import bounded
from ..datapolicy import exc_text
from ..integrity import SegmentSeal
from ..record.segments import ROLLOUT_ID_RE, LineCheck, segment_fingerprint
from ..workspace import LeaseLock, Workspace, set_aside_folder

if TYPE_CHECKING:
    from ..redact import Redactor

from .records import (
    KEY_RE,
    LAYOUT_CHANGE_KEYS_KEPT,
    LAYOUT_CHANGES_KEPT,
    LAYOUT_FORMAT,
    LAYOUT_SHARDS,
    SHARD_CACHE_BYTES,
    ConversationMemory,
    CopyRetraction,
    Defaults,
    Entry,
    LayoutChange,
    LayoutCommit,
    LayoutHead,
    LayoutMemory,
    LayoutShard,
    LogRecord,
    Progress,
    Registry,
    RolloutProgress,
    Source,
    layout_shard,
    now_ms,
    tail_hash,
    validate_key,
)
from .seam import MemoryStore, RolloutFlags

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


def _shard_bytes(entries: Mapping[str, str]) -> bytes:
    """A shard, one entry a line (:data:`LAYOUT_FORMAT` 2): still one JSON document, and as
    JSON text holds no raw newline, a newline then the key in quotes and a colon starts the
    line of that key's entry."""

    body = ",".join(f"\n{json.dumps(k)}:{entries[k]}" for k in sorted(entries))
    return ('{"entries":{' + body + "\n}}").encode("utf-8")


_JSON_KEY = rb'"(?:[^"\\\n]|\\.)*"'
_SHARD_LINES_RE = re.compile(
    rb'\{"entries":\{(?:\n'
    + _JSON_KEY
    + rb":\{[^\n]*\},)*(?:\n"
    + _JSON_KEY
    + rb":\{[^\n]*\})?\n\}\}"
)
"""A shard in the one-entry-a-line format (checked before a line is trusted to be an entry)."""


def _entry_line(raw: bytes, key: str) -> bytes | None:
    """The JSON of ``key``'s entry in a one-entry-a-line shard, without parsing any other."""

    needle = b"\n" + json.dumps(key).encode("utf-8") + b":"
    at = raw.find(needle)
    if at < 0:
        return None
    start = at + len(needle)
    end = raw.find(b"\n", start)
    line = raw[start:end]
    return line[:-1] if line.endswith(b",") else line


def _entry_lines(raw: bytes) -> dict[str, str]:
    """Key -> entry JSON of every line of a one-entry-a-line shard (nothing parsed)."""

    found: dict[str, str] = {}
    for line in raw.decode("utf-8").split("\n")[1:-1]:
        key, end = _scanstring(line, 1)
        found[key] = line[end + 1 : -1 if line.endswith(",") else None]
    return found


class LayoutEntries(Mapping[str, Entry]):
    """Layout memory's entries as one head holds them, each parsed when first asked for: a
    view of 20,000 entries costs reading their shards, and a caller that looks up one key (or
    only wants the version) parses one entry, not all of them.

    Holds the shards' bytes as read (a later commit does not change it). With ``acting``, only
    the entries that exist for ``person`` (:meth:`Entry.exists_for`).
    """

    def __init__(
        self,
        shards: Mapping[int, bytes | dict[str, Entry]],
        put: Mapping[str, Entry],
        gone: Iterable[str],
        *,
        person: str | None = None,
        acting: bool = False,
        on_error: Callable[[int, str], None] | None = None,
    ) -> None:
        self._shards = shards
        """Shard -> its bytes one entry a line, or its entries parsed (an earlier format)."""
        self._put = put
        self._gone = frozenset(gone)
        self._person = person
        self._acting = acting
        self._on_error = on_error
        self._parsed: dict[str, Entry | None] = {}
        self._keys: list[str] | None = None

    def _lookup(self, key: str) -> Entry | None:
        if key in self._parsed:
            return self._parsed[key]
        entry: Entry | None
        if key in self._put:
            entry = self._put[key]
        elif key in self._gone:
            entry = None
        else:
            sid = layout_shard(key)
            shard = self._shards.get(sid)
            if isinstance(shard, dict):
                entry = shard.get(key)
            else:
                line = None if shard is None else _entry_line(shard, key)
                try:
                    entry = None if line is None else Entry.model_validate_json(line)
                except ValidationError as exc:
                    if self._on_error is not None:
                        self._on_error(sid, _why(exc))
                    entry = None
        if entry is not None and self._acting and not entry.exists_for(self._person):
            entry = None
        self._parsed[key] = entry
        return entry

    def _all_keys(self) -> list[str]:
        if self._keys is None:
            found: dict[str, None] = {}
            for sid in sorted(self._shards):
                shard = self._shards[sid]
                found.update(
                    dict.fromkeys(shard if isinstance(shard, dict) else _entry_lines(shard))
                )
            found.update(dict.fromkeys(self._put))
            keys = [k for k in found if k not in self._gone or k in self._put]
            self._keys = [k for k in keys if self._lookup(k) is not None] if self._acting else keys
        return self._keys

    def __getitem__(self, key: str) -> Entry:
        entry = self._lookup(key) if isinstance(key, str) else None
        if entry is None:
            raise KeyError(key)
        return entry

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._lookup(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._all_keys())

    def __len__(self) -> int:
        return len(self._all_keys())

    def __repr__(self) -> str:
        return f"LayoutEntries({dict(self)!r})"


_UNSET = object()

_COMMITS_KEPT = 256


def _citable(rid: str) -> bool:
    return bool(ROLLOUT_ID_RE.fullmatch(rid)) and ".." not in rid


_JSON = ".json"

SHARED_COPY_FILE = "shared.json"
"""Under ``<memories_dir>/store/``: a shared store's working copy keeps its bookkeeping here."""

TOUCHED_FILE = "shared.touched"
"""Under ``<memories_dir>/store/``: in a working copy, the records changed since it was last
brought up to date, one path a line (see :meth:`Store.touched`)."""


_SEAL_TAIL = re.compile(rb',"memory_seal":"[0-9a-f]{32}"\}\n?\Z')


def unsealed(raw: bytes | None) -> bytes | None:
    """A record's bytes without the seal :meth:`Store.write_record` put at its end."""

    if raw is None:
        return None
    found = _SEAL_TAIL.search(raw, max(0, len(raw) - 64))
    return raw if found is None else raw[: found.start()] + b"}"


COPY_RETRACTED = "retracted with its layout copy"
"""The detail of a conversation's log record retracting a layout entry's copy."""


def _redoable(record: LogRecord) -> bool:
    detail = record.detail or ""
    return detail == COPY_RETRACTED or detail.startswith('{"command"')


def _redo(memory: ConversationMemory, record: LogRecord) -> None:
    """Apply a logged change (see :func:`_redoable`) to ``memory`` again, if not there."""

    if record.detail == COPY_RETRACTED:
        command: dict[str, Any] = {"_tag": "Forget", "key": record.keys[0] if record.keys else ""}
        item = "layout"
    else:
        try:
            given = bounded.loads(
                (record.detail or "").encode("utf-8"),
                limit=bounded.MAX_FIELD_BYTES,
                what="a log record's detail",
            )
            command, item = given["command"], str(given.get("item") or "")
            validate_key(command["key"])
        except (ValueError, KeyError, TypeError):
            return
    key = str(command.get("key") or "")
    held = memory.entries.get(key)
    source = Source(conversation=memory.rollout_id, item=item)
    if command.get("_tag") == "Forget":
        if held is not None and held.status == "active":
            held.status = "retracted"
            held.updated_at = record.at
            held.sources = [*held.sources, source]
    elif command.get("_tag") == "Remember" and isinstance(command.get("content"), str):
        kind = command.get("kind", "fact")
        if held is None or held.updated_at < record.at:
            try:
                memory.entries[key] = Entry(
                    key=key,
                    content=command["content"].strip(),
                    kind=kind,
                    sources=[source],
                    updated_at=record.at,
                    person=command.get("person"),
                )
            except ValidationError:
                return


def _seal_of(raw: bytes) -> str | None:
    """The seal a sealed record ends with (32 hex), ``None`` when it has none."""

    found = _SEAL_TAIL.search(raw, max(0, len(raw) - 64))
    return None if found is None else raw[found.start() + 16 : found.start() + 48].decode()


def _thread_data(fingerprint: str, rollout_id: str) -> bytes:
    """What a conversation index record's seal covers: the history and the conversation."""

    return f"{fingerprint}\n{rollout_id}".encode()


FIRST_LINE_MAX_BYTES = 16 << 20
"""How far a rollout's first line is looked for when its thread record is rebuilt."""


class Store(MemoryStore):
    """The store as files in the workspace (the embedded default)."""

    def __init__(
        self, workspace: Workspace, memories_dir: str, sessions_dir: str = "sessions"
    ) -> None:
        self.ws = workspace
        self.memories_dir = memories_dir
        self.sessions_dir = sessions_dir
        self.dir = f"{memories_dir}/store"
        self._legacy_checked = False
        self._head_raw: object = _UNSET
        """Bytes of ``layout/head.json`` last read (``None``: missing)."""
        self._head = LayoutHead()
        self._journal_raw: object = _UNSET
        self._journal: LayoutCommit | None = None
        self._shards: OrderedDict[int, _Shard] = OrderedDict()
        """Shards read, least recently used first, at most :data:`SHARD_CACHE_BYTES`."""
        self._whole: tuple[object, object, LayoutMemory] | None = None
        self._viewed: tuple[object, dict[int, bytes | dict[str, Entry]]] | None = None
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
        self.redactor_source: Callable[[], Redactor] | None = None
        """Set by the runtime: files set aside are redacted like everything else written."""
        self.line_check: Callable[[str], LineCheck] | None = None
        """Set by the runtime: how a rollout's lines are checked (only lines memory recorded
        are read; without it, no rollout line is)."""
        self.retract_copies: Callable[[Entry, CopyRetraction], Awaitable[None]] | None = None
        """Set by the runtime: retracts a layout entry's copies in conversation memory, each
        logged before it is saved (done again after a crash, it changes nothing twice)."""
        self.fence: Callable[[], Awaitable[None]] | None = None
        """Set while the layout lock is held (:meth:`LayoutState.write_lock`): checks that the
        lock is still this holder's before the writes only it may make (a layout commit, a
        progress record); raises :class:`~sandbox_memory.errors.MemoryLeaseLost` if not."""
        self.record_seal: Callable[[], SegmentSeal] | None = None
        """Set by the runtime: the seal of memory's own records (layout shards, conversation
        memory, the registry, a pending layout commit). Such a record whose seal does not
        verify was not written by memory (the agent's tools): it is set aside, never read.
        Without it (a store read outside a runtime) seals are neither made nor checked."""
        self.refused: set[str] = set()
        """Records refused for want of a valid seal by this store object (never sent on)."""
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

    async def read_state(self, path: str) -> bytes | None:
        """A state file's bytes, ``None`` when missing; a folder in its place is set aside."""

        try:
            return await self.ws.read_bytes(path)
        except IsADirectoryError:
            await set_aside_folder(self.ws, path)
            return None

    async def write_state(self, path: str, data: bytes) -> None:
        """Replace a state file atomically; a folder in its place is set aside first."""

        await self._touch(path)
        try:
            await self.ws.write_atomic(path, data)
        except IsADirectoryError:
            await set_aside_folder(self.ws, path)
            await self.ws.write_atomic(path, data)

    async def write_states(self, items: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`write_state` of each ``(path, data)``, waiting for the disk once for them all
        (:meth:`Workspace.write_atomic_many`): each file is replaced whole, in order."""

        for path, _ in items:
            await self._touch(path)
        try:
            await self.ws.write_atomic_many(items)
        except IsADirectoryError:
            # A folder where one belongs: set aside by the write of each, one by one.
            for path, data in items:
                await self.write_state(path, data)

    async def _touch(self, path: str) -> None:
        """In a shared store's working copy: note a record (conversation memory, progress,
        a conversation's fingerprint) before it changes. A close killed after the note and
        before the change leaves a note of a record as sent: compared, nothing is sent. A
        fingerprint is noted only when the copy said so (:attr:`shared_copy`): a record by a
        runtime without the store looks nothing up."""

        if not path.startswith(self._touched_prefixes):
            return
        if self.shared_copy is None and path.startswith(f"{self.dir}/threads/"):
            return  # a first record looks nothing up (a round trip through a session)
        if self.shared_copy is None:
            self.shared_copy = await self.ws.size(f"{self.dir}/{SHARED_COPY_FILE}") is not None
        if self.shared_copy:
            await self.ws.append_line(f"{self.dir}/{TOUCHED_FILE}", f"{path}\n".encode())

    async def touched(self) -> list[str] | None:
        """The records noted as changed (:meth:`_touch`) since :meth:`clear_touched`, in the
        order first noted; ``None`` when this folder has no note file (every record may have
        changed: a copy written before notes were kept)."""

        raw = await self.read_state(f"{self.dir}/{TOUCHED_FILE}")
        if raw is None:
            return None
        lines = raw.decode("utf-8", "replace").split("\n")[:-1]  # a torn last line: no change
        return list(dict.fromkeys(x for x in lines if x.startswith(self._touched_prefixes)))

    async def clear_touched(self) -> None:
        """Start the notes afresh: the copy and the store hold the same records now."""

        await self.write_state(f"{self.dir}/{TOUCHED_FILE}", b"")

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

    async def _set_aside(
        self,
        path: str,
        raw: bytes,
        why: str,
        *,
        kept: str = "broken",
        level: int = logging.ERROR,
    ) -> None:
        """Keep an unreadable state file's bytes beside it, once per content, and log it."""

        # Named by content: the file is read many times before it is next saved, and one
        # copy (and one log line) per distinct content is enough.
        broken = f"{path}.{kept}-{hashlib.sha256(raw).hexdigest()[:12]}"
        if await self.ws.size(broken) is not None:
            return
        from ..redact import redact_bytes  # imported on first use, like the runtime's redactor

        redactor = self.redactor_source() if self.redactor_source is not None else None
        await self.ws.write_atomic(broken, redact_bytes(raw, redactor))
        logger.log(
            level,
            "memory state file %s is not valid (%s); kept as %s and starting it afresh",
            path,
            why,
            broken,
        )

    async def _save(self, path: str, value: BaseModel) -> None:
        await self.write_record(path, value.model_dump_json(indent=1).encode("utf-8"))

    def _record_context(self, path: str) -> str:
        """What a record's seal is bound to besides its bytes: its place in the store, so a
        record copied to another place (another shard, another conversation) does not verify."""

        return "store:" + path.removeprefix(f"{self.dir}/")

    def _sealed(self, path: str, data: bytes) -> bytes:
        if self.record_seal is None:
            return data
        return self.record_seal().seal(data, self._record_context(path))

    async def write_record(self, path: str, data: bytes) -> None:
        """Write one of memory's own records (a JSON object), sealed (see :attr:`record_seal`)."""

        await self.write_state(path, self._sealed(path, data))

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

    async def read_record(self, path: str) -> tuple[bytes | None, bool]:
        """A record's bytes without its seal, and whether it was refused. A record whose seal
        does not verify (none, another place's, another key's, edited after sealing) is kept
        aside and reported once at WARNING; it reads as missing."""

        raw = await self.read_state(path)
        if raw is None:
            return None, False
        plain = await self._verified(path, raw)
        return plain, plain is None

    async def _verified(self, path: str, raw: bytes) -> bytes | None:
        """``raw`` without its seal when the seal verifies (or seals are off); else ``None``,
        the record kept aside and reported once at WARNING."""

        if self.record_seal is None:
            return unsealed(raw)
        body = raw[:-1] if raw.endswith(b"\n") else raw
        if self.record_seal().verify(body, self._record_context(path)):
            return unsealed(raw)
        await self._refuse(
            path,
            raw,
            "no valid seal: not written by memory (or by a build before records were sealed)",
        )
        return None

    async def _refuse(self, path: str, raw: bytes, why: str) -> None:
        self.refused.add(path)
        await self._set_aside(path, raw, why, kept="unsealed", level=logging.WARNING)

    # ------------------------------------------------------- layout memory

    @property
    def layout_dir(self) -> str:
        return f"{self.dir}/layout"

    def shard_path(self, shard: int) -> str:
        return f"{self.layout_dir}/shard-{shard:02d}.json"

    async def _sync_layout(self) -> None:
        """Look at the head and a pending commit (two small reads); forget cached shards when
        the head changed (another writer): each is parsed again only if its bytes changed."""

        hpath = f"{self.layout_dir}/head.json"
        raw = await self.read_state(hpath)
        head_moved = raw != self._head_raw
        if head_moved:
            self._head_raw = raw
            self._head_damaged = False
            self._head = LayoutHead(format=LAYOUT_FORMAT)
            if raw is not None:
                plain = await self._verified(hpath, raw)
                try:
                    if plain is None:
                        raise ValueError("no valid seal")
                    self._head = LayoutHead.model_validate_json(plain)
                except ValidationError as exc:
                    await self._set_aside(hpath, raw, _why(exc))
                    self._head_damaged = True
                except ValueError:
                    self._head_damaged = True
                if self._head_damaged:
                    # No shard is bound to a head memory did not write: every shard there is
                    # refused, and layout memory rebuilt from the conversation records.
                    self._head = LayoutHead(
                        version=await self._logged_layout_version(), format=LAYOUT_FORMAT
                    )
            if raw is None and self._legacy_layout is None:
                await self._read_legacy_layout()
        jpath = f"{self.layout_dir}/commit.json"
        jraw, _ = await self.read_record(jpath)
        if jraw != self._journal_raw or head_moved:
            self._journal_raw = jraw
            self._journal = None
            if jraw is not None:
                try:
                    self._journal = LayoutCommit.model_validate_json(jraw)
                except ValidationError as exc:
                    # Written whole before anything it changes: an unreadable one changed
                    # nothing yet. Kept aside; the change it held is lost, like a failed write.
                    await self._set_aside(jpath, jraw, _why(exc))
            journal = self._journal
            if (
                journal is not None
                and self._head_raw is not None
                and journal.before
                and self._head.stamp not in (journal.before, journal.stamp)
            ):
                # An older commit put back (its seal still verifies): applying it again would
                # bring back what later commits changed, a Forget among them.
                await self._refuse(
                    jpath,
                    await self.read_state(jpath) or b"",
                    "replayed: a commit of another layout head than the current one",
                )
                await self.ws.remove(jpath)
                self._journal_raw, self._journal = None, None
        if head_moved and not self._head_damaged and raw is not None:
            await self._check_head_against_log(raw)

    async def _check_head_against_log(self, raw: bytes) -> None:
        """A sealed head older than the layout changes the sealed log holds (the layout
        folder put back whole from an earlier copy, a Forget undone with it) is damage: no
        shard is bound to it, and layout memory is rebuilt from the conversation records. Not
        in a shared store's working copy, whose log is appended from the store's before its
        layout is brought up to date."""

        if self.record_seal is None:
            return
        if self.shared_copy is None:
            self.shared_copy = await self.ws.size(f"{self.dir}/{SHARED_COPY_FILE}") is not None
        if self.shared_copy:
            return
        await self._logged_changes()
        logged = self._log_layout_version
        pending = self._journal.version if self._journal is not None else 0
        if logged <= max(self._head.version, pending):
            return
        await self._refuse(
            f"{self.layout_dir}/head.json",
            raw,
            f"replayed: layout version {self._head.version}, older than the log's {logged}",
        )
        self._head_damaged = True
        self._head = LayoutHead(version=logged, format=LAYOUT_FORMAT)

    async def _logged_layout_version(self) -> int:
        versions = [r.version for r in await self.read_log() if r.scope == "layout"]
        return max(versions, default=0)

    async def _read_legacy_layout(self) -> None:
        """Readers before the first writer: ``layout.json`` (the old single file) as shards."""

        path = f"{self.dir}/layout.json"
        raw, refused = await self.read_record(path)
        if refused:
            self._legacy_broken = True
        if raw is None:
            return
        try:
            old = LayoutMemory.model_validate_json(raw)
        except ValidationError as exc:
            await self._set_aside(path, raw, _why(exc))
            self._legacy_broken = True
            return
        shards: dict[int, _Shard] = {}
        for key, entry in old.entries.items():
            shard = shards.setdefault(layout_shard(key), _Shard(None, None, {}))
            assert shard.entries is not None
            shard.entries[key] = entry
        self._legacy_layout = shards
        self._head = LayoutHead(version=old.version)

    async def _bound(self, sid: int, raw: bytes | None) -> bool:
        """Whether shard ``sid`` as read is the one the head names (see
        :attr:`LayoutHead.seals`); one that is not is kept aside (WARNING) and refused. A
        missing shard the head names is damage too (rebuilt, nothing kept aside)."""

        if self.record_seal is None or self._head_raw is None:
            return True
        if self._head.format < LAYOUT_FORMAT and not self._head_damaged:
            return True  # an earlier head names no seals; the next writer rewrites them
        journal = self._journal
        if journal is not None and sid in journal.shards():
            return True  # written by a commit being applied: the next head names it
        path = self.shard_path(sid)
        named = self._head.seals.get(f"{sid:02d}")
        if raw is None:
            if named is not None:
                self._damaged.add(sid)
            return True
        if _seal_of(raw) == named:
            return True
        await self._refuse(
            path, raw, "replayed: not the version of the shard layout memory's head names"
        )
        return False

    def _named_by_head(self, sid: int, stored: bytes | None) -> bool:
        """Whether shard ``sid`` as stored is the one a sealed head of :data:`LAYOUT_FORMAT`
        names by its seal (or a pending commit writes): memory wrote those very bytes one
        entry a line (:func:`_shard_bytes`), so their form needs no check (a regular
        expression over every byte, most of a shard's read at 20,000 entries)."""

        if stored is None or self.record_seal is None or self._head_damaged:
            return False
        if self._head_raw is None or self._head.format < LAYOUT_FORMAT:
            return False
        journal = self._journal
        if journal is not None and sid in journal.shards():
            return False  # not named yet: checked
        named = self._head.seals.get(f"{sid:02d}")
        return named is not None and _seal_of(stored) == named

    def _keep(self, sid: int, shard: _Shard) -> None:
        """Cache a shard read or written, dropping the least recently used past the budget."""

        self._shards[sid] = shard
        self._shards.move_to_end(sid)
        used = sum(s.size for s in self._shards.values())
        while used > SHARD_CACHE_BYTES and len(self._shards) > 1:
            _, dropped = self._shards.popitem(last=False)
            used -= dropped.size

    async def _shard(self, sid: int) -> _Shard:
        """One shard as stored (without a pending commit), read again only when the head moved;
        a shard one entry a line is only checked, its entries parsed when asked for."""

        cached = self._shards.get(sid)
        if cached is not None and cached.seen is self._head_raw:
            self._shards.move_to_end(sid)
            return cached
        if self._head_raw is None:
            legacy = (self._legacy_layout or {}).get(sid)
            shard = legacy or _Shard(None, None, {})
            shard.seen = self._head_raw
            self._keep(sid, shard)
            return shard
        path = self.shard_path(sid)
        stored = await self.read_state(path)
        raw = None if stored is None else await self._verified(path, stored)
        refused = stored is not None and raw is None
        if not refused and not await self._bound(sid, stored):
            refused, raw = True, None
        if cached is not None and raw is not None and cached.raw == raw:
            cached.seen = self._head_raw
            self._keep(sid, cached)
            return cached
        shard = _Shard(raw, self._head_raw)
        if refused:
            # Not memory's: read as empty, rewritten by the next commit, and layout memory
            # rebuilt from conversation memory by the next phase 2 (like a damaged shard).
            self._damaged.add(sid)
            shard.entries = {}
        elif (
            raw is not None
            and not self._named_by_head(sid, stored)
            and not _SHARD_LINES_RE.fullmatch(raw)
        ):
            shard.entries = await self._parse_shard(sid, raw)  # format 1, or unreadable
        self._keep(sid, shard)
        return shard

    async def _parse_shard(self, sid: int, raw: bytes) -> dict[str, Entry]:
        try:
            return LayoutShard.model_validate_json(raw).entries
        except ValidationError as exc:
            await self._set_aside(self.shard_path(sid), raw, _why(exc))
            self._damaged.add(sid)
            return {}

    async def _shard_entries(self, sid: int, shard: _Shard) -> dict[str, Entry]:
        """Every entry of a shard as stored, parsed (not kept: :meth:`layout_for_reading`
        keeps what it merges)."""

        if shard.entries is not None:
            return shard.entries
        if shard.raw is None:
            return {}
        entries = await self._parse_shard(sid, shard.raw)
        if sid in self._damaged:
            shard.entries = {}
        return entries

    async def _shard_entry(self, sid: int, shard: _Shard, key: str) -> Entry | None:
        """One entry of a shard as stored: found by its line, only it parsed (a copy, for a
        shard kept parsed)."""

        if shard.entries is not None:
            kept = shard.entries.get(key)
            return None if kept is None else kept.model_copy(deep=True)
        if shard.raw is None:
            return None
        line = _entry_line(shard.raw, key)
        if line is None:
            return None
        try:
            return Entry.model_validate_json(line)
        except ValidationError as exc:
            # Unreadable like a shard that is not JSON: kept aside whole, read as empty, and
            # rewritten (and layout memory rebuilt) by the next phase 2.
            await self._set_aside(self.shard_path(sid), shard.raw, _why(exc))
            self._damaged.add(sid)
            shard.entries = {}
            return None

    async def _shard_entries_of(self, sid: int, shard: _Shard, keys: list[str]) -> dict[str, Entry]:
        """The entries of ``keys`` in a shard as stored: their lines found, and parsed together
        (one parse for the shard, not one per key)."""

        if shard.entries is not None or shard.raw is None or len(keys) < 2:
            one = [(k, await self._shard_entry(sid, shard, k)) for k in keys]
            return {k: e for k, e in one if e is not None}
        raw = shard.raw
        lines = {k: line for k in keys for line in [_entry_line(raw, k)] if line is not None}
        body = b",".join(json.dumps(k).encode("utf-8") + b":" + v for k, v in lines.items())
        try:
            return LayoutShard.model_validate_json(b'{"entries":{' + body + b"}}").entries
        except ValidationError:
            # One of them is unreadable: found (and the shard set aside) key by key; a shard
            # set aside reads as empty.
            one = [(k, await self._shard_entry(sid, shard, k)) for k in lines]
            return {} if sid in self._damaged else {k: e for k, e in one if e is not None}

    def _shard_json(self, shard: _Shard) -> dict[str, str]:
        """Key -> entry JSON of every entry of a shard, to write it again (nothing parsed for
        a shard one entry a line)."""

        if shard.entries is not None:
            return {k: e.model_dump_json() for k, e in shard.entries.items()}
        return _entry_lines(shard.raw) if shard.raw is not None else {}

    def _pending(self, sid: int) -> tuple[dict[str, Entry], list[str]]:
        journal = self._journal
        if journal is None:
            return {}, []
        put = {k: e for k, e in journal.put.items() if layout_shard(k) == sid}
        return put, [k for k in journal.delete if layout_shard(k) == sid]

    async def _shard_view(self, sid: int) -> dict[str, Entry]:
        """A shard's entries as committed: a pending commit counts as applied."""

        shard = await self._shard(sid)
        entries = await self._shard_entries(sid, shard)
        put, gone = self._pending(sid)
        if not put and not gone:
            return entries
        view = dict(entries)
        view.update(put)
        for key in gone:
            view.pop(key, None)
        return view

    async def layout_head(self) -> LayoutHead:
        await self._sync_layout()
        if self._journal is not None:
            return LayoutHead(version=self._journal.version, stamp=self._journal.stamp)
        return self._head

    async def layout_damaged(self) -> bool:
        head = await self.layout_head()
        if head.stamp == "" or self._head_damaged or self._damaged:
            return True
        if self.record_seal is not None:
            # A shard another process refused (a run's prompt read it) is kept aside beside
            # it: the shard is checked here, so the refusal is seen whoever read it first.
            for name in await self.ws.listdir(self.layout_dir):
                if name.startswith("shard-") and ".json.unsealed-" in name:
                    sid = int(name[len("shard-") : name.index(".")])
                    await self._shard(sid)
        return bool(self._damaged)

    async def layout_entries(self, keys: Iterable[str]) -> dict[str, Entry]:
        await self._sync_layout()
        by_shard: dict[int, list[str]] = {}
        for key in keys:
            by_shard.setdefault(layout_shard(key), []).append(key)
        found: dict[str, Entry] = {}
        journal = self._journal
        for sid, group in by_shard.items():
            shard = await self._shard(sid)
            stored: list[str] = []
            for key in group:
                if journal is not None and key in journal.put:
                    found[key] = journal.put[key].model_copy(deep=True)
                elif journal is None or key not in journal.delete:
                    stored.append(key)
            found.update(await self._shard_entries_of(sid, shard, stored))
        return found

    async def layout_for_reading(self) -> LayoutMemory:
        await self._sync_layout()
        whole = self._whole
        if whole is not None and whole[0] is self._head_raw and whole[1] is self._journal_raw:
            return whole[2]
        merged: dict[str, Entry] = {}
        for sid in range(LAYOUT_SHARDS):
            merged.update(await self._shard_view(sid))
        version = self._journal.version if self._journal is not None else self._head.version
        value = LayoutMemory.model_construct(version=version, entries=merged)
        self._whole = (self._head_raw, self._journal_raw, value)
        return value

    async def layout_view(
        self, *, person: str | None = None, acting: bool = False
    ) -> tuple[int, Mapping[str, Entry]]:
        await self._sync_layout()
        version = self._journal.version if self._journal is not None else self._head.version
        whole = self._whole
        if whole is not None and whole[0] is self._head_raw and whole[1] is self._journal_raw:
            entries: Mapping[str, Entry] = whole[2].entries
            if acting:
                entries = {k: e for k, e in entries.items() if e.exists_for(person)}
            return version, entries
        # Every shard's bytes now (what a later commit writes does not reach this view); an
        # entry is parsed when asked for.
        viewed = self._viewed
        if viewed is not None and viewed[0] is self._head_raw and not self._damaged:
            shards = viewed[1]
        else:
            shards = {}
            for sid in range(LAYOUT_SHARDS):
                shard = await self._shard(sid)
                if shard.entries is not None:
                    shards[sid] = shard.entries
                elif shard.raw is not None:
                    shards[sid] = shard.raw
            self._viewed = (self._head_raw, shards)
        journal = self._journal
        put = dict(journal.put) if journal is not None else {}
        gone = list(journal.delete) if journal is not None else []

        def damaged(sid: int, why: str) -> None:
            # Set aside (and layout memory rebuilt) by the next writer, which reads it again.
            logger.warning("memory found an unreadable entry in %s: %s", self.shard_path(sid), why)
            self._damaged.add(sid)

        return version, LayoutEntries(
            shards, put, gone, person=person, acting=acting, on_error=damaged
        )

    async def layout_changes(self, since: str) -> tuple[str, set[str] | None]:
        await self._sync_layout()
        head, journal = self._head, self._journal
        now = head.stamp if journal is None else journal.stamp
        if not since or not head.stamp:
            return now, None  # no stamp to start from (a new or damaged head)
        keys: set[str] = set()
        if journal is not None and journal.stamp != head.stamp:
            # A commit written but not applied yet: read as applied, so named too.
            if since == journal.stamp:
                return now, keys
            pending = journal.changed_keys()
            if pending is None:
                return now, None
            keys.update(pending)
        steps = {c.stamp: c for c in head.changes}
        stamp = head.stamp
        while stamp != since:
            step = steps.pop(stamp, None)
            if step is None or step.keys is None:
                return now, None  # older than the commits named, or a rebuild between
            keys.update(step.keys)
            stamp = step.before
        return now, keys

    async def layout_parts(self) -> AsyncIterator[Iterable[Entry]]:
        await self._sync_layout()
        whole = self._whole
        if whole is not None and whole[0] is self._head_raw and whole[1] is self._journal_raw:
            yield whole[2].entries.values()
            return
        for sid in range(LAYOUT_SHARDS):
            # Parsed one shard at a time and not kept: at most one shard's entries are held.
            yield (await self._shard_view(sid)).values()

    def layout_changed_keys(self, since: str, until: str) -> set[str] | None:
        """Keys changed from stamp ``since`` to stamp ``until``, when every commit between them
        was made by this store object; ``None`` when not known (another writer's commit)."""

        keys: set[str] = set()
        stamp = until
        for _ in range(_COMMITS_KEPT):
            if stamp == since:
                return keys
            step = self._commits.get(stamp)
            if step is None:
                return None
            stamp, changed = step
            keys |= changed
        return None

    async def layout_citing(self, conversations: Iterable[str]) -> set[str]:
        await self._sync_layout()
        keys: set[str] = set()
        wanted = set(conversations)
        if self._head_raw is None and self._legacy_layout is not None:
            for shard in self._legacy_layout.values():
                for key, entry in (shard.entries or {}).items():
                    if any(s.conversation in wanted for s in entry.sources):
                        keys.add(key)
        for rid in sorted(wanted):
            raw = await self.read_state(f"{self.layout_dir}/cites/{rid}")
            for line in (raw or b"").decode("utf-8", "replace").splitlines():
                keys.update(k for k in line.split() if KEY_RE.fullmatch(k))
        if self._journal is not None:
            for key, entry in self._journal.put.items():
                if any(s.conversation in wanted for s in entry.sources):
                    keys.add(key)
        return keys

    async def forget_citations(self, conversations: Iterable[str]) -> None:
        """Drop the citation lists of forgotten conversations (after their entries went)."""

        for rid in conversations:
            await self.ws.remove(f"{self.layout_dir}/cites/{rid}")
            self._cited = {pair for pair in self._cited if pair[0] != rid}

    async def recover_layout(self) -> None:
        """Split ``layout.json`` into records, or finish a commit a killed writer left."""

        await self._sync_layout()
        legacy = f"{self.dir}/layout.json"
        if self._head_raw is None and self._legacy_layout is not None:
            await self._split_legacy_layout()
        elif await self.ws.size(legacy) is not None and (
            self._head_raw is not None or self._legacy_broken
        ):
            # Split already (a writer killed before removing it), or unreadable and kept aside.
            await self.ws.remove(legacy)
        if self._journal is not None:
            await self._apply(self._journal)
        if self._head_raw is not None and self._head.format < LAYOUT_FORMAT:
            await self._rewrite_shards()
        if not self._held_checked:
            self._held_checked = True
            if await self.ws.size(self.held_path(".complete")) is None:
                # Conversations written before the index of their keys: indexed once.
                names = await self._names(f"{self.dir}/conversations", _JSON)
                await self.note_holders([await self.load_conversation(r) for r in sorted(names)])

    async def _rewrite_shards(self) -> None:
        """Shards written by an earlier release (every entry on one line) again one entry a
        line, then the head says so (last: a writer killed before it rewrites them again; the
        entries are the same in both formats, so readers see no change)."""

        self._viewed = None

        for sid in range(LAYOUT_SHARDS):
            shard = await self._shard(sid)
            if shard.entries is None or shard.raw is None or sid in self._damaged:
                continue
            data = _shard_bytes(self._shard_json(shard))
            await self._write_shard(sid, data)
            self._keep(sid, _Shard(data, self._head_raw))
        await self._write_head(self._head.model_copy(update={"format": LAYOUT_FORMAT}))
        logger.info("layout memory's records in %s rewritten one entry a line", self.layout_dir)

    async def _split_legacy_layout(self) -> None:
        """``layout.json`` into shards and citation lists, the head last (the commit point: a
        writer killed before it splits the file again), then the old file goes."""

        self._viewed = None

        legacy = self._legacy_layout or {}
        version = self._head.version
        cites: dict[str, set[str]] = {}
        for sid in range(LAYOUT_SHARDS):
            shard = legacy.get(sid)
            if shard is None or not shard.entries:
                await self.ws.remove(self.shard_path(sid))  # left by an earlier store
                continue
            data = _shard_bytes({k: e.model_dump_json() for k, e in shard.entries.items()})
            await self._write_shard(sid, data)
            self._keep(sid, _Shard(data, self._head_raw))
            for key, entry in shard.entries.items():
                for source in entry.sources:
                    cites.setdefault(source.conversation, set()).add(key)
        for rid, keys in sorted(cites.items()):
            if _citable(rid):
                line = " ".join(sorted(keys)) + "\n"
                await self.write_state(f"{self.layout_dir}/cites/{rid}", line.encode("utf-8"))
                self._cited.update((rid, k) for k in keys)
        head = LayoutHead(version=version, stamp=secrets.token_hex(8), format=LAYOUT_FORMAT)
        await self._write_head(head)
        await self.ws.remove(f"{self.dir}/layout.json")
        self._legacy_layout = None
        logger.info(
            "layout memory split from %s/layout.json into %d records",
            self.dir,
            sum(1 for s in legacy.values() if s.entries),
        )

    async def _write_shard(self, sid: int, data: bytes) -> None:
        """Write a shard (sealed); the next head names its seal."""

        await self._write_shards([(sid, data)])

    async def _write_shards(self, shards: Sequence[tuple[int, bytes]]) -> None:
        """Write shards (sealed), waiting for the disk once for them all; the next head names
        their seals."""

        items = [(self.shard_path(sid), self._sealed(self.shard_path(sid), d)) for sid, d in shards]
        await self.write_states(items)
        for (sid, _), (_, sealed) in zip(shards, items, strict=True):
            seal = _seal_of(sealed)
            if seal is not None:
                self._written_seals[f"{sid:02d}"] = seal

    def _as_named(self, sid: int, shard: _Shard, data: bytes) -> bool:
        """Whether shard ``sid`` is stored holding ``data`` already, sealed as the head names
        it: then it is not written again (a commit that leaves a shard's bytes as they are).
        A shard written by a writer killed before its head is not as named: written again,
        so the next head names it."""

        if sid in self._damaged or shard.raw != data or self._head.format < LAYOUT_FORMAT:
            return False
        if self.record_seal is None:
            return True
        sealed = self._sealed(self.shard_path(sid), data)
        return _seal_of(sealed) == self._head.seals.get(f"{sid:02d}")

    async def _write_head(self, head: LayoutHead) -> None:
        if head.format >= LAYOUT_FORMAT:
            head = head.model_copy(update={"seals": {**head.seals, **self._written_seals}})
        path = f"{self.layout_dir}/head.json"
        raw = self._sealed(path, head.model_dump_json().encode("utf-8"))
        await self.write_state(path, raw)
        self._written_seals = {}
        old = self._head_raw
        for shard in self._shards.values():
            if shard.seen is old:
                shard.seen = raw  # still what is stored: only this writer changes shards
        if self._whole is not None and self._whole[0] is old and self._journal is None:
            self._whole = (raw, self._journal_raw, self._whole[2])
        if self._viewed is not None and self._viewed[0] is old:
            self._viewed = (raw, self._viewed[1])
        self._head_raw, self._head, self._head_damaged = raw, head, False

    async def commit_layout(
        self,
        *,
        version: int,
        put: Mapping[str, Entry],
        delete: Iterable[str] = (),
        log: Iterable[LogRecord] = (),
        copies: Iterable[CopyRetraction] = (),
        whole: bool = False,
    ) -> LayoutHead:
        if self.fence is not None:
            await self.fence()
        await self.recover_layout()
        commit = LayoutCommit(
            whole=whole,
            version=version,
            stamp=secrets.token_hex(8),
            put=dict(put),
            delete=[k for k in dict.fromkeys(delete) if k not in put],
            log=list(log),
            rewrite=sorted(self._damaged),
            copies=list(copies),
            before=self._head.stamp,
        )
        raw = commit.model_dump_json().encode("utf-8")
        await self.write_record(f"{self.layout_dir}/commit.json", raw)  # the commit point
        self._journal_raw, self._journal = raw, commit
        await self._apply(commit)
        return self._head

    async def _apply(self, commit: LayoutCommit) -> None:
        """Apply a written commit: log, shards, citation lists, head; then drop it. Each step
        may be done twice (a writer killed in between): the result is the same."""

        for record in commit.log:
            await self.append_log(record)
        touched: dict[int, tuple[dict[str, Entry], list[str]]] = {
            sid: ({}, []) for sid in commit.rewrite
        }
        for key, entry in commit.put.items():
            touched.setdefault(layout_shard(key), ({}, []))[0][key] = entry
        for key in commit.delete:
            touched.setdefault(layout_shard(key), ({}, []))[1].append(key)
        # The cached whole, if it is of the head this commit applies to (it may hold this
        # commit already, read as pending: applying it again gives the same).
        whole = self._whole
        previous = whole[2].entries if whole is not None and whole[0] is self._head_raw else None
        shards: list[tuple[int, bytes]] = []
        viewed = self._viewed
        shown = dict(viewed[1]) if viewed is not None and viewed[0] is self._head_raw else None
        self._viewed = None
        for sid in sorted(touched):
            changed, gone = touched[sid]
            shard = await self._shard(sid)
            js = self._shard_json(shard)
            for key, entry in changed.items():
                js[key] = entry.model_dump_json()
            for key in gone:
                js.pop(key, None)
            data = _shard_bytes(js)
            if (js or shard.raw is not None or sid in self._damaged) and not self._as_named(
                sid, shard, data
            ):
                shards.append((sid, data))
            self._keep(sid, _Shard(data, self._head_raw))
            if shown is not None:
                shown[sid] = data
        # Every shard that changes, then the head: the head names no shard before it is on
        # disk, and the shards wait for the disk together.
        await self._write_shards(shards)
        lines: dict[str, set[str]] = {}
        for key, entry in commit.put.items():
            for source in entry.sources:
                rid = source.conversation
                if (rid, key) in self._cited or not _citable(rid):
                    continue
                lines.setdefault(rid, set()).add(key)
        for rid, keys in sorted(lines.items()):
            line = " ".join(sorted(keys)) + "\n"
            await self.ws.append_line(f"{self.layout_dir}/cites/{rid}", line.encode("utf-8"))
            self._cited.update((rid, k) for k in keys)
        self._journal = None
        if shown is not None:
            self._viewed = (self._head_raw, shown)
        if previous is not None:
            # Copied, never changed in place: a reader may be iterating the old one.
            merged = dict(previous)
            merged.update(commit.put)
            for key in commit.delete:
                merged.pop(key, None)
            self._whole = (
                self._head_raw,
                None,
                LayoutMemory.model_construct(version=commit.version, entries=merged),
            )
        else:
            self._whole = None
        before = self._head.stamp
        changes = list(self._head.changes)
        if before != commit.stamp:  # else written already, by a writer killed after it
            changes.append(
                LayoutChange(stamp=commit.stamp, before=before, keys=commit.changed_keys())
            )
        while len(changes) > LAYOUT_CHANGES_KEPT or (
            len(changes) > 1 and sum(len(c.keys or ()) for c in changes) > LAYOUT_CHANGE_KEYS_KEPT
        ):
            changes.pop(0)
        await self._write_head(
            LayoutHead(
                version=commit.version,
                stamp=commit.stamp,
                changes=changes,
                format=self._head.format,
                seals=self._head.seals,
            )
        )
        self._commits[commit.stamp] = (before, {*commit.put, *commit.delete})
        while len(self._commits) > _COMMITS_KEPT:
            self._commits.pop(next(iter(self._commits)))
        if commit.copies:
            if self.retract_copies is None:
                return  # left for a writer that can (the runtime's store); readers see it done
            for copy in commit.copies:
                retracted = commit.put.get(copy.key)
                if retracted is not None:
                    await self.retract_copies(retracted, copy)
        await self.ws.remove(f"{self.layout_dir}/commit.json")
        self._journal_raw = None
        if self._whole is not None:
            self._whole = (self._head_raw, None, self._whole[2])
        self._damaged.clear()
        self._legacy_layout = None

    async def load_registry(self) -> Registry:
        value: Registry = await self._load(f"{self.dir}/registry.json", Registry, Registry())
        return value

    async def save_registry(self, registry: Registry) -> None:
        await self._save(f"{self.dir}/registry.json", registry)

    async def list_conversations(self) -> list[str]:
        names = await self._names(f"{self.dir}/conversations", ".json")
        return sorted({*names, *(await self.list_progress())})

    async def load_defaults(self) -> Defaults | None:
        # Sealed like every record a switch is read from: a ``"use": false`` the agent writes
        # would otherwise switch memory off for a client that leaves ``use`` open.
        value: Defaults | None = await self._load(f"{self.dir}/settings.json", Defaults, None)
        return value

    async def save_defaults(self, defaults: Defaults) -> None:
        if await self.load_defaults() != defaults:
            await self._save(f"{self.dir}/settings.json", defaults)

    def conversation_path(self, rollout_id: str) -> str:
        return f"{self.dir}/conversations/{rollout_id}.json"

    async def load_conversation(self, rollout_id: str) -> ConversationMemory:
        path = self.conversation_path(rollout_id)
        refused = len(self.refused)
        self.refused.discard(path)
        value: ConversationMemory = await self._load(
            path, ConversationMemory, ConversationMemory(rollout_id=rollout_id)
        )
        if path in self.refused:
            self._refused_conversations.add(rollout_id)
        elif len(self.refused) < refused:
            self.refused.add(path)  # refused before, by this store object: still not sent
        await self._redo_logged(value)
        # Keys a saved memory held are in the index already: saving them again adds nothing.
        self._held.update((rollout_id, key) for key in value.entries)
        return value

    async def _redo_logged(self, memory: ConversationMemory) -> None:
        """A record older than its sealed log lines (an earlier sealed copy put back over it,
        or a save a crash cut after its log line): the person's commands and the retractions
        logged after its version are applied to it again, so a Forget never comes back."""

        later = [
            r
            for r in (await self._logged_changes()).get(f"conversation:{memory.rollout_id}", [])
            if r.version > memory.version
        ]
        if not later:
            return
        for record in sorted(later, key=lambda r: r.version):
            _redo(memory, record)
            memory.version = max(memory.version, record.version)
        if self.fence is not None:
            # A writer (the layout lock held): the record is repaired on disk, as the change
            # cut short would have left it; a reader's view is repaired in memory only.
            await self.save_conversation(memory)
        logger.warning(
            "conversation record of %s is older than the changes its log holds (version %d); "
            "the person's later Remember/Forget are applied to it again",
            memory.rollout_id,
            memory.version,
        )

    async def _logged_changes(self) -> dict[str, list[LogRecord]]:
        """The sealed log's conversation changes that can be applied again (a person's
        command, a copy's retraction), by scope; read on from where it was last read."""

        path = self.log_path
        size = await self.ws.size(path) or 0
        at, mark, changes = self._log_seen
        if size < at or (at and await tail_hash(self.ws, path, at) != mark):
            at, changes = 0, {}  # replaced or cut: read again from the start
            self._log_layout_version = 0
        if size > at:
            data = await self.ws.read_range(path, at, size - at) or b""
            cut = data.rfind(b"\n") + 1
            seal = self.record_seal() if self.record_seal is not None else None
            context = self._record_context(path)
            for line in data[:cut].splitlines():
                if not line.strip():
                    continue
                if seal is not None and not seal.verify(line, context):
                    continue
                try:
                    record = LogRecord.model_validate_json(line)
                except ValidationError:
                    continue
                if record.scope == "layout":
                    self._log_layout_version = max(self._log_layout_version, record.version)
                elif record.scope.startswith("conversation:") and _redoable(record):
                    changes.setdefault(record.scope, []).append(record)
            at += cut
            self._log_seen = (at, await tail_hash(self.ws, path, at), changes)
        return changes

    async def save_conversation(self, memory: ConversationMemory) -> None:
        memory.updated_at = now_ms()
        await self._save(self.conversation_path(memory.rollout_id), memory)
        self._refused_conversations.discard(memory.rollout_id)
        await self._hold(memory.rollout_id, memory.entries)

    async def save_conversations(self, memories: Sequence[ConversationMemory]) -> None:
        """Every conversation's record written, waiting for the disk once for them all (a copy
        fetching thousands from a shared store), then the ``held/`` lines, one append a key."""

        items: list[tuple[str, bytes]] = []
        for memory in memories:
            memory.updated_at = now_ms()
            path = self.conversation_path(memory.rollout_id)
            data = memory.model_dump_json(indent=1).encode("utf-8")
            items.append((path, self._sealed(path, data)))
        await self.write_states(items)
        by_key: dict[str, list[str]] = {}
        for memory in memories:
            self._refused_conversations.discard(memory.rollout_id)
            for key in memory.entries:
                if (memory.rollout_id, key) in self._held or not KEY_RE.fullmatch(key):
                    continue
                if ".." not in key:
                    by_key.setdefault(key, []).append(memory.rollout_id)
        await self.ws.append_lines(
            [
                (self.held_path(key), "".join(f"{r}\n" for r in rids).encode())
                for key, rids in by_key.items()
            ]
        )
        for key, rids in by_key.items():
            self._held.update((rid, key) for rid in rids)

    def conversation_refused(self, rollout_id: str) -> bool:
        return rollout_id in self._refused_conversations

    # ``held/<key>``: the conversations whose memory held an entry ``key``, one a line,
    # appended when a conversation first saves the key; ``held/.complete`` once every
    # conversation written before the index existed was indexed. A Forget of a layout entry
    # retracts its copies in those conversations, not in every conversation.

    def held_path(self, key: str) -> str:
        return f"{self.dir}/held/{key}"

    async def _hold(self, rollout_id: str, keys: Iterable[str]) -> None:
        for key in keys:
            if (rollout_id, key) in self._held or not KEY_RE.fullmatch(key) or ".." in key:
                continue
            await self.ws.append_line(self.held_path(key), f"{rollout_id}\n".encode())
            self._held.add((rollout_id, key))

    async def conversations_holding(self, key: str) -> list[str] | None:
        if await self.ws.size(self.held_path(".complete")) is None:
            return None
        raw = await self.read_state(self.held_path(validate_key(key)))
        lines = (raw or b"").decode("utf-8", "replace").split()
        return sorted({rid for rid in lines if _citable(rid)})

    async def note_holders(self, memories: Iterable[ConversationMemory]) -> None:
        by_key: dict[str, list[str]] = {}
        for memory in memories:
            for key in memory.entries:
                if KEY_RE.fullmatch(key) and ".." not in key:
                    by_key.setdefault(key, []).append(memory.rollout_id)
        for key, rids in sorted(by_key.items()):
            await self.ws.append_line(self.held_path(key), "".join(f"{r}\n" for r in rids).encode())
            self._held.update((rid, key) for rid in rids)
        await self.write_state(self.held_path(".complete"), b"")

    async def conversation_exists(self, rollout_id: str) -> bool:
        return await self.ws.size(self.conversation_path(rollout_id)) is not None

    # ------------------------------------------------------------- progress

    def progress_path(self, rollout_id: str) -> str:
        return f"{self.dir}/progress/{rollout_id}{_JSON}"

    def forgotten_path(self, rollout_id: str) -> str:
        return f"{self.dir}/forgotten/{rollout_id}{_JSON}"

    def pending_flag(self, rollout_id: str) -> str:
        """The empty file the recorder creates around each append to ``rollout_id``."""

        return f"{self.dir}/pending/{rollout_id}"

    async def _read_progress(self, path: str) -> RolloutProgress | None:
        raw = await self.read_state(path)
        if raw is None:
            return None
        try:
            return RolloutProgress.model_validate_json(raw)
        except ValidationError as exc:
            await self._set_aside(path, raw, _why(exc))
            # Gone once kept aside: the rollout is unknown again, so it is read afresh.
            await self.ws.remove(path)
            return None

    async def get_progress(self, rollout_id: str) -> RolloutProgress | None:
        await self._split_legacy()
        live = await self._read_progress(self.progress_path(rollout_id))
        if live is not None:
            return live
        gone = await self._read_progress(self.forgotten_path(rollout_id))
        if gone is not None:
            gone.forgotten = True
        return gone

    async def put_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        await self.put_progress_many({rollout_id: progress})

    async def put_progress_many(self, progress: Mapping[str, RolloutProgress]) -> None:
        """One check of the lock, then every record, waiting for the disk once for them all."""

        if not progress:
            return
        if self.fence is not None:
            await self.fence()
        await self.write_states(
            [
                (
                    self.progress_path(rid),
                    prog.model_copy(update={"forgotten": False}).model_dump_json().encode(),
                )
                for rid, prog in progress.items()
            ]
        )
        for rid, prog in progress.items():
            if prog.forgotten:
                # Only once the live record is on disk: a crash in between leaves both, and
                # the live one wins.
                await self.ws.remove(self.forgotten_path(rid))

    async def forget_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        await self.forget_progress_many({rollout_id: progress})

    async def forget_progress_many(self, progress: Mapping[str, RolloutProgress]) -> None:
        """Every pruned record written (waiting for the disk once), then the live ones go: a
        crash in between leaves both, and the live one wins."""

        await self.write_states(
            [
                (
                    self.forgotten_path(rid),
                    RolloutProgress(offset=prog.offset, updated_at=prog.updated_at)
                    .model_dump_json(include={"offset", "updated_at"})
                    .encode(),
                )
                for rid, prog in progress.items()
            ]
        )
        for rid in progress:
            await self.ws.remove(self.progress_path(rid))

    async def list_progress(self) -> dict[str, RolloutProgress]:
        await self._split_legacy()
        found: dict[str, RolloutProgress] = {}
        for name in await self.ws.listdir(f"{self.dir}/progress"):
            if not name.endswith(_JSON) or name.startswith("."):
                continue
            rid = name[: -len(_JSON)]
            prog = await self._read_progress(f"{self.dir}/progress/{name}")
            if prog is not None:
                found[rid] = prog
        return found

    async def _names(self, folder: str, suffix: str) -> list[str]:
        return [
            name[: len(name) - len(suffix)]
            for name in await self.ws.listdir(folder)
            if name.endswith(suffix) and not name.startswith(".")
        ]

    async def pending_rollouts(self) -> list[str]:
        """Rollouts never read, and flagged rollouts that grew past their progress.

        No rollout file is opened or sized unless flagged: the recorder flags a rollout before
        and after every append, and a flag is cleared here once the rollout is read to its end.
        Rollouts written by something else (the SDK's own memory, a copied folder) have no
        progress at all and are found by name.
        """

        await self._split_legacy()
        rollouts = await self._names(self.sessions_dir, ".jsonl")
        known = set(await self._names(f"{self.dir}/progress", _JSON))
        known.update(await self._names(f"{self.dir}/forgotten", _JSON))
        flagged = set(await self._names(f"{self.dir}/pending", ""))
        pending: list[str] = []
        for rid in rollouts:
            if rid not in known:
                if rid not in flagged:
                    # Flagged until read to its end, even if its first extraction fails.
                    await self.mark_pending(rid)
                await self._recover_thread(rid)
                pending.append(rid)
            elif rid in flagged and await self._grew(rid):
                pending.append(rid)
        return pending

    async def mark_pending(self, rollout_id: str) -> None:
        await self.write_state(self.pending_flag(rollout_id), b"")

    async def mark_pending_many(self, rollout_ids: Iterable[str]) -> None:
        await self.write_states([(self.pending_flag(rid), b"") for rid in rollout_ids])

    def unindexed_flag(self, rollout_id: str) -> str:
        """The empty file set when ``rollout_id``'s pending flag is cleared, until the search
        index has looked at the rollout (see :meth:`changed_rollouts`)."""

        return f"{self.dir}/unindexed/{rollout_id}"

    async def changed_rollouts(self) -> RolloutFlags | None:
        # Two small folders: the flags of rollouts recorded (or found) since their last
        # extraction, and of those read to their end since the index last looked.
        return RolloutFlags(
            pending=set(await self._names(f"{self.dir}/pending", "")),
            unindexed=set(await self._names(f"{self.dir}/unindexed", "")),
        )

    async def rollouts_indexed(self, rollout_ids: Iterable[str]) -> None:
        for rid in rollout_ids:
            await self.ws.remove(self.unindexed_flag(rid))

    async def flag_unindexed(self, rollout_ids: Iterable[str]) -> None:
        for rid in rollout_ids:
            await self.ws.write_derived(self.unindexed_flag(rid), b"")

    async def _grew(self, rollout_id: str) -> bool:
        """Whether a flagged rollout holds bytes past its progress; clears a stale flag."""

        prog = await self.get_progress(rollout_id)
        offset = prog.offset if prog is not None else 0
        path = f"{self.sessions_dir}/{rollout_id}.jsonl"
        if (await self.ws.size(path) or 0) != offset:
            return True  # grew, or shrank: cleared or restored from an older copy
        if prog is not None and prog.tail is not None:
            if await tail_hash(self.ws, path, offset) != prog.tail:
                return True  # as long as what was read, but other bytes
        # Read to its end: drop the flag, then look again, so an append that raced with the
        # check (its flag was set before the removal) is not missed. The search index still
        # has to look at what was read (its own sync after the extraction may have failed, or
        # happened in a copy never written back): the flag passes to it first.
        await self.ws.write_derived(self.unindexed_flag(rollout_id), b"")
        await self.ws.remove(self.pending_flag(rollout_id))
        if (await self.ws.size(path) or 0) > offset:
            await self.mark_pending(rollout_id)
            return True
        return False

    # -------------------------------------------------------------- threads

    def thread_path(self, fingerprint: str) -> str:
        return f"{self.dir}/threads/{fingerprint}"

    async def thread_for(self, fingerprint: str) -> str | None:
        await self._split_legacy()
        path = self.thread_path(fingerprint)
        raw = await self.read_state(path)
        if raw is None:
            return None
        if not raw.strip():
            # Written without waiting for the disk, then a power loss: rebuilt by the next
            # close from the rollout's first line (see _recover_thread).
            await self.ws.remove(path)
            return None
        rid, _, seal = raw.decode("utf-8", errors="replace").strip().partition(" ")
        if ROLLOUT_ID_RE.fullmatch(rid) and ".." not in rid:
            if self.line_check is None:
                return rid
            if self.line_check(rid).seal.check("thread", _thread_data(fingerprint, rid), seal):
                return rid
            # Not written by memory (the agent's tools, or a release before records were
            # sealed): it would send a run replaying this history into that conversation.
            logger.warning(
                "conversation index record %s holds no valid seal; it is removed, and a run "
                "replaying that history is recorded on its own",
                path,
            )
            await self.ws.remove(path)
            return None
        await self._set_aside(
            path, raw, "not a rollout id; that conversation's next run starts afresh"
        )
        await self.ws.remove(path)
        return None

    async def index_thread(self, fingerprint: str, rollout_id: str) -> None:
        # Not waited for on disk (an fsync was most of a first record's time): a record lost
        # to a crash is rebuilt from the rollout by the next close (_recover_thread).
        path = self.thread_path(fingerprint)
        data = rollout_id.encode("utf-8")
        if self.line_check is not None:
            seal = self.line_check(rollout_id).seal.sign(
                "thread", _thread_data(fingerprint, rollout_id)
            )
            data += b" " + seal.encode()
        await self._touch(path)
        try:
            await self.ws.write_derived(path, data)
        except IsADirectoryError:
            await set_aside_folder(self.ws, path)
            await self.ws.write_derived(path, data)

    async def _recover_thread(self, rollout_id: str) -> None:
        """Index a never-read rollout's conversation if its thread record is missing.

        The recorder writes the record just after the rollout's first line; a kill in between,
        or a power loss before the record reached the disk, loses it. Its content is the
        fingerprint of that first line, so it is put back from there: a later run replaying
        the conversation's history still joins it. Never fails the close.
        """

        if rollout_id in self._threads_checked:
            return
        try:
            first = await self._first_line(f"{self.sessions_dir}/{rollout_id}.jsonl")
            if first is None or self.line_check is None:
                return
            check = self.line_check(rollout_id)
            if not check.seal.verify(first, rollout_id):
                return  # not recorded by memory: it claims no conversation
            segment = bounded.loads(first, limit=bounded.MAX_LINE_BYTES, what="a session line")
            fp = segment_fingerprint(segment) if isinstance(segment, dict) else None
            if fp is not None and await self.thread_for(fp) is None:
                await self.index_thread(fp, rollout_id)
                logger.info("conversation %s indexed again from its first run", rollout_id)
            self._threads_checked.add(rollout_id)
        except (OSError, ValueError) as exc:
            logger.debug("could not check the thread record of %s: %s", rollout_id, exc_text(exc))

    async def _first_line(self, path: str) -> bytes | None:
        data = b""
        chunk = 1 << 16
        while len(data) < FIRST_LINE_MAX_BYTES:
            part = await self.ws.read_range(path, len(data), chunk)
            if not part:
                return None
            data += part
            cut = data.find(b"\n")
            if cut >= 0:
                return data[:cut]
            chunk = min(chunk * 4, 8 << 20)
        return None

    # --------------------------------------------------------------- legacy

    async def _split_legacy(self) -> None:
        """Split ``progress.json`` and ``threads.json`` (the old whole-file forms) into records.

        Records already present win (they are newer); the old file goes once split, so this
        costs one check per store object afterwards.
        """

        if self._legacy_checked:
            return
        self._legacy_checked = True
        legacy = f"{self.dir}/progress.json"
        if await self.ws.size(legacy) is not None:
            old: Progress = await self._load(legacy, Progress, Progress(), sealed=False)
            for rid, prog in old.rollouts.items():
                if await self.ws.size(self.progress_path(rid)) is not None:
                    continue
                if await self.ws.size(self.forgotten_path(rid)) is not None:
                    continue
                if prog.slug is None and prog.consolidated:
                    await self.forget_progress(rid, prog)
                else:
                    await self.put_progress(rid, prog)
            await self.ws.remove(legacy)
        threads = f"{self.dir}/threads.json"
        if await self.ws.size(threads) is not None:
            for fingerprint, rid in (await self._load_legacy_threads(threads)).items():
                if await self.ws.size(self.thread_path(fingerprint)) is None:
                    await self.index_thread(fingerprint, rid)
            await self.ws.remove(threads)

    async def _load_legacy_threads(self, path: str) -> dict[str, str]:
        raw = await self.read_state(path)
        if not raw:
            return {}
        try:
            data = bounded.loads(raw, limit=bounded.MAX_STATE_BYTES, what=path)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            await self._set_aside(
                path,
                raw,
                "not a JSON object; runs of earlier conversations start a new conversation memory",
            )
            return {}
        return {str(k): str(v) for k, v in data.items()}

    # --------------------------------------------------------- read prompt

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

    # ------------------------------------------------------------------ log

    @property
    def log_path(self) -> str:
        return f"{self.dir}/log.jsonl"

    def _log_line(self, record: LogRecord) -> bytes:
        """One sealed line of the change log: the seal binds it to the log (a line of another
        record does not verify here); lines are sealed alone, so an append stays one write."""

        return self._sealed(self.log_path, (record.model_dump_json() + "\n").encode("utf-8"))

    async def append_log(self, record: LogRecord) -> None:
        await self.ws.append_line(self.log_path, self._log_line(record))

    async def replace_log(self, records: Iterable[LogRecord]) -> None:
        """The whole log replaced by ``records`` (a shared store's copy takes the store's)."""

        body = b"".join(self._log_line(r) for r in records)
        await self.ws.write_atomic(self.log_path, body)

    async def log_scopes_after(self, mark: str | None) -> tuple[set[str] | None, str]:
        """Reads only the log's bytes after ``mark`` (a byte offset into ``log.jsonl``)."""

        log_path = f"{self.dir}/log.jsonl"
        size = await self.ws.size(log_path) or 0
        offset = int(mark) if mark is not None and mark.isdigit() else -1
        if offset < 0 or size < offset:
            return None, str(size)
        scopes: set[str] = set()
        if size == offset:
            return scopes, mark or "0"
        data = await self.ws.read_range(log_path, offset, size - offset) or b""
        cut = data.rfind(b"\n") + 1
        for line in data[:cut].splitlines():
            try:
                record = bounded.loads(line, limit=bounded.MAX_FIELD_BYTES, what="a log line")
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("scope"), str):
                scopes.add(record["scope"])
        return scopes, str(offset + cut)

    async def scopes_with_memory(self) -> set[str]:
        """One scope per conversation record under ``conversations/``."""

        return {
            f"conversation:{name[: -len('.json')]}"
            for name in await self.ws.listdir(f"{self.dir}/conversations")
            if name.endswith(".json") and not name.startswith(".")
        }

    async def read_log(self) -> list[LogRecord]:
        raw = await self.read_state(self.log_path)
        records: list[LogRecord] = []
        seen: set[tuple[str, int, str, tuple[str, ...]]] = set()
        refused = 0
        seal = self.record_seal() if self.record_seal is not None else None
        context = self._record_context(self.log_path)
        for line in (raw or b"").splitlines():
            if not line.strip():
                continue
            if seal is not None and not seal.verify(line, context):
                # Not written by memory: a line the agent forged would otherwise show as a
                # person's change in ``sandbox-memory log`` and be sent to a shared store.
                refused += 1
                continue
            try:
                record = LogRecord.model_validate_json(line)
            except ValidationError:
                logger.warning("skipping an unreadable line of the memory log")
                continue
            # A change is logged before it is saved; a close killed in between redoes it and
            # logs it again with the same version: one change, read once.
            ident = (record.scope, record.version, record.cause, tuple(record.keys))
            if ident in seen:
                continue
            seen.add(ident)
            records.append(record)
        if refused and refused != self._log_refused:
            logger.warning(
                "%d line(s) of %s hold no valid seal: not written by memory, skipped",
                refused,
                self.log_path,
            )
        self._log_refused = refused
        return records
