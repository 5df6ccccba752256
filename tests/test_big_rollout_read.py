"""Reading a big rollout: memory bounded by a chunk and a line, and digests of the items as
recorded (issue 12 big rollout; issue 10 replay recognition)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

from helpers import layout_runtime, replay_of, run_payload, sealed
from sandbox_memory.config import MemoryLayoutConfig
from sandbox_memory.integrity import SegmentSeal
from sandbox_memory.stores import segments as rollouts
from sandbox_memory.stores.segments import (
    MAX_STRING_CHARS,
    LineCheck,
    clip_strings,
    history_fingerprint,
    new_item_digests,
    parse_segments,
    read_new_segments,
)
from sandbox_memory.workspace import LocalWorkspace

CHECK = LineCheck(SegmentSeal([b"test-key-" * 4]), "r")
"""The lines of ``r.jsonl`` below are sealed with this key, as memory seals what it records."""


def sealed_line(line: bytes) -> bytes:
    return CHECK.seal.seal(line.rstrip(b"\n") + b"\n", "r")


def segment(n: int, output_chars: int) -> dict[str, Any]:
    return {
        "segment_id": f"s{n}",
        "input": [{"role": "user", "content": f"Run step {n}.", "memory_item_id": f"s{n}:0"}],
        "generated_items": [
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": f"{n} é log line\n" * (output_chars // 14),
                "memory_item_id": f"s{n}:1",
            }
        ],
    }


def test_a_rollout_is_read_a_line_at_a_time_with_memory_bounded_by_chunk_and_line(
    tmp_path: Path,
) -> None:
    # 24 lines of about 0.5 MB (12 MB). Before: the 8 MB chunk was parsed whole before its
    # strings were clipped (a chunk, its copies and all its parsed lines at once).
    lines = [sealed_line(json.dumps(segment(n, 500_000)).encode()) for n in range(24)]
    (tmp_path / "r.jsonl").write_bytes(b"".join(lines))
    ws = LocalWorkspace(tmp_path)
    tracemalloc.start()
    try:
        parsed = asyncio.run(read_new_segments(ws, "r.jsonl", offset=0, check=CHECK, digests=True))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert parsed is not None and len(parsed.segments) == 24
    # A 1 MiB chunk, the line it ends, its text (1-2 bytes a character) and its parse.
    assert peak < 8 << 20, f"reading a 12 MB rollout peaked at {peak / 2**20:.1f} MB"
    whole = parse_segments(b"".join(lines), start_offset=0, check=CHECK)
    assert parsed.segments == [clip_strings(s) for s in whole.segments]
    assert parsed.item_digests == [d for s in whole.segments for d in new_item_digests(s)]


def test_chunked_reading_equals_reading_whole(tmp_path: Path) -> None:
    good = [json.dumps(segment(n, 3_000 * n)).encode() for n in range(6)]
    good[2] = good[2].replace(b"log line", b"log \xff\xfe line")  # not UTF-8: replaced
    good = [sealed_line(g)[:-1] for g in good]
    body = (
        good[0]
        + b"\n\n  \t\n"  # blank lines: skipped, not counted
        + good[1]
        + b"\n{not json\n[1, 2]\n"  # two lines memory did not record (no seal)
        + good[2]
        + b"\n\xc2\xa0\n"  # a no-break space alone: not memory's either
        + b"\n".join(good[3:])
        + b"\n"
        + good[0][:50]  # a torn last line: left for later
    )
    (tmp_path / "r.jsonl").write_bytes(body)
    whole = parse_segments(body, start_offset=7, check=CHECK)
    ws = LocalWorkspace(tmp_path)
    for chunk in (1, 7, 64, 1000, 4096, len(body), 1 << 20):
        parsed = asyncio.run(
            read_new_segments(ws, "r.jsonl", offset=0, check=CHECK, chunk=chunk, digests=True)
        )
        assert parsed is not None
        assert parsed.unverified == whole.unverified == 3 and parsed.malformed == 0
        assert parsed.end_offset == whole.end_offset - 7 == len(body) - 50
        assert parsed.segments == [clip_strings(s) for s in whole.segments]
        assert len(parsed.segments) == 6
        assert parsed.item_digests == [d for s in whole.segments for d in new_item_digests(s)]
    late = asyncio.run(read_new_segments(ws, "r.jsonl", offset=len(good[0]) + 1, check=CHECK))
    assert late is not None and len(late.segments) == 5
    assert asyncio.run(read_new_segments(ws, "absent.jsonl", offset=0, check=CHECK)) is None


def big_run() -> dict[str, Any]:
    return run_payload(
        "Build it and show the log.",
        reply=None,
        when=None,
        items=[
            {"type": "function_call", "name": "exec_command", "call_id": "c", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": "compiling module\n" * (2 * MAX_STRING_CHARS // 17),
            },
        ],
        final_output="Built.",
    )


def replayed_items(root: Path) -> int:
    """A fresh runtime (nothing cached) records a run replaying the big run's history."""

    first = big_run()
    second = replay_of(first, "And now?")
    rt = layout_runtime(root)
    assert asyncio.run(rt.record(second, rollout_id="run-x", per_run_id=True)) == "conv"
    lines = (root / MemoryLayoutConfig().sessions_dir / "conv.jsonl").read_bytes().splitlines()
    return sum(i.get("type") == "memory_replayed_item" for i in json.loads(lines[-1])["input"])


def test_a_fresh_recorder_reads_the_rollouts_digests_keeping_no_segment(tmp_path: Path) -> None:
    # Before: a cold recorder read every segment not yet extracted, each clipped to 64,000
    # characters a string, and kept them all only to take their items' digests (about 0.2 MB
    # a segment of a big output: 21 MB more at the close of a 100 MB rollout).
    from sandbox_memory.redact import default_redactor

    default_redactor()  # built before the measure, as in any process that recorded before
    sessions = tmp_path / MemoryLayoutConfig().sessions_dir
    sessions.mkdir()
    lines = [sealed(json.dumps(segment(n, 200_000)), "conv") for n in range(60)]
    (sessions / "conv.jsonl").write_bytes(b"".join(lines))
    rt = layout_runtime(tmp_path)
    earlier = [{"role": "user", "content": "Run step 3."}]
    run = run_payload("Again.", reply=None, when=None, history=earlier)
    tracemalloc.start()
    try:
        asyncio.run(rt.record(run, rollout_id="conv"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # One 0.2 MB line at a time (its bytes, text, parse and digest text); the 60 clipped
    # segments held together would be about 8 MB.
    assert peak < 4 << 20, f"a cold record of a 12 MB rollout peaked at {peak / 2**20:.1f} MB"
    recorded = json.loads((sessions / "conv.jsonl").read_bytes().splitlines()[-1])
    # the digests were all read: segment 3's message, replayed, is recognised
    assert [i.get("type") for i in recorded["input"]] == ["memory_replayed_item", None]


def test_a_big_item_replayed_is_recognised_by_a_fresh_process(tmp_path: Path) -> None:
    # Before: the digests of items read back from the rollout (and noted by phase 1) were
    # taken after their long strings were clipped, so a replay of a big tool output was
    # recorded again whole once the runtime that recorded it was gone.
    for noted in (False, True):
        root = tmp_path / f"noted-{noted}"
        root.mkdir()
        rt = layout_runtime(root)
        asyncio.run(rt.record(big_run(), rollout_id="conv"))
        if noted:
            asyncio.run(rt.close())  # phase 1 notes the items' digests
            assert (root / rt.state.items_path("conv")).exists()
        assert replayed_items(root) == 3  # the message, the call and its big output


FIXED_FINGERPRINT = "af36bd800906"  # the fingerprint code as first written, on `fixed` below


def reference_fingerprint(items: list[dict[str, Any]]) -> str | None:
    """The fingerprint as first written: whole strings split into all their words."""

    kept = [
        i
        for i in items
        if i.get("type") not in ("reasoning", "compaction")
        and i.get("role") not in ("system", "developer")
    ][:2]
    if len(kept) < 2:
        return None

    def text(item: dict[str, Any]) -> str:
        content = item.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts = [str(item.get("role") or item.get("type") or "")]
        for value in (content, item.get("name"), item.get("arguments"), item.get("output")):
            if value:
                parts.append(value if isinstance(value, str) else json.dumps(value, default=str))
        return " ".join(" ".join(parts).split())

    joined = "\n".join(text(i) for i in kept)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()[:12]


def test_a_fingerprint_is_the_same_taken_a_window_at_a_time(monkeypatch: Any) -> None:
    rng = random.Random(12)
    alphabet = ["a", "b", "é", "😀", " ", "  ", "\n", "\t", "\x1c", "\u3000", "\xa0", "x" * 9]
    for window in (1, 3, 8, 64, 1 << 16):
        monkeypatch.setattr(rollouts, "_WORDS_WINDOW", window)
        for _ in range(60):

            def text() -> str:
                return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))

            items: list[dict[str, Any]] = [
                {"role": "system", "content": text()},
                {"role": "user", "content": rng.choice([text(), [{"text": text()}, {}]])},
                {"type": "reasoning", "summary": text()},
                {"type": "function_call", "name": text(), "arguments": {"cmd": text()}},
                {"type": "function_call_output", "output": text()},
            ]
            rng.shuffle(items)
            assert history_fingerprint(items) == reference_fingerprint(items)
    # Against a fixed value too: a fingerprint is stored (threads/), it must never change.
    fixed = [{"role": "user", "content": "Hi  there"}, {"role": "assistant", "content": "Yes."}]
    assert history_fingerprint(fixed) == reference_fingerprint(fixed)
    assert history_fingerprint(fixed) == FIXED_FINGERPRINT


def test_a_fingerprint_of_a_huge_output_takes_little_memory() -> None:
    # Before: a 4 MB output among the first two items was split into all its words at once,
    # about 10x its size in word objects.
    items = [
        {"role": "user", "content": "Show the log."},
        {"type": "function_call_output", "output": "ok line 12\n" * (4_000_000 // 11)},
    ]
    tracemalloc.start()
    try:
        got = history_fingerprint(items)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, f"a fingerprint of a 4 MB output peaked at {peak / 2**20:.1f} MB"
    assert got == reference_fingerprint(items)
