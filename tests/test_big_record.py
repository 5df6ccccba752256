"""Recording a huge tool output never stalls the event loop (issue 10 item 14)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import layout_runtime, replay_of, run_payload, sealed
from sandbox_memory.config import MemoryLayoutConfig
from sandbox_memory.record import offload
from sandbox_memory.redact import Redactor
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.stores.segments import build_segment, segment_line

SECRET = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


def big_payload(megabytes: float) -> dict[str, Any]:
    line = "2026-01-01 12:00:00 INFO worker processed item 123456 in 4 ms status=ok\n"
    output = line * int(megabytes * (1 << 20) // len(line))
    half = len(output) // 2
    output = output[:half] + f"export GITHUB_TOKEN={SECRET}\n" + output[half:]
    return run_payload(
        "Run the job and show its log.",
        reply=None,
        when="2026-01-01T12:00:00+00:00",
        items=[
            {"type": "function_call", "name": "exec_command", "call_id": "c", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": output},
        ],
        final_output="Done.",
    )


async def record_measuring_stall(rt: LayoutRuntime, payload: dict[str, Any]) -> float:
    """Record ``payload``; the longest gap between a ticker's 1 ms ticks meanwhile."""

    # Written out: an input that is a bare string, a form run_payload does not build.
    await rt.record({"input": "warm up", "generated_items": []}, rollout_id="warm")
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

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    try:
        await rt.record(payload, rollout_id="big")
    finally:
        done = True
        await tick
    return worst


def recorded_line(root: Path) -> bytes:
    data = (root / MemoryLayoutConfig().sessions_dir / "big.jsonl").read_bytes()
    assert data.count(b"\n") == 1
    return data


def in_process_line(payload: dict[str, Any], segment_id: str) -> bytes:
    segment = build_segment(
        payload, rollout_id="big", person=None, redactor=Redactor(), segment_id=segment_id
    )
    return sealed(segment_line(segment), "big")


def test_huge_tool_output_is_recorded_without_stalling_the_loop(tmp_path: Path) -> None:
    payload = big_payload(20)
    rt = layout_runtime(tmp_path)
    # Before: 2.4 s for 20 MB, all of it on the loop. The bound leaves room for a loaded core.
    stall = asyncio.run(record_measuring_stall(rt, payload))
    assert stall < 0.5, f"the event loop stalled {stall:.2f} s while recording 20 MB"
    line = recorded_line(tmp_path)
    assert SECRET.encode() not in line
    assert b"[REDACTED:github-token]" in line
    assert rt.redactor.counts == {"github-token": 1}  # counted though redacted in the child
    segment_id = json.loads(line)["segment_id"]
    assert line == in_process_line(payload, segment_id)


def test_a_failing_child_falls_back_to_recording_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(offload, "OFFLOAD_CHARS", 64_000)
    offload._child._stop()  # a fresh child, started from an interpreter that exits at once
    monkeypatch.setattr(sys, "executable", "/bin/false")
    payload = big_payload(0.5)
    rt = layout_runtime(tmp_path)
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        asyncio.run(record_measuring_stall(rt, payload))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "child process" in warnings[0].getMessage()
    line = recorded_line(tmp_path)
    assert SECRET.encode() not in line
    assert rt.redactor.counts == {"github-token": 1}
    assert line == in_process_line(payload, json.loads(line)["segment_id"])
    monkeypatch.undo()
    offload._child._stop()


def test_a_small_run_is_recorded_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offload._child._stop()
    rt = layout_runtime(tmp_path)
    asyncio.run(rt.record(big_payload(0.01), rollout_id="big"))
    assert offload._child._proc is None  # no child was started for it
    assert SECRET.encode() not in recorded_line(tmp_path)


def replaying_runs(root: Path) -> list[dict[str, Any]]:
    """A run with a big tool output, then a run (no conversation id) replaying its history."""

    first = big_payload(0.5)
    second = replay_of(first, "And now?")
    root.mkdir()
    rt = layout_runtime(root)

    async def go() -> None:
        await rt.record(first, rollout_id="conv")
        assert await rt.record(second, rollout_id="run-x", per_run_id=True) == "conv"

    asyncio.run(go())
    data = (root / MemoryLayoutConfig().sessions_dir / "conv.jsonl").read_bytes()
    assert SECRET.encode() not in data
    # Without their seals (made over different segment ids and times).
    return [
        {k: v for k, v in json.loads(line).items() if k != "memory_seal"}
        for line in data.splitlines()
    ]


def test_a_big_replayed_run_is_recognised_as_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = replaying_runs(tmp_path / "here")
    monkeypatch.setattr(offload, "OFFLOAD_CHARS", 64_000)  # both runs now go to the child
    there = replaying_runs(tmp_path / "there")
    replayed = [i for i in there[1]["input"] if i.get("type") == "memory_replayed_item"]
    assert len(replayed) == 3  # the user message, the call and its big output

    def normal(segments: list[dict[str, Any]]) -> str:
        text = json.dumps(segments)
        for n, seg in enumerate(segments):
            text = text.replace(seg["segment_id"], f"seg{n}").replace(seg["updated_at"], "t")
        return text

    assert normal(there) == normal(here)


class CountingPipes:
    """Wraps the child's pipes: every write the hand-over makes to the child (each is what one
    GIL-holding step produced: a slice encoded, a pickle frame, a header) and every object a
    read from the child returned."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[int] = []
        self.reads: list[bytes] = []
        start = offload._child._start

        def counted_start() -> Any:
            proc = start()
            if not hasattr(proc, "counted"):
                write, read = proc.stdin.write, proc.stdout.read

                def counted_write(data: Any) -> int:
                    self.writes.append(memoryview(data).nbytes)
                    return write(data)

                def counted_read(size: int = -1) -> bytes:
                    data = read(size)
                    self.reads.append(data)
                    return data

                proc.stdin.write = counted_write
                proc.stdout.read = counted_read
                proc.counted = True
            return proc

        offload._child._stop()  # a fresh child, whose pipes are wrapped
        monkeypatch.setattr(offload._child, "_start", counted_start)


def test_the_hand_over_holds_the_gil_for_one_slice_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the payload was pickled whole and written in one frame, and the line came back
    # pickled and was copied out of it: each a step holding the GIL for the whole output.
    monkeypatch.setattr(offload, "OFFLOAD_CHARS", 64_000)
    pipes = CountingPipes(monkeypatch)
    payload = big_payload(3)
    output_chars = len(payload["generated_items"][1]["output"])
    rt = layout_runtime(tmp_path)
    appended: list[bytes] = []
    append_line = rt.ws.append_line

    async def spy_append(path: str, data: bytes, **kw: Any) -> bool:
        appended.append(data)
        return await append_line(path, data, **kw)

    monkeypatch.setattr(rt.ws, "append_line", spy_append)
    asyncio.run(rt.record(payload, rollout_id="big"))
    assert sum(pipes.writes) > output_chars  # the output did go through the pipe
    assert max(pipes.writes) <= offload.SLICE_BYTES
    line = appended[-1]
    assert len(line) > output_chars
    # The line handed to the append is the very object one read from the pipe filled.
    assert any(line is data for data in pipes.reads)
    assert line == recorded_line(tmp_path)
    assert line == in_process_line(payload, json.loads(line)["segment_id"])
    assert rt.redactor.counts == {"github-token": 1}
    monkeypatch.undo()
    offload._child._stop()


class Recorded(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, data: Any) -> int:
        self.sizes.append(memoryview(data).nbytes)
        return super().write(data)


def test_a_message_goes_through_the_pipe_whole_and_in_bounded_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(offload, "STREAM_MIN", 1000)
    monkeypatch.setattr(offload, "SLICE_BYTES", 700)
    # A surrogate pair split across two slices (175 characters each: not ASCII), lone
    # surrogates, characters of 1 to 4 bytes; an ASCII string, bytes, a string sent twice.
    tricky = ("a" * 174 + "\ud83d\ude00" + "é€😀\udcff" * 400) * 3
    shared = "s" * 5000
    message = (
        "build",
        (
            {"big": tricky, "again": tricky, "shared": [shared, shared], "small": "ok"},
            b"\x00\xff" * 3000,
            "",
            None,
            {"n": 1, "f": 0.5},
        ),
    )
    stream = Recorded()
    offload._send(stream, message)
    assert max(stream.sizes) <= 700  # no write carries more than one slice
    assert stream.getvalue().count(b"s" * 700) == len(shared) // 700  # its slices, once
    stream.seek(0)
    got = offload._receive(stream)
    assert got == message
    assert got[1][0]["big"] is got[1][0]["again"]
    assert stream.read() == b""  # the message was read to its end, nothing more

    # Many small strings: pickled in frames of about 64 KiB, each written before the next.
    many = [f"word {i}" for i in range(100_000)]
    stream = Recorded()
    offload._send(stream, many)
    assert len(stream.sizes) > 20 and max(stream.sizes) < 70_000
    stream.seek(0)
    assert offload._receive(stream) == many
