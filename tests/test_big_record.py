"""Recording a huge tool output never stalls the event loop (issue 10 item 14)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox_memory import offload
from sandbox_memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandbox_memory.redact import Redactor
from sandbox_memory.rollouts import build_segment, segment_line
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.workspace import LocalWorkspace

SECRET = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


def big_payload(megabytes: float) -> dict[str, Any]:
    line = "2026-01-01 12:00:00 INFO worker processed item 123456 in 4 ms status=ok\n"
    output = line * int(megabytes * (1 << 20) // len(line))
    half = len(output) // 2
    output = output[:half] + f"export GITHUB_TOKEN={SECRET}\n" + output[half:]
    return {
        "updated_at": "2026-01-01T12:00:00+00:00",
        "input": [{"role": "user", "content": "Run the job and show its log."}],
        "generated_items": [
            {"type": "function_call", "name": "exec_command", "call_id": "c", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": output},
        ],
        "final_output": "Done.",
    }


def runtime(root: Path) -> LayoutRuntime:
    return LayoutRuntime(
        LocalWorkspace(str(root)),
        layout=MemoryLayoutConfig(),
        generate=MemoryGenerateConfig(engine="offline"),
        read=MemoryReadConfig(),
    )


async def record_measuring_stall(rt: LayoutRuntime, payload: dict[str, Any]) -> float:
    """Record ``payload``; the longest gap between a ticker's 1 ms ticks meanwhile."""

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
    return segment_line(segment)


def test_huge_tool_output_is_recorded_without_stalling_the_loop(tmp_path: Path) -> None:
    payload = big_payload(20)
    rt = runtime(tmp_path)
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
    rt = runtime(tmp_path)
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
    rt = runtime(tmp_path)
    asyncio.run(rt.record(big_payload(0.01), rollout_id="big"))
    assert offload._child._proc is None  # no child was started for it
    assert SECRET.encode() not in recorded_line(tmp_path)


def replaying_runs(root: Path) -> list[dict[str, Any]]:
    """A run with a big tool output, then a run (no conversation id) replaying its history."""

    first = big_payload(0.5)
    history = [*first["input"], *first["generated_items"]]
    second = {"input": [*history, {"role": "user", "content": "And now?"}], "generated_items": []}
    root.mkdir()
    rt = runtime(root)

    async def go() -> None:
        await rt.record(first, rollout_id="conv")
        assert await rt.record(second, rollout_id="run-x", per_run_id=True) == "conv"

    asyncio.run(go())
    data = (root / MemoryLayoutConfig().sessions_dir / "conv.jsonl").read_bytes()
    assert SECRET.encode() not in data
    return [json.loads(line) for line in data.splitlines()]


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
