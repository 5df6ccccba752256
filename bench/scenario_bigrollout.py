"""big rollout: peak memory of the process that closes a sandbox whose rollout is 100 MB.

Per system, two fresh Python processes:

1. setup writes the rollout file the system's own recorder would have written: one
   conversation of 1 MB run segments (each an ordinary run plus one ~1 MB tool output, like a
   build log). Ours: ``build_segment`` + ``append_segment`` (the bytes ``LayoutRuntime.record``
   writes; the text holds no secrets, so redaction, which would change nothing, is skipped to
   save setup time). Built-in: the JSONL lines ``enqueue_rollout_payload`` writes, written once
   (its read-and-rewrite per append is what the record scenario measures).
2. close starts a real ``UnixLocalSandboxClient`` session on that workspace, hands the
   conversation's last (ordinary, ~9 KB) run to the manager the SDK runtime would use, closes
   the sandbox (pre-stop hook: extraction and consolidation through the counting models) and
   reports its peak resident set size (``VmHWM``) and its resident size before the run arrived.

The peak covers everything the close process did; the growth is the peak minus the resident
size before the run arrived (imports and the started sandbox are the same for both systems).

Ours builds its redactor in the close (the last run is redacted when recorded). Its Hyperscan
prefilter is loaded from the database cache (``redact/database_cache.py``), which setup warms
as any earlier process on the machine would; for the first size the note also gives the
growth of a close whose cache is empty (the first process on a machine compiles the
database: about 7 MB more, once).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import Progress, Row, make_memory, manager_for, sandbox, temp_root
from workload import conversation_id, segment_payload

SEGMENT_OUTPUT_CHARS = 1_000_000
CONVERSATION = 7


def _status_kb(field: str) -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_mb() -> float:
    hwm = _status_kb("VmHWM")
    if hwm:
        return hwm / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    return _status_kb("VmRSS") / 1024


class _Unchanged:
    """Stands in for the redactor during setup only (the text has nothing to redact)."""

    total = 0

    def redact_json(self, value: Any) -> Any:
        return value


async def _setup(system: str, root: Path, megabytes: int) -> dict[str, Any]:
    rid = conversation_id(CONVERSATION)
    segments = max(1, megabytes)
    if system == "ours":
        from sandbox_memory.integrity import SegmentSeal, host_keys
        from sandbox_memory.stores.segments import append_segment, build_segment

        seal = SegmentSeal(host_keys())
        from sandbox_memory.workspace import LocalWorkspace

        ws = LocalWorkspace(root)
        for i in range(segments):
            payload = segment_payload(CONVERSATION, i, big_output_chars=SEGMENT_OUTPUT_CHARS)
            segment = build_segment(
                payload,
                rollout_id=rid,
                person=None,
                redactor=_Unchanged(),  # type: ignore[arg-type]
            )
            await append_segment(
                ws, sessions_dir="sessions", rollout_id=rid, segment=segment, seal=seal
            )
        path = root / "sessions" / f"{rid}.jsonl"
        from sandbox_memory.redact import default_redactor

        default_redactor()  # the database cache is warm, as after any earlier process
    else:
        from agents.sandbox.memory.rollouts import dump_rollout_json

        path = root / "sessions" / f"{rid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            for i in range(segments):
                payload = segment_payload(CONVERSATION, i, big_output_chars=SEGMENT_OUTPUT_CHARS)
                ordered = {"updated_at": payload.pop("updated_at"), "rollout_id": rid, **payload}
                fh.write(dump_rollout_json(ordered))
    return {"rollout_mb": path.stat().st_size / 1e6}


async def _close(system: str, root: Path, megabytes: int) -> dict[str, Any]:
    memories = make_memory(system)
    rid = conversation_id(CONVERSATION)
    start = time.perf_counter()
    async with sandbox(root) as session:
        before = rss_mb()
        manager = manager_for(session, memories)
        await manager.enqueue_rollout_payload(
            segment_payload(CONVERSATION, max(1, megabytes)), rollout_id=rid
        )
    return {
        "peak_mb": peak_rss_mb(),
        "before_mb": before,
        "seconds": time.perf_counter() - start,
        "calls": memories.calls,
        "tokens": memories.tokens,
    }


def child_main(argv: list[str]) -> None:
    step, system, root, megabytes = argv[0], argv[1], Path(argv[2]), int(argv[3])
    func = _setup if step == "setup" else _close
    print(json.dumps(asyncio.run(func(system, root, megabytes))))


def _child(
    step: str, system: str, root: Path, megabytes: int, cache_dir: Path | None = None
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, step, system, str(root), str(megabytes)]
    env = None if cache_dir is None else {**os.environ, "SANDBOX_MEMORY_CACHE_DIR": str(cache_dir)}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"big-rollout {step} for {system} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def run(sizes: list[int], progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    extra: dict[str, Any] = {}
    for megabytes in sizes:
        results: dict[str, dict[str, Any]] = {}
        for system in ("ours", "builtin"):
            with temp_root(f"big-{system}") as root:
                setup = await asyncio.to_thread(_child, "setup", system, root, megabytes)
                if system == "ours" and megabytes == sizes[0]:
                    # the same close with an empty database cache, on a copy of the workspace
                    with temp_root("big-cold") as cold, temp_root("big-cache") as cache:
                        shutil.copytree(root, cold, dirs_exist_ok=True)
                        cold_close = await asyncio.to_thread(
                            _child, "close", system, cold, megabytes, cache
                        )
                    extra[f"{megabytes}mb_cold_cache"] = cold_close
                closed = await asyncio.to_thread(_child, "close", system, root, megabytes)
            results[system] = {**setup, **closed}
            progress(
                f"big rollout: {system} {setup['rollout_mb']:.0f} MB rollout, peak "
                f"{closed['peak_mb']:.0f} MB, close {closed['seconds']:.1f}s"
            )
        extra[f"{megabytes}mb"] = results
        o, b = results["ours"], results["builtin"]
        grow_o, grow_b = o["peak_mb"] - o["before_mb"], b["peak_mb"] - b["before_mb"]
        cold = extra.get(f"{megabytes}mb_cold_cache")
        cold_note = (
            ""
            if cold is None
            else f"; ours with an empty database cache (first process on a machine): growth "
            f"{cold['peak_mb'] - cold['before_mb']:.1f} MB"
        )
        rows.append(
            Row(
                name=f"big_rollout.growth.{megabytes}mb",
                metric=(
                    f"peak RSS minus resident size before the last run, {o['rollout_mb']:.0f} MB "
                    "rollout"
                ),
                unit="MB",
                ours=grow_o,
                builtin=grow_b,
                target="ours <= 0.5x built-in",
                met=grow_o <= 0.5 * grow_b,
                note=(
                    f"peak RSS: ours {o['peak_mb']:.0f} MB, built-in {b['peak_mb']:.0f} MB "
                    f"(resident before the run: {o['before_mb']:.0f} / {b['before_mb']:.0f} MB); "
                    f"close: ours {o['seconds']:.2f} s, built-in {b['seconds']:.2f} s" + cold_note
                ),
            )
        )
    top = max(sizes)
    o, b = extra[f"{top}mb"]["ours"], extra[f"{top}mb"]["builtin"]
    rows.append(
        Row(
            name=f"big_rollout.close_seconds.{top}mb",
            metric=f"wall time of the last run's recording and the close, {top} MB rollout",
            unit="s",
            ours=o["seconds"],
            builtin=b["seconds"],
            target="ours <= built-in",
            met=o["seconds"] <= b["seconds"],
        )
    )
    return rows, {"big_rollout": extra}


if __name__ == "__main__":
    child_main(sys.argv[1:])
