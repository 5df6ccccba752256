"""Layout memory as records: per-entry changes, the commit, the old single file, and the
rendering kept up to date entry by entry (byte-identical to rendering everything again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import adopt_store
from sandbox_memory.consolidate.selection import displayed_entries
from sandbox_memory.engines.base import Subjects
from sandbox_memory.render.files import (
    LayoutRendering,
    RolloutRef,
    SavedRows,
    is_skill,
    render_memory_md,
    render_summary_file,
)
from sandbox_memory.stores.records import (
    Entry,
    LayoutMemory,
    Registry,
    RolloutProgress,
    Source,
    layout_shard,
)

KEYS = [f"k{i}" for i in range(12)]
KINDS = ["fact", "decision", "preference", "procedure", "hypothesis"]
PEOPLE = [None, None, "ana", "bo"]
ROLLOUTS = ["r1", "r2", "r3"]


def full_prompt_index(entries: list[Entry], budget: int) -> str:
    from sandbox_memory.render.step import prompt_index

    return prompt_index(entries, budget=budget)


op = st.one_of(
    st.tuples(
        st.just("put"),
        st.sampled_from(KEYS),
        st.sampled_from(KINDS),
        st.sampled_from(PEOPLE),
        st.integers(0, 6),
        st.text("ab c\n", max_size=12),
    ),
    st.tuples(st.just("retract"), st.sampled_from(KEYS)),
    st.tuples(st.just("delete"), st.sampled_from(KEYS)),
    st.tuples(
        st.just("registry"),
        st.sampled_from(ROLLOUTS),
        st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 6)), max_size=3),
    ),
    st.tuples(st.just("drop"), st.sampled_from(ROLLOUTS)),
)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(op, min_size=1, max_size=25),
    budget=st.integers(20, 400),
    told=st.sampled_from(["keys", "everything", "saved"]),
)
def test_the_rendering_kept_entry_by_entry_equals_rendering_everything(
    steps: list[Any], budget: int, told: str
) -> None:
    layout: dict[str, Entry] = {}
    groups: dict[str, list[Entry]] = {}
    rendering = LayoutRendering()
    refs = [
        RolloutRef(rollout_id=r, progress=RolloutProgress(updated_at=f"2026-01-0{n}", slug="s"))
        for n, r in enumerate(ROLLOUTS, 1)
    ]
    for step in steps:
        # Copied on change, like the store's cache: unchanged entries keep their objects.
        layout = dict(layout)
        keys = {step[1]} if step[0] in ("put", "retract", "delete") else set()
        if step[0] == "put":
            _, key, kind, person, stamp, text = step
            layout[key] = Entry(
                key=key,
                content=f"{key} {text}",
                kind=kind,
                person=person,
                sources=[Source(conversation="r1", item=f"{key}:{stamp}")],
                updated_at=stamp,
                # The files it is about (MEMORY.md's ``## Files``): some share one.
                subjects=Subjects(files=[f"pkg/{(text.strip() or 'x')[:1]}.py"])
                if stamp % 3
                else None,
            )
        elif step[0] == "retract" and step[1] in layout:
            layout[step[1]] = layout[step[1]].model_copy(update={"status": "retracted"})
        elif step[0] == "delete":
            layout.pop(step[1], None)
        elif step[0] == "registry":
            _, rid, facts = step
            groups = dict(groups)
            groups[rid] = [
                Entry(
                    key=k,
                    content=f"{k} from {rid}",
                    kind="fact",
                    updated_at=t,
                    subjects=Subjects(files=[f"pkg/{rid}.py"]) if t % 2 else None,
                )
                for k, t in dict(facts).items()
            ]
        elif step[0] == "drop":
            groups = {r: g for r, g in groups.items() if r != step[1]}
        # Told which keys changed (the store's own commits), or every entry taken in again, or
        # (a new process) the rendering saved by the last one taken up, then told.
        if told == "saved":
            saved = SavedRows.model_validate_json(rendering.saved().model_dump_json())
            rendering = LayoutRendering()
            rendering.restore(saved, groups)
        if told != "everything":
            rendering.update({k: layout.get(k) for k in keys}, groups)
        else:
            rendering.rebuild(layout.values(), groups)
        everything = displayed_entries(LayoutMemory(entries=layout), Registry(conversations=groups))
        assert rendering.memory_md(refs) == render_memory_md(everything, refs)
        assert rendering.summary_file(refs, budget) == render_summary_file(everything, refs, budget)
        assert rendering.prompt_keys(budget) <= set(layout)
        assert rendering.prompt_index(budget, layout) == full_prompt_index(everything, budget)
        wanted = {k for k, e in layout.items() if e.status == "active" and is_skill(e)}
        assert set(rendering.skills) == wanted


@settings(max_examples=60, deadline=None)
@given(
    entries=st.lists(
        st.tuples(
            st.sampled_from(KEYS),
            st.sampled_from(KINDS),
            st.sampled_from(PEOPLE),
            st.integers(0, 6),
            st.booleans(),
        ),
        max_size=12,
    ),
    registry=st.lists(st.tuples(st.sampled_from(KEYS), st.integers(0, 6)), max_size=4),
    order=st.randoms(use_true_random=False),
)
def test_saved_rows_in_any_order_are_taken_up_as_the_same_rendering(
    entries: list[Any], registry: list[Any], order: Any
) -> None:
    """A saved rendering is written oldest row first now; one written in another order (by an
    earlier version, or a delta's rows after its base's) is taken up as the same rendering."""

    layout = {
        key: Entry(
            key=key,
            content=f"{key} said at {stamp}",
            kind=kind,
            person=person,
            sources=[Source(conversation="r1", item=f"{key}:{stamp}")],
            updated_at=stamp,
            subjects=Subjects(files=[f"pkg/{stamp % 2}.py"]) if with_files else None,
        )
        for key, kind, person, stamp, with_files in entries
    }
    groups = {
        "r2": [Entry(key=k, content=f"{k} from r2", kind="fact", updated_at=t) for k, t in registry]
    }
    rendering = LayoutRendering()
    rendering.rebuild(layout.values(), groups)
    saved = rendering.saved()
    assert [(saved.updated_at[i], k) for i, k in enumerate(saved.keys)] == sorted(
        zip(saved.updated_at, saved.keys, strict=True)
    )
    # The same rows shuffled together, then read back as the file would be.
    rows = list(range(len(saved.keys)))
    order.shuffle(rows)
    columns = ("keys", "updated_at", "kinds", "persons", "lines", "short", "files")
    shuffled = SavedRows.model_validate_json(
        saved.model_copy(
            update={name: [getattr(saved, name)[i] for i in rows] for name in columns}
        ).model_dump_json()
    )
    taken_up = LayoutRendering()
    taken_up.restore(shuffled, groups)
    refs = [
        RolloutRef(rollout_id="r2", progress=RolloutProgress(updated_at="2026-01-02", slug="s"))
    ]
    assert taken_up.memory_md(refs) == rendering.memory_md(refs)
    assert taken_up.summary_file(refs, 120) == rendering.summary_file(refs, 120)
    assert taken_up.prompt_keys(120) == rendering.prompt_keys(120)
    assert taken_up.prompt_index(120, layout) == rendering.prompt_index(120, layout)
    assert taken_up.skills == rendering.skills
    assert taken_up.saved() == saved


# ------------------------------------------------------------------ the store's records


def _entry(i: int, **kw: Any) -> Entry:
    fields: dict[str, Any] = {
        "key": f"entry-{i:04d}",
        "content": f"Fact {i} about the parser.",
        "kind": KINDS[i % len(KINDS)],
        "sources": [Source(conversation=f"conv-{i % 7}", item=f"{i:08x}:1")],
        "updated_at": 1_700_000_000_000 + i,
    }
    fields.update(kw)
    return Entry(**fields)


def _old_store(root: Path, count: int, version: int) -> dict[str, Entry]:
    """A store written by the earlier release: all of layout memory in ``layout.json``."""

    entries = {e.key: e for e in (_entry(i) for i in range(count))}
    entries["entry-0001"] = _entry(1, person="ana", kind="preference")
    entries["entry-0002"] = _entry(2, status="retracted")
    store = root / "memories" / "store"
    store.mkdir(parents=True)
    doc = LayoutMemory(version=version, entries=entries)
    (store / "layout.json").write_text(doc.model_dump_json(indent=1))
    return entries


async def test_an_old_single_file_layout_memory_opens_and_keeps_every_entry(
    tmp_path: Path,
) -> None:
    from helpers import read_layout
    from sandbox_memory import MemoryClient, MemoryGenerateConfig, Remember

    old = _old_store(tmp_path, 300, version=7)
    await adopt_store(tmp_path)  # an earlier build's records: sealed by a person
    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    view = await client.view(None)
    assert view.version == 7
    assert {k: e.model_dump() for k, e in view.entries.items()} == {
        k: e.model_dump() for k, e in old.items()
    }
    store = tmp_path / "memories" / "store"
    assert (store / "layout.json").exists()  # reading never writes

    after = await client.apply(
        Remember(key="new-fact", content="CI runs on 3.12.", kind="fact"), expected=7
    )
    assert after.version == 8
    assert not (store / "layout.json").exists()  # split by the first writer
    stored = read_layout(tmp_path)
    assert stored["version"] == 8
    assert set(stored["entries"]) == {*old, "new-fact"}
    for key, entry in old.items():
        assert stored["entries"][key] == json.loads(entry.model_dump_json())
    # Spread over shards; the keys citing a conversation are listed by conversation.
    assert 20 < len(list((store / "layout").glob("shard-*.json"))) <= 64
    cited = (store / "layout" / "cites" / "conv-3").read_text().split()
    assert set(cited) == {k for k, e in old.items() if e.sources[0].conversation == "conv-3"}
    # A fresh process reads the same memory from the records.
    again = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    assert set((await again.view(None)).entries) == {*old, "new-fact"}


async def test_an_unreadable_old_single_file_is_kept_aside_and_rebuilt_from_conversations(
    tmp_path: Path,
) -> None:
    from sandbox_memory import MemoryClient, MemoryGenerateConfig
    from sandbox_memory.stores.records import ConversationMemory

    store = tmp_path / "memories" / "store"
    (store / "conversations").mkdir(parents=True)
    junk = b'{"version": 3, "entries": {"x": 1}}'
    (store / "layout.json").write_bytes(junk)
    conv = ConversationMemory(
        rollout_id="c1",
        version=1,
        entries={"deploy": _entry(9, key="deploy", kind="procedure")},
    )
    (store / "conversations" / "c1.json").write_text(conv.model_dump_json())
    await adopt_store(tmp_path)
    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    await client.create()  # a phase 2 under the lease
    kept = list(store.glob("layout.json.broken-*"))
    assert [p.read_bytes() for p in kept] == [junk]
    assert not (store / "layout.json").exists()
    assert (store / "layout" / "head.json").exists()


async def test_a_commit_cut_short_after_its_commit_point_is_read_as_applied_and_finished(
    tmp_path: Path,
) -> None:
    from helpers import read_layout
    from sandbox_memory.stores.files import Store
    from sandbox_memory.stores.records import LogRecord
    from sandbox_memory.workspace import LocalWorkspace

    class DiesAtShards(LocalWorkspace):
        async def write_atomic(self, path: str, data: bytes) -> None:
            if "/layout/shard-" in path:
                raise OSError(5, "killed", path)
            await super().write_atomic(path, data)

    _old_store(tmp_path, 50, version=2)
    writer = Store(LocalWorkspace(tmp_path), "memories")
    await writer.recover_layout()  # split
    dying = Store(DiesAtShards(tmp_path), "memories")
    record = LogRecord(version=3, at=1, cause="person", scope="layout", keys=["entry-0005"])
    try:
        await dying.commit_layout(
            version=3,
            put={"entry-0005": _entry(5, content="Changed.")},
            delete=["entry-0006"],
            log=[record],
        )
    except OSError:
        pass
    layout = tmp_path / "memories" / "store" / "layout"
    assert (layout / "commit.json").exists()
    reader = Store(LocalWorkspace(tmp_path), "memories")
    found = await reader.layout_entries(["entry-0005", "entry-0006", "entry-0007"])
    assert found["entry-0005"].content == "Changed." and "entry-0006" not in found
    assert (await reader.layout_head()).version == 3
    assert (await reader.layout_for_reading()).entries["entry-0005"].content == "Changed."
    await reader.recover_layout()  # the next writer, under the lease
    assert not (layout / "commit.json").exists()
    stored = read_layout(tmp_path)
    assert stored["version"] == 3 and "entry-0006" not in stored["entries"]
    assert stored["entries"]["entry-0005"]["content"] == "Changed."
    assert [r.keys for r in await reader.read_log() if r.scope == "layout"] == [["entry-0005"]]


async def test_a_change_of_one_entry_reads_and_writes_one_shard(tmp_path: Path) -> None:
    from sandbox_memory.stores.files import Store
    from sandbox_memory.workspace import LocalWorkspace

    class Counting(LocalWorkspace):
        reads: list[str] = []
        writes: list[str] = []

        async def read_bytes(self, path: str) -> bytes | None:
            self.reads.append(path)
            return await super().read_bytes(path)

        async def write_atomic(self, path: str, data: bytes) -> None:
            self.writes.append(path)
            await super().write_atomic(path, data)

    _old_store(tmp_path, 2_000, version=1)
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()
    ws = Counting(tmp_path)
    store = Store(ws, "memories")
    edit = await store.edit_layout()
    await edit.load(["entry-0042"])
    edit.entries["entry-0042"].content = "Changed."
    edit.version += 1
    assert await edit.commit()
    shards = [p for p in ws.reads + ws.writes if "/shard-" in p]
    assert len(set(shards)) == 1, shards
    assert sorted(p.rsplit("/", 1)[1] for p in ws.writes) == [
        "commit.json",
        "head.json",
        shards[0].rsplit("/", 1)[1],
    ]
    assert (await store.layout_entries(["entry-0042"]))["entry-0042"].content == "Changed."


async def test_a_commit_that_leaves_a_shards_bytes_as_they_are_does_not_write_it(
    tmp_path: Path,
) -> None:
    from helpers import sealed_store

    _old_store(tmp_path, 200, version=1)
    await adopt_store(tmp_path)
    await sealed_store(tmp_path).recover_layout()
    store = sealed_store(tmp_path)
    writes: list[str] = []
    real = store.ws.write_atomic_many

    async def counting(items: Any) -> None:
        writes.extend(p for p, _ in items)
        await real(items)

    store.ws.write_atomic_many = counting
    same = (await store.layout_entries(["entry-0042"]))["entry-0042"]
    changed = _entry(43, content="Changed.")
    await store.commit_layout(version=2, put={"entry-0042": same, "entry-0043": changed})
    shard_of = {k: store.shard_path(layout_shard(k)) for k in ("entry-0042", "entry-0043")}
    assert shard_of["entry-0043"] in writes
    if shard_of["entry-0042"] != shard_of["entry-0043"]:
        assert shard_of["entry-0042"] not in writes
    reader = sealed_store(tmp_path)
    found = await reader.layout_entries(["entry-0042", "entry-0043"])
    assert found["entry-0042"] == same and found["entry-0043"].content == "Changed."
    assert reader.refused == set()


async def test_a_commit_redone_after_its_shards_were_written_names_them_in_the_head(
    tmp_path: Path,
) -> None:
    from helpers import sealed_store
    from sandbox_memory.workspace import LocalWorkspace

    class DiesAtHead(LocalWorkspace):
        async def write_atomic(self, path: str, data: bytes) -> None:
            if path.endswith("/layout/head.json"):
                raise OSError(5, "killed", path)
            await super().write_atomic(path, data)

    _old_store(tmp_path, 200, version=1)
    await adopt_store(tmp_path)
    await sealed_store(tmp_path).recover_layout()
    dying = sealed_store(tmp_path)
    dying.ws = DiesAtHead(tmp_path)
    with pytest.raises(OSError):
        await dying.commit_layout(version=2, put={"entry-0042": _entry(42, content="Changed.")})
    redo = sealed_store(tmp_path)
    await redo.recover_layout()  # the shard holds the commit already: its bytes stay
    reader = sealed_store(tmp_path)
    found = await reader.layout_entries(["entry-0042", "entry-0043"])
    assert found["entry-0042"].content == "Changed." and "entry-0043" in found
    assert reader.refused == set() and not await reader.layout_damaged()


async def test_a_forget_reads_only_the_conversations_that_held_the_key(tmp_path: Path) -> None:
    from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, Remember
    from sandbox_memory.stores.records import ConversationMemory
    from sandbox_memory.workspace import LocalWorkspace

    class Reads(LocalWorkspace):
        conversations: list[str] = []

        async def read_bytes(self, path: str) -> bytes | None:
            if "/store/conversations/" in path:
                self.conversations.append(path.rsplit("/", 1)[1])
            return await super().read_bytes(path)

    folder = tmp_path / "memories" / "store" / "conversations"
    folder.mkdir(parents=True)
    for i in range(20):  # written by an earlier release: no index of their keys
        entries = {f"f-{i}": _entry(i, key=f"f-{i}", kind="fact")}
        if i in (3, 7):
            entries["deploy"] = _entry(i, key="deploy", kind="procedure")
        memory = ConversationMemory(rollout_id=f"c{i}", version=1, entries=entries)
        (folder / f"c{i}.json").write_text(memory.model_dump_json())
    await adopt_store(tmp_path)
    ws = Reads(tmp_path)
    client = MemoryClient(ws, generate=MemoryGenerateConfig(engine="offline"))
    store = client.runtime.store
    view = await client.apply(
        Remember(key="deploy", content="Run `make deploy`.", kind="procedure"), expected=0
    )
    assert len(set(ws.conversations)) == 20  # the first writer indexes them, once
    await store.save_conversation(  # a conversation saved later is indexed as it is saved
        ConversationMemory(
            rollout_id="c20", entries={"deploy": _entry(20, key="deploy", kind="procedure")}
        )
    )
    ws.conversations = []
    await client.apply(Forget(key="deploy"), expected=view.version)
    assert sorted(set(ws.conversations)) == ["c20.json", "c3.json", "c7.json"]
    for rid, status in (("c3", "retracted"), ("c7", "retracted"), ("c20", "retracted")):
        assert (await store.load_conversation(rid)).entries["deploy"].status == status
    assert "deploy" not in (await store.load_conversation("c4")).entries


# ------------------------------------------------------ shards one entry a line


def _format_one_store(root: Path, count: int, version: int) -> tuple[dict[str, Entry], str]:
    """A store split by the earlier release: 64 shards each written on one line, and a head
    without a format; returns the entries and the head's stamp."""

    from sandbox_memory.stores.records import LAYOUT_SHARDS, layout_shard

    entries = {e.key: e for e in (_entry(i) for i in range(count))}
    folder = root / "memories" / "store" / "layout"
    folder.mkdir(parents=True)
    for sid in range(LAYOUT_SHARDS):
        mine = {k: e for k, e in sorted(entries.items()) if layout_shard(k) == sid}
        if mine:
            body = ",".join(f"{json.dumps(k)}:{e.model_dump_json()}" for k, e in mine.items())
            (folder / f"shard-{sid:02d}.json").write_text('{"entries":{' + body + "}}")
    (folder / "head.json").write_text(json.dumps({"version": version, "stamp": "0123abcd"}))
    return entries, "0123abcd"


async def test_a_key_is_read_from_its_shard_without_parsing_the_other_entries(
    tmp_path: Path,
) -> None:
    from sandbox_memory.stores.files import Store
    from sandbox_memory.stores.records import layout_shard
    from sandbox_memory.workspace import LocalWorkspace

    _old_store(tmp_path, 600, version=1)
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()  # split
    wanted = "entry-0042"
    sid = layout_shard(wanted)
    path = tmp_path / "memories" / "store" / "layout" / f"shard-{sid:02d}.json"
    lines = path.read_bytes().split(b"\n")
    assert lines[0] == b'{"entries":{' and lines[-1] == b"}}"  # one entry a line
    # Another entry of that shard made unreadable (still JSON): reading the wanted key does
    # not parse it, so it is neither noticed nor set aside.
    other = next(
        i
        for i, line in enumerate(lines)
        if line.startswith(b'"entry-') and wanted.encode() not in line
    )
    lines[other] = lines[other].replace(b'"kind":"', b'"kind":"no-such-kind-')
    path.write_bytes(b"\n".join(lines))
    store = Store(LocalWorkspace(tmp_path), "memories")
    found = await store.layout_entries([wanted, "entry-9999"])
    assert list(found) == [wanted] and found[wanted].content == "Fact 42 about the parser."
    assert not await store.layout_damaged()
    assert not list(path.parent.glob("*.broken-*"))
    # Asked for with it (read together), the unreadable one sets the shard aside.
    sibling = json.loads(b"{" + lines[other].rstrip(b",") + b"}").popitem()[0]
    assert await store.layout_entries([wanted, sibling]) == {}
    assert await store.layout_damaged()
    # Reading all of layout memory parses every entry: the shard is found unreadable then.
    store = Store(LocalWorkspace(tmp_path), "memories")
    whole = await store.layout_for_reading()
    assert wanted not in whole.entries and await store.layout_damaged()
    assert len(list(path.parent.glob(f"shard-{sid:02d}.json.broken-*"))) == 1


async def test_a_shard_cut_short_is_kept_aside_and_read_as_empty(tmp_path: Path, caplog) -> None:
    from sandbox_memory.stores.files import Store
    from sandbox_memory.stores.records import layout_shard
    from sandbox_memory.workspace import LocalWorkspace

    _old_store(tmp_path, 300, version=1)
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()
    sid = layout_shard("entry-0007")
    path = tmp_path / "memories" / "store" / "layout" / f"shard-{sid:02d}.json"
    cut = path.read_bytes()
    cut = cut[: cut.index(b"\n", len(cut) // 2) + 20]  # a line cut in the middle
    path.write_bytes(cut)
    store = Store(LocalWorkspace(tmp_path), "memories")
    assert await store.layout_entries(["entry-0007"]) == {}
    assert await store.layout_damaged()
    assert [p.read_bytes() for p in path.parent.glob(f"shard-{sid:02d}.json.broken-*")] == [cut]
    assert any("kept as" in r.getMessage() for r in caplog.records)


async def test_the_shards_kept_read_stay_within_their_budget(tmp_path: Path, monkeypatch) -> None:
    import sandbox_memory.stores.files.layout as store_module
    from sandbox_memory.stores.files import Store
    from sandbox_memory.workspace import LocalWorkspace

    old = _old_store(tmp_path, 1_500, version=1)
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()
    shard_bytes = [p.stat().st_size for p in (tmp_path / "memories/store/layout").glob("shard-*")]
    budget = 3 * max(shard_bytes)
    monkeypatch.setattr(store_module, "SHARD_CACHE_BYTES", budget)
    store = Store(LocalWorkspace(tmp_path), "memories")
    for key in sorted(old):  # every key once: every shard read
        found = await store.layout_entries([key])
        assert found[key].model_dump() == old[key].model_dump()
        assert sum(s.size for s in store._shards.values()) <= budget
    # A commit's shards are kept within it too.
    edit = await store.edit_layout()
    await edit.load(sorted(old)[:200])
    for key in sorted(old)[:200]:
        edit.entries[key].content = f"Changed {key}."
    edit.version += 1
    assert await edit.commit()
    assert sum(s.size for s in store._shards.values()) <= budget
    again = Store(LocalWorkspace(tmp_path), "memories")
    assert (await again.layout_entries(["entry-0150"]))[
        "entry-0150"
    ].content == "Changed entry-0150."


async def test_shards_of_an_earlier_release_are_read_and_rewritten_one_entry_a_line(
    tmp_path: Path,
) -> None:
    from helpers import read_layout
    from sandbox_memory.stores.files import Store
    from sandbox_memory.stores.records import LAYOUT_FORMAT
    from sandbox_memory.workspace import LocalWorkspace

    entries, stamp = _format_one_store(tmp_path, 400, version=5)
    folder = tmp_path / "memories" / "store" / "layout"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    reader = Store(LocalWorkspace(tmp_path), "memories")
    found = await reader.layout_entries(["entry-0003", "entry-0399"])
    assert {k: e.model_dump() for k, e in found.items()} == {
        k: entries[k].model_dump() for k in ("entry-0003", "entry-0399")
    }
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # readers never write

    class DiesAtShard(LocalWorkspace):
        writes = 0

        async def write_atomic(self, path: str, data: bytes) -> None:
            if "/layout/shard-" in path:
                DiesAtShard.writes += 1
                if DiesAtShard.writes == 10:
                    raise OSError(5, "killed", path)
            await super().write_atomic(path, data)

    try:
        await Store(DiesAtShard(tmp_path), "memories").recover_layout()
    except OSError:
        pass
    # Cut short: half the shards in each format, the same entries read from either.
    assert json.loads((folder / "head.json").read_text()).get("format") is None
    mixed = Store(LocalWorkspace(tmp_path), "memories")
    assert {k: e.model_dump() for k, e in (await mixed.layout_for_reading()).entries.items()} == {
        k: e.model_dump() for k, e in entries.items()
    }
    await Store(LocalWorkspace(tmp_path), "memories").recover_layout()  # the next writer
    head = json.loads((folder / "head.json").read_text())
    assert head["format"] == LAYOUT_FORMAT and head["stamp"] == stamp and head["version"] == 5
    for shard in folder.glob("shard-*.json"):
        lines = shard.read_bytes().split(b"\n")
        assert lines[0] == b'{"entries":{' and lines[-1] == b"}}"
        assert len(lines) - 2 == len(json.loads(shard.read_text())["entries"])
    stored = read_layout(tmp_path)
    assert stored["entries"] == {
        k: json.loads(e.model_dump_json()) for k, e in sorted(entries.items())
    }
    # Once rewritten, a writer does not rewrite them again.
    ws = DiesAtShard(tmp_path)
    DiesAtShard.writes = -1_000
    await Store(ws, "memories").recover_layout()
    assert DiesAtShard.writes == -1_000


async def test_a_fresh_process_renders_every_entry_without_keeping_them_parsed(
    tmp_path: Path,
) -> None:
    import gc

    from sandbox_memory import MemoryClient, MemoryGenerateConfig
    from sandbox_memory.stores.files import Store
    from sandbox_memory.workspace import LocalWorkspace

    _old_store(tmp_path, 800, version=1)
    await adopt_store(tmp_path)
    config = MemoryGenerateConfig(engine="offline")
    first = MemoryClient(tmp_path, generate=config).runtime
    async with first.write_lock():
        await first.consolidate_layout()  # split, rendered, indexed
    (tmp_path / "memories" / "MEMORY.md").unlink()
    del first
    rt = MemoryClient(tmp_path, generate=config).runtime
    await rt.render_current()  # a fresh process: every entry taken in
    gc.collect()
    alive = sum(1 for o in gc.get_objects() if type(o) is Entry)
    # The rendering keeps a line per entry; neither it nor the store keeps 800 parsed entries.
    assert alive < 200, alive
    reader = Store(LocalWorkspace(tmp_path), "memories")
    layout = await reader.layout_for_reading()
    expected = render_memory_md(displayed_entries(layout, Registry()), [])
    assert (tmp_path / "memories" / "MEMORY.md").read_text() == expected
    assert expected.count("\n- **entry-") == 798  # active shared: not the private, retracted


async def test_memory_md_is_compared_in_chunks_and_written_only_when_it_differs(
    tmp_path: Path, monkeypatch
) -> None:
    import sandbox_memory.render.step as render_module
    from sandbox_memory import MemoryClient, MemoryGenerateConfig

    monkeypatch.setattr(render_module, "DIGEST_CHUNK_BYTES", 1_000)
    _old_store(tmp_path, 120, version=1)
    await adopt_store(tmp_path)
    config = MemoryGenerateConfig(engine="offline")
    first = MemoryClient(tmp_path, generate=config).runtime
    async with first.write_lock():
        await first.consolidate_layout()
    path = tmp_path / "memories" / "MEMORY.md"
    rendered = path.read_bytes()
    assert len(rendered) > 5_000  # several chunks
    inode = path.stat().st_ino
    await MemoryClient(tmp_path, generate=config).runtime.render_current()  # a fresh process
    assert path.stat().st_ino == inode  # the same bytes: not written again
    # One byte changed in the last chunk, the size kept: written again.
    edited = rendered[:-10] + (b"X" if rendered[-10:-9] != b"X" else b"Y") + rendered[-9:]
    path.write_bytes(edited)
    await MemoryClient(tmp_path, generate=config).runtime.render_current()
    assert path.read_bytes() == rendered


def _taken_up_not_patched(monkeypatch: Any) -> None:
    """A process holding no rendering takes up the saved one, never patching the files at the
    changed keys (the patch is tested in ``test_render_patch.py``)."""

    from sandbox_memory.render.step import Renderer

    async def no_patch(self: Renderer, *args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(Renderer, "_patch", no_patch)


async def test_a_new_process_takes_up_the_saved_rendering_and_renders_what_a_full_render_does(
    tmp_path: Path, monkeypatch
) -> None:
    """Remember, Forget and closes, each in a new client (a new process): each takes up the
    rendering the last one saved (``store/rendering.json``) and brings it up to date with the
    keys changed since; ``MEMORY.md``, the summary and the prompt index are those of rendering
    every entry again."""

    import sandbox_memory.render.step as render_module
    from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, Remember
    from sandbox_memory.render.step import Renderer
    from shared_flow import lesson, unstamped_noted_run

    monkeypatch.setattr(render_module, "SAVE_AFTER_COMMITS", 3)  # saved, and taken up behind
    _taken_up_not_patched(monkeypatch)
    monkeypatch.setattr(render_module, "SAVE_FROM_ENTRIES", 10)
    _old_store(tmp_path, 60, version=1)
    await adopt_store(tmp_path)
    config = MemoryGenerateConfig(engine="offline")
    restored: list[int] = []
    take_up = Renderer._restore

    async def counting(self: Renderer, registry: Registry) -> str:
        stamp = await take_up(self, registry)
        restored.append(bool(stamp))
        return stamp

    monkeypatch.setattr(Renderer, "_restore", counting)
    mem = tmp_path / "memories"
    steps: list[tuple[str, int]] = [
        *(("remember", i) for i in range(4)),
        ("forget", 1),
        ("close", 0),
        ("forget", 0),
        ("remember", 9),
        ("close", 1),
        ("forget", 9),
        ("forget_layout", 7),
    ]
    for verb, i in steps:
        client = MemoryClient(tmp_path, generate=config)
        if verb == "close":
            rt = client.runtime
            await rt.record(unstamped_noted_run(lesson(f"tag{i}")), rollout_id=f"conv-new-{i}")
            await rt.close()
            continue
        view = await client.view()
        if verb == "remember":
            command: Remember | Forget = Remember(
                key=f"saved-{i}", content=f"Fact {i} kept between processes.", kind="fact"
            )
        else:
            command = Forget(key=f"saved-{i}" if verb == "forget" else f"entry-{i:04d}")
        await client.apply(command, expected=view.version)
    assert sum(restored) >= len(steps) - 1  # every new process but the first took it up
    rendered = {name: (mem / name).read_bytes() for name in ("MEMORY.md", "memory_summary.md")}
    prompt = (mem / "store" / "prompt.json").read_bytes()
    # A full render of the same records (no saved rendering to take up) writes the same bytes.
    for name in ("store/rendering.json", "store/rendered.json", "MEMORY.md", "memory_summary.md"):
        (mem / name).unlink()
    monkeypatch.setattr(Renderer, "_restore", take_up)
    await MemoryClient(tmp_path, generate=config).runtime.render_current()
    for name, data in rendered.items():
        assert (mem / name).read_bytes() == data, name
    assert (mem / "store" / "prompt.json").read_bytes() == prompt
    assert b"saved-9" not in rendered["MEMORY.md"] and b"saved-3" in rendered["MEMORY.md"]
    assert b"entry-0007" not in rendered["MEMORY.md"] and b"entry-0008" in rendered["MEMORY.md"]


async def test_two_open_clients_taking_turns_render_what_a_full_render_does(
    tmp_path: Path, monkeypatch
) -> None:
    """Two clients open on one workspace (two processes), each having taken up the saved
    rendering, change layout memory in turns: a command on a version the other moved is
    refused (:class:`~sandbox_memory.errors.MemoryConflict`, nothing written), and each
    render brings the taken-up rendering up to date with the other's commits (named by the
    sealed head), so the files are those of rendering every entry again."""

    import sandbox_memory.render.step as render_module
    from sandbox_memory import Forget, MemoryClient, MemoryConflict, MemoryGenerateConfig, Remember
    from sandbox_memory.render.step import Renderer

    restored: list[str] = []
    take_up = Renderer._restore

    async def counting(self: Renderer, registry: Registry) -> str:
        stamp = await take_up(self, registry)
        restored.append(stamp)
        return stamp

    monkeypatch.setattr(Renderer, "_restore", counting)
    monkeypatch.setattr(render_module, "SAVE_AFTER_COMMITS", 2)
    _taken_up_not_patched(monkeypatch)
    monkeypatch.setattr(render_module, "SAVE_FROM_ENTRIES", 10)
    _old_store(tmp_path, 60, version=1)
    await adopt_store(tmp_path)
    config = MemoryGenerateConfig(engine="offline")
    mem = tmp_path / "memories"
    first = MemoryClient(tmp_path, generate=config)
    second = MemoryClient(tmp_path, generate=config)
    seen = await first.view()
    await second.apply(Forget(key="entry-0003"), expected=(await second.view()).version)
    with pytest.raises(MemoryConflict):
        await first.apply(Forget(key="entry-0004"), expected=seen.version)
    turns: list[tuple[MemoryClient, Remember | Forget]] = [
        (first, Remember(key="turn-a", content="Fact a from the first client.", kind="fact")),
        (second, Remember(key="turn-b", content="Fact b from the second client.", kind="fact")),
        (first, Forget(key="turn-b")),
        (second, Remember(key="entry-0005", content="Entry 5 said again.", kind="decision")),
        (first, Forget(key="entry-0006")),
        (second, Remember(key="turn-c", content="Fact c from the second client.", kind="fact")),
    ]
    for client, command in turns:
        await client.apply(command, expected=(await client.view()).version)
    assert any(restored)  # the first client took up what the second saved
    rendered = {name: (mem / name).read_bytes() for name in ("MEMORY.md", "memory_summary.md")}
    prompt = (mem / "store" / "prompt.json").read_bytes()
    for name in ("store/rendering.json", "store/rendered.json", "MEMORY.md", "memory_summary.md"):
        (mem / name).unlink()
    (mem / "store" / "rendering-delta.json").unlink(missing_ok=True)
    await MemoryClient(tmp_path, generate=config).runtime.render_current()
    for name, data in rendered.items():
        assert (mem / name).read_bytes() == data, name
    assert (mem / "store" / "prompt.json").read_bytes() == prompt
    text = rendered["MEMORY.md"].decode()
    assert "turn-a" in text and "turn-c" in text and "turn-b" not in text
    assert "entry-0003" not in text and "entry-0006" not in text and "entry-0004" in text
    assert "**entry-0005** (decision): Entry 5 said again." in text


async def test_the_saved_rendering_is_brought_up_to_date_by_a_delta_of_the_changed_rows(
    tmp_path: Path, monkeypatch
) -> None:
    """Past :data:`SAVE_AFTER_KEYS` changed entries the saved rendering is brought up to date
    by ``store/rendering-delta.json`` (the rows of the entries changed since it was written
    whole), not written whole, until the delta holds one in :data:`DELTA_SHARE` of its rows; a
    new process takes up both, and the files are those of rendering every entry again. A
    delta left on an earlier base (a process cut short after writing the base whole) is not
    read."""

    import sandbox_memory.render.step as render_module
    from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, Remember
    from sandbox_memory.render.step import Renderer, SavedDelta, SavedRendering
    from sandbox_memory.stores.files import unsealed

    _taken_up_not_patched(monkeypatch)
    monkeypatch.setattr(render_module, "SAVE_FROM_ENTRIES", 10)
    monkeypatch.setattr(render_module, "SAVE_AFTER_KEYS", 2)
    monkeypatch.setattr(render_module, "DELTA_SHARE", 6)  # 60 entries: up to 10 rows
    _old_store(tmp_path, 60, version=1)
    await adopt_store(tmp_path)
    config = MemoryGenerateConfig(engine="offline")
    mem = tmp_path / "memories"
    base, delta = mem / "store" / "rendering.json", mem / "store" / "rendering-delta.json"
    restored: list[str] = []
    take_up = Renderer._restore

    async def counting(self: Renderer, registry: Registry) -> str:
        stamp = await take_up(self, registry)
        restored.append(stamp)
        return stamp

    monkeypatch.setattr(Renderer, "_restore", counting)

    async def apply(command: Remember | Forget) -> None:
        client = MemoryClient(tmp_path, generate=config)
        view = await client.view()
        await client.apply(command, expected=view.version)

    await apply(Remember(key="saved-0", content="Fact 0 kept between processes.", kind="fact"))
    whole = base.read_bytes()
    assert not delta.exists()
    deltas: list[bytes] = []
    for i in range(1, 5):
        await apply(Remember(key=f"saved-{i}", content=f"Fact {i} kept.", kind="fact"))
        if i > 1:
            deltas.append(delta.read_bytes())
    await apply(Forget(key="entry-0007"))
    assert restored[-1] == SavedDelta.model_validate_json(unsealed(deltas[-1]) or b"").layout_stamp
    await apply(Forget(key="entry-0008"))  # two changed since the delta: written again
    assert base.read_bytes() == whole  # not written whole again
    last = SavedDelta.model_validate_json(unsealed(delta.read_bytes()) or b"")
    assert {"saved-1", "saved-4", "entry-0007", "entry-0008"} <= set(last.changed)
    assert "entry-0007" not in last.rows.keys and "saved-4" in last.rows.keys

    # Past its share the rendering is written whole again and the delta goes; an old delta put
    # back (its base is not this one) is not read.
    for i in range(5, 12):
        await apply(Remember(key=f"saved-{i}", content=f"Fact {i} kept.", kind="fact"))
    assert base.read_bytes() != whole and not delta.exists()
    now = SavedRendering.model_validate_json(unsealed(base.read_bytes()) or b"").layout_stamp
    delta.write_bytes(deltas[0])
    await apply(Forget(key="saved-3"))
    assert restored[-1] == now
    rendered = {name: (mem / name).read_bytes() for name in ("MEMORY.md", "memory_summary.md")}
    prompt = (mem / "store" / "prompt.json").read_bytes()
    for name in ("store/rendering.json", "store/rendered.json", "MEMORY.md", "memory_summary.md"):
        (mem / name).unlink()
    delta.unlink(missing_ok=True)
    monkeypatch.setattr(Renderer, "_restore", take_up)
    await MemoryClient(tmp_path, generate=config).runtime.render_current()
    for name, data in rendered.items():
        assert (mem / name).read_bytes() == data, name
    assert (mem / "store" / "prompt.json").read_bytes() == prompt
    assert b"saved-3" not in rendered["MEMORY.md"] and b"saved-11" in rendered["MEMORY.md"]
    assert b"entry-0007" not in rendered["MEMORY.md"] and b"entry-0009" in rendered["MEMORY.md"]


async def test_a_rendering_delta_edited_in_the_workspace_is_refused_and_the_changes_read_again(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    """``store/rendering-delta.json`` is sealed like the saved rendering: one whose seal does
    not verify is set aside (WARNING) and read as missing; the entries changed since the
    saved rendering are read from their shards, and the files are those of a full render."""

    import sandbox_memory.render.step as render_module
    from sandbox_memory import MemoryClient, MemoryGenerateConfig, Remember

    monkeypatch.setattr(render_module, "SAVE_FROM_ENTRIES", 10)
    monkeypatch.setattr(render_module, "SAVE_AFTER_KEYS", 1)
    _old_store(tmp_path, 40, version=1)
    await adopt_store(tmp_path)
    config = MemoryGenerateConfig(engine="offline")
    for i in range(2):
        client = MemoryClient(tmp_path, generate=config)
        view = await client.view()
        await client.apply(
            Remember(key=f"kept-{i}", content=f"A fact {i}.", kind="fact"), expected=view.version
        )
    await _edited_record_is_set_aside(
        tmp_path, caplog, "rendering-delta.json", b"A fact 1.", b"A forged fact."
    )


async def _edited_record_is_set_aside(
    root: Path, caplog, name: str, text: bytes, edited: bytes
) -> None:
    """``store/<name>`` with ``text`` changed to ``edited`` (its seal left as it was): the
    next render sets it aside (WARNING) and writes the ``MEMORY.md`` it wrote before."""

    from sandbox_memory import MemoryClient, MemoryGenerateConfig

    mem = root / "memories"
    record = mem / "store" / name
    expected = (mem / "MEMORY.md").read_bytes()
    forged = record.read_bytes().replace(text, edited)
    assert forged != record.read_bytes()
    record.write_bytes(forged)
    (mem / "MEMORY.md").unlink()
    await MemoryClient(
        root, generate=MemoryGenerateConfig(engine="offline")
    ).runtime.render_current()
    assert (mem / "MEMORY.md").read_bytes() == expected
    assert any(p.name.startswith(f"{name}.unsealed-") for p in record.parent.iterdir())
    assert name in caplog.text


async def test_a_saved_rendering_edited_in_the_workspace_is_refused_and_everything_rendered(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    """``store/rendering.json`` is workspace data the agent's tools can write: one whose seal
    does not verify is set aside (WARNING), and the files are rendered from every entry."""

    import sandbox_memory.render.step as render_module
    from sandbox_memory import MemoryClient, MemoryGenerateConfig, Remember

    monkeypatch.setattr(render_module, "SAVE_FROM_ENTRIES", 10)
    _old_store(tmp_path, 40, version=1)
    await adopt_store(tmp_path)
    config = MemoryGenerateConfig(engine="offline")
    client = MemoryClient(tmp_path, generate=config)
    view = await client.view()
    await client.apply(Remember(key="kept", content="A fact.", kind="fact"), expected=view.version)
    # The line of entry-0003 says something else, the seal left as it was.
    await _edited_record_is_set_aside(
        tmp_path, caplog, "rendering.json", b"Fact 3 about the parser.", b"Fact 3 is forged here."
    )


async def test_a_layout_view_parses_an_entry_when_asked_and_keeps_what_it_saw(
    tmp_path: Path,
) -> None:
    from pydantic import BaseModel

    from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, Remember

    entries = _old_store(tmp_path, 300, version=1)
    await adopt_store(tmp_path)
    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    async with client.runtime.write_lock():
        await client.runtime.consolidate_layout()  # split into shards, rendered
    parsed: list[int] = []
    validate = Entry.model_validate_json

    def counting(data: Any, **kw: Any) -> BaseModel:
        parsed.append(1)
        return validate(data, **kw)

    reader = MemoryClient(tmp_path)
    try:
        Entry.model_validate_json = counting  # type: ignore[method-assign]
        view = await reader.view()
        assert view.entries["entry-0005"] == entries["entry-0005"]
        assert len(parsed) == 1
    finally:
        Entry.model_validate_json = validate  # type: ignore[method-assign]
    await client.apply(Forget(key="entry-0010"), expected=view.version)
    after = await client.apply(
        Remember(key="new-one", content="New.", kind="fact"), expected=view.version + 1
    )
    # The first view is what layout memory was when it was read.
    assert view.entries["entry-0010"].status == "active" and "new-one" not in view.entries
    assert dict(view.entries) == {k: e for k, e in entries.items()}
    assert after.entries["entry-0010"].status == "retracted" and "new-one" in after.entries
    assert dict(await reader.view_for(person="ana")).keys() >= {"version", "entries"}
    assert "entry-0001" in (await reader.view()).entries  # ana's, seen by the host
    bo = MemoryClient(tmp_path, person="bo")
    assert "entry-0001" not in (await bo.view()).entries
    assert len((await bo.view()).entries) == len(after.entries) - 1
    assert json.loads(view.model_dump_json())["entries"]["entry-0005"]["key"] == "entry-0005"


def test_a_skill_is_decided_by_what_the_procedure_says_not_by_the_runs_it_cites() -> None:
    # Which of several equal statements an entry cites is a tie a killed and re-run close may
    # settle differently; a skill that followed the cited runs appeared in one and not the other.
    def procedure(content: str, runs: int, person: str | None = None) -> Entry:
        sources = [Source(conversation=f"conv-{i}", item=f"{i:08x}:1") for i in range(runs)]
        return Entry(
            key="test-command", content=content, kind="procedure", sources=sources, person=person
        )

    one_step = "Run the tests with `python3 -m pytest -q`."
    two_steps = "Run `python3 tools/gen.py` before the tests, then `python3 -m pytest -q`."
    assert not is_skill(procedure(one_step, runs=1))
    assert not is_skill(procedure(one_step, runs=3))
    assert is_skill(procedure(two_steps, runs=1))
    assert is_skill(procedure(two_steps, runs=3))
    assert not is_skill(procedure(two_steps, runs=1, person="ana"))  # a person's own: no skill
    fact = procedure(two_steps, runs=1).model_copy(update={"kind": "fact"})
    assert not is_skill(fact)
