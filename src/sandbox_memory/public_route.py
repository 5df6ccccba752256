"""The public-API route: record a run yourself, for code paths the automatic one cannot see.

Use it when you drive a model outside ``Runner.run`` with a sandbox, or on an SDK version the
bridge in ``_sdk.py`` does not support::

    result = await Runner.run(agent, "...", run_config=run_config)
    await record_run(sandbox, result, memory=memory, conversation_id="ticket-42")
"""

from __future__ import annotations

from typing import Any

from .capability import Memory


async def record_run(
    session: Any,
    result: Any,
    *,
    memory: Memory,
    conversation_id: str,
    exception: BaseException | None = None,
) -> str:
    """Record ``result`` (a ``RunResult``) as a segment of ``conversation_id``; return the id.

    Only public SDK attributes of the result are read (``input``, ``new_items``,
    ``final_output``). Generation happens at the session's close as usual when the capability
    is bound, or on ``MemoryClient(...).apply(Refresh(), ...)``.
    """

    from agents.items import ItemHelpers

    from . import _sdk

    runtime = _sdk.runtime_for(session, memory)
    items: list[Any] = []
    for item in getattr(result, "new_items", []):
        raw = item.to_input_item() if hasattr(item, "to_input_item") else item
        if isinstance(raw, dict) and raw.get("type") != "reasoning":
            items.append(raw)
    final = getattr(result, "final_output", None)
    payload = {
        "input": ItemHelpers.input_to_new_input_list(result.input),
        "generated_items": items,
        "final_output": final if isinstance(final, str | int | float | None) else str(final),
        "terminal_metadata": {
            "terminal_state": "completed" if exception is None else "failed",
            "has_final_output": final is not None,
            **({"exception_type": type(exception).__name__} if exception else {}),
        },
    }
    rid: str = await runtime.record(payload, rollout_id=conversation_id, person=memory.person)
    return rid
