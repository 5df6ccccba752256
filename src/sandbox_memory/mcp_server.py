"""The MCP server: memory as tools for any MCP client (``sandbox-memory mcp``).

Serves one memory (a workspace folder, or a namespace of the shared PostgreSQL store) over
stdio with the official MCP Python SDK (the ``mcp`` package, extra ``sandbox-memory[mcp]``).
Every tool goes through :class:`~sandbox_memory.commands.MemoryClient`, the layer the command
line and the agent tools use, so its rules hold here unchanged: version checks
(:meth:`~sandbox_memory.commands.MemoryClient.apply`), refusal of secrets and access links,
privacy (:func:`~sandbox_memory.commands.visible_to`,
:meth:`~sandbox_memory.commands.MemoryClient.apply_for`), search's own filters.

- **Read-only unless started with writes allowed.** Without ``--allow-writes`` the write tools
  are not listed at all: a client cannot call what it does not see.
- **The person is the server's.** ``--person`` says whom the server acts for; no tool takes a
  person. Another person's private entries do not exist for it (views, ``get``, the log,
  search, Forget, Remember's keys); ``private=true`` on Remember makes the entry the server's
  person's.
- **Writes are an agent's edits.** The caller is a model acting for someone, not the person's
  own words: changes are logged with cause ``live_update`` and may not make a ``preference``
  (as the agent's own ``memory_remember`` tool).
- **A stale version is a tool error** saying the version memory is at; re-read and retry.

Tool results are JSON objects (the MCP result's structured content, and its text).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import version
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from . import bounded
from .commands import (
    Configure,
    ConversationView,
    Forget,
    LayoutView,
    MemoryClient,
    Remember,
)
from .errors import (
    MemoryConfigError,
    MemoryConflict,
    MemoryStoreUnavailable,
    SandboxMemoryError,
)
from .search.index import DEFAULT_LIMIT, MAX_LIMIT
from .stores.records import MAX_CONTENT_CHARS, Entry, LogRecord

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

logger = logging.getLogger("sandbox_memory")

SERVER_NAME = "sandbox-memory"

READ_TOOLS = ("memory_search", "memory_show", "memory_get", "memory_log", "memory_conversations")
WRITE_TOOLS = ("memory_remember", "memory_forget", "memory_configure")

LOG_LIMIT = 50
"""Log records ``memory_log`` returns unless asked for more (newest last): a model reads the
recent changes, not a history of thousands."""

MAX_LOG_LIMIT = 1_000
"""The most ``memory_log`` returns in one call."""

Conversation = Annotated[
    str | None,
    Field(
        description="Rollout id of a conversation (see memory_conversations); omit for the "
        "layout memory every conversation shares."
    ),
]
Expected = Annotated[
    int,
    Field(
        description="The memory's version you last read (memory_show or memory_get); a stale "
        "one is refused with the current version, nothing changes."
    ),
]
Switch = Annotated[
    Literal["on", "off", "default"] | None,
    Field(description="on or off; default drops the conversation's override; omit to keep it."),
]


def _import_mcp() -> type[MCPServer]:
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:  # the extra is missing, or an mcp before 2.0
        raise MemoryConfigError(
            "mcp",
            getattr(exc, "name", None),
            "the MCP server needs the official MCP Python SDK 2.x: "
            "pip install 'sandbox-memory[mcp]'",
        ) from exc
    return MCPServer


def _tool_error(exc: SandboxMemoryError) -> Exception:
    """The MCP tool error for a memory error: what was wrong, and the version to retry at."""

    from mcp.server.mcpserver.exceptions import ToolError

    if isinstance(exc, MemoryConflict):
        current = (
            f" (current version: {exc.current_version})" if exc.current_version is not None else ""
        )
        return ToolError(f"conflict: {exc}{current}")
    if isinstance(exc, MemoryStoreUnavailable):
        return ToolError(f"unavailable: {exc}")
    return ToolError(f"refused: {exc}")


def _entry(entry: Entry) -> dict[str, Any]:
    data = entry.model_dump(exclude={"keywords"})
    data["private"] = data.pop("person") is not None  # whose: the server's person, or shared
    return data


def _view(view: ConversationView | LayoutView, kind: str | None = None) -> dict[str, Any]:
    entries = [
        _entry(e)
        for e in sorted(view.entries.values(), key=lambda e: e.updated_at, reverse=True)
        if kind is None or e.kind == kind
    ]
    out: dict[str, Any] = {"version": view.version, "entries": entries}
    if isinstance(view, ConversationView):
        out.update(
            conversation=view.rollout_id,
            settings=view.settings,
            overrides=view.overrides,
            processed_items=len(view.processed),
        )
    else:
        out["conversation"] = None
    return out


def _record(record: LogRecord) -> dict[str, Any]:
    data = record.model_dump()
    if record.detail:
        try:
            data["detail"] = bounded.loads(
                record.detail, limit=bounded.MAX_FIELD_BYTES, what="a log detail"
            )
        except ValueError:
            pass  # prose stays prose
    return data


def build_server(
    client: MemoryClient, *, person: str | None = None, allow_writes: bool = False
) -> MCPServer:
    """An MCP server over ``client``'s memory, acting for ``person`` (``None``: shared memory
    only); the write tools are there only with ``allow_writes``."""

    server_cls = _import_mcp()
    from mcp.types import ToolAnnotations

    who = f" for {person}" if person else ""
    mode = "read and write" if allow_writes else "read-only"
    server = server_cls(
        SERVER_NAME,
        version=version("sandbox-memory"),
        instructions=(
            f"Memory of earlier agent runs ({mode}{who}): lessons as keyed entries with sources. "
            "Search it before repeating past work; entries are past evidence, current "
            "instructions win."
            + (
                " To change memory read its version first (memory_show or memory_get) and pass "
                "it as expected_version; a stale version is refused."
                if allow_writes
                else ""
            )
        ),
        log_level="WARNING",
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    for tool in _read_tools(client, person):
        server.add_tool(tool, annotations=read_only)
    if not allow_writes:
        return server
    write = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
    for tool in _write_tools(client, person):
        server.add_tool(tool, annotations=write)
    return server


def _read_tools(client: MemoryClient, person: str | None) -> list[Callable[..., Any]]:
    """The read tools (search, show, get, log, conversations), acting for ``person``."""

    async def memory_search(
        query: Annotated[
            str, Field(description="A few keywords: names, error messages, commands, files.")
        ],
        conversation: Conversation = None,
        limit: Annotated[int, Field(description=f"How many hits (1-{MAX_LIMIT}).")] = DEFAULT_LIMIT,
    ) -> dict[str, Any]:
        """Ranked search over memory: entries, rollout summaries and the recorded messages and
        tool results of earlier runs, best first, each with its sources and the file it is in."""

        try:
            hits = await client.search(query, conversation=conversation, limit=limit, person=person)
        except SandboxMemoryError as exc:
            raise _tool_error(exc) from exc
        return {"hits": [h.model_dump() for h in hits]}

    async def memory_show(
        conversation: Conversation = None,
        kind: Annotated[
            Literal["fact", "decision", "preference", "procedure", "hypothesis"] | None,
            Field(description="Only entries of this kind."),
        ] = None,
    ) -> dict[str, Any]:
        """The entries of layout memory or of one conversation (active and retracted, newest
        first), with the version to pass to a change and, for a conversation, its switches."""

        try:
            view = await client.view_for(conversation, person=person)
        except SandboxMemoryError as exc:
            raise _tool_error(exc) from exc
        return _view(view, kind)

    async def memory_get(
        key: Annotated[str, Field(description="The entry's key.")],
        conversation: Conversation = None,
    ) -> dict[str, Any]:
        """One entry with its sources and its history (the log records that changed it), and
        the version to pass to a change."""

        try:
            view = await client.view_for(conversation, person=person)
            entry = view.entries.get(key)
            if entry is None:
                where = "layout memory" if conversation is None else f"conversation {conversation}"
                raise MemoryConfigError("key", key, f"is not an entry of {where}")
            scope = (
                f"conversation:{view.rollout_id}"
                if isinstance(view, ConversationView)
                else "layout"
            )
            history = [
                _record(r)
                for r in await client.log_for(person=person)
                if r.scope == scope and key in r.keys
            ]
        except SandboxMemoryError as exc:
            raise _tool_error(exc) from exc
        return {"version": view.version, "entry": _entry(entry), "history": history}

    async def memory_log(
        conversation: Conversation = None,
        key: Annotated[str | None, Field(description="Only changes of this key.")] = None,
        limit: Annotated[
            int, Field(description=f"The newest this many records (1-{MAX_LOG_LIMIT}).")
        ] = LOG_LIMIT,
    ) -> dict[str, Any]:
        """Changes to memory, oldest first: version, time (ms), cause (consolidation, person,
        promotion, live_update, forgetting), scope, keys and what changed."""

        if not 1 <= limit <= MAX_LOG_LIMIT:
            raise _tool_error(
                MemoryConfigError("limit", limit, f"must be from 1 to {MAX_LOG_LIMIT}")
            )
        try:
            records = await client.log_for(person=person)
            if conversation is not None:
                await client.require(conversation)
        except SandboxMemoryError as exc:
            raise _tool_error(exc) from exc
        if conversation is not None:
            from .stores.segments import safe_rollout_id

            scope = f"conversation:{safe_rollout_id(conversation)}"
            records = [r for r in records if r.scope == scope]
        if key is not None:
            records = [r for r in records if key in r.keys]
        return {"records": [_record(r) for r in records[-limit:]]}

    async def memory_conversations() -> dict[str, Any]:
        """Every conversation with memory or recorded runs, most recently updated first."""

        try:
            found = await client.conversations()
        except SandboxMemoryError as exc:
            raise _tool_error(exc) from exc
        return {"conversations": [c.model_dump() for c in found]}

    return [memory_search, memory_show, memory_get, memory_log, memory_conversations]


def _write_tools(client: MemoryClient, person: str | None) -> list[Callable[..., Any]]:
    """The write tools (remember, forget, configure), acting for ``person``: each applies a
    command with the version its caller read."""

    async def memory_remember(
        key: Annotated[
            str, Field(description="A stable lowercase slug naming the fact; reuse it to correct.")
        ],
        content: Annotated[
            str,
            Field(description=f"The fact in plain text (at most {MAX_CONTENT_CHARS} characters)."),
        ],
        expected_version: Expected,
        kind: Annotated[
            Literal["fact", "decision", "procedure", "hypothesis"],
            Field(description="What it is (preferences are learned from the person's words)."),
        ] = "fact",
        conversation: Conversation = None,
        private: Annotated[
            bool, Field(description="Only for the person this server acts for.")
        ] = False,
    ) -> dict[str, Any]:
        """Add an entry, or replace (or revive) the entry with this key, if memory is still at
        expected_version. Secrets and access links are refused. Returns the new view."""

        if private and person is None:
            raise _tool_error(
                MemoryConfigError(
                    "private", private, "needs a person: start the server with --person"
                )
            )
        command = Remember(key=key, content=content, kind=kind, person=person if private else None)
        return await _apply(command, expected_version, conversation)

    async def memory_forget(
        key: Annotated[str, Field(description="The key of the entry to retract.")],
        expected_version: Expected,
        conversation: Conversation = None,
    ) -> dict[str, Any]:
        """Retract the entry with this key (it stays in the log; a later Remember revives it),
        if memory is still at expected_version. Returns the new view."""

        return await _apply(Forget(key=key), expected_version, conversation)

    async def memory_configure(
        conversation: Annotated[str, Field(description="Rollout id of the conversation.")],
        expected_version: Expected,
        use: Switch = None,
        generate: Switch = None,
    ) -> dict[str, Any]:
        """Switch a conversation's memory: use (its memory injected into its runs) and
        generate (learning from its runs). Returns the new view."""

        fields: dict[str, bool | None] = {}
        for name, value in (("use", use), ("generate", generate)):
            if value is not None:
                fields[name] = None if value == "default" else value == "on"
        if not fields:
            raise _tool_error(
                MemoryConfigError("use/generate", None, "give at least one of use and generate")
            )
        return await _apply(Configure(**fields), expected_version, conversation)

    async def _apply(
        command: Remember | Forget | Configure, expected: int, conversation: str | None
    ) -> dict[str, Any]:
        try:
            await client.apply_for(
                command, person=person, expected=expected, conversation=conversation
            )
            view = await client.view_for(conversation, person=person)
        except SandboxMemoryError as exc:
            raise _tool_error(exc) from exc
        return _view(view)

    return [memory_remember, memory_forget, memory_configure]


async def serve_stdio(
    client: MemoryClient, *, person: str | None = None, allow_writes: bool = False
) -> None:
    """Check that ``client`` holds memory (a clear error, before any client connects), then
    serve it over stdin and stdout until the client closes them."""

    server = build_server(client, person=person, allow_writes=allow_writes)
    await client.require()
    logger.info(
        "sandbox-memory MCP server on %s (%s)",
        client.where(),
        "read and write" if allow_writes else "read-only",
    )
    await server.run_stdio_async()
