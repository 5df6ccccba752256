"""A close over a shared store: what it holds the lease for, and a real process killed in it.

Real server (``pg_dsn``), real runtimes on workspace folders, the offline engine (wrapped at
the engine seam only to see when extractions run).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pgserver import PostgresServer
from sandbox_memory.engines.base import Extraction, ExtractionRequest
from sandbox_memory.engines.offline import OfflineEngine
from sandbox_memory.stores import PostgresStore
from shared_flow import lesson, store_runtime, unstamped_noted_run

KILL = str(Path(__file__).with_name("shared_kill.py"))

OVERLAP_WAIT_SECONDS = 20.0
"""How long one extraction waits to see the other sandbox's start (generous: a loaded CI)."""


TAGS = {"a": "alpha", "b": "bravo"}


class Meeting(OfflineEngine):
    """The offline engine, which notes whether another sandbox's extraction ran meanwhile."""

    def __init__(self, mine: asyncio.Event, theirs: asyncio.Event) -> None:
        self.mine, self.theirs = mine, theirs
        self.met: bool | None = None

    async def extract(self, request: ExtractionRequest) -> Extraction:
        self.mine.set()
        try:
            await asyncio.wait_for(self.theirs.wait(), OVERLAP_WAIT_SECONDS)
            self.met = True
        except TimeoutError:
            self.met = False
        return await super().extract(request)


async def test_closes_of_two_sandboxes_extract_their_runs_at_the_same_time(
    pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started = {"a": asyncio.Event(), "b": asyncio.Event()}
    engines = {
        "a": Meeting(started["a"], started["b"]),
        "b": Meeting(started["b"], started["a"]),
    }
    stores = {n: PostgresStore(pg_dsn, namespace="acme") for n in engines}
    rts = {n: store_runtime(tmp_path / n, stores[n], engines[n]) for n in engines}
    for n, rt in rts.items():
        await rt.record(unstamped_noted_run(lesson(TAGS[n])), rollout_id=f"conv-{n}")
    # Each close extracts its own run; neither waits for the other's lease to do so.
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        reports = await asyncio.gather(*(rt.close() for rt in rts.values()))
    assert caplog.text == ""  # no run extracted twice, so no change of one rejected
    assert engines["a"].met and engines["b"].met, "one close extracted under the other's lease"
    assert [r["extracted"] for r in reports] == [["conv-a"], ["conv-b"]]  # each its own, once
    # And nothing is lost: both lessons reached the store's layout memory, each run once.
    layout = (await stores["a"].read_scope("layout")).entries.values()
    for n in engines:
        assert any(f"deploy-{TAGS[n]}" in e.content for e in layout), n
    rollouts = await stores["a"].rollouts()
    assert {r: (s.segments, s.watermark) for r, s in rollouts.items()} == {
        "conv-a": (1, 1),
        "conv-b": (1, 1),
    }
    for s in stores.values():
        await s.aclose()


@pytest.mark.slow
def test_a_close_killed_by_sigkill_at_each_write_point_then_closed_again_loses_nothing(
    pg_dsn: str, tmp_path: Path
) -> None:
    """A real process per kill point (forked from one that imported everything once), killed
    by SIGKILL just before a statement that changes the store or a write to its copy."""

    env = {**os.environ, "OPENAI_API_KEY": "", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = subprocess.run(
        [sys.executable, KILL, pg_dsn, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    points: list[str] = out["points"]
    store_points = [p for p in points if p.split()[0] in ("INSERT", "UPDATE", "DELETE")]
    assert len(store_points) >= 10 and len(points) > len(store_points), points
    results = out["results"]
    store_ks = {k for k, p in enumerate(points, 1) if p in store_points}
    assert store_ks <= {r["k"] for r in results}  # every store write point, at least
    assert all(r["killed"] for r in results), [r for r in results if not r["killed"]]
    # Points before the lease (claims, extraction of its own runs), then points under it,
    # where the dead process never released it.
    held = [r["lease_held"] for r in results]
    assert held == sorted(held) and held[0] == 0 and held[-1] == 1, held
    assert [r for r in results if r["differs"]] == []


async def test_a_fresh_process_closing_a_copy_refuses_none_of_its_records(
    pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy whose records and runs were sealed after the store was reached, closed by a new
    process (a new runtime, nothing keyed yet): its head, shards, log and its own run are all
    memory's, so none is refused or kept aside, and the run it recorded is extracted."""

    seed = PostgresStore(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "seed", seed)
    await rt.record(unstamped_noted_run(lesson("old")), rollout_id="r0")
    await rt.close()
    await seed.aclose()
    mine = PostgresStore(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "here", mine)
    await rt.start_run()  # the copy takes in the store's layout memory, sealed here
    await rt.record(unstamped_noted_run(lesson("new")), rollout_id="r1")
    await mine.aclose()

    fresh = PostgresStore(pg_dsn, namespace="acme")
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        report = await store_runtime(tmp_path / "here", fresh).close()
    assert caplog.text == ""
    assert report["extracted"] == ["r1"]
    assert not [p.name for p in (tmp_path / "here").rglob("*.unsealed-*")]
    layout = (await fresh.read_scope("layout")).entries.values()
    assert any("deploy-new" in e.content for e in layout)
    await fresh.aclose()


async def test_a_fresh_process_closing_a_copy_while_the_store_is_away_keeps_its_records(
    pg_server: PostgresServer, pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The copy's records are sealed with the host's key: a new process that cannot reach
    the store (so has not the namespace's key) still reads them as memory's, keeps its
    layout memory in ``MEMORY.md``, and leaves the run it cannot verify for the next close."""

    seed = PostgresStore(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "seed", seed)
    await rt.record(unstamped_noted_run(lesson("old")), rollout_id="r0")
    await rt.close()
    await seed.aclose()
    mine = PostgresStore(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "here", mine)
    await rt.start_run()
    await rt.record(unstamped_noted_run(lesson("new")), rollout_id="r1")
    await mine.aclose()
    pg_server.stop()
    try:
        away = PostgresStore(pg_dsn, namespace="acme", connect_timeout=1)
        with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
            report = await store_runtime(tmp_path / "here", away).close()
        assert "no valid seal: not written by memory" not in caplog.text
        assert not [p.name for p in (tmp_path / "here").rglob("*.unsealed-*")]
        assert "deploy-old" in (tmp_path / "here" / "memories" / "MEMORY.md").read_text()
        assert report["extracted"] == []  # its line is sealed with the namespace's key
    finally:
        pg_server.start()
    back = PostgresStore(pg_dsn, namespace="acme")
    assert (await store_runtime(tmp_path / "here", back).close())["extracted"] == ["r1"]
    layout = (await back.read_scope("layout")).entries.values()
    assert any("deploy-new" in e.content for e in layout)
    await back.aclose()
