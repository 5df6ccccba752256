"""The runtime over every backend of the store seam: record, close, read, Remember and Forget
work the same whether memory is kept in workspace files, in the process or in PostgreSQL.

The runtime reaches memory only through :class:`~sandbox_memory.stores.seam.MemoryStore`;
what describes this workspace's rendered files (``store/rendered.json``, the saved rendering,
``store/prompt.json``, item digests) stays in the workspace whatever the backend
(:class:`~sandbox_memory.workspace.records.LocalRecords`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from helpers import layout_runtime, run_payload
from sandbox_memory import Forget, MemoryClient, Remember
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.stores.memory import InMemoryStore
from sandbox_memory.stores.postgres import PostgresStore
from sandbox_memory.stores.postgres_seam import PostgresMemoryStore
from sandbox_memory.stores.seam import MemoryStore

TOLD = "Always run the tests with `make check`. The invoice total rounds tax in acme/invoice.py."


@pytest.fixture(params=["files", "memory", "postgres"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[MemoryStore | None]:
    """``None``: the default, workspace files; else the store the runtime is given."""

    if request.param == "files":
        yield None
    elif request.param == "memory":
        yield InMemoryStore()
    else:
        store = PostgresMemoryStore(
            PostgresStore(request.getfixturevalue("pg_dsn"), namespace="runtime")
        )
        try:
            yield store
        finally:
            await store.pg.aclose()


def runtime(root: Path, backend: MemoryStore | None) -> LayoutRuntime:
    runtime: LayoutRuntime = layout_runtime(root, backend=backend)
    return runtime


def memory_records(root: Path) -> list[str]:
    """Memory's own records found in the workspace (layout, conversations, progress, log)."""

    store = root / "memories" / "store"
    found = [p for d in ("layout", "conversations", "progress") for p in (store / d).glob("*")]
    found += [p for p in (store / "log.jsonl", store / "registry.json") if p.exists()]
    return sorted(p.relative_to(root).as_posix() for p in found)


async def test_a_run_is_learned_shown_and_changed_through_any_store(
    backend: MemoryStore | None, tmp_path: Path
) -> None:
    rt = runtime(tmp_path, backend)
    store = rt.store
    rid = await rt.record(run_payload(TOLD), rollout_id="r1")
    assert await store.pending_rollouts() == [rid]
    report = await rt.close()
    assert report["extracted"] == [rid]
    assert await store.pending_rollouts() == []

    layout = await store.load_layout()
    assert layout.entries["test-command"].status == "active"
    memory_md = (tmp_path / "memories" / "MEMORY.md").read_text()
    assert "make check" in memory_md
    # The workspace's own records are in the workspace, memory's only where the store keeps it.
    assert (tmp_path / "memories" / "store" / "rendered.json").exists()
    assert (tmp_path / "memories" / "store" / "items" / f"{rid}.txt").exists()
    if backend is None:
        assert memory_records(tmp_path)
    else:
        assert memory_records(tmp_path) == []

    client = MemoryClient(tmp_path, runtime=rt)
    view = await client.view()
    await client.apply(
        Remember(key="release-day", content="Releases ship on Tuesdays.", kind="decision"),
        expected=view.version,
    )
    assert "Releases ship on Tuesdays." in (tmp_path / "memories" / "MEMORY.md").read_text()
    hits = await client.search("make check")
    assert any("make check" in hit.text for hit in hits)

    # A Forget retracts the layout entry and, in the same commit, its copy in the
    # conversation that taught it (``MemoryStore.retract_copies``, set by the runtime).
    conversation = await store.load_conversation(rid)
    assert conversation.entries["test-command"].status == "active"
    view = await client.view()
    await client.apply(Forget(key="test-command"), expected=view.version)
    assert (await store.load_layout()).entries["test-command"].status == "retracted"
    conversation = await store.load_conversation(rid)
    assert conversation.entries["test-command"].status == "retracted"
    assert "make check" not in (tmp_path / "memories" / "MEMORY.md").read_text()


async def test_a_new_runtime_on_the_same_store_renders_what_the_last_one_learned(
    backend: MemoryStore | None, tmp_path: Path
) -> None:
    first = runtime(tmp_path, backend)
    await first.record(run_payload(TOLD), rollout_id="r1")
    await first.close()
    rendered = (tmp_path / "memories" / "MEMORY.md").read_text()
    (tmp_path / "memories" / "MEMORY.md").unlink()
    (tmp_path / "memories" / "store" / "rendered.json").unlink()

    again = runtime(tmp_path, backend)
    await again.render_current()
    assert (tmp_path / "memories" / "MEMORY.md").read_text() == rendered


async def test_a_shared_store_and_a_backend_are_not_both_taken(tmp_path: Path) -> None:
    shared: Any = object()
    with pytest.raises(ValueError, match="backend=InMemoryStore"):
        layout_runtime(tmp_path, store=shared, backend=InMemoryStore())


async def test_a_line_added_to_memory_md_is_taken_in_through_any_store(
    backend: MemoryStore | None, tmp_path: Path
) -> None:
    rt = runtime(tmp_path, backend)
    await rt.record(run_payload(TOLD), rollout_id="r1")
    await rt.close()
    memory_md = tmp_path / "memories" / "MEMORY.md"
    line = "- **deploy-target** (decision): Deploy to the staging cluster first.\n"
    memory_md.write_text(memory_md.read_text() + line)
    assert await rt.memory_md_edited() is not None
    await rt.close()
    entry = (await rt.store.load_layout()).entries["deploy-target"]
    assert entry.content == "Deploy to the staging cluster first."
    # Edited between runs, so by a person (a run's own edit would be a live update).
    logged = [(r.cause, r.scope, r.keys) for r in await rt.store.read_log()]
    assert ("person", "layout", ["deploy-target"]) in logged


async def test_memory_having_been_here_is_asked_of_the_store(
    backend: MemoryStore | None, tmp_path: Path
) -> None:
    """Before memory's first rendering, ``memory_summary.md`` is read as the SDK's (carried
    over); once memory has recorded here, a file appearing there is not taken as the SDK's,
    whichever store holds memory (it may be the agent's)."""

    from sandbox_memory.consolidate.carryover import sdk_summary

    rt = runtime(tmp_path, backend)
    summary = tmp_path / "memories" / "memory_summary.md"
    summary.parent.mkdir(parents=True)
    summary.write_text("The SDK's summary.\n")
    assert await sdk_summary(rt.state) == "The SDK's summary."
    summary.unlink()
    await rt.record(run_payload(TOLD), rollout_id="r1")
    await rt.close()
    (tmp_path / "memories" / "store" / "rendered.json").unlink()
    summary.write_text("Written after memory was here.\n")
    assert await sdk_summary(rt.state) is None
