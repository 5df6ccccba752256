"""Edit: the specification's commands (Remember, Forget, Configure, Refresh) with versions.

A command is applied with the version the caller last saw; a stale version raises
:class:`~sandbox_memory.errors.MemoryConflict` and changes nothing. ``conversation=None``
addresses the layout memory (the specification's agent memory), a rollout id addresses that
conversation's memory (the specification's session memory).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agents.tool_context import ToolContext
from pydantic import BaseModel, Field

from .config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from .engines.base import ITEM_ID_FIELD, EntryKind
from .errors import MemoryConfigError, MemoryConflict
from .manager import LayoutRuntime
from .phase_two import secret_problem
from .rollouts import append_segment, build_segment, parse_segments, rollout_path, safe_rollout_id
from .store import (
    MAX_CONTENT_CHARS,
    ConversationMemory,
    Entry,
    LogRecord,
    Overrides,
    Source,
    now_ms,
    validate_key,
)
from .workspace import LocalWorkspace, Workspace

if TYPE_CHECKING:
    from agents.tool import Tool

    from .capability import Memory

logger = logging.getLogger("sandbox_memory")


class Remember(BaseModel):
    tag: Literal["Remember"] = Field(default="Remember", alias="_tag")
    key: str
    content: str
    kind: EntryKind = "fact"
    person: str | None = None
    """Owner of a private entry (a preference); ``None`` for shared work."""

    model_config = {"populate_by_name": True}


class Forget(BaseModel):
    tag: Literal["Forget"] = Field(default="Forget", alias="_tag")
    key: str

    model_config = {"populate_by_name": True}


class Configure(BaseModel):
    """``True``/``False`` set a switch; ``None`` removes the override; absent leaves it."""

    tag: Literal["Configure"] = Field(default="Configure", alias="_tag")
    use: bool | None = None
    generate: bool | None = None

    model_config = {"populate_by_name": True}


class Refresh(BaseModel):
    tag: Literal["Refresh"] = Field(default="Refresh", alias="_tag")

    model_config = {"populate_by_name": True}


Command = Remember | Forget | Configure | Refresh


def parse_command(data: dict[str, Any]) -> Command:
    """A command from its JSON form (``{"_tag": "Remember", ...}``)."""

    tag = data.get("_tag")
    kinds: dict[str, type[BaseModel]] = {
        "Remember": Remember,
        "Forget": Forget,
        "Configure": Configure,
        "Refresh": Refresh,
    }
    if tag not in kinds:
        raise MemoryConfigError("command._tag", tag, f"must be one of {sorted(kinds)}")
    return kinds[tag].model_validate(data)  # type: ignore[return-value]


class ConversationView(BaseModel):
    rollout_id: str
    version: int
    head: str | None
    entries: dict[str, Entry]
    processed: list[str]
    settings: dict[str, bool]
    overrides: dict[str, bool]


class LayoutView(BaseModel):
    version: int
    entries: dict[str, Entry]


def _edit(
    entries: dict[str, Entry], command: Remember | Forget, source: Source, stamp: int
) -> None:
    """A person's Remember (add, replace or revive) or Forget (retract) of one entry."""

    if isinstance(command, Remember):
        entries[command.key] = Entry(
            key=command.key,
            content=command.content.strip(),
            kind=command.kind,
            sources=[source],
            updated_at=stamp,
            person=command.person,
        )
        return
    entry = entries[command.key]
    entry.status = "retracted"
    entry.updated_at = stamp
    entry.sources = [*entry.sources, source]


class MemoryClient:
    """Read and change memory in a workspace folder or a live sandbox session.

    >>> client = MemoryClient("/path/to/workspace")
    >>> view = await client.view()                       # layout memory
    >>> await client.apply(Remember(key="budget", content="...", kind="fact"),
    ...                    expected=view.version)
    """

    def __init__(
        self,
        workspace: Workspace | Path | str,
        *,
        layout: MemoryLayoutConfig | None = None,
        read: MemoryReadConfig | None = None,
        generate: MemoryGenerateConfig | None = None,
        use_default: bool = True,
        generate_default: bool = True,
        runtime: LayoutRuntime | None = None,
    ) -> None:
        ws = workspace if isinstance(workspace, Workspace) else LocalWorkspace(Path(workspace))
        if runtime is None:
            runtime = LayoutRuntime(
                ws,
                layout=layout or MemoryLayoutConfig(),
                generate=(generate or MemoryGenerateConfig()) if generate_default else None,
                read=(read or MemoryReadConfig()) if use_default else None,
            )
        self.runtime = runtime

    @classmethod
    def for_session(cls, session: Any, memory: Memory) -> MemoryClient:
        from . import _sdk

        return cls(_sdk.workspace_for_session(session), runtime=_sdk.runtime_for(session, memory))

    @property
    def store(self) -> Any:
        return self.runtime.store

    # ------------------------------------------------------------------ views

    async def view(self, conversation: str | None = None) -> ConversationView | LayoutView:
        if conversation is None:
            layout = await self.store.load_layout()
            return LayoutView(version=layout.version, entries=layout.entries)
        return await self._conversation_view(safe_rollout_id(conversation))

    async def _conversation_view(self, rid: str) -> ConversationView:
        memory = await self.store.load_conversation(rid)
        prog = await self.store.get_progress(rid)
        offset = prog.offset if prog is not None else 0
        processed: list[str] = []
        if offset:
            data = await self.runtime.ws.read_bytes(
                rollout_path(self.runtime.layout.sessions_dir, rid)
            )
            for seg in parse_segments((data or b"")[:offset], start_offset=0).segments:
                for key in ("input", "generated_items"):
                    for item in seg.get(key) or []:
                        if isinstance(item, dict) and ITEM_ID_FIELD in item:
                            processed.append(str(item[ITEM_ID_FIELD]))
        return ConversationView(
            rollout_id=rid,
            version=memory.version,
            head=memory.head,
            entries=memory.entries,
            processed=processed,
            settings={
                "use": self.runtime.switch(memory.overrides.use, "use"),
                "generate": self.runtime.switch(memory.overrides.generate, "generate"),
            },
            overrides=memory.overrides.model_dump(exclude_none=True),
        )

    async def log(self) -> list[LogRecord]:
        records: list[LogRecord] = await self.store.read_log()
        return records

    # --------------------------------------------------------------- commands

    async def apply(
        self,
        command: Command,
        *,
        expected: int,
        conversation: str | None = None,
        cause: Literal["person", "live_update"] = "person",
    ) -> ConversationView | LayoutView:
        """Apply ``command`` if the memory is still at version ``expected``."""

        if isinstance(command, Refresh):
            return await self._refresh(conversation)
        rid = safe_rollout_id(conversation) if conversation is not None else None
        if isinstance(command, Remember):
            validate_key(command.key)
            if not command.content.strip():
                raise MemoryConfigError("content", command.content, "must not be empty")
            if len(command.content) > MAX_CONTENT_CHARS:
                raise MemoryConfigError(
                    "content", command.content[:40] + "...", f"is over {MAX_CONTENT_CHARS} chars"
                )
            problem = secret_problem(command.content, self.runtime.redactor)
            if problem:
                logger.warning("Remember of %r refused: %s", command.key, problem)
                raise MemoryConflict(f"Remember of {command.key!r} refused: {problem}")
        if isinstance(command, Forget):
            validate_key(command.key)
        rt = self.runtime
        async with rt.write_lock():
            if rid is None:
                await self._apply_layout(command, expected=expected, cause=cause)
            else:
                await self._apply_conversation(command, rid, expected=expected, cause=cause)
            await rt.consolidate_layout()
        rt.bump()
        return await self.view(rid)

    async def _apply_layout(self, command: Command, *, expected: int, cause: str) -> None:
        store = self.store
        layout = await store.load_layout()
        if layout.version != expected:
            logger.warning(
                "memory command %s rejected: layout memory is at version %d, the caller saw %d",
                type(command).__name__,
                layout.version,
                expected,
            )
            raise MemoryConflict(
                f"layout memory is at version {layout.version}, not {expected}: re-read it and "
                "retry",
                current_version=layout.version,
            )
        if isinstance(command, Configure):
            raise MemoryConflict(
                "Configure applies to a conversation: pass conversation=<rollout id>"
            )
        edit_id = f"edit-{now_ms()}"
        source = Source(conversation=cause if cause == "person" else "live", item=edit_id)
        stamp = now_ms()
        if isinstance(command, Forget) and command.key not in layout.entries:
            raise MemoryConflict(
                f"Forget: no entry with key {command.key!r} in layout memory",
                current_version=layout.version,
            )
        if isinstance(command, Remember | Forget):
            _edit(layout.entries, command, source, stamp)
        layout.version += 1
        await store.save_layout(layout)
        await store.append_log(
            LogRecord(
                version=layout.version,
                at=stamp,
                cause=cause,
                scope="layout",
                keys=[command.key] if isinstance(command, Remember | Forget) else [],
                detail=json.dumps({"command": command.model_dump(by_alias=True), "item": edit_id}),
            )
        )

    async def _apply_conversation(
        self, command: Command, rid: str, *, expected: int, cause: str
    ) -> None:
        rt = self.runtime
        store = self.store
        memory: ConversationMemory = await store.load_conversation(rid)
        if memory.version != expected:
            logger.warning(
                "memory command %s rejected: conversation %s is at version %d, the caller saw %d",
                type(command).__name__,
                rid,
                memory.version,
                expected,
            )
            raise MemoryConflict(
                f"conversation {rid} memory is at version {memory.version}, not {expected}: "
                "re-read it and retry",
                current_version=memory.version,
            )
        stamp = now_ms()
        if isinstance(command, Configure):
            changed = command.model_fields_set & {"use", "generate"}
            data = memory.overrides.model_dump()
            for name in changed:
                data[name] = getattr(command, name)
            memory.overrides = Overrides(**data)
            memory.version += 1
            await store.save_conversation(memory)
            await store.append_log(
                LogRecord(
                    version=memory.version,
                    at=stamp,
                    cause="person",
                    scope=f"conversation:{rid}",
                    keys=[],
                    detail=json.dumps({"configure": {n: data[n] for n in changed}}),
                )
            )
            return
        if isinstance(command, Forget) and (command.key not in memory.entries):
            raise MemoryConflict(
                f"Forget: no entry with key {command.key!r} in conversation {rid}",
                current_version=memory.version,
            )
        # The edit becomes a small item of the conversation's history: the change's source.
        path = rollout_path(rt.layout.sessions_dir, rid)
        size_before = await rt.ws.size(path) or 0
        prog = await store.get_progress(rid)
        offset = prog.offset if prog is not None else 0
        segment = build_segment(
            {
                "input": [{"type": "memory_edit", "command": command.model_dump(by_alias=True)}],
                "generated_items": [],
                "terminal_metadata": {"terminal_state": "completed", "has_final_output": False},
            },
            rollout_id=rid,
            person=getattr(command, "person", None),
            redactor=rt.redactor,
        )
        await append_segment(
            rt.ws, sessions_dir=rt.layout.sessions_dir, rollout_id=rid, segment=segment
        )
        item_id = str(segment["input"][0][ITEM_ID_FIELD])
        if offset == size_before:
            new_size = await rt.ws.size(path) or 0

            def advance(p: Any) -> None:
                p.offset = new_size

            await rt.update_progress(rid, advance)
        source = Source(conversation=rid, item=item_id)
        assert isinstance(command, Remember | Forget)
        _edit(memory.entries, command, source, stamp)
        memory.version += 1
        memory.head = item_id
        await store.save_conversation(memory)
        await store.append_log(
            LogRecord(
                version=memory.version,
                at=stamp,
                cause=cause,
                scope=f"conversation:{rid}",
                keys=[command.key],
            )
        )
        if isinstance(command, Remember):

            def unconsolidate(p: Any) -> None:
                p.consolidated = False
                if p.slug is None:
                    p.slug = "edits"
                    p.updated_at = str(segment["updated_at"])

            await rt.update_progress(rid, unconsolidate)

    async def _refresh(self, conversation: str | None) -> ConversationView | LayoutView:
        rt = self.runtime
        if conversation is None:
            await rt.close()
            return await self.view(None)
        rid = safe_rollout_id(conversation)
        memory = await self.store.load_conversation(rid)
        if not rt.switch(memory.overrides.generate, "generate"):
            return await self.view(rid)

        def retry(p: Any) -> None:
            if p.status == "failed":
                p.status = "retrying"
                p.attempts = 0
            p.next_attempt_at = 0.0

        await rt.update_progress(rid, retry)
        await self.store.mark_pending(rid)
        await rt.close(only=[rid])
        return await self.view(rid)


def live_update_tools(memory: Memory) -> list[Tool]:
    """Agent tools to remember and forget during a run, through the same rules and versions."""

    from agents.tool import function_tool

    from . import _sdk

    def client() -> MemoryClient:
        assert memory.session is not None
        return MemoryClient.for_session(memory.session, memory)

    @function_tool(name_override="memory_remember")
    async def memory_remember(ctx: ToolContext[Any], key: str, content: str, kind: str) -> str:
        """Save or correct a durable memory entry for future runs.

        Args:
            key: stable lowercase slug naming the fact (reuse the key to correct a fact).
            content: the fact in plain text, one or two sentences.
            kind: fact, decision, procedure or hypothesis.
        """
        if kind not in ("fact", "decision", "procedure", "hypothesis"):
            return (
                f"refused: kind {kind!r} is not allowed here (preferences are learned from the "
                "user's own words at the end of the run)"
            )
        c = client()
        view = await c.view(None)
        try:
            await c.apply(
                Remember(key=key, content=content, kind=kind),
                expected=view.version,
                cause="live_update",
            )
        except (MemoryConflict, MemoryConfigError) as exc:
            return f"refused: {exc}"
        _ = _sdk
        return f"remembered {key!r} (call {ctx.tool_call_id})"

    @function_tool(name_override="memory_forget")
    async def memory_forget(ctx: ToolContext[Any], key: str) -> str:
        """Retract a memory entry that turned out to be wrong or stale.

        Args:
            key: the key of the entry, as shown in MEMORY.md.
        """
        c = client()
        view = await c.view(None)
        try:
            await c.apply(Forget(key=key), expected=view.version, cause="live_update")
        except (MemoryConflict, MemoryConfigError) as exc:
            return f"refused: {exc}"
        return f"retracted {key!r} (call {ctx.tool_call_id})"

    return [memory_remember, memory_forget]
