"""Step 5 of the flow, edit: what a person or the agent changes in memory.

Entry point: :class:`sandbox_memory.edit.commands.MemoryClient` (Remember, Forget,
Configure, Refresh); ``live_edits`` takes in edits of ``MEMORY.md``; ``forgetting`` and
``copies`` carry a change into the text derived from it.
"""
