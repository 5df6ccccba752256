"""Step 1 of the flow, record: each run's segment appended to its conversation's rollout.

Entry point: :func:`sandbox_memory.record.step.record_run`. ``segments`` is the file format
of ``sessions/``, ``offload`` records a huge segment in a child process, ``adopt`` seals
runs a person vouches for.
"""
