"""Agent tools for live update: remember and forget during a run, through the same commands.

Kept apart from ``commands.py`` because it needs the SDK's tool machinery, which the command
line's read paths must not import (it costs about a second at start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.tool import Tool, function_tool
from agents.tool_context import ToolContext

from .commands import Forget, MemoryClient, Remember
from .errors import MemoryConfigError, MemoryConflict

if TYPE_CHECKING:
    from .capability import Memory


def live_update_tools(memory: Memory) -> list[Tool]:
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
        view = await c.view(None)
        try:
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
