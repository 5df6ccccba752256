"""How long recording one run with a huge tool output blocks the event loop, and its memory.

``python bench/record_stall.py [MB ...]`` records one run whose tool output is MB megabytes
through ``LayoutRuntime.record`` (redaction, encoding, append) into a temporary workspace while
a ticker task measures the longest gap between its 1 ms ticks. The runtime first records a
small run (loading the redactor is a one-time cost, not the stall measured here). Peak memory
of this process is traced with ``tracemalloc`` in a second record of the same run (tracing
slows every allocation, so it is kept out of the timed one); a segment over
``OFFLOAD_CHARS`` is redacted in a child process, whose memory it does not see. Prints one
line of figures per size.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import tracemalloc

from sandbox_memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.workspace import LocalWorkspace


async def measure(megabytes: int) -> dict[str, float]:
    line = "2026-01-01 12:00:00 INFO worker processed item 123456 in 4 ms status=ok\n"
    output = line * (megabytes * (1 << 20) // len(line))
    payload = {
        "input": [{"role": "user", "content": "Run the job and show its log."}],
        "generated_items": [
            {"type": "function_call", "name": "exec_command", "call_id": "c", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": output},
        ],
        "final_output": "Done.",
    }
    with tempfile.TemporaryDirectory() as root:
        rt = LayoutRuntime(
            LocalWorkspace(root),
            layout=MemoryLayoutConfig(),
            generate=MemoryGenerateConfig(engine="offline"),
            read=MemoryReadConfig(),
        )
        worst = 0.0
        done = False

        async def ticker() -> None:
            nonlocal worst
            last = time.perf_counter()
            while not done:
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now

        await rt.record({"input": "warm up", "generated_items": []}, rollout_id="warm")
        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        started = time.perf_counter()
        await rt.record(payload, rollout_id="big")
        took = time.perf_counter() - started
        done = True
        await tick
        tracemalloc.start()
        await rt.record(payload, rollout_id="big")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {
        "mb": megabytes,
        "record_s": round(took, 2),
        "max_stall_ms": round(worst * 1000, 1),
        "peak_mb": round(peak / (1 << 20), 1),
    }


def main() -> None:
    for size in [int(a) for a in sys.argv[1:]] or [20]:
        print(asyncio.run(measure(size)), flush=True)


if __name__ == "__main__":
    main()
