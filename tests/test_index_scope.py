"""Phase 2's search-index syncs cost the new work: only the rollouts flagged since the last sync
are looked at, and none is missed (another process's runs, an extraction whose own sync was
lost, a copy never written back, a change racing the sync). Search hits come in a fixed order,
ties included, however the index was filled. Counted in workspace calls, not timed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox import Manifest

from helpers import layout_runtime, run_payload
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.search import index as search
from sandbox_memory.search.index import sync as index_sync
from sandbox_memory.workspace import LocalWorkspace, SessionWorkspace
from test_extract_scale import ListingCounter

STORE = "memories/store"
LISTED = {"sessions", "memories/rollout_summaries"}


def run(text: str, reply: str = "Done.", when: str = "2026-01-01T00:00:00+00:00") -> dict[str, Any]:
    return run_payload(text, reply=reply, when=when, completed=True)


def reading(path: str) -> dict[str, Any]:
    """A run whose tool call reads a memory file (a use of that conversation)."""

    return run_payload(
        "Build it.",
        reply=None,
        when="2026-01-05T00:00:00+00:00",
        items=[
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": "r1",
                "arguments": json.dumps({"cmd": f"cat {path}"}),
            }
        ],
    )


async def phase_two(rt: LayoutRuntime) -> None:
    async with rt.write_lock():
        await rt.consolidate_layout()


def docs_of(rt: LayoutRuntime, rid: str) -> set[str]:
    """The kinds of the index's documents of conversation ``rid`` (read without a sync)."""

    db = rt.search_index._db
    assert db is not None
    return {k for (k,) in db.execute("SELECT kind FROM docs WHERE conversation = ?", (rid,))}


def flags(root: Path, folder: str) -> set[str]:
    path = root / STORE / folder
    return {p.name for p in path.iterdir()} if path.is_dir() else set()


async def seeded(root: Path, n: int = 4) -> tuple[ListingCounter, LayoutRuntime]:
    """A store of ``n`` conversations, extracted and consolidated (the index has listed every
    rollout once), and a counting workspace on it."""

    ws = ListingCounter(root)
    rt = layout_runtime(ws)
    for k in range(n):
        await rt.record(run(f"Old run {k}: the staging database is db{k}."), rollout_id=f"old{k}")
    await rt.close()
    ws.listed.clear()
    return ws, rt


async def test_phase_two_looks_only_at_the_rollouts_flagged_since_the_last_sync(
    tmp_path: Path,
) -> None:
    ws, rt = await seeded(tmp_path)
    await rt.record(run("We take the Zanzibar ferry on Tuesdays."), rollout_id="new")
    await rt.close()
    # Neither of phase 2's syncs listed sessions/ or rollout_summaries/ ...
    assert not LISTED & set(ws.listed), ws.listed
    # ... yet the new run's items and summary are in the index before any search.
    assert {"item", "rollout_summary"} <= docs_of(rt, "new")
    ws.listed.clear()
    await phase_two(rt)  # nothing new
    assert not LISTED & set(ws.listed)
    assert await rt.search_index.sync() == 0  # a search's whole sync finds nothing left


async def test_another_process_s_run_is_indexed_and_counted_by_the_next_phase_two(
    tmp_path: Path,
) -> None:
    ws, rt = await seeded(tmp_path)
    summary = next((tmp_path / "memories" / "rollout_summaries").glob("old0_*.md"))
    # Another process records a run that reads old0's summary; nothing is extracted there.
    other = layout_runtime(LocalWorkspace(tmp_path))
    await other.record(reading(f"memories/rollout_summaries/{summary.name}"), rollout_id="other")
    fresh = layout_runtime(ws)  # this process again, started afresh
    await phase_two(fresh)
    assert not LISTED & set(ws.listed)
    assert "item" in docs_of(fresh, "other")
    assert (await fresh.search_index.usage())["old0"][0] == 1


async def test_an_extraction_whose_own_index_sync_was_lost_is_indexed_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ws, rt = await seeded(tmp_path)
    await rt.record(run("The Zanzibar ferry leaves at noon."), rollout_id="lost")

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk full")

    # This process extracts the run, but every index sync of it fails (logged) and it ends.
    monkeypatch.setattr(rt.search_index, "_sync_rollouts", broken)
    await rt.close()
    assert "could not be updated" in caplog.text
    rt.search_index.close()
    # The next process's pending check finds the rollout read to its end and clears its
    # pending flag: the flag passes to the index ...
    later = layout_runtime(ws)
    assert await later.pending_rollouts() == []
    assert "lost" not in flags(tmp_path, "pending")
    assert "lost" in flags(tmp_path, "unindexed")
    # ... whose next phase 2 looks at it, without listing every rollout, and clears it.
    await phase_two(later)
    assert not LISTED & set(ws.listed)
    assert {"item", "rollout_summary"} <= docs_of(later, "lost")
    assert flags(tmp_path, "unindexed") == set()


async def test_a_rollout_changed_while_the_index_looked_is_flagged_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, rt = await seeded(tmp_path)
    await rt.record(run("First part."), rollout_id="busy")
    await rt.close()
    assert await rt.pending_rollouts() == []  # its pending flag passes to the index
    assert flags(tmp_path, "unindexed") == {"busy"}
    store = rt.state.store
    clear = store.rollouts_indexed

    async def racing(ids: Any) -> None:
        # Another process appends after the index looked, before the flag is cleared.
        await layout_runtime(LocalWorkspace(tmp_path)).record(
            run("Second part: Quetzal."), rollout_id="busy"
        )
        await clear(ids)

    monkeypatch.setattr(store, "rollouts_indexed", racing)
    await phase_two(rt)
    monkeypatch.setattr(store, "rollouts_indexed", clear)
    assert "busy" in flags(tmp_path, "unindexed") | flags(tmp_path, "pending")
    await phase_two(rt)
    db = rt.search_index._db
    assert db is not None
    texts = [search._unpack(t) for (t,) in db.execute("SELECT text FROM docs WHERE kind = 'item'")]
    assert any("Quetzal" in t for t in texts)


async def test_many_flagged_rollouts_are_found_by_one_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws, rt = await seeded(tmp_path)
    monkeypatch.setattr(index_sync, "FLAGGED_SYNC_MAX", 2)
    for k in range(3):
        await rt.record(run(f"Batch run {k}."), rollout_id=f"batch{k}")
    await rt.search_index.sync(flagged=True)
    assert sorted(ws.listed) == sorted(LISTED)  # one listing each, not a look at each rollout
    assert all("item" in docs_of(rt, f"batch{k}") for k in range(3))


async def test_a_deleted_index_is_rebuilt_from_a_listing_by_the_next_phase_two(
    tmp_path: Path,
) -> None:
    ws, rt = await seeded(tmp_path)
    before = await rt.search_index.count()
    rt.search_index.close()
    (tmp_path / STORE / search.INDEX_FILE).unlink()
    fresh = layout_runtime(ws)
    await phase_two(fresh)
    assert "sessions" in ws.listed  # nothing flagged says what the new index lacks
    assert await fresh.search_index.count() == before


async def test_a_copy_of_the_index_clears_its_flags_only_once_written_back(
    client: Any, tmp_path: Path
) -> None:
    local = layout_runtime(LocalWorkspace(tmp_path))
    await local.record(run("The rental car is a red Fiat Panda."), rollout_id="trip")
    await local.close()
    assert await local.pending_rollouts() == []
    assert flags(tmp_path, "unindexed") == {"trip"}
    sandbox = await client.create(manifest=Manifest(root=str(tmp_path)))
    async with sandbox:
        rt = layout_runtime(SessionWorkspace(sandbox))
        await phase_two(rt)
        # Taken into the local copy only: a process ending here must leave the flag.
        assert flags(tmp_path, "unindexed") == {"trip"}
        await rt.save_search()
        assert flags(tmp_path, "unindexed") == set()


def noted() -> dict[str, Any]:
    return run("Please remember the invoice.", "Noted.", when="2026-02-01T09:00:00+00:00")


async def test_hits_that_tie_come_in_the_same_order_however_the_index_was_filled(
    tmp_path: Path,
) -> None:
    orders = []
    for name, first, second in (("one", "a", "b"), ("two", "b", "a")):
        (tmp_path / name).mkdir()
        rt = layout_runtime(LocalWorkspace(tmp_path / name))
        for rid in ("a", "b"):
            await rt.record(noted(), rollout_id=rid)
        # The two conversations' identical items go into the index in opposite orders.
        await rt.search_index.sync([first])
        await rt.search_index.sync([second])
        hits = await rt.search_index.search("noted invoice", limit=10)
        orders.append([(h.kind, h.conversation, h.text, h.score) for h in hits])
    assert orders[0] == orders[1]
    # Each statement twice, with the same score and time: by document id, a before b.
    assert [(c, t) for _, c, t, _ in orders[0]] == [
        ("a", "Noted."),
        ("b", "Noted."),
        ("a", "Please remember the invoice."),
        ("b", "Please remember the invoice."),
    ]
    assert orders[0][0][3] == orders[0][1][3] and orders[0][2][3] == orders[0][3][3]
