"""Step 4 of the flow, render: the files a user and the agent read, and the run's prompt.

Entry point: :func:`sandbox_memory.render.files.step.render`. ``files`` renders ``MEMORY.md``,
``memory_summary.md`` and skills; ``relevant`` the prompt's section relevant to the task.
"""
