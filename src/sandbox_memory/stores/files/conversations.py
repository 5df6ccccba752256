"""Conversation memory as files (:class:`ConversationFiles`): one record per conversation
(``conversations/<id>.json``, with the changes the log holds for it redone after a crash),
the registry and the switch defaults, and the ``held/`` index of which conversations hold a
key (so a Forget of a layout entry retracts its copies where they are).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import ValidationError

from ... import bounded
from ..records import (
    COPY_RETRACTED,
    KEY_RE,
    ConversationMemory,
    Defaults,
    Entry,
    LogRecord,
    Registry,
    Source,
    now_ms,
    tail_hash,
    validate_key,
)
from .base import FileRecords, _citable

logger = logging.getLogger("sandbox_memory")


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


@functools.lru_cache(maxsize=1)
def _registry_ids_in(raw: bytes) -> tuple[str, ...]:
    """The conversation ids of a registry record's bytes (parsed once for the extractions of
    a close: the registry changes only in phase 2)."""

    try:
        doc = bounded.loads(raw, limit=bounded.MAX_STATE_BYTES, what="store/registry.json")
    except ValueError:
        doc = {}  # set aside and rebuilt where the registry is loaded in full
    found = doc.get("conversations") if isinstance(doc, dict) else None
    return tuple(str(r) for r in found) if isinstance(found, dict) else ()


class ConversationFiles(FileRecords):
    """Conversation memory, the registry, the switch defaults and the ``held/`` index."""

    async def load_registry(self) -> Registry:
        value: Registry = await self._load(f"{self.dir}/registry.json", Registry, Registry())
        return value

    async def registered_ids(self) -> list[str]:
        # Read without validating every entry the registry holds (once per content).
        raw = await self.read_state(f"{self.dir}/registry.json")
        return list(_registry_ids_in(raw)) if raw else []

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
        await self.save_conversations([memory])

    async def save_conversations(self, memories: Sequence[ConversationMemory]) -> None:
        """Every conversation's record written, waiting for the disk once for them all (a copy
        fetching thousands from a shared store), then their ``held/`` lines."""

        items: list[tuple[str, bytes]] = []
        for memory in memories:
            memory.updated_at = now_ms()
            path = self.conversation_path(memory.rollout_id)
            data = memory.model_dump_json(indent=1).encode("utf-8")
            items.append((path, self._sealed(path, data)))
        await self.write_states(items)
        for memory in memories:
            self._refused_conversations.discard(memory.rollout_id)
        await self._hold(memories)

    def conversation_refused(self, rollout_id: str) -> bool:
        return rollout_id in self._refused_conversations

    # ``held/<key>``: the conversations whose memory held an entry ``key``, one a line,
    # appended when a conversation first saves the key; ``held/.complete`` once every
    # conversation written before the index existed was indexed. A Forget of a layout entry
    # retracts its copies in those conversations, not in every conversation.

    async def _hold(self, memories: Iterable[ConversationMemory], *, every: bool = False) -> None:
        """Note in ``held/`` each conversation holding each key: one append a key, the keys in
        order. Pairs this store saved or loaded are skipped (in the index already), unless
        ``every`` (the first indexing of conversations written before the index)."""

        by_key: dict[str, list[str]] = {}
        for memory in memories:
            for key in memory.entries:
                if not KEY_RE.fullmatch(key) or (
                    not every and (memory.rollout_id, key) in self._held
                ):
                    continue
                if ".." not in key:
                    by_key.setdefault(key, []).append(memory.rollout_id)
        await self.ws.append_lines(
            [
                (self.held_path(key), "".join(f"{r}\n" for r in rids).encode())
                for key, rids in sorted(by_key.items())
            ]
        )
        for key, rids in by_key.items():
            self._held.update((rid, key) for rid in rids)

    async def conversations_holding(self, key: str) -> list[str] | None:
        if await self.ws.size(self.held_path(".complete")) is None:
            return None
        raw = await self.read_state(self.held_path(validate_key(key)))
        lines = (raw or b"").decode("utf-8", "replace").split()
        return sorted({rid for rid in lines if _citable(rid)})

    async def note_holders(self, memories: Iterable[ConversationMemory]) -> None:
        await self._hold(memories, every=True)
        await self.write_state(self.held_path(".complete"), b"")

    async def conversation_exists(self, rollout_id: str) -> bool:
        return await self.ws.size(self.conversation_path(rollout_id)) is not None
