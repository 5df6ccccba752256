"""The structured store: entries, versions, the change log, progress, leases.

The store is the source of truth; ``MEMORY.md``, ``memory_summary.md`` and ``skills/`` are
rendered from it. :class:`MemoryStore` is the seam: per-record operations (one conversation's
memory, one rollout's progress, one log line), so each costs the record it touches, never the
whole history. :class:`Store` implements it with files, all under ``<memories_dir>/store/``:

- ``layout.json``                 layout memory (the specification's agent memory)
- ``conversations/<id>.json``     conversation memory (the specification's session memory)
- ``log.jsonl``                   every change: version, time, cause, scope, keys
- ``progress/<id>.json``          what phase 1 has read of one rollout; attempts and errors
- ``forgotten/<id>.json``         bytes read of a rollout phase 2 forgot (its progress, pruned)
- ``pending/<id>``                empty flag: the rollout grew since its progress was checked
- ``threads/<fingerprint>``       the rollout id of a conversation, known by its first items
- ``settings.json``               the switch defaults of the ``Memory`` configuration in use
- ``lock``                        the layout's lease lock

``progress.json`` and ``threads.json`` (one file for every rollout, written whole per change)
are read once and split into those records.
"""

from __future__ import annotations

import abc
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .engines.base import EntryKind

if TYPE_CHECKING:
    from .redact import Redactor
from .errors import MemoryConfigError
from .rollouts import ROLLOUT_ID_RE
from .workspace import LeaseLock, Workspace, set_aside_folder

logger = logging.getLogger("sandbox_memory")

KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
"""Keys are short stable slugs: no '/', no '..', safe as file names (skills/<key>/)."""

MAX_CONTENT_CHARS = 2_000
"""An entry is a compact fact, not a document; longer content is refused."""

LONG_LIVED_KINDS: frozenset[str] = frozenset({"procedure", "preference", "decision"})
"""Kinds promoted from conversation memory to layout memory (the specification's agent memory)."""

Cause = Literal["consolidation", "person", "promotion", "live_update", "forgetting"]


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


class RolloutProgress(BaseModel):
    offset: int = 0
    """Bytes of ``sessions/<id>.jsonl`` already extracted."""
    updated_at: str = ""
    """``updated_at`` of the newest segment extracted (orders phase-2 selection)."""
    slug: str | None = None
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


def _why(exc: ValidationError) -> str:
    """The first problem pydantic found, for the log line about an unreadable file."""

    return str(exc.errors()[0].get("msg", "invalid")) if exc.errors() else str(exc)


class MemoryStore(abc.ABC):
    """The store seam: the per-record operations memory needs, whatever holds the records.

    Every operation touches the records it names (one conversation, one rollout's progress,
    one log line), so its cost is that of the new work, not of the history. :class:`Store`
    keeps the records as files in the workspace; a shared store (PostgreSQL) implements the
    same operations on tables.
    """

    # --- entries and versions
    @abc.abstractmethod
    async def load_layout(self) -> LayoutMemory:
        """Layout memory (empty when there is none yet)."""

    @abc.abstractmethod
    async def save_layout(self, memory: LayoutMemory) -> None:
        """Replace layout memory (the caller holds the lease)."""

    @abc.abstractmethod
    async def load_layout_for_phase_two(self) -> tuple[LayoutMemory, bool]:
        """Layout memory read once, and whether it was missing or unreadable (then phase 2
        rebuilds it from every selected conversation)."""

    @abc.abstractmethod
    async def load_registry(self) -> Registry:
        """The selected conversations' short-lived entries (derived by phase 2)."""

    @abc.abstractmethod
    async def save_registry(self, registry: Registry) -> None:
        """Replace the registry."""

    @abc.abstractmethod
    async def load_conversation(self, rollout_id: str) -> ConversationMemory:
        """One conversation's memory (empty when there is none yet)."""

    @abc.abstractmethod
    async def save_conversation(self, memory: ConversationMemory) -> None:
        """Replace one conversation's memory."""

    @abc.abstractmethod
    async def conversation_exists(self, rollout_id: str) -> bool:
        """Whether the conversation has memory."""

    async def list_conversations(self) -> list[str]:
        """Rollout ids of every conversation with memory or progress.

        This default lists the rollouts with progress; a store that can list its conversation
        records (memory created by ``init`` before any run) overrides it.
        """

        return sorted(await self.list_progress())

    # --- switch defaults of the Memory configuration in use
    async def load_defaults(self) -> Defaults | None:
        """The recorded switch defaults; ``None`` when none were recorded (this default)."""

        return None

    async def save_defaults(self, defaults: Defaults) -> None:
        """Record the switch defaults (this default records nothing)."""

        _ = defaults

    # --- the change log
    @abc.abstractmethod
    async def append_log(self, record: LogRecord) -> None:
        """Append one change to the log."""

    @abc.abstractmethod
    async def read_log(self) -> list[LogRecord]:
        """Every change, oldest first (a change logged twice by a redone close, once)."""

    # --- progress, one rollout at a time
    @abc.abstractmethod
    async def get_progress(self, rollout_id: str) -> RolloutProgress | None:
        """One rollout's progress (a forgotten one's, ``forgotten=True``); ``None`` if none."""

    @abc.abstractmethod
    async def put_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        """Replace one rollout's progress; a forgotten rollout becomes live again."""

    @abc.abstractmethod
    async def forget_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        """Prune a forgotten rollout's progress to what keeps its old bytes from coming back."""

    @abc.abstractmethod
    async def list_progress(self) -> dict[str, RolloutProgress]:
        """Progress of every rollout not forgotten (what phase 2 selects from)."""

    @abc.abstractmethod
    async def pending_rollouts(self) -> list[str]:
        """Rollouts holding recorded bytes not yet extracted (also from crashed sessions)."""

    @abc.abstractmethod
    async def mark_pending(self, rollout_id: str) -> None:
        """Have the next :meth:`pending_rollouts` look at this rollout again (``Refresh``)."""

    # --- conversations known by their first items
    @abc.abstractmethod
    async def thread_for(self, fingerprint: str) -> str | None:
        """The rollout id of the conversation whose history starts with ``fingerprint``."""

    @abc.abstractmethod
    async def index_thread(self, fingerprint: str, rollout_id: str) -> None:
        """Remember that conversations starting with ``fingerprint`` are ``rollout_id``."""

    # --- leases
    @abc.abstractmethod
    def lease(self, *, timeout: float, lease: float) -> LeaseLock:
        """The layout's lease lock: one writer at a time across processes and machines."""


_JSON = ".json"


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
        self._layout_cache: tuple[bytes, LayoutMemory] | None = None
        self.redactor_source: Callable[[], Redactor] | None = None
        """Set by the runtime: files set aside are redacted like everything else written."""

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

        try:
            await self.ws.write_atomic(path, data)
        except IsADirectoryError:
            await set_aside_folder(self.ws, path)
            await self.ws.write_atomic(path, data)

    async def _load(self, path: str, model: type[BaseModel], default: BaseModel) -> Any:
        raw = await self.read_state(path)
        if raw is None:
            return default
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            await self._set_aside(path, raw, _why(exc))
            return default

    async def _set_aside(self, path: str, raw: bytes, why: str) -> None:
        """Keep an unreadable state file's bytes beside it, once per content, and log it."""

        # Named by content: the file is read many times before it is next saved, and one
        # copy (and one ERROR line) per distinct content is enough.
        broken = f"{path}.broken-{hashlib.sha256(raw).hexdigest()[:12]}"
        if await self.ws.size(broken) is not None:
            return
        from .redact import redact_bytes  # imported on first use, like the runtime's redactor

        redactor = self.redactor_source() if self.redactor_source is not None else None
        await self.ws.write_atomic(broken, redact_bytes(raw, redactor))
        logger.error(
            "memory state file %s is not valid (%s); kept as %s and starting it afresh",
            path,
            why,
            broken,
        )

    async def load_layout_for_phase_two(self) -> tuple[LayoutMemory, bool]:
        path = f"{self.dir}/layout.json"
        raw = await self.read_state(path)
        if raw is None:
            return LayoutMemory(), True
        try:
            return LayoutMemory.model_validate_json(raw), False
        except ValidationError as exc:
            await self._set_aside(path, raw, _why(exc))
            return LayoutMemory(), True

    async def _save(self, path: str, value: BaseModel) -> None:
        await self.write_state(path, value.model_dump_json(indent=1).encode("utf-8"))

    async def load_layout(self) -> LayoutMemory:
        value: LayoutMemory = await self._load(
            f"{self.dir}/layout.json", LayoutMemory, LayoutMemory()
        )
        return value

    async def save_layout(self, memory: LayoutMemory) -> None:
        await self._save(f"{self.dir}/layout.json", memory)

    async def layout_for_reading(self) -> LayoutMemory:
        """Layout memory to read, never to change: parsed again only when ``layout.json``'s
        bytes changed since the last call (extracting 30 rollouts reads it 30 times; with
        20,000 entries each parse costs about a tenth of a second)."""

        raw = await self.read_state(f"{self.dir}/layout.json")
        cached = self._layout_cache
        if raw is not None and cached is not None and cached[0] == raw:
            return cached[1]
        if raw is None:
            return LayoutMemory()
        try:
            value = LayoutMemory.model_validate_json(raw)
        except ValidationError as exc:
            await self._set_aside(f"{self.dir}/layout.json", raw, _why(exc))
            return LayoutMemory()
        self._layout_cache = (raw, value)
        return value

    async def load_registry(self) -> Registry:
        value: Registry = await self._load(f"{self.dir}/registry.json", Registry, Registry())
        return value

    async def save_registry(self, registry: Registry) -> None:
        await self._save(f"{self.dir}/registry.json", registry)

    async def list_conversations(self) -> list[str]:
        names = await self._names(f"{self.dir}/conversations", ".json")
        return sorted({*names, *(await self.list_progress())})

    async def load_defaults(self) -> Defaults | None:
        raw = await self.ws.read_bytes(f"{self.dir}/settings.json")
        if raw is None:
            return None
        try:
            return Defaults.model_validate_json(raw)
        except ValidationError as exc:
            await self._set_aside(f"{self.dir}/settings.json", raw, _why(exc))
            return None

    async def save_defaults(self, defaults: Defaults) -> None:
        if await self.load_defaults() != defaults:
            await self._save(f"{self.dir}/settings.json", defaults)

    def conversation_path(self, rollout_id: str) -> str:
        return f"{self.dir}/conversations/{rollout_id}.json"

    async def load_conversation(self, rollout_id: str) -> ConversationMemory:
        value: ConversationMemory = await self._load(
            self.conversation_path(rollout_id),
            ConversationMemory,
            ConversationMemory(rollout_id=rollout_id),
        )
        return value

    async def save_conversation(self, memory: ConversationMemory) -> None:
        memory.updated_at = now_ms()
        await self._save(self.conversation_path(memory.rollout_id), memory)

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
        revived = progress.forgotten
        data = progress.model_copy(update={"forgotten": False})
        await self.write_state(
            self.progress_path(rollout_id), data.model_dump_json().encode("utf-8")
        )
        if revived:
            # Only once the live record is on disk: a crash in between leaves both, and the
            # live one wins.
            await self.ws.remove(self.forgotten_path(rollout_id))

    async def forget_progress(self, rollout_id: str, progress: RolloutProgress) -> None:
        kept = RolloutProgress(offset=progress.offset, updated_at=progress.updated_at)
        await self.write_state(
            self.forgotten_path(rollout_id),
            kept.model_dump_json(include={"offset", "updated_at"}).encode("utf-8"),
        )
        await self.ws.remove(self.progress_path(rollout_id))

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
                pending.append(rid)
            elif rid in flagged and await self._grew(rid):
                pending.append(rid)
        return pending

    async def mark_pending(self, rollout_id: str) -> None:
        await self.write_state(self.pending_flag(rollout_id), b"")

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
        # check (its flag was set before the removal) is not missed.
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
        rid = raw.decode("utf-8", errors="replace").strip()
        if ROLLOUT_ID_RE.fullmatch(rid) and ".." not in rid:
            return rid
        await self._set_aside(
            path, raw, "not a rollout id; that conversation's next run starts afresh"
        )
        await self.ws.remove(path)
        return None

    async def index_thread(self, fingerprint: str, rollout_id: str) -> None:
        await self.write_state(self.thread_path(fingerprint), rollout_id.encode("utf-8"))

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
            old: Progress = await self._load(legacy, Progress, Progress())
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
            data = json.loads(raw)
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
            doc = json.loads(raw)
            if int(doc["budget"]) < budget:
                return None
            found = list(doc["shared"])
            if person is not None:
                found += doc["private"].get(person, [])
            return [Entry.model_validate(e) for e in found]
        except (ValueError, KeyError, TypeError, AttributeError, ValidationError):
            return None

    # ------------------------------------------------------------------ log

    async def append_log(self, record: LogRecord) -> None:
        await self.ws.append_line(
            f"{self.dir}/log.jsonl", (record.model_dump_json() + "\n").encode("utf-8")
        )

    async def read_log(self) -> list[LogRecord]:
        raw = await self.read_state(f"{self.dir}/log.jsonl")
        records: list[LogRecord] = []
        seen: set[tuple[str, int, str, tuple[str, ...]]] = set()
        for line in (raw or b"").splitlines():
            if not line.strip():
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
        return records
