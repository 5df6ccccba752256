"""Step 2 of the flow, extract (phase 1): what each conversation's new segments teach.

Entry point: :func:`sandbox_memory.extract.step.extract_all`. ``rollout`` extracts one
rollout through an engine (``sandbox_memory.engines``); ``engine`` picks which engine runs.
"""
