"""The structured store: entries, versions, the change log, switches.

The store is the source of truth; ``MEMORY.md``, ``memory_summary.md`` and ``skills/`` are
rendered from it. Files, all under ``<memories_dir>/store/``:

- ``layout.json``                 layout memory (the specification's agent memory)
- ``conversations/<id>.json``     conversation memory (the specification's session memory)
- ``log.jsonl``                   every change: version, time, cause, scope, keys
- ``progress.json``               what phase 1 has read of each rollout; attempts and errors
- ``threads.json``                first-item fingerprints, to know a conversation at run start
- ``lock``                        the layout's lease lock
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .engines.base import EntryKind
from .errors import MemoryConfigError
from .workspace import Workspace

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


class Progress(BaseModel):
    rollouts: dict[str, RolloutProgress] = Field(default_factory=dict)


class LogRecord(BaseModel):
    version: int
    at: int
    cause: Cause
    scope: str
    """``layout`` or ``conversation:<rollout-id>``."""
    keys: list[str]
    detail: str | None = None


class Store:
    """Load and save the structured state of one layout."""

    def __init__(self, workspace: Workspace, memories_dir: str) -> None:
        self.ws = workspace
        self.memories_dir = memories_dir
        self.dir = f"{memories_dir}/store"

    @property
    def lock_path(self) -> str:
        return f"{self.dir}/lock"

    async def _load(self, path: str, model: type[BaseModel], default: BaseModel) -> Any:
        raw = await self.ws.read_bytes(path)
        if raw is None:
            return default
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            why = exc.errors()[0].get("msg", "invalid") if exc.errors() else str(exc)
            await self._set_aside(path, raw, why)
            return default

    async def _set_aside(self, path: str, raw: bytes, why: str) -> None:
        """Keep an unreadable state file's bytes beside it, once per content, and log it."""

        # Named by content: the file is read many times before it is next saved, and one
        # copy (and one ERROR line) per distinct content is enough.
        broken = f"{path}.broken-{hashlib.sha256(raw).hexdigest()[:12]}"
        if await self.ws.size(broken) is not None:
            return
        await self.ws.write_atomic(broken, raw)
        logger.error(
            "memory state file %s is not valid (%s); kept as %s and starting it afresh",
            path,
            why,
            broken,
        )

    async def layout_needs_rebuild(self) -> bool:
        """Whether ``layout.json`` is missing or unreadable (then phase 2 rebuilds it)."""

        raw = await self.ws.read_bytes(f"{self.dir}/layout.json")
        if raw is None:
            return True
        try:
            LayoutMemory.model_validate_json(raw)
        except ValidationError:
            return True
        return False

    async def _save(self, path: str, value: BaseModel) -> None:
        await self.ws.write_atomic(path, value.model_dump_json(indent=1).encode("utf-8"))

    async def load_layout(self) -> LayoutMemory:
        value: LayoutMemory = await self._load(
            f"{self.dir}/layout.json", LayoutMemory, LayoutMemory()
        )
        return value

    async def save_layout(self, memory: LayoutMemory) -> None:
        await self._save(f"{self.dir}/layout.json", memory)

    async def load_registry(self) -> Registry:
        value: Registry = await self._load(f"{self.dir}/registry.json", Registry, Registry())
        return value

    async def save_registry(self, registry: Registry) -> None:
        await self._save(f"{self.dir}/registry.json", registry)

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

    async def load_progress(self) -> Progress:
        value: Progress = await self._load(f"{self.dir}/progress.json", Progress, Progress())
        return value

    async def save_progress(self, progress: Progress) -> None:
        await self._save(f"{self.dir}/progress.json", progress)

    async def append_log(self, record: LogRecord) -> None:
        await self.ws.append_line(
            f"{self.dir}/log.jsonl", (record.model_dump_json() + "\n").encode("utf-8")
        )

    async def read_log(self) -> list[LogRecord]:
        raw = await self.ws.read_bytes(f"{self.dir}/log.jsonl")
        records: list[LogRecord] = []
        for line in (raw or b"").splitlines():
            if not line.strip():
                continue
            try:
                records.append(LogRecord.model_validate_json(line))
            except ValidationError:
                logger.warning("skipping an unreadable line of the memory log")
        return records

    async def load_threads(self) -> dict[str, str]:
        raw = await self.ws.read_bytes(f"{self.dir}/threads.json")
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            await self._set_aside(
                f"{self.dir}/threads.json",
                raw,
                "not a JSON object; runs of earlier conversations start a new conversation memory",
            )
            return {}
        return {str(k): str(v) for k, v in data.items()}

    async def save_threads(self, threads: dict[str, str]) -> None:
        await self.ws.write_atomic(
            f"{self.dir}/threads.json", json.dumps(threads, indent=0).encode("utf-8")
        )
