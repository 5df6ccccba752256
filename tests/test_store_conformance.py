"""The store seam's contract (:class:`sandbox_memory.stores.files.MemoryStore`), one case at a time,
run against every backend that meets it.

A new backend is one fixture below: a store, and how a run's segment reaches it (the recorder
appends to ``sessions/<id>.jsonl`` beside the workspace store; the in-memory store keeps the
segments itself). Every case must pass for it, unchanged.

The PostgreSQL backend (:class:`~sandbox_memory.stores.postgres_seam.PostgresMemoryStore`)
runs on a fresh database of the real test server (``tests/pgserver.py``) for each case.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox_memory.errors import MemoryLockTimeout
from sandbox_memory.stores.files import Store
from sandbox_memory.stores.memory import InMemoryStore
from sandbox_memory.stores.postgres import PostgresStore
from sandbox_memory.stores.postgres_seam import PostgresMemoryStore
from sandbox_memory.stores.records import (
    ConversationMemory,
    CopyRetraction,
    Defaults,
    Entry,
    LogRecord,
    RolloutProgress,
    Source,
    tail_hash,
)
from sandbox_memory.stores.seam import LayoutEdit, MemoryStore
from sandbox_memory.workspace import LocalWorkspace


@dataclass
class Backend:
    store: MemoryStore
    record: Callable[[str, bytes], Awaitable[None]]
    """Append one segment line of a rollout the way this backend's recorder does."""
    tail: Callable[[str, int], Awaitable[str | None]]
    """The hash of a rollout's bytes before an offset (``RolloutProgress.tail``)."""


def _files(tmp_path: Path) -> Backend:
    ws = LocalWorkspace(tmp_path)
    store = Store(ws, "memories", "sessions")

    async def record(rollout_id: str, line: bytes) -> None:
        await store.mark_pending(rollout_id)  # the recorder flags before and after an append
        await ws.append_line(f"sessions/{rollout_id}.jsonl", line)
        await store.mark_pending(rollout_id)

    async def tail(rollout_id: str, offset: int) -> str | None:
        return await tail_hash(ws, f"sessions/{rollout_id}.jsonl", offset)

    return Backend(store, record, tail)


def _memory(tmp_path: Path) -> Backend:
    store = InMemoryStore()

    async def tail(rollout_id: str, offset: int) -> str | None:
        return store._tail(rollout_id, offset)

    return Backend(store, store.append_segment, tail)


def _postgres(dsn: str) -> Backend:
    store = PostgresMemoryStore(PostgresStore(dsn, namespace="conformance"))
    return Backend(store, store.append_segment, store.tail)


BACKENDS: dict[str, Callable[[Path], Backend]] = {"files": _files, "memory": _memory}


@pytest.fixture(params=[*sorted(BACKENDS), "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param != "postgres":
        yield BACKENDS[request.param](tmp_path)
        return
    made = _postgres(request.getfixturevalue("pg_dsn"))
    assert isinstance(made.store, PostgresMemoryStore)
    try:
        yield made
    finally:
        await made.store.pg.aclose()


def entry(key: str, content: str = "", *, cites: str = "c1", item: str = "i1") -> Entry:
    return Entry(
        key=key,
        content=content or f"about {key}",
        kind="fact",
        sources=[Source(conversation=cites, item=item)],
    )


def log(version: int, *keys: str) -> LogRecord:
    return LogRecord(version=version, at=1, cause="consolidation", scope="layout", keys=list(keys))


# ------------------------------------------------------------------ layout memory


async def test_a_new_store_is_empty(backend: Backend) -> None:
    store = backend.store
    head = await store.layout_head()
    assert head.version == 0
    assert await store.layout_entries(["a"]) == {}
    assert (await store.layout_for_reading()).entries == {}
    assert await store.read_log() == []
    assert await store.list_progress() == {}
    assert await store.get_progress("c1") is None
    assert await store.pending_rollouts() == []
    assert await store.thread_for("f" * 16) is None
    assert not await store.conversation_exists("c1")
    assert (await store.load_conversation("c1")).entries == {}


async def test_a_commit_puts_and_removes_entries_and_moves_the_version(backend: Backend) -> None:
    store = backend.store
    first = await store.commit_layout(version=1, put={"a": entry("a"), "b": entry("b")})
    assert first.version == 1 and first.stamp
    second = await store.commit_layout(version=2, put={"c": entry("c")}, delete=["a"])
    assert second.version == 2 and second.stamp != first.stamp
    assert sorted(await store.layout_entries(["a", "b", "c"])) == ["b", "c"]
    whole = await store.layout_for_reading()
    assert whole.version == 2 and sorted(whole.entries) == ["b", "c"]
    parts = [e.key async for part in store.layout_parts() for e in part]
    assert sorted(parts) == ["b", "c"]


async def test_a_commit_retracting_an_entry_retracts_its_copies_through_the_runtime(
    backend: Backend,
) -> None:
    store = backend.store
    await store.commit_layout(version=1, put={"a": entry("a"), "b": entry("b")})
    called: list[tuple[str, str, int]] = []

    async def retract_copies(retracted: Entry, copy: CopyRetraction) -> None:
        called.append((retracted.key, retracted.status, copy.stamp))

    store.retract_copies = retract_copies
    gone = entry("a").model_copy(update={"status": "retracted"})
    copy = CopyRetraction(
        key="a", source=Source(conversation="person", item="f1"), stamp=7, cause="person"
    )
    await store.commit_layout(version=2, put={"a": gone}, copies=[copy])
    assert called == [("a", "retracted", 7)]
    assert (await store.layout_entries(["a"]))["a"].status == "retracted"


async def test_the_registry_names_its_conversations(backend: Backend) -> None:
    store = backend.store
    assert await store.registered_ids() == []
    registry = await store.load_registry()
    registry.conversations["c1"] = [entry("a")]
    registry.conversations["c2"] = [entry("b", cites="c2")]
    await store.save_registry(registry)
    assert sorted(await store.registered_ids()) == ["c1", "c2"]


async def test_entries_handed_out_are_copies(backend: Backend) -> None:
    store = backend.store
    await store.commit_layout(version=1, put={"a": entry("a", "first")})
    got = (await store.layout_entries(["a"]))["a"]
    got.content = "changed by the caller"
    assert (await store.layout_entries(["a"]))["a"].content == "first"


async def test_a_commit_appends_its_log_records_in_order(backend: Backend) -> None:
    store = backend.store
    await store.commit_layout(version=1, put={"a": entry("a")}, log=[log(1, "a")])
    await store.append_log(log(2, "b"))
    await store.commit_layout(version=3, put={"c": entry("c")}, log=[log(3, "c")])
    assert [(r.version, r.keys) for r in await store.read_log()] == [
        (1, ["a"]),
        (2, ["b"]),
        (3, ["c"]),
    ]


async def test_layout_changes_name_the_keys_changed_since_a_stamp(backend: Backend) -> None:
    store = backend.store
    base = await store.commit_layout(version=1, put={"a": entry("a"), "b": entry("b")})
    await store.commit_layout(version=2, put={"c": entry("c")})
    now = await store.commit_layout(version=3, put={"d": entry("d")}, delete=["a"])
    stamp, keys = await store.layout_changes(base.stamp)
    assert stamp == now.stamp
    assert keys is None or keys >= {"a", "c", "d"}
    assert keys is None or "b" not in keys  # a store that names keys names only changed ones
    same, none = await store.layout_changes(now.stamp)
    assert same == now.stamp and none in (None, set())
    _, anything = await store.layout_changes("")
    assert anything is None  # no stamp to start from: any entry may differ


async def test_a_rebuild_is_named_as_changing_every_entry(backend: Backend) -> None:
    store = backend.store
    base = await store.commit_layout(version=1, put={"a": entry("a")})
    await store.commit_layout(version=2, put={"b": entry("b")}, whole=True)
    _, keys = await store.layout_changes(base.stamp)
    assert keys is None


async def test_layout_citing_finds_the_entries_that_cite_a_conversation(backend: Backend) -> None:
    store = backend.store
    await store.commit_layout(
        version=1,
        put={"a": entry("a", cites="c1"), "b": entry("b", cites="c2"), "c": entry("c", cites="c3")},
    )
    found = await store.layout_citing(["c1", "c2"])
    assert found >= {"a", "b"}
    assert "c" not in found  # a superset may name more, never an entry citing neither
    entries = await store.layout_entries(found)
    assert {
        k for k, e in entries.items() if {s.conversation for s in e.sources} & {"c1", "c2"}
    } == {
        "a",
        "b",
    }


async def test_a_layout_edit_commits_only_what_it_changed(backend: Backend) -> None:
    store = backend.store
    await store.commit_layout(version=1, put={"a": entry("a"), "b": entry("b")})
    edit = await store.edit_layout()
    await edit.load(["a", "b", "z"])
    edit.entries["a"] = entry("a", "new content")
    del edit.entries["b"]
    edit.version = 2
    assert await edit.commit([log(2, "a", "b")])
    assert (await store.layout_head()).version == 2
    now = await store.layout_entries(["a", "b"])
    assert list(now) == ["a"] and now["a"].content == "new content"
    again = await store.edit_layout()
    await again.load(["a"])
    assert not await again.commit([log(2, "a")])  # nothing changed: only the log is appended
    assert [r.keys for r in await store.read_log()][-1] == ["a"]


async def test_a_layout_edit_refuses_a_key_it_did_not_load(backend: Backend) -> None:
    edit = LayoutEdit(backend.store, await backend.store.layout_head())
    with pytest.raises(KeyError, match="not loaded"):
        _ = "a" in edit.entries


# ------------------------------------------------------------ conversation memory


async def test_conversation_memory_is_saved_and_listed(backend: Backend) -> None:
    store = backend.store
    memory = ConversationMemory(rollout_id="c1", version=3, entries={"a": entry("a")})
    await store.save_conversation(memory)
    assert await store.conversation_exists("c1")
    loaded = await store.load_conversation("c1")
    assert loaded.version == 3 and list(loaded.entries) == ["a"]
    assert "c1" in await store.list_conversations()
    holders = await store.conversations_holding("a")
    assert holders is None or holders == ["c1"]


async def test_every_record_names_conversations_rollouts_and_threads(backend: Backend) -> None:
    store = backend.store
    await store.save_conversation(ConversationMemory(rollout_id="c1", entries={"a": entry("a")}))
    await store.put_progress("c1", RolloutProgress(offset=4, slug="one", updated_at="t"))
    await store.put_progress("c2", RolloutProgress(offset=5, slug="two", updated_at="t"))
    await store.forget_progress("c2", RolloutProgress(offset=5, slug="two", updated_at="t"))
    await store.index_thread("ab" * 8, "c1")
    found = await store.every_record()
    assert found.conversations == ["c1"]
    assert sorted(found.rollouts) == ["c1", "c2"]
    assert found.threads == ["ab" * 8]


async def test_notes_of_changed_records_start_afresh_when_cleared(backend: Backend) -> None:
    store = backend.store
    await store.save_conversation(ConversationMemory(rollout_id="c1", entries={"a": entry("a")}))
    store.note_changes()
    await store.clear_changed()
    await store.save_conversation(ConversationMemory(rollout_id="c2", entries={"b": entry("b")}))
    await store.put_progress("c3", RolloutProgress(offset=4, slug="three", updated_at="t"))
    await store.index_thread("cd" * 8, "c2")
    changed = await store.changed_records()
    if changed is None:  # a store that keeps no notes: the copy compares every record
        return
    assert changed.conversations == ["c2"]
    assert changed.rollouts == ["c3"]
    assert changed.threads == ["cd" * 8]
    await store.clear_changed()
    cleared = await store.changed_records()
    assert cleared is not None and cleared.conversations == cleared.rollouts == []


async def test_the_log_is_replaced_whole(backend: Backend) -> None:
    store = backend.store
    await store.append_log(log(1, "a"))
    await store.append_log(log(2, "b"))
    await store.replace_log([log(7, "c")])
    assert [(r.version, r.keys) for r in await store.read_log()] == [(7, ["c"])]


async def test_the_registry_and_the_switch_defaults_round_trip(backend: Backend) -> None:
    store = backend.store
    registry = await store.load_registry()
    registry.conversations["c1"] = [entry("a")]
    await store.save_registry(registry)
    assert [e.key for e in (await store.load_registry()).entries()] == ["a"]
    defaults = Defaults(use=False, generate=True, max_summary_chars=4_000)
    await store.save_defaults(defaults)
    assert await store.load_defaults() == defaults


async def test_the_log_names_the_scopes_changed_since_a_mark(backend: Backend) -> None:
    store = backend.store
    scopes, mark = await store.log_scopes_after(None)
    assert scopes is None  # no mark yet: every scope is compared
    await store.append_log(log(1, "a").model_copy(update={"scope": "conversation:c1"}))
    await store.commit_layout(version=2, put={"a": entry("a")}, log=[log(2, "a")])
    scopes, mark = await store.log_scopes_after(mark)
    assert scopes == {"conversation:c1", "layout"}
    again, same = await store.log_scopes_after(mark)
    assert again == set() and same == mark
    await store.append_log(log(3, "b").model_copy(update={"scope": "conversation:c2"}))
    assert (await store.log_scopes_after(mark))[0] == {"conversation:c2"}


async def test_the_scopes_with_memory_name_every_saved_conversation(backend: Backend) -> None:
    store = backend.store
    await store.save_conversation(ConversationMemory(rollout_id="c1", entries={"a": entry("a")}))
    assert "conversation:c1" in await store.scopes_with_memory()  # logged or not


# ---------------------------------------------------------------------- progress


async def test_progress_is_one_record_per_rollout(backend: Backend) -> None:
    store = backend.store
    await store.put_progress("c1", RolloutProgress(offset=10, slug="one"))
    await store.put_progress("c2", RolloutProgress(offset=20, slug="two"))
    got = await store.get_progress("c1")
    assert got is not None and got.offset == 10 and got.slug == "one" and not got.forgotten
    assert sorted(await store.list_progress()) == ["c1", "c2"]


async def test_forgotten_progress_keeps_only_the_offset_until_revived(backend: Backend) -> None:
    store = backend.store
    await store.put_progress("c1", RolloutProgress(offset=10, slug="one", updated_at="t"))
    await store.forget_progress("c1", RolloutProgress(offset=10, slug="one", updated_at="t"))
    gone = await store.get_progress("c1")
    assert gone is not None and gone.forgotten and gone.offset == 10 and gone.slug is None
    assert "c1" not in await store.list_progress()
    await store.put_progress("c1", gone.model_copy(update={"offset": 15}))
    back = await store.get_progress("c1")
    assert back is not None and not back.forgotten and back.offset == 15
    assert "c1" in await store.list_progress()


async def test_progress_of_many_rollouts_is_written_and_pruned_together(
    backend: Backend,
) -> None:
    store = backend.store
    await store.put_progress("c0", RolloutProgress(offset=5, slug="zero", updated_at="t"))
    await store.forget_progress("c0", RolloutProgress(offset=5, slug="zero", updated_at="t"))
    old = await store.get_progress("c0")
    assert old is not None and old.forgotten
    await store.put_progress_many(
        {
            "c0": old.model_copy(update={"offset": 7}),
            "c1": RolloutProgress(offset=10, slug="one", updated_at="t"),
            "c2": RolloutProgress(offset=20, slug="two", updated_at="u"),
        }
    )
    assert sorted(await store.list_progress()) == ["c0", "c1", "c2"]
    revived = await store.get_progress("c0")
    assert revived is not None and not revived.forgotten and revived.offset == 7
    await store.forget_progress_many(
        {
            "c1": RolloutProgress(offset=10, slug="one", updated_at="t"),
            "c2": RolloutProgress(offset=20, slug="two", updated_at="u"),
        }
    )
    assert sorted(await store.list_progress()) == ["c0"]
    gone = await store.get_progress("c2")
    assert gone is not None and gone.forgotten and gone.offset == 20 and gone.slug is None


async def test_a_recorded_rollout_is_pending_until_read_to_its_end(backend: Backend) -> None:
    store = backend.store
    line = b'{"input": []}\n'
    await backend.record("c1", line)
    assert await store.pending_rollouts() == ["c1"]
    await store.put_progress(
        "c1", RolloutProgress(offset=len(line), tail=await backend.tail("c1", len(line)))
    )
    assert await store.pending_rollouts() == []
    await backend.record("c1", line)
    assert await store.pending_rollouts() == ["c1"]


async def test_a_rollout_read_to_its_end_is_flagged_for_the_search_index(backend: Backend) -> None:
    store = backend.store
    line = b'{"input": []}\n'
    await backend.record("c1", line)
    await store.pending_rollouts()
    await store.put_progress("c1", RolloutProgress(offset=len(line)))
    assert await store.pending_rollouts() == []
    flags = await store.changed_rollouts()
    if flags is None:
        pytest.skip("this backend keeps no flags (the index lists every rollout)")
    assert "c1" in flags.unindexed and "c1" not in flags.pending
    await store.rollouts_indexed(["c1"])
    after = await store.changed_rollouts()
    assert after is not None and "c1" not in after.unindexed


async def test_a_refresh_marks_a_rollout_to_be_looked_at_again(backend: Backend) -> None:
    store = backend.store
    line = b'{"input": []}\n'
    await backend.record("c1", line)
    await store.put_progress("c1", RolloutProgress(offset=len(line)))
    assert await store.pending_rollouts() == []
    await store.put_progress("c1", RolloutProgress(offset=0))  # a Refresh rewinds, then marks
    await store.mark_pending("c1")
    assert await store.pending_rollouts() == ["c1"]


# ----------------------------------------------------------------------- threads


async def test_a_conversation_is_found_by_the_fingerprint_of_its_first_items(
    backend: Backend,
) -> None:
    store = backend.store
    await store.index_thread("ab" * 8, "c1")
    assert await store.thread_for("ab" * 8) == "c1"
    assert await store.thread_for("cd" * 8) is None


# ------------------------------------------------------------------------- lease


async def test_the_lease_has_one_holder_and_a_waiter_times_out(backend: Backend) -> None:
    store = backend.store
    async with store.lease(timeout=5, lease=30):
        with pytest.raises(MemoryLockTimeout):
            async with store.lease(timeout=0.3, lease=30):
                pass
    async with store.lease(timeout=1, lease=30):
        pass  # released by the first holder: taken at once


async def test_a_waiter_gets_the_lease_when_the_holder_lets_go(backend: Backend) -> None:
    store = backend.store
    order: list[str] = []
    first = store.lease(timeout=5, lease=30)
    await first.acquire()

    async def wait() -> None:
        async with store.lease(timeout=5, lease=30):
            order.append("second")

    waiter = asyncio.create_task(wait())
    await asyncio.sleep(0.1)
    order.append("first")
    await first.release()
    await asyncio.wait_for(waiter, timeout=5)
    assert order == ["first", "second"]
