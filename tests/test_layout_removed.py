"""Keys removed from layout memory without rewriting their shards: the head names them, every
reader (another store object too) reads them as absent, a shard is rewritten without them once
they reach a share of its entries or when it is rewritten anyway, a key put again is present
again, and a writer killed at any write of such a commit leaves memory as before or as after."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import adopt_store, read_layout, sealed_store
from sandbox_memory.errors import MemoryConfigError
from sandbox_memory.stores import records
from sandbox_memory.stores.files import Store
from sandbox_memory.stores.records import Entry, LayoutMemory, Source, layout_shard
from sandbox_memory.workspace import LocalWorkspace

LAYOUT = "memories/store/layout"
COUNT = 2_000  # 64 shards of about 31 entries: a shard is rewritten at 4 removed keys


def _entry(i: int, content: str | None = None) -> Entry:
    return Entry(
        key=f"entry-{i:04d}",
        content=content or f"Fact {i} about the parser.",
        kind="fact",
        sources=[Source(conversation=f"conv-{i % 7}", item=f"{i:08x}:1")],
        updated_at=1_700_000_000_000 + i,
    )


async def _seeded(root: Path, count: int = COUNT) -> dict[str, Entry]:
    """A sealed store of ``count`` layout entries in 64 shards, split by this build."""

    entries = {e.key: e for e in (_entry(i) for i in range(count))}
    store = root / "memories/store"
    store.mkdir(parents=True)
    (store / "layout.json").write_text(LayoutMemory(version=1, entries=entries).model_dump_json())
    await adopt_store(root)
    await sealed_store(root).recover_layout()
    return entries


def _head(root: Path) -> dict[str, Any]:
    head: dict[str, Any] = json.loads((root / LAYOUT / "head.json").read_bytes())
    return head


def _shard_file(key: str) -> str:
    return f"shard-{layout_shard(key):02d}.json"


def _shard_bytes(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / LAYOUT).glob("shard-*.json"))}


def _same_shard(first: int, n: int) -> list[str]:
    """``n`` keys of the seeded store in the shard of ``entry-<first>``."""

    sid = layout_shard(f"entry-{first:04d}")
    return [k for k in (f"entry-{i:04d}" for i in range(COUNT)) if layout_shard(k) == sid][:n]


async def _everything(store: Store) -> dict[str, str]:
    """Layout memory as each way of reading it gives it (they must agree)."""

    _, view = await store.layout_view()  # first: from the shards, not from the whole read
    viewed = {k: e.content for k, e in view.items()}
    parts = {e.key: e.content for part in [p async for p in store.layout_parts()] for e in part}
    whole = {k: e.content for k, e in (await store.layout_for_reading()).entries.items()}
    assert whole == parts == viewed
    assert len(view) == len(whole)
    return whole


async def test_a_removal_leaves_the_shards_bytes_and_the_key_is_absent_for_another_store(
    tmp_path: Path,
) -> None:
    entries = await _seeded(tmp_path)
    before = _shard_bytes(tmp_path)
    gone = ["entry-0042", "entry-0777", "entry-1500"]
    assert len({layout_shard(k) for k in gone}) == 3
    writer = sealed_store(tmp_path)
    await writer.commit_layout(version=2, put={}, delete=gone)

    assert _shard_bytes(tmp_path) == before  # no shard written: the head names the keys
    head = _head(tmp_path)
    assert head["format"] == records.LAYOUT_FORMAT == 4
    assert sorted(k for keys in head["removed"].values() for k in keys) == sorted(gone)
    assert head["entries"] == COUNT - 3
    for store in (writer, sealed_store(tmp_path)):  # this store object, and a fresh one
        found = await store.layout_entries([*gone, "entry-0043"])
        assert sorted(found) == ["entry-0043"]
        everything = await _everything(store)
        assert set(everything) == set(entries) - set(gone)
        _, view = await store.layout_view()
        assert "entry-0042" not in view and view.get("entry-0777") is None
        assert store.refused == set() and not await store.layout_damaged()
    assert set(read_layout(tmp_path)["entries"]) == set(entries) - set(gone)

    # Removing a key again, or one never there, changes no count and names nothing new.
    await sealed_store(tmp_path).commit_layout(version=3, put={}, delete=["entry-0042", "nope"])
    assert _head(tmp_path)["entries"] == COUNT - 3
    assert sorted(k for keys in _head(tmp_path)["removed"].values() for k in keys) == sorted(gone)


async def test_a_shard_is_rewritten_without_its_removed_keys_once_they_reach_its_share(
    tmp_path: Path,
) -> None:
    await _seeded(tmp_path)
    keys = _same_shard(5, 4)
    name = _shard_file(keys[0])
    for n, key in enumerate(keys[:3]):
        before = (tmp_path / LAYOUT / name).read_bytes()
        await sealed_store(tmp_path).commit_layout(version=2 + n, put={}, delete=[key])
        assert (tmp_path / LAYOUT / name).read_bytes() == before
    assert _head(tmp_path)["removed"] == {name[6:8]: sorted(keys[:3])}

    # The fourth of about 31 entries: the share is reached, the shard rewritten without them.
    await sealed_store(tmp_path).commit_layout(version=5, put={}, delete=[keys[3]])
    stored = (tmp_path / LAYOUT / name).read_bytes()
    assert not any(f'"{k}":'.encode() in stored for k in keys)
    assert _head(tmp_path)["removed"] == {}
    assert _head(tmp_path)["entries"] == COUNT - 4
    fresh = sealed_store(tmp_path)
    assert await fresh.layout_entries(keys) == {}
    assert fresh.refused == set() and not await fresh.layout_damaged()


async def test_the_heads_list_past_its_bound_rewrites_the_shards_holding_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _seeded(tmp_path)
    monkeypatch.setattr(records, "LAYOUT_REMOVED_KEPT", 4)
    monkeypatch.setattr("sandbox_memory.stores.files.layout_commits.LAYOUT_REMOVED_KEPT", 4)
    pair = _same_shard(9, 2)
    singles = [k for k in (f"entry-{i:04d}" for i in range(100, 200))]
    others: list[str] = []
    for key in singles:
        if layout_shard(key) not in {layout_shard(k) for k in [*pair, *others]}:
            others.append(key)
    gone = [*pair, *others[:3]]  # five keys in four shards: one past the bound
    before = _shard_bytes(tmp_path)
    await sealed_store(tmp_path).commit_layout(version=2, put={}, delete=gone)
    after = _shard_bytes(tmp_path)
    assert [n for n in before if before[n] != after[n]] == [_shard_file(pair[0])]
    assert sorted(k for keys in _head(tmp_path)["removed"].values() for k in keys) == sorted(
        others[:3]
    )
    assert await sealed_store(tmp_path).layout_entries(gone) == {}


async def test_a_key_put_again_after_its_removal_is_present_again(tmp_path: Path) -> None:
    await _seeded(tmp_path)
    key, neighbour = _same_shard(11, 2)
    await sealed_store(tmp_path).commit_layout(version=2, put={}, delete=[key])
    assert key not in await sealed_store(tmp_path).layout_entries([key])

    back = _entry(int(key[-4:]), content="Back again.")
    await sealed_store(tmp_path).commit_layout(version=3, put={key: back})
    fresh = sealed_store(tmp_path)
    assert (await fresh.layout_entries([key]))[key].content == "Back again."
    assert (await _everything(fresh))[key] == "Back again."
    assert _head(tmp_path)["removed"] == {}
    assert _head(tmp_path)["entries"] == COUNT

    # A put into a shard holding a removed key rewrites it without that key's line.
    await sealed_store(tmp_path).commit_layout(version=4, put={}, delete=[key])
    await sealed_store(tmp_path).commit_layout(
        version=5, put={neighbour: _entry(int(neighbour[-4:]), content="Changed.")}
    )
    stored = (tmp_path / LAYOUT / _shard_file(key)).read_bytes()
    assert f'"{key}":'.encode() not in stored and b"Changed." in stored
    assert _head(tmp_path)["removed"] == {}
    fresh = sealed_store(tmp_path)
    assert key not in await fresh.layout_entries([key, neighbour])
    assert fresh.refused == set() and not await fresh.layout_damaged()


class _Killed(BaseException):
    """The writer dies here (not an error anything would catch)."""


WRITE_OPS = ("write_atomic", "write_atomic_many", "append_line", "remove", "rename")


def _dying(root: Path, kill_at: int) -> Any:
    """A store whose workspace dies just before its ``kill_at``-th write (0: never; counts)."""

    points: list[str] = []

    class Dying(LocalWorkspace):
        pass

    def wrap(name: str) -> Any:
        real = getattr(LocalWorkspace, name)

        async def op(self: Any, path: Any, *args: Any, **kw: Any) -> Any:
            points.append(f"{name} {path if isinstance(path, str) else path[0][0]}")
            if len(points) == kill_at:
                raise _Killed
            return await real(self, path, *args, **kw)

        return op

    for name in WRITE_OPS:
        setattr(Dying, name, wrap(name))
    store = sealed_store(root)
    store.ws = Dying(root)
    return store, points


async def test_a_writer_killed_at_each_write_of_a_removal_leaves_memory_before_or_after(
    tmp_path: Path,
) -> None:
    seed = tmp_path / "seed"
    await _seeded(seed)
    near = _same_shard(20, 4)
    await sealed_store(seed).commit_layout(version=2, put={}, delete=near[:3])
    # One commit: a put, a shard reaching its share (rewritten), removals named in the head.
    put = {"entry-0021": _entry(21, content="Changed."), "entry-9999": _entry(9999)}
    gone = [near[3], "entry-0300", "entry-0301", "entry-0302", "entry-1999"]

    async def commit(store: Store) -> None:
        await store.commit_layout(version=3, put=put, delete=gone)

    def copy(name: str) -> Path:
        shutil.copytree(seed, tmp_path / name)
        return tmp_path / name

    before = await _everything(sealed_store(seed))
    clean = copy("clean")
    store, points = _dying(clean, 0)
    await commit(store)
    after = await _everything(sealed_store(clean))
    assert after != before and set(before) - set(after) == set(gone)
    assert {p.split()[0] for p in points} >= {"write_atomic", "write_atomic_many", "remove"}
    # What the decisions name (not the stamp, nor the count of entries: about right, kept
    # from the shards a commit rewrites, which a killed writer may have rewritten already).
    unnamed = ("stamp", "changes", "entries", "memory_seal", "seals")
    head_after = {k: v for k, v in _head(clean).items() if k not in unnamed}

    for k in range(1, len(points) + 1):
        root = copy(f"kill-{k}")
        dying, _ = _dying(root, k)
        with pytest.raises(_Killed):
            await commit(dying)
        reader = sealed_store(root)
        seen = await _everything(reader)
        assert seen in (before, after), (k, points[k - 1])
        assert reader.refused == set(), (k, points[k - 1])
        await sealed_store(root).recover_layout()  # the next writer applies the commit again
        fresh = sealed_store(root)
        assert await _everything(fresh) == (before if seen == before else after), k
        assert fresh.refused == set() and not await fresh.layout_damaged(), k
        if seen == after:
            head = {n: v for n, v in _head(root).items() if n not in unnamed}
            assert head == head_after, (k, points[k - 1])
            assert _shard_bytes(root) == _shard_bytes(clean), (k, points[k - 1])
        shutil.rmtree(root)


async def test_a_format_3_head_is_read_as_before_and_its_next_writer_writes_format_4(
    tmp_path: Path,
) -> None:
    entries = await _seeded(tmp_path)
    store = Store(LocalWorkspace(tmp_path), "memories")  # not sealing: the head is edited
    head_path = tmp_path / LAYOUT / "head.json"
    head = _head(tmp_path)
    head.pop("memory_seal", None)
    del head["removed"]
    head["format"] = 3
    head_path.write_text(json.dumps(head))
    before = _shard_bytes(tmp_path)
    assert set(await _everything(store)) == set(entries)
    await Store(LocalWorkspace(tmp_path), "memories").commit_layout(
        version=2, put={}, delete=["entry-0042"]
    )
    assert _shard_bytes(tmp_path) == before
    assert _head(tmp_path)["format"] == 4
    fresh = Store(LocalWorkspace(tmp_path), "memories")
    assert set(await _everything(fresh)) == set(entries) - {"entry-0042"}


async def test_a_head_of_a_later_format_is_refused_naming_it(tmp_path: Path) -> None:
    await _seeded(tmp_path, 50)
    head = _head(tmp_path)
    head.pop("memory_seal", None)
    head["format"] = 5
    (tmp_path / LAYOUT / "head.json").write_text(json.dumps(head))
    store = Store(LocalWorkspace(tmp_path), "memories")
    for _ in range(2):  # refused at every read, not only the first
        with pytest.raises(MemoryConfigError, match=r"head.json format .* got: 5"):
            await store.layout_entries(["entry-0001"])
    with pytest.raises(MemoryConfigError, match="head.json format"):
        await Store(LocalWorkspace(tmp_path), "memories").commit_layout(version=9, put={})
