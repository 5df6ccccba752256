"""record: time to append the Nth run segment of one conversation.

Each system records through its own append path on its own real ``UnixLocalSandboxClient``
session (two temp folders on the same disk):

- ours: ``LayoutRuntime.record`` over the workspace the session manager uses (the local-folder
  fast path for UnixLocal): redact, add item ids, append one JSONL line;
- built-in: ``SandboxMemoryGenerationManager.enqueue_rollout_payload``: ensure the layout, read
  the whole rollout file, write it back with the new line.

A raw append of the bytes ours wrote (``os.open(O_APPEND)`` + ``write``) to a third file with
the same history is the floor. The three series run one after the other (interleaving them let
the built-in's multi-megabyte rewrites evict ours' working set and slowed ours' next append by
up to 2x). N=1 is the median of the first append of eleven fresh conversations; N>1 is the
median of the eleven appends around N of one conversation.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from typing import Any

from agents.sandbox.memory.manager import SandboxMemoryGenerationManager
from common import Progress, Row, make_memory, median, sandbox, temp_root
from workload import conversation_id, segment_payload

from sandbox_memory import _sdk
from sandbox_memory.manager import LayoutRuntime
from sandbox_memory.rollouts import build_segment

WINDOW = 5
FIRST_APPEND_SAMPLES = 11
WARMUP = 3


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (the built-in's ``test -f``)."""

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class Samples:
    """Wall and CPU seconds of a series of appends."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def add(self, wall: float, cpu: float) -> None:
        self.wall.append(wall)
        self.cpu.append(cpu)


def _raw_append(path: Path, data: bytes, into: Samples) -> None:
    cpu, start = _cpu(), time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    into.add(time.perf_counter() - start, _cpu() - cpu)


def _tail_bytes(path: Path, offset: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return fh.read()


async def run(sizes: list[int], progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    top = max(sizes)
    total = top + WINDOW
    payloads = [segment_payload(0, i) for i in range(total)]
    series = {k: Samples() for k in ("ours", "builtin", "raw")}
    write_only: list[float] = []
    first = {k: Samples() for k in ("ours", "builtin", "raw")}
    redact_us: list[float] = []

    with temp_root("record-ours") as root_ours, temp_root("record-builtin") as root_builtin:
        async with sandbox(root_ours) as s_ours, sandbox(root_builtin) as s_builtin:
            ours = make_memory("ours")
            builtin = make_memory("builtin")
            cap = ours.capability
            runtime = LayoutRuntime(
                _sdk.workspace_for_session(s_ours),
                layout=cap.layout,
                generate=cap.generate,
                read=cap.read,
            )
            manager = SandboxMemoryGenerationManager(session=s_builtin, memory=builtin.capability)
            sessions_ours = root_ours / cap.layout.sessions_dir
            raw_dir = root_ours / "raw-append"
            raw_dir.mkdir()

            async def append(kind: str, payload: dict[str, Any], rid: str, into: Samples) -> None:
                cpu, start = _cpu(), time.perf_counter()
                if kind == "ours":
                    await runtime.record(payload, rollout_id=rid)
                else:
                    await manager.enqueue_rollout_payload(payload, rollout_id=rid)
                into.add(time.perf_counter() - start, _cpu() - cpu)

            # Warm-up (not measured): first calls import and compile lazily.
            for k in range(WARMUP):
                for kind in ("ours", "builtin"):
                    await append(kind, segment_payload(80_000, k), "warm-up", Samples())

            # N = 1: the first append of fresh conversations.
            fresh = [
                (conversation_id(90_000 + k), segment_payload(90_000 + k, 0))
                for k in range(FIRST_APPEND_SAMPLES)
            ]
            for rid, payload in fresh:
                await append("ours", payload, rid, first["ours"])
            for rid, payload in fresh:
                await append("builtin", payload, rid, first["builtin"])
            for rid, _ in fresh:
                line = _tail_bytes(sessions_ours / f"{rid}.jsonl", 0)
                _raw_append(raw_dir / f"{rid}.jsonl", line, first["raw"])

            # N > 1: one conversation, every append timed; one system after the other, so the
            # built-in's whole-file rewrites do not evict ours' working set between appends.
            rid = conversation_id(0)
            path_ours = sessions_ours / f"{rid}.jsonl"
            lines: list[bytes] = []
            for payload in payloads:
                before = path_ours.stat().st_size if path_ours.exists() else 0
                await append("ours", payload, rid, series["ours"])
                lines.append(_tail_bytes(path_ours, before))
            progress(f"record: ours {total} appends done")
            for i, payload in enumerate(payloads):
                await append("builtin", payload, rid, series["builtin"])
                if (i + 1) % 250 == 0:
                    progress(f"record: built-in {i + 1}/{total} appends")
            raw_path = raw_dir / f"{rid}.jsonl"
            for line in lines:
                _raw_append(raw_path, line, series["raw"])
            line_bytes = path_ours.stat().st_size / total
            # The write alone (no segment building, no redaction): ours' append primitive on
            # the same bytes, to a fourth file.
            from sandbox_memory.workspace import LocalWorkspace

            writer = LocalWorkspace(raw_dir)
            for line in lines:
                start = time.perf_counter()
                await writer.append_line(f"write-only-{rid}.jsonl", line)
                write_only.append(time.perf_counter() - start)

            # Where ours spends its time: building the redacted segment (CPU), at the top N.
            for payload in payloads[top - 1 - WINDOW : top + WINDOW]:
                start = time.process_time()
                build_segment(payload, rollout_id=rid, person=None, redactor=runtime.redactor)
                redact_us.append((time.process_time() - start) * 1e6)
            manager._stopped = True  # record only: no phase 1/2 when the sandbox closes

    def at(kind: str, n: int, *, cpu: bool = False) -> float:
        if n == 1:
            samples = first[kind]
            return median(samples.cpu if cpu else samples.wall) * 1e6
        values = series[kind].cpu if cpu else series[kind].wall
        return median(values[max(0, n - 1 - WINDOW) : n + WINDOW]) * 1e6

    def cpu_note(n: int) -> str:
        return (
            f"CPU time (process + children): ours {at('ours', n, cpu=True):,.0f} us, "
            f"built-in {at('builtin', n, cpu=True):,.0f} us; raw append {at('raw', n):,.0f} us"
        )

    rows: list[Row] = []
    for n in sizes:
        o, b = at("ours", n), at("builtin", n)
        if n == top:
            target, met = "ours <= 0.05x built-in (20x faster)", o <= 0.05 * b
        else:
            target, met = "ours <= built-in", o <= b
        rows.append(
            Row(
                name=f"record.n{n}",
                metric=f"time to append segment {n} of a conversation",
                unit="us",
                ours=o,
                builtin=b,
                target=target,
                met=met,
                note=cpu_note(n),
            )
        )
    n1 = min(sizes)
    flat_o = at("ours", top) / at("ours", n1)
    flat_b = at("builtin", top) / at("builtin", n1)
    rows.append(
        Row(
            name="record.flat",
            metric=f"append time at N={top} / at N={n1}",
            unit="x",
            ours=flat_o,
            builtin=flat_b,
            target="ours <= 2",
            met=flat_o <= 2,
        )
    )
    raw_top = at("raw", top)
    vs_o = at("ours", top) / raw_top
    vs_b = at("builtin", top) / raw_top
    rows.append(
        Row(
            name="record.vs_raw",
            metric=f"append time at N={top} / raw append of the same bytes",
            unit="x",
            ours=vs_o,
            builtin=vs_b,
            target="ours <= 5",
            met=vs_o <= 5,
            note=(
                f"raw {raw_top:.0f} us; of ours' {at('ours', top, cpu=True):,.0f} us of CPU per "
                f"append, building the redacted segment takes {median(redact_us):,.0f} us"
            ),
        )
    )
    write_top = median(write_only[max(0, top - 1 - WINDOW) : top + WINDOW]) * 1e6
    rows.append(
        Row(
            name="record.write_vs_raw",
            metric=f"the write alone (no redaction) at N={top} / raw append of the same bytes",
            unit="x",
            ours=write_top / raw_top,
            builtin=vs_b,
            target="ours <= 5",
            met=write_top / raw_top <= 5,
            note=(
                f"ours' append primitive {write_top:.0f} us, raw {raw_top:.0f} us; the built-in "
                "column is its whole append (it has no separate write step)"
            ),
        )
    )
    extra = {
        "segment_bytes": round(line_bytes),
        "ours_build_segment_us": median(redact_us),
        "series_us": {k: [round(v * 1e6, 1) for v in vals.wall] for k, vals in series.items()},
    }
    return rows, extra
