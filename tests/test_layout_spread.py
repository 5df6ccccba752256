"""Layout memory's shards grow in number with it: each stays a few dozen entries, an earlier
store is spread once by its next writer, and a writer killed while spreading loses nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import adopt_store, read_layout
from sandbox_memory.stores import records
from sandbox_memory.stores.files import Store
from sandbox_memory.stores.records import Entry, LayoutMemory, Source
from sandbox_memory.workspace import LocalWorkspace

STORE = "memories/store"


def _entry(i: int) -> Entry:
    return Entry(
        key=f"entry-{i:04d}",
        content=f"Fact {i} about the parser.",
        kind="fact",
        sources=[Source(conversation=f"conv-{i % 7}", item=f"{i:08x}:1")],
        updated_at=1_700_000_000_000 + i,
    )


def _single_file_store(root: Path, count: int) -> dict[str, Entry]:
    entries = {e.key: e for e in (_entry(i) for i in range(count))}
    store = root / STORE
    store.mkdir(parents=True)
    doc = LayoutMemory(version=3, entries=entries)
    (store / "layout.json").write_text(doc.model_dump_json())
    return entries


async def _store_of_64_shards_counting_none(root: Path, count: int) -> dict[str, Entry]:
    """A store split over 64 shards whose head names neither a count of shards nor of
    entries, as a release before the count grew wrote it."""

    entries = _single_file_store(root, count)
    await Store(LocalWorkspace(root), "memories").recover_layout()  # split: 64 shards
    head_path = root / STORE / "layout/head.json"
    head = json.loads(head_path.read_text())
    assert head["shards"] == 64
    del head["shards"], head["entries"]
    head_path.write_text(json.dumps(head))
    return entries


def _shard_files(root: Path) -> list[str]:
    return sorted(p.name for p in (root / STORE / "layout").glob("shard-*.json"))


def _stored(root: Path) -> dict[str, object]:
    return dict(read_layout(root)["entries"])


async def test_a_large_layout_memory_is_split_over_shards_of_a_few_dozen_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_memory import MemoryClient, MemoryGenerateConfig, Remember

    monkeypatch.setattr(records, "SHARD_ENTRIES", 10)
    old = _single_file_store(tmp_path, 700)
    await adopt_store(tmp_path)  # an earlier build's records: sealed by a person
    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    await client.apply(
        Remember(key="new-fact", content="CI runs on 3.12.", kind="fact"), expected=3
    )
    files = _shard_files(tmp_path)
    # 700 entries are more than 64 shards of 10: 128 shards, named by their count.
    assert all(name.startswith("shard-128-") for name in files)
    assert 120 < len(files) <= 128
    head = json.loads((tmp_path / STORE / "layout/head.json").read_text().split("\n")[0])
    assert (head["shards"], head["entries"]) == (128, 701)
    again = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    assert set((await again.view(None)).entries) == {*old, "new-fact"}


async def test_an_earlier_stores_64_shards_are_spread_once_by_the_next_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = await _store_of_64_shards_counting_none(tmp_path, 600)
    before = _stored(tmp_path)
    assert len(_shard_files(tmp_path)) == 64
    monkeypatch.setattr(records, "SHARD_ENTRIES", 4)  # 600 entries: 256 shards of at most 4
    writer = Store(LocalWorkspace(tmp_path), "memories")
    await writer.recover_layout()
    files = _shard_files(tmp_path)
    assert files and all(name.startswith("shard-256-") for name in files)
    assert _stored(tmp_path) == before
    head = json.loads((tmp_path / STORE / "layout/head.json").read_text())
    assert (head["shards"], head["entries"]) == (256, 600)
    reader = Store(LocalWorkspace(tmp_path), "memories")
    wanted = ["entry-0007", "entry-0420", "missing"]
    assert sorted(await reader.layout_entries(wanted)) == ["entry-0007", "entry-0420"]
    assert set((await reader.layout_for_reading()).entries) == set(entries)
    _, view = await reader.layout_view()
    assert view["entry-0599"].content == "Fact 599 about the parser."

    # Once: the next writer finds the count in the head and rewrites nothing.
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / STORE / "layout").iterdir()}
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / STORE / "layout").iterdir()} == stamps


async def test_a_commit_on_spread_shards_rewrites_one_and_keeps_the_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _store_of_64_shards_counting_none(tmp_path, 600)
    monkeypatch.setattr(records, "SHARD_ENTRIES", 4)
    writer = Store(LocalWorkspace(tmp_path), "memories")
    await writer.commit_layout(
        version=4, put={"entry-0900": _entry(900)}, delete=["entry-0001", "entry-0002"]
    )
    stored = _stored(tmp_path)
    assert "entry-0900" in stored and "entry-0001" not in stored and len(stored) == 599
    head = json.loads((tmp_path / STORE / "layout/head.json").read_text())
    assert (head["shards"], head["entries"], head["version"]) == (256, 599, 4)
    fresh = Store(LocalWorkspace(tmp_path), "memories")
    assert (await fresh.layout_entries(["entry-0900"]))["entry-0900"].content.startswith("Fact 900")


async def test_a_writer_killed_while_spreading_the_shards_leaves_the_old_ones_in_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class DiesAtNewShards(LocalWorkspace):
        async def write_atomic_many(self, items: list[tuple[str, bytes]]) -> None:  # type: ignore[override]
            if any("/layout/shard-256-" in path for path, _ in items):
                raise OSError(5, "killed", items[0][0])
            await super().write_atomic_many(items)

        async def write_atomic(self, path: str, data: bytes) -> None:
            if "/layout/shard-256-" in path:
                raise OSError(5, "killed", path)
            await super().write_atomic(path, data)

    entries = await _store_of_64_shards_counting_none(tmp_path, 600)
    before = _stored(tmp_path)
    monkeypatch.setattr(records, "SHARD_ENTRIES", 4)
    with pytest.raises(OSError, match="killed"):
        await Store(DiesAtNewShards(tmp_path), "memories").recover_layout()
    assert len(_shard_files(tmp_path)) == 64 and _stored(tmp_path) == before
    reader = Store(LocalWorkspace(tmp_path), "memories")
    assert set((await reader.layout_for_reading()).entries) == set(entries)
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()
    assert all(name.startswith("shard-256-") for name in _shard_files(tmp_path))
    assert _stored(tmp_path) == before


async def test_old_shards_left_by_a_writer_killed_after_the_head_are_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class DiesAtRemoval(LocalWorkspace):
        async def remove(self, path: str) -> None:
            if "/layout/shard-" in path:
                raise OSError(5, "killed", path)
            await super().remove(path)

    entries = await _store_of_64_shards_counting_none(tmp_path, 600)
    monkeypatch.setattr(records, "SHARD_ENTRIES", 4)
    with pytest.raises(OSError, match="killed"):
        await Store(DiesAtRemoval(tmp_path), "memories").recover_layout()
    files = _shard_files(tmp_path)
    assert sum(1 for n in files if n.startswith("shard-256-")) > 200
    assert sum(1 for n in files if not n.startswith("shard-256-")) == 64  # the old ones
    reader = Store(LocalWorkspace(tmp_path), "memories")
    assert set((await reader.layout_for_reading()).entries) == set(entries)
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()
    assert all(name.startswith("shard-256-") for name in _shard_files(tmp_path))
