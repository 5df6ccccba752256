"""Agent tools: search memory, and (live update) remember and forget during a run.

Remember and forget go through the same commands as Python and the CLI; search through the
layout's index (``search/index/``). Kept apart from ``commands/`` and ``search/index/`` because they
need the SDK's tool machinery and the SDK bridge, which the command line's read paths must not
import (it costs about a second at start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.tool import Tool, function_tool
from agents.tool_context import ToolContext

from . import _sdk
from .commands import Forget, MemoryClient, Remember
from .errors import MemoryConfigError, MemoryConflict
from .search.index import DEFAULT_LIMIT, SEARCH_TOOL_NAME, format_hits

if TYPE_CHECKING:
    from .typing import MemoryCapability


def search_tool(memory: MemoryCapability) -> Tool:
    """The ``memory_search`` agent tool: ranked search over this layout's memory."""

    @function_tool(name_override=SEARCH_TOOL_NAME)
    async def memory_search(query: str, limit: int = DEFAULT_LIMIT) -> str:
        """Search memory of earlier runs (entries, rollout summaries and recorded messages and
        tool results); best matches first, each with where it comes from.

        Args:
            query: a few keywords (names, error messages, commands, file names).
            limit: how many hits to return (1-20).
        """
        assert memory.session is not None
        runtime = _sdk.runtime_for(memory.session, memory)
        person = _sdk.current_person.get() or memory.person
        try:
            hits = await runtime.search_index.search(
                query, limit=max(1, min(limit, 20)), person=person
            )
        except MemoryConfigError as exc:
            return f"refused: {exc}"
        return format_hits(hits)

    return memory_search


def live_update_tools(memory: MemoryCapability) -> list[Tool]:
    """Agent tools to remember and forget during a run, through the same rules and versions."""

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
        try:
            view = await c.view(None)
            await c.apply(
                Remember(key=key, content=content, kind=kind),
                expected=view.version,
                cause="live_update",
            )
        except (MemoryConflict, MemoryConfigError) as exc:
            return f"refused: {exc}"
        return f"remembered {key!r} (call {ctx.tool_call_id})"

    @function_tool(name_override="memory_forget")
    async def memory_forget(ctx: ToolContext[Any], key: str) -> str:
        """Retract a memory entry that turned out to be wrong or stale.

        Args:
            key: the key of the entry, as shown in MEMORY.md.
        """
        c = client()
        assert memory.session is not None
        here = await memory.current_conversation()
        try:
            scopes = await c.holders(key, conversation=here)
            if not scopes:
                raise MemoryConflict(f"Forget: no active entry with key {key!r} in memory")
            while scopes:  # one Forget can retract copies elsewhere: look again after each
                view = await c.view(scopes[0])
                await c.apply(
                    Forget(key=key),
                    expected=view.version,
                    conversation=scopes[0],
                    cause="live_update",
                )
                left = await c.holders(key, conversation=here)
                scopes = [s for s in left if s != scopes[0]]
        except (MemoryConflict, MemoryConfigError) as exc:
            return f"refused: {exc}"
        return f"retracted {key!r} (call {ctx.tool_call_id})"

    return [memory_remember, memory_forget]
