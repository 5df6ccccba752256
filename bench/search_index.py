"""Cost of the search index (issue 11): build, incremental update, query, the session path.

    python bench/search_index.py                 # 200 conversations x 10 runs
    python bench/search_index.py --conversations 50 --runs 5

On a workspace of recorded chat runs (two items a run, plus a 2 kB tool output every third run)
the script prints:

- the first full build: documents written, seconds, index bytes against the rollout bytes;
- one more run recorded: documents written by the next sync (the cost is the new material,
  not the history) and its time; a sync with nothing new;
- query latency (median and max over a set of queries, the sync before each included);
- through the session API (``SessionWorkspace`` over a live ``UnixLocalSandboxClient``
  session, the path of every non-local backend): fetching the index into a local copy, the
  first sync of a runtime (a size check per rollout), a sync after one more run, and writing
  the copy back at close.

A script, not a test: nothing gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.pop("OPENAI_API_KEY", None)

TOPICS = (
    "the kiln firing schedule",
    "the staging database port",
    "the ferry to Naxos",
    "the parser regression in lexer.py",
    "Caroline's adoption interview",
    "the invoice discount bug",
    "the rental car booking",
    "the marathon training plan",
)

QUERIES = (
    "kiln firing",
    "database port staging",
    "ferry Naxos Tuesday",
    "lexer regression",
    "adoption interview",
    "discount invoice test",
    "rental car",
    "marathon plan week",
    "what did they decide about the schedule",
    "port 6543",
)


def payload(conv: int, run: int) -> dict[str, Any]:
    topic = TOPICS[(conv + run) % len(TOPICS)]
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"Noted {topic} for run {run}."}],
        }
    ]
    if run % 3 == 0:
        items.append(
            {
                "type": "function_call_output",
                "call_id": f"c{run}",
                "output": (f"log line {run}: {topic} checked; " * 60)[:2_000],
            }
        )
    return {
        "updated_at": f"2026-01-{1 + run % 28:02d}T10:{conv % 60:02d}:00+00:00",
        "input": [
            {
                "role": "user",
                "content": f"In conversation {conv}, run {run}: let's talk about {topic}, "
                f"item {conv * 31 + run}.",
            }
        ],
        "generated_items": items,
    }


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


async def main(conversations: int, runs: int) -> None:
    from agents.sandbox import Manifest
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

    from sandbox_memory import MemoryClient, MemoryGenerateConfig
    from sandbox_memory.search.index import INDEX_FILE
    from sandbox_memory.workspace import SessionWorkspace

    root = Path(tempfile.mkdtemp(prefix="bench-search-"))
    try:
        client = MemoryClient(root, generate=MemoryGenerateConfig(engine="offline"))
        rt = client.runtime
        for conv in range(conversations):
            for run in range(runs):
                await rt.record(payload(conv, run), rollout_id=f"conv-{conv}")
        sessions = folder_bytes(root / "sessions")
        index = rt.search_index

        started = time.perf_counter()
        built = await index.sync()
        build_s = time.perf_counter() - started
        size = (root / "memories" / "store" / INDEX_FILE).stat().st_size
        print(f"workspace: {conversations} conversations x {runs} runs, {sessions:,} rollout bytes")
        print(
            f"build:       {built:,} documents in {build_s:.2f} s; index {size:,} bytes "
            f"({size / sessions:.2f}x the rollout bytes)"
        )

        await rt.record(payload(0, runs), rollout_id="conv-0")
        started = time.perf_counter()
        added = await index.sync()
        one_s = time.perf_counter() - started
        started = time.perf_counter()
        nothing = await index.sync()
        none_s = time.perf_counter() - started
        print(
            f"one run more: {added} documents written in {one_s * 1000:.1f} ms "
            f"(history: {built:,}); nothing new: {nothing} in {none_s * 1000:.1f} ms"
        )

        times = []
        for query in QUERIES * 3:
            started = time.perf_counter()
            hits = await client.search(query)
            times.append(time.perf_counter() - started)
            assert hits, query
        print(
            f"search:      median {statistics.median(times) * 1000:.1f} ms, "
            f"max {max(times) * 1000:.1f} ms over {len(times)} queries (sync included)"
        )
        index.close()

        sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
        async with sandbox:
            remote = MemoryClient(
                SessionWorkspace(sandbox), generate=MemoryGenerateConfig(engine="offline")
            )
            rindex = remote.runtime.search_index
            started = time.perf_counter()
            await rindex._open()  # noqa: SLF001 - the fetch alone, for the figure
            fetch_s = time.perf_counter() - started
            started = time.perf_counter()
            first = await rindex.sync()
            first_s = time.perf_counter() - started
            await remote.runtime.record(payload(1, runs), rollout_id="conv-1")
            started = time.perf_counter()
            later = await rindex.sync()
            later_s = time.perf_counter() - started
            started = time.perf_counter()
            await rindex.save()
            save_s = time.perf_counter() - started
            rindex.close()
        print(
            f"session API: fetch {size:,} bytes {fetch_s * 1000:.0f} ms; first sync of a "
            f"runtime ({conversations} size checks, {first} written) {first_s * 1000:.0f} ms; "
            f"after one run ({later} written) {later_s * 1000:.0f} ms; write back at close "
            f"{save_s * 1000:.0f} ms"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(main(args.conversations, args.runs))
