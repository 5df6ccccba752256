"""Step 5 of the flow, edit: a change to memory carried where it must go.

``live_edits`` takes in edits of ``MEMORY.md``; ``forgetting`` and ``copies`` carry a change
into the text derived from it. The commands a person or the agent gives (Remember, Forget,
Configure, Refresh) come through :class:`sandbox_memory.commands.MemoryClient`, the door over
the runtime that builds these steps.
"""
