"""Step 3 of the flow, consolidate (phase 2): the layout memory made from its conversations.

Entry point: :func:`sandbox_memory.consolidate.step.consolidate`. ``selection`` chooses
rollouts and promotes entries; ``carryover`` takes in what the SDK's own memory left.
"""
