"""A working copy and the shared store exchange what changed, not all of memory.

A real server (``pg_dsn``), real runtimes on workspace folders, the offline engine. The store
side: changes after a version, removals, the change horizon with a transaction in flight. The
copy side: a fetch applies only the entries another sandbox changed, a send reads and writes
only the entries this copy changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import layout_runtime
from sandbox_memory.stores import PostgresStore
from sandbox_memory.stores.records import Entry, Source
from shared_flow import store_runtime

MANY = 60


def entry(key: str, content: str = "x") -> Entry:
    return Entry(
        key=key, content=content, kind="fact", sources=[Source(conversation="c", item="i")]
    )


async def test_changes_after_a_version_are_the_entries_written_and_removed_after_it(
    pg_dsn: str,
) -> None:
    store = PostgresStore(pg_dsn, namespace="n")
    v1 = await store.write_scope("layout", entries={f"k{i}": entry(f"k{i}") for i in range(5)})
    v2 = await store.write_scope("layout", entries={"k1": entry("k1", "new")}, remove=["k2"])
    got = (await store.read_changes({"layout": v1}))["layout"]
    assert (got.version, sorted(got.entries), got.removed) == (v2, ["k1"], ["k2"])
    assert got.entries["k1"].content == "new" and got.entry_versions == {"k1": v2}
    # Put back after its removal: a change like any other, no longer removed.
    v3 = await store.write_scope("layout", entries={"k2": entry("k2", "back")})
    got = (await store.read_changes({"layout": v1}))["layout"]
    assert (sorted(got.entries), got.removed) == (["k1", "k2"], [])
    assert (await store.read_changes({"layout": v3}))["layout"].entries == {}
    # From 0: the whole scope.
    whole = (await store.read_changes({"layout": 0}))["layout"]
    assert sorted(whole.entries) == [f"k{i}" for i in range(5)]
    # A removal with nothing else still moves the version (a copy at the old one sees it).
    v4 = await store.write_scope("layout", remove=["k4"], bump=0)
    assert v4 == v3 + 1
    assert (await store.read_changes({"layout": v3}))["layout"].removed == ["k4"]
    await store.aclose()


async def test_a_write_still_running_when_a_copy_looked_is_seen_the_next_time(
    pg_dsn: str,
) -> None:
    store = PostgresStore(pg_dsn, namespace="n")
    await store.append_segment("r0", "s0", "{}")
    horizon = await store.horizon()
    _, rollouts, _ = await store.changed_since(0)
    assert list(rollouts) == ["r0"]
    # Another process' transaction takes its id now and commits after the copy's next look.
    async with await psycopg.AsyncConnection.connect(pg_dsn) as other:
        await other.execute(
            "INSERT INTO sbm_rollouts (namespace, rollout_id, segments) VALUES ('n', 'late', 1)"
        )
        newer = await store.horizon()
        _, seen, _ = await store.changed_since(horizon)
        assert "late" not in seen  # not committed yet
        await other.commit()
    _, seen, _ = await store.changed_since(newer)
    assert "late" in seen  # written by a transaction older than the horizon looked from
    # Once nothing older runs, a look from the newest horizon lists nothing old again.
    assert (await store.changed_since(await store.horizon()))[1] == {}
    await store.aclose()


class Spy(PostgresStore):
    """Notes the entries each fetch read and each write sent (the store seam itself)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.read: list[tuple[int, list[str], list[str]]] = []
        self.sent: list[tuple[list[str], list[str]]] = []

    async def read_changes(self, since: dict[str, int]) -> Any:
        out = await super().read_changes(since)
        if "layout" in out:
            got = out["layout"]
            self.read.append((got.since, sorted(got.entries), got.removed))
        return out

    async def write_scope(self, scope: str, **kw: Any) -> int:
        if scope == "layout":
            self.sent.append((sorted(kw.get("entries") or {}), sorted(kw.get("remove") or ())))
        return await super().write_scope(scope, **kw)


async def test_a_copy_fetches_and_applies_only_the_entries_another_sandbox_changed(
    pg_dsn: str, tmp_path: Path
) -> None:
    other = PostgresStore(pg_dsn, namespace="acme")
    await other.write_scope(
        "layout", entries={f"k{i:02d}": entry(f"k{i:02d}") for i in range(MANY)}
    )
    spy = Spy(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "a", spy)
    await rt.start_run()  # the first fetch: everything
    assert spy.read == [(0, [f"k{i:02d}" for i in range(MANY)], [])]
    # Another sandbox changes one entry and drops another.
    await other.write_scope("layout", entries={"k07": entry("k07", "changed")}, remove=["k09"])
    spy.read.clear()
    await store_runtime(tmp_path / "a", spy).start_run()  # a fresh process on the same copy
    assert [(r[1], r[2]) for r in spy.read] == [(["k07"], ["k09"])]
    copy = (await rt.store.layout_for_reading()).entries
    stored = (await other.read_scope("layout")).entries
    assert sorted(copy) == sorted(stored) and "k09" not in copy
    assert copy["k07"].content == "changed"
    assert "changed" in (tmp_path / "a" / "memories" / "MEMORY.md").read_text()
    await other.aclose()
    await spy.aclose()


@pytest.mark.parametrize("fresh_process", [False, True])
async def test_a_copy_sends_only_the_entries_it_changed(
    pg_dsn: str, tmp_path: Path, fresh_process: bool
) -> None:
    """The copy's commits name the keys they changed, for the process that made them and for
    a fresh one on the copy (the one that changed it died): neither compares every entry."""

    other = PostgresStore(pg_dsn, namespace="acme")
    await other.write_scope(
        "layout", entries={f"k{i:02d}": entry(f"k{i:02d}") for i in range(MANY)}
    )
    spy = Spy(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "a", spy)
    await rt.start_run()
    edit = await rt.store.edit_layout()
    await edit.load(["k03", "k04"])
    edit.entries["k03"] = entry("k03", "mine")
    del edit.entries["k04"]
    edit.entries["k99"] = entry("k99", "added")
    edit.version += 1
    await edit.commit()
    if fresh_process:
        rt = store_runtime(tmp_path / "a", spy)
    spy.sent.clear()
    copies = 0
    real = rt.store.load_layout

    async def load_layout() -> Any:
        nonlocal copies
        copies += 1
        return await real()

    rt.store.load_layout = load_layout  # type: ignore[method-assign]
    async with rt.shared.session() as fence:  # type: ignore[union-attr]
        assert fence is not None
    assert spy.sent == [(["k03", "k99"], ["k04"])]
    assert copies == 0  # no copy of every entry to compare
    stored = (await other.read_scope("layout")).entries
    assert stored["k03"].content == "mine" and stored["k99"].content == "added"
    assert "k04" not in stored and len(stored) == MANY
    assert sorted((await rt.store.layout_for_reading()).entries) == sorted(stored)
    await other.aclose()
    await spy.aclose()


async def test_a_copy_whose_changes_are_not_named_compares_every_entry(
    pg_dsn: str, tmp_path: Path
) -> None:
    """A head that no longer names the commits since the copy's stamp (a rebuild, or more
    commits than it keeps): every entry is compared, and still only the changed are sent."""

    other = PostgresStore(pg_dsn, namespace="acme")
    await other.write_scope(
        "layout", entries={f"k{i:02d}": entry(f"k{i:02d}") for i in range(MANY)}
    )
    spy = Spy(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "a", spy)
    await rt.start_run()
    layout = await rt.store.load_layout()
    layout.entries["k05"] = entry("k05", "rebuilt")
    layout.version += 1
    await rt.store.commit_layout(
        version=layout.version, put={"k05": layout.entries["k05"]}, whole=True
    )
    spy.sent.clear()
    async with rt.shared.session() as fence:  # type: ignore[union-attr]
        assert fence is not None
    assert spy.sent == [(["k05"], [])]
    assert (await other.read_scope("layout")).entries["k05"].content == "rebuilt"
    await other.aclose()
    await spy.aclose()


async def test_a_send_reads_only_the_records_noted_as_changed_even_by_a_runtime_without_the_store(
    pg_dsn: str, tmp_path: Path
) -> None:
    """A copy's records are noted before they change, also by a runtime on the folder that has
    no shared store (a command on the copy): the send reads those, not every conversation."""

    from sandbox_memory.stores.shared import conversation_scope

    other = PostgresStore(pg_dsn, namespace="acme")
    for i in range(MANY):
        await other.write_scope(conversation_scope(f"c{i:02d}"), entries={"k": entry("k")})
    spy = Spy(pg_dsn, namespace="acme")
    first = store_runtime(tmp_path / "a", spy)
    await first.start_run()
    await first.store.recover_layout()  # the copy's one-time index of conversation keys
    plain = layout_runtime(tmp_path / "a", engine="offline")
    conv = await plain.store.load_conversation("c07")
    conv.entries["k"] = entry("k", "changed here")
    await plain.store.save_conversation(conv)
    rt = store_runtime(tmp_path / "a", spy)
    assert rt.shared is not None and await rt.shared.has_unsent_changes()
    loaded: list[str] = []
    real = rt.ws.read_bytes

    async def read_bytes(path: str) -> Any:
        if "/conversations/" in path:
            loaded.append(path.rsplit("/", 1)[1])
        return await real(path)

    rt.ws.read_bytes = read_bytes  # type: ignore[method-assign]
    async with rt.shared.session() as fence:
        assert fence is not None
    assert "c07.json" in loaded and len(set(loaded)) <= 2, loaded  # not every conversation
    stored = await other.read_scope(conversation_scope("c07"))
    assert stored.entries["k"].content == "changed here"
    assert not await rt.shared.has_unsent_changes()  # sent, and the notes start afresh
    await other.aclose()
    await spy.aclose()


class SegmentReads(PostgresStore):
    """Counts how the copy reads recorded runs from the store."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.one: list[str] = []
        self.many: list[list[str]] = []

    async def read_segments(self, rollout_id: str, *, after: int = 0) -> list[tuple[int, str, str]]:
        self.one.append(rollout_id)
        return await super().read_segments(rollout_id, after=after)

    async def read_segments_many(self, after: Any) -> dict[str, list[tuple[int, str, str]]]:
        self.many.append(sorted(after))
        return dict(await super().read_segments_many(after))


async def test_a_new_copy_fetches_the_runs_in_batches_and_gets_what_one_batch_gets(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sandbox_memory.shared_copy import fetch
    from shared_flow import lesson, unstamped_noted_run

    seed = PostgresStore(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "a", seed)
    rollouts = [f"conv-{i}" for i in range(5)]
    for rid in rollouts:
        await rt.record(unstamped_noted_run(lesson(rid.replace("-", ""))), rollout_id=rid)
    await rt.close()  # sends the runs and what the close learned

    copies = {}
    for name, batch in (("b", 2), ("c", fetch.PULL_BATCH)):
        monkeypatch.setattr(fetch, "PULL_BATCH", batch)
        spy = SegmentReads(pg_dsn, namespace="acme")
        copy = store_runtime(tmp_path / name, spy)
        await copy.start_run()
        assert spy.one == []
        # One statement a batch (in the store's order), every run once.
        assert [len(ids) for ids in spy.many] == [
            len(rollouts[i : i + batch]) for i in range(0, len(rollouts), batch)
        ]
        assert sorted(rid for ids in spy.many for rid in ids) == rollouts
        copies[name] = copy
        await spy.aclose()
    b, c = tmp_path / "b", tmp_path / "c"
    for rid in rollouts:
        session = f"sessions/{rid}.jsonl"
        assert (b / session).read_bytes() == (c / session).read_bytes() != b""
        assert (b / session).read_bytes() == (tmp_path / "a" / session).read_bytes()
        got = [await copies[n].store.get_progress(rid) for n in ("b", "c")]
        assert got[0] == got[1] and got[0] is not None
        held = [(await copies[n].store.load_conversation(rid)).entries for n in ("b", "c")]
        assert held[0] == held[1] and held[0]
    # The same records, flags and held lists: file for file.
    names = [sorted(p.relative_to(r).as_posix() for p in r.rglob("*")) for r in (b, c)]
    assert names[0] == names[1]
    assert any(n.startswith("memories/store/held/") for n in names[0])
    assert (b / "memories" / "MEMORY.md").read_text() == (c / "memories" / "MEMORY.md").read_text()
    await seed.aclose()


async def test_the_copy_bookkeeping_read_again_is_checked_again_once_changed_and_never_shared_with_a_writer(
    pg_dsn: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_dsn, namespace="acme")
    await store.write_scope("layout", entries={"k1": entry("k1")})
    rt = store_runtime(tmp_path / "a", store)
    await rt.start_run()
    copy = rt.shared
    assert copy is not None
    read = await copy._base(to_change=False)
    assert read is await copy._base(to_change=False)  # unchanged bytes: one parse for readers
    mine = await copy._base()
    assert mine is not read and mine == read
    mine["rollouts"]["conv-x"] = {"n": 1}
    assert "conv-x" not in read and "conv-x" not in await copy._base(to_change=False)
    # The file changed under the copy (the agent's tools can write it): parsed and bounded anew.
    path = tmp_path / "a" / copy.state_path
    deep = "[" * 100 + "]" * 100
    path.write_text(
        json.dumps({"namespace": "acme", "scopes": {}, "rollouts": {}, "x": deep})[:-1]
        + ', "y": '
        + deep
        + "}"
    )
    fresh = await copy._base(to_change=False)
    assert fresh["scopes"] == {} and "y" not in fresh  # refused whole: fetched again from the store
    await store.aclose()


async def test_thread_records_written_together_keep_a_valid_record_and_replace_a_forged_one(
    tmp_path: Path,
) -> None:
    rt = layout_runtime(tmp_path, mkdir=True)
    st = rt.store
    await st.index_thread("fp-kept", "conv-1")
    threads = tmp_path / "memories" / "store" / "threads"
    (threads / "fp-forged").write_text("conv-9")  # no seal: the agent's tools wrote it
    (threads / "fp-folder").mkdir()  # a folder where a record belongs
    await st.index_threads(
        {"fp-kept": "conv-2", "fp-forged": "conv-3", "fp-new": "conv-4", "fp-folder": "conv-5"}
    )
    assert await st.thread_for("fp-kept") == "conv-1"  # the first kept
    assert await st.thread_for("fp-forged") == "conv-3"
    assert await st.thread_for("fp-new") == "conv-4"
    assert await st.thread_for("fp-folder") == "conv-5"


class SegmentWrites(PostgresStore):
    """Counts how the copy sends recorded runs to the store."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.one = 0
        self.many: list[int] = []

    async def append_segment(self, rollout_id: str, segment_id: str, line: str) -> int:
        self.one += 1
        return await super().append_segment(rollout_id, segment_id, line)

    async def append_segments(self, segments: Any) -> list[int]:
        self.many.append(len(segments))
        return await super().append_segments(segments)


async def test_runs_recorded_before_the_store_go_in_one_transaction_and_never_again(
    pg_dsn: str, tmp_path: Path
) -> None:
    from shared_flow import lesson, unstamped_noted_run

    # Runs recorded before the sandbox had the store (or while it was unreachable): the first
    # close with it sends them all.
    local = layout_runtime(tmp_path / "a", mkdir=True)
    rollouts = [f"conv-{i}" for i in range(5)]
    for rid in rollouts:
        await local.record(unstamped_noted_run(lesson(rid.replace("-", ""))), rollout_id=rid)
    spy = SegmentWrites(pg_dsn, namespace="acme")
    rt = store_runtime(tmp_path / "a", spy)
    await rt.close()
    assert spy.one == 0 and spy.many == [5]
    stored = await spy.rollouts()
    assert {rid: stored[rid].segments for rid in rollouts} == dict.fromkeys(rollouts, 1)
    assert await rt.shared.push_segments() == 0  # all known: nothing sent again
    assert spy.many == [5]
    await spy.aclose()
