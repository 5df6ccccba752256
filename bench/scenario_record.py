"""record: time to append the Nth run segment of one conversation, locally and through the
session API.

The N-1 earlier segments are written directly, in each system's own format (the append cost
depends on what is already in the file, not on how it got there), so N=1,000 costs seconds,
not a thousand slow appends. Then each system appends ``samples`` segments through its own path
on its own real ``UnixLocalSandboxClient`` session (temp folders on the same disk):

- ours, local: ``LayoutRuntime.record`` over the workspace the session manager uses for
  UnixLocal (the local-folder fast path): redact, add item ids, append one JSONL line;
- ours, session API: the same through ``SessionWorkspace`` (what every other backend uses:
  Docker, hosted), one exec per append;
- built-in: ``SandboxMemoryGenerationManager.enqueue_rollout_payload``, which always goes
  through the session API: ensure the layout, read the whole rollout file, write it back.

A raw append of the bytes ours wrote (``os.open(O_APPEND)`` + ``write``) to a file with the same
history is the floor, and ours' append primitive alone (``LocalWorkspace.append_line``) on the
same bytes shows what the write costs without building the segment. Each figure is the median
of the samples at that N (N=1: the first append of ``samples`` fresh conversations). The
systems take turns sample by sample, and each sample starts once the previous one's writes are
on disk (see ``_settle``).
"""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Any

from agents.sandbox.memory.manager import SandboxMemoryGenerationManager
from agents.sandbox.memory.rollouts import dump_rollout_json
from common import Progress, Row, make_memory, median, sandbox, temp_root
from workload import conversation_id, segment_payload

from sandbox_memory import _sdk
from sandbox_memory.record import offload
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.stores.segments import build_segment
from sandbox_memory.workspace import LocalWorkspace, SessionWorkspace

WARMUP = 3
SERIES = ("ours", "session", "builtin", "raw")


def _cpu() -> float:
    """CPU seconds of this process and its waited-for children (the built-in's execs)."""

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


class _Unchanged:
    """Stands in for the redactor while writing history (the text has nothing to redact)."""

    total = 0

    def redact_json(self, value: Any) -> Any:
        return value


def _ours_history(path: Path, rid: str, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(count):
            seg = build_segment(
                segment_payload(0, i),
                rollout_id=rid,
                person=None,
                redactor=_Unchanged(),  # type: ignore[arg-type]
            )
            fh.write(json.dumps(seg, separators=(",", ":"), ensure_ascii=False) + "\n")


def _builtin_history(path: Path, rid: str, count: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(count):
            payload = segment_payload(0, i)
            ordered = {"updated_at": payload.pop("updated_at"), "rollout_id": rid, **payload}
            fh.write(dump_rollout_json(ordered))


def _settle(path: Path) -> None:
    """Wait (untimed) until what the last append wrote is on disk.

    The built-in rewrites the whole rollout per append (9 MB at N=1,000), and ext4 starts
    writing a rewritten file back when it is closed: the next few milliseconds of any write to
    that disk, the other system's timed append included, wait behind it (a 1-byte write took
    6 ms instead of 0.3 ms right after one). Real appends are a run apart, so each sample
    starts on a disk with nothing in flight, both systems alike.
    """

    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _offload_cpu() -> float:
    """CPU seconds of the recording child (``record.offload``: payloads over 4 Mi characters
    are built there), 0 when none runs (Linux: read from ``/proc``)."""

    proc = offload._child._proc
    if proc is None:
        return 0.0
    try:
        with open(f"/proc/{proc.pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _load_average() -> str:
    """The 1-minute load average (the wall figures move with it on a shared machine)."""

    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def _raw_append(path: Path, data: bytes, into: Samples) -> None:
    cpu, start = _cpu(), time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    into.add(time.perf_counter() - start, _cpu() - cpu)


async def run(config: dict[str, Any], progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    sizes: list[int] = config["sizes"]
    samples: int = config["samples"]
    top = max(sizes)
    at: dict[tuple[str, int], Samples] = {(k, n): Samples() for k in SERIES for n in sizes}
    write_only: list[float] = []
    redact_us: list[float] = []
    big_cpu: list[float] = []
    big_raw: list[float] = []
    big_bytes: list[int] = []
    line_bytes = 0

    load = [_load_average(), ""]
    with temp_root("record-ours") as root_ours, temp_root("record-builtin") as root_builtin:
        async with sandbox(root_ours) as s_ours, sandbox(root_builtin) as s_builtin:
            ours = make_memory("ours")
            builtin = make_memory("builtin")
            cap = ours.capability
            runtimes = {
                "ours": LayoutRuntime(
                    _sdk.workspace_for_session(s_ours),
                    layout=cap.layout,
                    generate=cap.generate,
                    read=cap.read,
                ),
                "session": LayoutRuntime(
                    SessionWorkspace(s_ours),
                    layout=cap.layout,
                    generate=cap.generate,
                    read=cap.read,
                ),
            }
            manager = SandboxMemoryGenerationManager(session=s_builtin, memory=builtin.capability)
            sessions_ours = root_ours / cap.layout.sessions_dir
            sessions_builtin = root_builtin / builtin.capability.layout.sessions_dir
            raw_dir = root_ours / "raw-append"
            raw_dir.mkdir()

            async def append(kind: str, payload: dict[str, Any], rid: str, into: Samples) -> bytes:
                path = sessions_ours / f"{rid}.jsonl"
                before = path.stat().st_size if path.exists() else 0
                cpu, start = _cpu(), time.perf_counter()
                if kind == "builtin":
                    await manager.enqueue_rollout_payload(payload, rollout_id=rid)
                else:
                    await runtimes[kind].record(payload, rollout_id=rid)
                into.add(time.perf_counter() - start, _cpu() - cpu)
                if kind == "builtin":
                    _settle(sessions_builtin / f"{rid}.jsonl")
                    return b""
                _settle(path)
                with open(path, "rb") as fh:
                    fh.seek(before)
                    return fh.read()

            for k in range(WARMUP):  # first calls import and compile lazily
                for kind in ("ours", "session", "builtin"):
                    await append(kind, segment_payload(80_000, k), f"warm-up-{kind}", Samples())

            for n in sizes:
                lines: list[bytes] = []
                kinds = ("ours", "session", "builtin")
                if n > 1:
                    for kind in kinds:
                        history = _builtin_history if kind == "builtin" else _ours_history
                        folder = sessions_builtin if kind == "builtin" else sessions_ours
                        history(folder / f"{kind}-n{n}.jsonl", f"{kind}-n{n}", n - 1)
                        _settle(folder / f"{kind}-n{n}.jsonl")
                # Round-robin, the order turning each round: the systems' samples of a round
                # meet the same load (2x swings on a shared machine), and none always goes first.
                for s in range(samples):
                    for kind in kinds[s % 3 :] + kinds[: s % 3]:
                        if n == 1:
                            rid = conversation_id(90_000 + 1_000 * SERIES.index(kind) + s)
                            payload = segment_payload(90_000 + s, 0)
                        else:
                            rid = f"{kind}-n{n}"
                            payload = segment_payload(0, n - 1 + s)
                        line = await append(kind, payload, rid, at[(kind, n)])
                        if kind == "ours":
                            lines.append(line)
                raw_path = raw_dir / f"raw-n{n}.jsonl"
                if n > 1:
                    _ours_history(raw_path, "raw", n - 1)
                for line in lines:
                    _raw_append(raw_path, line, at[("raw", n)])
                if n == top:
                    line_bytes = sum(len(x) for x in lines) // max(1, len(lines))
                    writer = LocalWorkspace(raw_dir)
                    _ours_history(raw_dir / "write-only.jsonl", "raw", n - 1)
                    for line in lines:
                        start = time.perf_counter()
                        await writer.append_line("write-only.jsonl", line)
                        write_only.append(time.perf_counter() - start)
                    for s in range(samples):
                        start = time.process_time()
                        build_segment(
                            segment_payload(0, n + s),
                            rollout_id="x",
                            person=None,
                            redactor=runtimes["ours"].redactor,
                        )
                        redact_us.append((time.process_time() - start) * 1e6)
                progress(
                    f"record: N={n}: "
                    + ", ".join(f"{k} {median(at[(k, n)].wall) * 1e6:,.0f} us" for k in SERIES)
                )
            # CPU per byte of a record minus a raw write of the same bytes, for a segment with
            # one 1 MB tool output (the 9 KB figure comes from the N=top samples above).
            for s in range(config.get("big_samples", 5)):
                payload = segment_payload(0, top + samples + s, big_output_chars=1_000_000)
                path = sessions_ours / "big.jsonl"
                before = path.stat().st_size if path.exists() else 0
                cpu = _cpu() + _offload_cpu()
                await runtimes["ours"].record(payload, rollout_id="big")
                big_cpu.append(_cpu() + _offload_cpu() - cpu)
                _settle(path)
                with open(path, "rb") as fh:
                    fh.seek(before)
                    line = fh.read()
                big_bytes.append(len(line))
                raw = Samples()
                _raw_append(raw_dir / "raw-big.jsonl", line, raw)
                big_raw.append(raw.cpu[0])
            manager._stopped = True  # record only: no phase 1/2 when the sandbox closes
    load[1] = _load_average()

    def us(kind: str, n: int, *, cpu: bool = False) -> float:
        s = at[(kind, n)]
        return median(s.cpu if cpu else s.wall) * 1e6

    def cpu_note(n: int) -> str:
        return (
            f"CPU time (process + children): ours {us('ours', n, cpu=True):,.0f} us, "
            f"built-in {us('builtin', n, cpu=True):,.0f} us; raw append {us('raw', n):,.0f} us"
        )

    rows: list[Row] = []
    for n in sizes:
        o, b = us("ours", n), us("builtin", n)
        if n == top:
            target, met = "ours <= 0.05x built-in (20x faster)", o <= 0.05 * b
        else:
            target, met = "ours <= built-in", o <= b
        rows.append(
            Row(
                name=f"record.n{n}",
                metric=f"time to append segment {n} of a conversation (ours: local folder)",
                unit="us",
                ours=o,
                builtin=b,
                target=target,
                met=met,
                note=cpu_note(n),
            )
        )
    o, b = us("session", top), us("builtin", top)
    paired = [
        x / y for x, y in zip(at[("session", top)].wall, at[("builtin", top)].wall, strict=True)
    ]
    rows.append(
        Row(
            name=f"record.session.n{top}",
            metric=f"time to append segment {top}, both through the session API",
            unit="us",
            ours=o,
            builtin=b,
            target="ours <= 0.2x built-in (5x faster)",
            met=o <= 0.2 * b,
            note=(
                f"CPU time (process + children): ours {us('session', top, cpu=True):,.0f} us, "
                f"built-in {us('builtin', top, cpu=True):,.0f} us; median of the {samples} "
                f"rounds' own ratios {median(paired):.2f}; load average {load[0]} -> {load[1]}"
            ),
        )
    )
    n1 = min(sizes)
    flat_o = us("ours", top) / us("ours", n1)
    flat_b = us("builtin", top) / us("builtin", n1)
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
    raw_top = us("raw", top)
    write_top = median(write_only) * 1e6
    rows.append(
        Row(
            name="record.write_vs_raw",
            metric=f"the write alone (no redaction) at N={top} / raw append of the same bytes",
            unit="x",
            ours=write_top / raw_top,
            builtin=us("builtin", top) / raw_top,
            target="ours <= 5",
            met=write_top / raw_top <= 5,
            note=(
                f"ours' append primitive {write_top:.0f} us, raw {raw_top:.0f} us; of ours' "
                f"{us('ours', top, cpu=True):,.0f} us of CPU per append, building the redacted "
                f"segment takes {median(redact_us):,.0f} us; the built-in column is its whole "
                "append (it has no separate write step)"
            ),
        )
    )
    raw_cpu_top = us("raw", top, cpu=True)
    per_byte = [
        (
            "segment_9k",
            f"an ordinary segment ({line_bytes:,} B) at N={top}",
            (us("ours", top, cpu=True) - raw_cpu_top) * 1e3 / line_bytes,
            40.0,
            f"ours {us('ours', top, cpu=True):,.0f} us of CPU per append, raw append "
            f"{raw_cpu_top:,.0f} us",
        ),
        (
            "output_1m",
            f"a segment with one 1 MB tool output ({median(big_bytes):,.0f} B)",
            median(
                [(c - r) * 1e9 / b for c, r, b in zip(big_cpu, big_raw, big_bytes, strict=True)]
            ),
            25.0,
            f"ours {median(big_cpu) * 1e3:,.1f} ms of CPU per append (this process and the "
            f"recording child, if one was used), raw append {median(big_raw) * 1e3:,.2f} ms; "
            f"median of {len(big_cpu)}",
        ),
    ]
    for name, what, ns, limit, note in per_byte:
        rows.append(
            Row(
                name=f"record.cpu_per_byte.{name}",
                metric=f"record's CPU per byte minus a raw write of the same bytes, {what}",
                unit="ns/B",
                ours=ns,
                builtin=None,
                target=f"<= {limit:.0f} ns/B",
                met=ns <= limit,
                note=note,
            )
        )
    extra = {
        "segment_bytes": line_bytes,
        "ours_build_segment_us": median(redact_us),
        "points_us": {k: {str(n): round(us(k, n), 1) for n in sizes} for k in SERIES},
    }
    return rows, extra
