"""Step 6 of the flow, search: a ranked index over everything memory holds.

Entry point: :class:`sandbox_memory.search.index.SearchIndex`. ``embedding`` is the seam of
the semantic ranking; ``step`` keeps the index in step with the workspace.
"""
