"""close latency: wall time to close a sandbox holding 8 new rollouts, at 500 ms per model call.

One real ``UnixLocalSandboxClient`` session per system. Eight runs of eight conversations arrive
back to back through the manager the SDK runtime would use (``enqueue_rollout_payload``, as
``Runner.run`` does after each run), then the sandbox is closed (``async with`` exit, which runs
the memory pre-stop hook). The time from the start of the close to its end is measured. Every
memory-model call sleeps 500 ms; the runs themselves take no time, which is the worst case for a
system that works in the background between runs (nothing has finished when the close starts).
"""

from __future__ import annotations

import time
from typing import Any

from agents.sandbox import Manifest
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from common import Progress, Row, make_memory, manager_for, temp_root
from workload import conversation_id, segment_payload

ROLLOUTS = 8


async def close_time(system: str, latency: float, rollouts: int) -> tuple[float, int]:
    memories = make_memory(system, latency=latency)
    with temp_root(f"close-{system}") as root:
        session = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
        start = 0.0
        async with session:
            manager = manager_for(session, memories)
            for k in range(rollouts):
                await manager.enqueue_rollout_payload(
                    segment_payload(k, 0), rollout_id=conversation_id(k)
                )
            start = time.perf_counter()
        elapsed = time.perf_counter() - start
    return elapsed, memories.calls


async def run(latency: float, progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    results: dict[str, tuple[float, int]] = {}
    for system in ("ours", "builtin"):
        results[system] = await close_time(system, latency, ROLLOUTS)
        progress(f"close latency: {system} {results[system][0]:.2f}s")
    o, b = results["ours"][0], results["builtin"][0]
    row = Row(
        name="close_latency",
        metric=f"wall time to close a sandbox with {ROLLOUTS} new rollouts, {latency * 1000:.0f} ms per model call",
        unit="s",
        ours=o,
        builtin=b,
        target="ours <= 0.3x built-in",
        met=o <= 0.3 * b,
        note=f"model calls: ours {results['ours'][1]}, built-in {results['builtin'][1]}",
    )
    return [row], {"calls": {k: v[1] for k, v in results.items()}}
