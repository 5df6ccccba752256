"""How long recording one run with a huge tool output blocks the event loop, and its memory.

``python bench/record_stall.py [MB ...]`` records one run whose tool output is MB megabytes
through ``LayoutRuntime.record`` (redaction, encoding, append) into a temporary workspace while
a ticker task measures the longest gap between its 1 ms ticks, also less the time the loop's
thread waited for a CPU in that gap (Linux ``schedstat``: on a loaded machine the thread is
often runnable but not running, which no code of this process can change). The runtime first records a
small run (loading the redactor and starting the child process are one-time costs, not the
stall measured here). Then the same ticker runs as long again with nothing else to do: its
longest gap is what the machine itself costs (other processes on the cores), the floor under
the first figure. Memory: the growth of this process' peak RSS (``VmHWM``, reset through
``/proc/self/clear_refs`` before the record) over its RSS with the payload built, and the peak
RSS of the child process that redacts and encodes a segment over ``OFFLOAD_CHARS``. Also the
largest single step of the hand-over that holds the GIL (a slice encoded, a pickle frame),
counted in bytes. Prints one line of figures per size.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable
from typing import Any

from sandbox_memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandbox_memory.record import offload
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.workspace import LocalWorkspace


def status_kib(field: str, pid: int | str = "self") -> int:
    """A ``VmRSS``/``VmHWM`` figure of ``/proc/<pid>/status``, in KiB (0 where absent)."""

    try:
        with open(f"/proc/{pid}/status") as fh:
            for row in fh:
                if row.startswith(field + ":"):
                    return int(row.split()[1])
    except OSError:
        pass
    return 0


def reset_peak(pid: int | str = "self") -> None:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def cpu_wait_ns() -> int:
    """Time this thread has spent runnable but waiting for a CPU (``schedstat``), in ns."""

    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as fh:
            return int(fh.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


async def longest_gap(work: Awaitable[Any]) -> tuple[float, float]:
    """The longest gap between a 1 ms ticker's ticks while ``work`` runs, and the longest
    once the time the loop's thread waited for a CPU (other processes, the child, the append's
    thread in the kernel) is taken off each gap: what is left is waiting for the GIL, or work
    on the loop itself."""

    worst = worst_own = 0.0
    done = False

    async def ticker() -> None:
        nonlocal worst, worst_own
        last, waited = time.perf_counter(), cpu_wait_ns()
        while not done:
            await asyncio.sleep(0.001)
            now, now_waited = time.perf_counter(), cpu_wait_ns()
            worst = max(worst, now - last)
            worst_own = max(worst_own, now - last - (now_waited - waited) / 1e9)
            last, waited = now, now_waited

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    try:
        await work
    finally:
        done = True
        await tick
    return worst, worst_own


class StepCount:
    """Wraps the child's request pipe: the largest single write the hand-over makes (each is
    one GIL-holding step's output: a slice encoded, a pickle frame, a header)."""

    def __init__(self) -> None:
        self.largest = 0
        self._start = offload._child._start

    def install(self) -> None:
        def start() -> Any:
            proc = self._start()
            stream = proc.stdin
            if stream is not None and not hasattr(stream, "counted"):
                write = stream.write

                def counted(data: Any) -> int:
                    self.largest = max(self.largest, len(memoryview(data).cast("B")))
                    return write(data)

                stream.write = counted  # type: ignore[method-assign]
                stream.counted = True  # type: ignore[attr-defined]
            return proc

        offload._child._start = start  # type: ignore[method-assign]


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
    steps = STEPS
    with tempfile.TemporaryDirectory() as root:
        rt = LayoutRuntime(
            LocalWorkspace(root),
            layout=MemoryLayoutConfig(),
            generate=MemoryGenerateConfig(engine="offline"),
            read=MemoryReadConfig(),
        )
        await rt.record({"input": "warm up", "generated_items": []}, rollout_id="warm")
        # Starts the child (a one-time cost) with a payload just over the threshold.
        await rt.record({"input": "x" * (offload.OFFLOAD_CHARS + 1)}, rollout_id="warm")
        child = offload._child._proc
        child_pid = child.pid if child is not None else None
        steps.largest = 0
        rss_before = status_kib("VmRSS")
        reset_peak()
        if child_pid is not None:
            reset_peak(child_pid)
        started = time.perf_counter()
        worst, own = await longest_gap(rt.record(payload, rollout_id="big"))
        took = time.perf_counter() - started
        grown = status_kib("VmHWM") - rss_before
        child_peak = status_kib("VmHWM", child_pid) if child_pid is not None else 0
        idle, idle_own = await longest_gap(asyncio.sleep(took))
    return {
        "mb": megabytes,
        "record_s": round(took, 2),
        "max_stall_ms": round(worst * 1000, 1),
        "less_cpu_wait_ms": round(own * 1000, 1),
        "idle_stall_ms": round(idle * 1000, 1),
        "idle_less_cpu_wait_ms": round(idle_own * 1000, 1),
        "largest_step_kib": round(steps.largest / 1024, 1),
        "rss_growth_mb": round(grown / 1024, 1),
        "child_peak_rss_mb": round(child_peak / 1024, 1),
    }


STEPS = StepCount()


def main() -> None:
    STEPS.install()
    for size in [int(a) for a in sys.argv[1:]] or [20]:
        print(asyncio.run(measure(size)), flush=True)


if __name__ == "__main__":
    main()
