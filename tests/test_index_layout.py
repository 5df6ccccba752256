"""The search index follows layout memory by the keys each commit names.

Every commit of layout memory names the keys it put or removed in the head (a rebuild, or a
shard rewritten, names every entry); the index keeps the stamp it last synced layout memory
at and compares only the entries named since then, whoever made the commits and however a
writer was cut short. These tests compare the index with one built afresh from the same
workspace, and count the shards a sync reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from helpers import index_entry_rows, rebuilt_index_rows
from sandbox_memory import MemoryClient, MemoryGenerateConfig
from sandbox_memory.stores.files import Store
from sandbox_memory.stores.records import Entry, LogRecord, Source, layout_shard
from sandbox_memory.workspace import LocalWorkspace

COUNT = 300


def _entry(i: int, **kw: Any) -> Entry:
    fields: dict[str, Any] = {
        "key": f"entry-{i:04d}",
        "content": f"Fact {i} about the parser module.",
        "kind": "fact",
        "sources": [Source(conversation=f"conv-{i % 7}", item=f"{i:08x}:1")],
        "updated_at": 1_700_000_000_000 + i,
    }
    fields.update(kw)
    return Entry(**fields)


class Reads(LocalWorkspace):
    """A local folder that lists the files read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    async def read_bytes(self, path: str) -> bytes | None:
        self.reads.append(path)
        return await super().read_bytes(path)

    def shards(self) -> set[int]:
        return {int(p[-7:-5]) for p in self.reads if "/layout/shard-" in p}


def client_for(ws: LocalWorkspace | Path) -> MemoryClient:
    return MemoryClient(ws, generate=MemoryGenerateConfig(engine="offline"))


async def commit(store: Store, put: dict[str, Entry], delete: tuple[str, ...] = ()) -> None:
    """A change of layout memory by another process, which never syncs the index."""

    head = await store.layout_head()
    record = LogRecord(
        version=head.version + 1,
        at=1,
        cause="person",
        scope="layout",
        keys=sorted({*put, *delete}),
    )
    await store.commit_layout(version=head.version + 1, put=put, delete=delete, log=[record])


@pytest.fixture
async def indexed(tmp_path: Path) -> Path:
    """A workspace whose layout memory holds ``COUNT`` entries, indexed."""

    root = tmp_path / "ws"
    root.mkdir()
    client = client_for(root)
    await client.create()
    await commit(client.runtime.store, {e.key: e for e in map(_entry, range(COUNT))})
    assert len(await client.search("parser", limit=100)) == 100
    client.runtime.search_index.close()
    return root


def _writer(root: Path) -> Store:
    """Another process's store: it seals what it writes with the host's key, as a runtime's
    store does (a record without the seal is refused as not memory's)."""

    from sandbox_memory.integrity import SegmentSeal, host_keys

    store = Store(LocalWorkspace(root), "memories")
    seal = SegmentSeal(host_keys())
    store.record_seal = lambda: seal
    return store


async def test_a_change_by_another_process_is_indexed_reading_only_the_shards_it_names(
    indexed: Path, tmp_path: Path
) -> None:
    other = _writer(indexed)
    retracted = _entry(11, status="retracted", content="Fact 11 was wrong.")
    changed = _entry(12, content="The lexer moved to tokens.py.")
    added = _entry(COUNT + 1, content="Deploys go through the staging queue.")
    await commit(
        other,
        {e.key: e for e in (retracted, changed, added)},
        delete=("entry-0013",),
    )
    named = {layout_shard(k) for k in (retracted.key, changed.key, added.key, "entry-0013")}

    ws = Reads(indexed)
    client = client_for(ws)  # a fresh process: nothing cached
    hits = await client.search("lexer tokens staging queue")
    assert {h.key for h in hits if h.kind == "entry"} == {changed.key, added.key}
    assert ws.shards() <= named, sorted(ws.shards())
    client.runtime.search_index.close()
    rows = index_entry_rows(indexed)
    assert rows == await rebuilt_index_rows(indexed, tmp_path / "rebuilt")
    assert "entry:layout:entry-0013" not in rows["docs"]
    assert "entry:layout:entry-0011" not in rows["docs"]
    assert any(row[1] == "entry-0011" for row in rows["retracted"])

    # Nothing changed since: the sync reads no shard at all.
    ws.reads.clear()
    await client.search("parser")
    assert ws.shards() == set()


async def test_an_index_older_than_the_commits_the_head_names_compares_every_entry(
    indexed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_memory.stores.files import layout_commits as store_module

    monkeypatch.setattr(store_module, "LAYOUT_CHANGES_KEPT", 3)
    other = _writer(indexed)
    for i in range(5):
        await commit(other, {f"entry-{i:04d}": _entry(i, content=f"Rewritten {i} times.")})
    ws = Reads(indexed)
    client = client_for(ws)
    hits = await client.search("rewritten", limit=20)
    assert {h.key for h in hits} == {f"entry-{i:04d}" for i in range(5)}
    assert len(ws.shards()) > 20  # the stamp it had is no longer named: every shard is read
    client.runtime.search_index.close()
    assert index_entry_rows(indexed) == await rebuilt_index_rows(indexed, tmp_path / "rebuilt")


async def test_a_rebuild_after_an_unreadable_shard_is_indexed_whole(
    indexed: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # An unreadable shard: its entries are lost (they came from no conversation), and the
    # phase 2 that notices rebuilds layout memory. The commit names no key of the lost
    # entries, so only "every entry may have changed" takes them out of the index.
    sid = layout_shard("entry-0042")
    lost = [f"entry-{i:04d}" for i in range(COUNT) if layout_shard(f"entry-{i:04d}") == sid]
    path = indexed / "memories" / "store" / "layout" / f"shard-{sid:02d}.json"
    path.write_text("{ not json")
    client = client_for(indexed)
    view = await client.view(None)  # reads every shard: the damage is found
    assert not any(k in view.entries for k in lost)
    async with client.runtime.write_lock():
        await client.runtime.consolidate_layout()
    client.runtime.search_index.close()
    rows = index_entry_rows(indexed)
    assert not any(f"entry:layout:{k}" in rows["docs"] for k in lost)
    assert rows == await rebuilt_index_rows(indexed, tmp_path / "rebuilt")
    assert any("is not valid" in r.getMessage() for r in caplog.records)


async def test_the_head_names_each_commit_and_a_pending_one(tmp_path: Path) -> None:
    from sandbox_memory.stores.records import LayoutCommit

    store = Store(LocalWorkspace(tmp_path), "memories")
    await commit(store, {"a": _entry(1, key="a")})
    first = (await store.layout_head()).stamp
    await commit(store, {"b": _entry(2, key="b")}, delete=("a",))
    await commit(store, {"c": _entry(3, key="c")})
    stamp, keys = await store.layout_changes(first)
    assert stamp == (await store.layout_head()).stamp and keys == {"a", "b", "c"}
    assert await store.layout_changes(stamp) == (stamp, set())
    assert (await store.layout_changes("unknown"))[1] is None
    assert (await store.layout_changes(""))[1] is None

    # A commit written but not applied (its writer killed at its commit point) is named too.
    pending = LayoutCommit(version=9, stamp="pending", put={"d": _entry(4, key="d")})
    (tmp_path / "memories/store/layout/commit.json").write_text(pending.model_dump_json())
    reader = Store(LocalWorkspace(tmp_path), "memories")
    assert await reader.layout_changes(stamp) == ("pending", {"d"})
    assert await reader.layout_changes(first) == ("pending", {"b", "a", "c", "d"})
    await reader.recover_layout()  # finished: the head names it now
    assert await Store(LocalWorkspace(tmp_path), "memories").layout_changes(stamp) == (
        "pending",
        {"d"},
    )
    rebuild = LayoutCommit(version=10, stamp="rebuild", whole=True)
    assert rebuild.changed_keys() is None


async def test_usage_costs_the_uses_recorded_not_the_entries_indexed(indexed: Path) -> None:
    # Phase 2 reads usage at every close and command: with one use recorded it must not visit
    # every entry document (SQLite's planner scanned the entries first for an empty table).
    client = client_for(indexed)
    index = client.runtime.search_index
    await index.sync()
    db = await index._open()
    db.execute(
        "INSERT INTO usage(target, kind, uses, last_used_at) VALUES ('entry-0003', 'entry', 2, 5)"
    )
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    db.set_progress_handler(count, 10)
    used = await index.usage()
    db.set_progress_handler(None, 0)
    assert used == {"conv-3": (2, 5)}
    assert steps * 10 < COUNT, steps  # a visit of each of the COUNT entries takes more
    index.close()


async def test_a_remember_reads_memory_md_once_and_writes_it_once(indexed: Path) -> None:
    from sandbox_memory import Remember

    ws = Reads(indexed)
    client = client_for(ws)
    view = await client.view(None)
    ws.reads.clear()
    await client.apply(
        Remember(key="deploy-queue", content="Deploys go through the staging queue."),
        expected=view.version,
    )
    # The live-edit check reads it; the rendering after the change only writes it.
    assert ws.reads.count("memories/MEMORY.md") == 1
    text = (indexed / "memories" / "MEMORY.md").read_text()
    assert "**deploy-queue**" in text and "staging queue" in text


@pytest.mark.parametrize("command", ["new", "replace", "forget"])
async def test_a_command_while_memory_md_holds_a_hand_edit_keeps_both(
    tmp_path: Path, command: str
) -> None:
    # The command commits first; its phase 2 then takes the hand edit in. The entry it
    # changed was never rendered as it is now: its line (or the line's absence) is no edit.
    from sandbox_memory import Forget, Remember

    client = client_for(tmp_path)
    view = await client.create()
    view = await client.apply(Remember(key="a", content="Fact 7 about x."), expected=view.version)
    view = await client.apply(Remember(key="k", content="Old k."), expected=view.version)
    path = tmp_path / "memories" / "MEMORY.md"
    path.write_text(path.read_text().replace("Fact 7 about", "Fact seven about"))
    change = {
        "new": Remember(key="other", content="Another fact."),
        "replace": Remember(key="k", content="New k."),
        "forget": Forget(key="k"),
    }[command]
    view = await client.apply(change, expected=view.version)
    got = {k: (e.content, e.status) for k, e in view.entries.items()}
    assert got["a"] == ("Fact seven about x.", "active")  # the hand edit, taken in
    want = {
        "new": ("other", ("Another fact.", "active")),
        "replace": ("k", ("New k.", "active")),
        "forget": ("k", ("Old k.", "retracted")),
    }[command]
    assert got[want[0]] == want[1]
    text = path.read_text()
    assert "Fact seven about x." in text
    assert ("**k**" in text) is (command != "forget")
    assert ("New k." in text) is (command == "replace")
