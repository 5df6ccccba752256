"""Cost that grows with the new work: per-record state, counted in operations, not timed.

Each test counts the workspace operations (or the files touched) an operation makes and checks
that they do not grow with the history already stored.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agents.sandbox import Manifest

from helpers import layout_runtime, read_progress, run_payload
from sandbox_memory import MemoryGenerateConfig
from sandbox_memory.stores.segments import history_fingerprint
from sandbox_memory.workspace import LocalWorkspace, SessionWorkspace

STORE = "memories/store"


class CountingWorkspace(LocalWorkspace):
    """A local folder that counts the operations made on it, by name."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls: Counter[str] = Counter()
        self.changed: Counter[str] = Counter()  # writes and removals, by path

    async def size(self, path: str) -> int | None:
        self.calls["size"] += 1
        return await super().size(path)

    async def read_bytes(self, path: str) -> bytes | None:
        self.calls["read_bytes"] += 1
        return await super().read_bytes(path)

    async def read_range(self, path: str, offset: int, length: int) -> bytes | None:
        self.calls["read_range"] += 1
        return await super().read_range(path, offset, length)

    async def write_atomic(self, path: str, data: bytes) -> None:
        self.calls["write_atomic"] += 1
        self.changed[path] += 1
        await super().write_atomic(path, data)

    async def remove(self, path: str) -> None:
        self.changed[path] += 1
        await super().remove(path)


async def test_pending_check_sizes_only_the_rollouts_recorded_since_the_last_check(
    tmp_path: Path,
) -> None:
    ws = CountingWorkspace(tmp_path)
    rt = layout_runtime(ws)
    for k in range(30):
        await rt.record(run_payload(f"Task {k}: fix the parser."), rollout_id=f"c{k:02d}")
    await rt.close()
    await rt.pending_rollouts()  # clears the flags of what the close read to its end
    ws.calls.clear()
    assert await rt.pending_rollouts() == []
    assert ws.calls["size"] == 0 and ws.calls["read_bytes"] == 0

    await rt.record(run_payload("Task 7 again."), rollout_id="c07")
    ws.calls.clear()
    assert await rt.pending_rollouts() == ["c07"]
    # One rollout grew: its progress record and its size, whatever the number stored.
    assert ws.calls["size"] <= 2 and ws.calls["read_bytes"] <= 1


async def test_a_deferred_rollouts_first_line_is_read_for_its_thread_record_once(
    tmp_path: Path,
) -> None:
    ws = CountingWorkspace(tmp_path)
    rt = layout_runtime(ws)
    for k in range(5):
        await rt.record(run_payload(f"Task {k}: fix the parser."), rollout_id=f"c{k}")
    threads = tmp_path / STORE / "threads"
    lost = sorted(threads.iterdir())[0]
    lost.unlink()  # a kill between the first line and the thread record
    ws.calls.clear()
    assert await rt.pending_rollouts() == [f"c{k}" for k in range(5)]
    assert ws.calls["read_range"] == 5  # each never-read rollout's first line
    assert lost.exists()  # put back from there
    ws.calls.clear()
    assert await rt.pending_rollouts() == [f"c{k}" for k in range(5)]
    assert ws.calls["read_range"] == 0  # still pending (deferred), not read again


async def test_a_rollout_written_by_something_else_is_found_by_name(tmp_path: Path) -> None:
    rt = layout_runtime(LocalWorkspace(tmp_path))
    await rt.record(run_payload("Fix the parser."), rollout_id="ours")
    await rt.close()
    seg = {**run_payload("Written by the SDK's own memory."), "rollout_id": "theirs"}
    (tmp_path / "sessions/theirs.jsonl").write_text(json.dumps(seg) + "\n")
    assert await rt.pending_rollouts() == ["theirs"]
    await rt.close()
    assert await rt.pending_rollouts() == []
    assert (
        read_progress(tmp_path)["theirs"]["offset"]
        == (tmp_path / "sessions/theirs.jsonl").stat().st_size
    )


async def test_only_a_progress_record_of_its_own_name_makes_a_rollout_known(
    tmp_path: Path,
) -> None:
    rt = layout_runtime(LocalWorkspace(tmp_path))
    await rt.record(run_payload("Fix the parser."), rollout_id="ours")
    await rt.close()
    sessions = tmp_path / "sessions"
    for rid in ("a", "b.json", "c", "d"):
        seg = {**run_payload(f"Written elsewhere: {rid}."), "rollout_id": rid}
        (sessions / f"{rid}.jsonl").write_text(json.dumps(seg) + "\n")
    (sessions / "notes.json").write_text("{}")  # not a rollout
    (sessions / ".hidden.jsonl").write_text("{}\n")  # a hidden name is not a rollout
    progress = tmp_path / STORE / "progress"
    # Names that are not ``<id>.json`` hide no rollout: another suffix, a hidden record.
    (progress / "a.jsonl").write_text("{}")
    (progress / ".c.json").write_text("{}")
    (progress / "d.json.tmp").write_text("{}")
    assert await rt.pending_rollouts() == ["a", "b.json", "c", "d"]
    assert "notes" not in await rt.pending_rollouts()


async def test_an_extraction_rewrites_only_its_own_rollouts_progress(tmp_path: Path) -> None:
    ws = CountingWorkspace(tmp_path)
    rt = layout_runtime(ws)
    for rid in ("a", "b", "c"):
        await rt.record(run_payload(f"Work on {rid}."), rollout_id=rid)
    await rt.close()
    folder = tmp_path / STORE / "progress"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert sorted(before) == ["a.json", "b.json", "c.json"]
    offset = read_progress(tmp_path)["a"]["offset"]
    ws.changed.clear()
    await rt.record(
        run_payload("More work on a.", when="2026-01-02T00:00:00+00:00"), rollout_id="a"
    )
    await rt.close()
    # Counted at the workspace seam (a rewrite with the same bytes counts too), not by inode
    # and mtime, which a busy machine's file system can reuse or leave coarse.
    progress = {path for path in ws.changed if path.startswith(f"{STORE}/progress/")}
    assert progress == {f"{STORE}/progress/a.json"}
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert after["b.json"] == before["b.json"] and after["c.json"] == before["c.json"]
    assert read_progress(tmp_path)["a"]["offset"] > offset  # read further


async def test_forgotten_rollouts_are_pruned_and_their_old_runs_not_read_again(
    tmp_path: Path,
) -> None:
    rt = layout_runtime(LocalWorkspace(tmp_path), max_raw_memories_for_consolidation=1)
    await rt.record(
        run_payload("Fix the parser.", when="2026-01-01T00:00:00+00:00"), rollout_id="old"
    )
    await rt.close()
    state = tmp_path / STORE
    size_before = (state / "progress/old.json").stat().st_size
    await rt.record(
        run_payload("Fix the lexer.", when="2026-01-02T00:00:00+00:00"), rollout_id="new"
    )
    await rt.close()

    assert sorted(read_progress(tmp_path)) == ["new"]  # pruned from the live records
    kept = json.loads((state / "forgotten/old.json").read_text())
    assert set(kept) == {"offset", "updated_at"}
    assert (state / "forgotten/old.json").stat().st_size < size_before
    assert not (tmp_path / "memories/raw_memories/old.md").exists()
    assert await rt.pending_rollouts() == []  # its old runs are not read again

    # The conversation goes on: only its new run is read, and it is live again.
    offset = kept["offset"]
    await rt.record(
        run_payload("Back to the parser.", when="2026-01-03T00:00:00+00:00"), rollout_id="old"
    )
    assert await rt.pending_rollouts() == ["old"]
    await rt.close()
    live = read_progress(tmp_path)
    assert sorted(live) == ["old"]
    assert live["old"]["offset"] > offset
    assert not (state / "forgotten/old.json").exists()
    assert (state / "forgotten/new.json").exists()


async def test_a_new_conversation_adds_one_thread_record_and_leaves_the_others(
    tmp_path: Path,
) -> None:
    rt = layout_runtime(LocalWorkspace(tmp_path))
    first = [{"role": "user", "content": "Plan the trip."}, {"role": "assistant", "content": "Ok"}]
    second = [{"role": "user", "content": "Fix the bug."}, {"role": "assistant", "content": "Ok"}]
    await rt.record({"input": first}, rollout_id="trip")
    folder = tmp_path / STORE / "threads"
    (record,) = folder.iterdir()
    stamp = (record.stat().st_ino, record.stat().st_mtime_ns)
    await rt.record({"input": second}, rollout_id="bug")
    assert len(list(folder.iterdir())) == 2
    assert (record.stat().st_ino, record.stat().st_mtime_ns) == stamp  # not rewritten
    assert await rt.conversation_for(history_fingerprint(first)) == "trip"
    assert await rt.conversation_for(history_fingerprint(second)) == "bug"


async def test_the_old_whole_file_progress_and_threads_are_split_into_records(
    tmp_path: Path,
) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    seg = {**run_payload("Fix the parser."), "rollout_id": "done", "segment_id": "s1"}
    (sessions / "done.jsonl").write_text(json.dumps(seg) + "\n")
    size = (sessions / "done.jsonl").stat().st_size
    store = tmp_path / STORE
    store.mkdir(parents=True)
    (store / "progress.json").write_text(
        json.dumps(
            {
                "rollouts": {
                    "done": {"offset": size, "slug": "parser", "consolidated": True},
                    "gone": {"offset": 10, "slug": None, "consolidated": True},
                }
            }
        )
    )
    (store / "threads.json").write_text(json.dumps({"f" * 24: "done"}))
    rt = layout_runtime(LocalWorkspace(tmp_path))
    assert await rt.pending_rollouts() == []  # nothing read before is read again
    assert read_progress(tmp_path)["done"]["offset"] == size
    assert json.loads((store / "forgotten/gone.json").read_text())["offset"] == 10
    assert await rt.conversation_for("f" * 24) == "done"
    assert not (store / "progress.json").exists() and not (store / "threads.json").exists()


async def test_a_session_append_is_one_exec_and_flags_the_rollout(
    client: Any, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        ws = SessionWorkspace(sandbox)
        rt = layout_runtime(ws)
        await rt.record(run_payload("Fix the parser."), rollout_id="conv")
        calls: list[Any] = []
        real_exec = sandbox.exec

        async def counting_exec(*args: Any, **kwargs: Any) -> Any:
            calls.append(args)
            return await real_exec(*args, **kwargs)

        sandbox.exec = counting_exec  # type: ignore[method-assign]
        await rt.record(run_payload("Fix the lexer."), rollout_id="conv")
        sandbox.exec = real_exec  # type: ignore[method-assign]
        assert len(calls) == 1
        assert len((root / "sessions/conv.jsonl").read_text().splitlines()) == 2
        assert (root / STORE / "pending/conv").exists()
        assert await rt.pending_rollouts() == ["conv"]


async def test_extraction_after_runs_is_bounded_by_phase_one_concurrency(
    client: Any, tmp_path: Path
) -> None:
    from faultlib import PhaseOneModel
    from sandbox_memory import Memory, _sdk

    root = tmp_path / "ws"
    root.mkdir()
    model = PhaseOneModel(delay=0.05)
    memory = Memory(
        generate=MemoryGenerateConfig(
            engine="model", phase_one_model=model, phase_one_concurrency=2
        )
    )
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        memory.bind(sandbox)
        manager = _sdk.find_manager(sandbox, memory)
        assert manager is not None
        for k in range(6):
            await manager.enqueue_rollout_payload(run_payload(f"Task {k}."), rollout_id=f"c{k}")
        # Three runs of one conversation while it waits: one extraction reads them all.
        for k in range(3):
            await manager.enqueue_rollout_payload(run_payload(f"More {k}."), rollout_id="c5")
        assert len(manager._tasks) <= 2
        assert await manager.wait_idle(30)
        assert model.max_active <= 2
        assert len(model.calls) == 6
        assert sorted(read_progress(root)) == [f"c{k}" for k in range(6)]


async def test_phase_two_writes_a_skill_only_when_its_content_changed(tmp_path: Path) -> None:
    from sandbox_memory import MemoryClient, Remember

    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    view = await client.apply(
        Remember(key="run-tests", content="Run `make gen`, then `make test`.", kind="procedure"),
        expected=0,
    )
    view = await client.apply(
        Remember(key="deploy", content="Run `make check` before `make deploy`.", kind="procedure"),
        expected=view.version,
    )
    skills = tmp_path / "memories/skills"

    def stamps() -> dict[str, tuple[int, int]]:
        return {
            p.parent.name: (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in skills.glob("*/SKILL.md")
        }

    before = stamps()
    assert sorted(before) == ["deploy", "run-tests"]
    await client.apply(
        Remember(
            key="deploy",
            content="Run `make check` before `make deploy` from main.",
            kind="procedure",
        ),
        expected=view.version,
    )
    after = stamps()
    assert after["run-tests"] == before["run-tests"]  # unchanged: not written again
    assert "from main" in (skills / "deploy/SKILL.md").read_text()
    (skills / "run-tests/SKILL.md").unlink()
    (skills / "run-tests").rmdir()
    async with client.runtime.write_lock():
        await client.runtime.consolidate_layout()
    assert (skills / "run-tests/SKILL.md").exists()  # removed by hand: written again


async def test_phase_two_with_nothing_new_reads_no_layout_entry_and_writes_nothing(
    tmp_path: Path,
) -> None:
    from sandbox_memory import MemoryClient, Remember

    class Reads(CountingWorkspace):
        async def read_bytes(self, path: str) -> bytes | None:
            self.calls[path] += 1
            return await super().read_bytes(path)

    ws = Reads(tmp_path)
    client = MemoryClient(ws, generate=MemoryGenerateConfig(engine="offline"))
    view = await client.apply(Remember(key="k", content="A fact.", kind="fact"), expected=0)
    await client.apply(
        Remember(key="deploy", content="Run `make deploy`.", kind="procedure"),
        expected=view.version,
    )
    rt = client.runtime
    await rt.record(run_payload("Fix the parser."), rollout_id="c1")
    await rt.close()
    rendered = {p: p.read_bytes() for p in (tmp_path / "memories").rglob("*.md")}
    # The same runtime, and a fresh one (a new process: nothing cached).
    for again in (rt, MemoryClient(ws, generate=MemoryGenerateConfig(engine="offline")).runtime):
        ws.calls.clear()
        ws.changed.clear()
        async with again.write_lock():
            await again.consolidate_layout()
        # The change stamp (head.json) says nothing changed: no entry of layout memory is read.
        read = [p for p in ws.calls if "/layout" in p and not p.endswith("/head.json")]
        assert read == [f"{STORE}/layout/commit.json"]  # looked for, absent
        assert ws.calls["memories/MEMORY.md"] == 1  # a live edit? no
        assert [p for p in ws.changed if not p.endswith("/lock")] == []
    assert {p: p.read_bytes() for p in (tmp_path / "memories").rglob("*.md")} == rendered


async def test_a_forgotten_procedure_takes_its_skill_folder_with_it(tmp_path: Path) -> None:
    from sandbox_memory import Forget, MemoryClient, Remember

    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    view = await client.apply(
        Remember(key="deploy", content="Run `make check`, then `make deploy`.", kind="procedure"),
        expected=0,
    )
    skills = tmp_path / "memories" / "skills"
    (skills / "hand-written").mkdir()
    (skills / "hand-written" / "SKILL.md").write_text("# mine\n")
    assert (skills / "deploy" / "SKILL.md").exists()
    await client.apply(Forget(key="deploy"), expected=view.version)
    assert not (skills / "deploy").exists()
    assert (skills / "hand-written" / "SKILL.md").read_text() == "# mine\n"


async def test_the_first_turn_reads_the_prompt_index_not_the_whole_store(
    client: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    from sandbox_memory import Memory, MemoryClient, Remember, for_person
    from sandbox_memory.stores.files import Store

    root = tmp_path / "ws"
    root.mkdir()
    memory_client = MemoryClient(root, generate=MemoryGenerateConfig(engine="offline"))
    view = await memory_client.apply(
        Remember(key="ci", content="CI runs on Python 3.12.", kind="fact"), expected=0
    )
    await memory_client.apply(
        Remember(key="tabs", content="Ana prefers tabs.", kind="preference", person="ana"),
        expected=view.version,
    )

    def whole_store(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the first turn read the whole store")

    monkeypatch.setattr(Store, "load_layout", whole_store)
    monkeypatch.setattr(Store, "load_registry", whole_store)
    memory = Memory(generate=None)
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        memory.bind(sandbox)
        text = await memory.instructions(sandbox.state.manifest) or ""
        assert "CI runs on Python 3.12." in text and "tabs" not in text
        with for_person("ana"):
            ana = memory.clone()
            ana.bind(sandbox)
            assert "Ana prefers tabs." in (await ana.instructions(sandbox.state.manifest) or "")


async def test_the_conversation_view_lists_processed_items_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from sandbox_memory import MemoryClient
    from sandbox_memory.commands import base as commands
    from sandbox_memory.stores.segments import parse_segments

    rt = layout_runtime(LocalWorkspace(tmp_path))
    tricky = run_payload('The tool printed {"memory_item_id":"not-an-id"} and more.')
    for k in range(5):
        await rt.record(tricky if k == 2 else run_payload(f"Step {k}."), rollout_id="conv")
    await rt.close()
    data = (tmp_path / "sessions/conv.jsonl").read_bytes()
    expected = [
        item["memory_item_id"]
        for seg in parse_segments(data, start_offset=0, check=rt.state.line_check("conv")).segments
        for key in ("input", "generated_items")
        for item in seg[key]
    ]
    reads: list[int] = []
    real = LocalWorkspace.read_range

    async def read_range(self: Any, path: str, offset: int, length: int) -> bytes | None:
        reads.append(length)
        return await real(self, path, offset, length)

    monkeypatch.setattr(commands, "VIEW_CHUNK_BYTES", 200)
    monkeypatch.setattr(LocalWorkspace, "read_range", read_range)
    view = await MemoryClient(tmp_path).view("conv")
    assert view.processed == expected  # type: ignore[union-attr]
    assert "not-an-id" not in view.processed  # type: ignore[union-attr]
    assert len(reads) > 1 and max(reads) <= 200


async def test_a_close_defers_its_backlog_without_looking_up_known_entries(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Past the close's model-call budget, a pending rollout is deferred before its known
    entries are searched: a long backlog costs a read of each rollout, not a search each."""

    from faultlib import PhaseOneModel
    from sandbox_memory.search.index import SearchIndex

    model = PhaseOneModel()
    rt = layout_runtime(
        tmp_path, engine="model", phase_one_model=model, max_model_calls_per_close=2
    )
    for k in range(6):
        await rt.record(
            run_payload(f"Task {k}: the parser drops the last line."), rollout_id=f"c{k}"
        )
    looked_up: list[str] = []
    real = SearchIndex.known_entries

    async def counting(self: SearchIndex, text: str, **kwargs: Any) -> Any:
        looked_up.append(text)
        return await real(self, text, **kwargs)

    monkeypatch.setattr(SearchIndex, "known_entries", counting)
    report = await rt.close()
    assert len(model.calls) == 2
    assert len(report["deferred"]) == 4
    assert len(looked_up) == 2
    assert await rt.pending_rollouts() == sorted(report["deferred"])


async def test_a_commands_render_reads_only_the_entries_it_changed(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The prompt index shows the newest entries (spread over most shards); after this
    process' own command only the keys it changed are read again, and the index is the one a
    fresh process renders from every entry."""

    from sandbox_memory import Forget, MemoryClient, Remember
    from sandbox_memory.stores.files import Store

    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    view = await client.create()
    for k in range(24):
        view = await client.apply(
            Remember(key=f"fact-{k}", content=f"Fact number {k} of the parser.", kind="fact"),
            expected=view.version,
        )
    asked: list[list[str]] = []
    real = Store.layout_entries

    async def counting(self: Store, keys: Any) -> Any:
        keys = list(keys)
        asked.append(keys)
        return await real(self, keys)

    monkeypatch.setattr(Store, "layout_entries", counting)
    view = await client.apply(
        Remember(key="fact-3", content="Fact three, corrected.", kind="fact"),
        expected=view.version,
    )
    view = await client.apply(Forget(key="fact-5"), expected=view.version)
    view = await client.apply(
        Remember(key="fact-new", content="A new fact.", kind="fact"), expected=view.version
    )
    assert asked and max(len(keys) for keys in asked) <= 1, asked
    monkeypatch.setattr(Store, "layout_entries", real)

    prompt = tmp_path / STORE / "prompt.json"
    shown = prompt.read_bytes()
    assert b"Fact three, corrected." in shown and b"fact-new" in shown
    assert b"Fact number 5 " not in shown
    prompt.unlink()
    (tmp_path / STORE / "rendered.json").unlink()
    fresh = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline")).runtime
    async with fresh.write_lock():
        await fresh.consolidate_layout()
    assert prompt.read_bytes() == shown
