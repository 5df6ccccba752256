"""A command from a process that holds no rendering patches the rendered files at the keys it
changed (``render/patch.py``, ``store/rendering-patch.json``): the files are byte-identical to
rendering every entry again, and whatever the patch cannot place is rendered from every entry."""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import adopt_store
from sandbox_memory import Forget, MemoryClient, MemoryConflict, MemoryGenerateConfig, Remember
from sandbox_memory.config import MemoryReadConfig
from sandbox_memory.engines.base import Subjects
from sandbox_memory.render.step import Renderer
from sandbox_memory.stores.files import unsealed
from sandbox_memory.stores.records import LayoutMemory
from shared_flow import lesson, unstamped_noted_run
from test_layout_records import _entry

FUTURE = 4_000_000_000_000
"""An ``updated_at`` later than any command's: an entry a command's entry is older than."""

CONFIG = MemoryGenerateConfig(engine="offline")
READ = MemoryReadConfig(max_summary_chars=600)
"""A small budget: the summary and the prompt's cut leave entries out."""

COMPARED = ("MEMORY.md", "memory_summary.md", "store/prompt.json")


def _store(root: Path, count: int) -> None:
    """Layout memory of ``count`` entries: every kind, private ones, procedures that are
    skills, entries about files (``src/parser.py`` named by more than ``## Files`` lists), one
    retracted, and a decision dated after every command."""

    entries = {e.key: e for e in (_entry(i) for i in range(count))}
    for i in range(0, count, 9):
        entries[f"entry-{i:04d}"] = _entry(i, person="ana" if i % 2 else "bo")
    for i in range(2, count, 6):
        entries[f"entry-{i:04d}"] = _entry(
            i, kind="procedure", content=f"Run `make gen{i}` then `make test{i}`."
        )
    for i in range(3, count, 4):
        files = ["src/parser.py"] if i % 8 == 3 else [f"src/mod{i}.py", "src/parser.py"]
        entries[f"entry-{i:04d}"] = _entry(i, subjects=Subjects(files=files))
    entries["entry-0005"] = _entry(5, status="retracted")
    entries["entry-0007"] = _entry(7, kind="decision", updated_at=FUTURE)
    store = root / "memories" / "store"
    store.mkdir(parents=True)
    doc = LayoutMemory(version=1, entries=entries)
    (store / "layout.json").write_text(doc.model_dump_json(indent=1))


def _client(root: Path) -> MemoryClient:
    return MemoryClient(root, generate=CONFIG, read=READ)


def _rendered(root: Path) -> dict[str, bytes]:
    mem = root / "memories"
    files = {name: (mem / name).read_bytes() for name in COMPARED}
    for skill in sorted((mem / "skills").glob("*/SKILL.md")):
        files[str(skill.relative_to(mem))] = skill.read_bytes()
    return files


async def _full_render(root: Path, scratch: Path) -> dict[str, bytes]:
    """The files of rendering every entry again, in a copy of ``root`` without any rendering."""

    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(root, scratch)
    mem = scratch / "memories"
    for name in ("rendered.json", "rendering.json", "rendering-delta.json", "rendering-patch.json"):
        (mem / "store" / name).unlink(missing_ok=True)
    for name in COMPARED:
        (mem / name).unlink()
    await _client(scratch).runtime.render_current()
    return _rendered(scratch)


@pytest.fixture
def patches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Small limits (a record from 10 entries, 3 lessons listed per file, 4 rows past the
    cut), and the number of keys of each patch made."""

    import sandbox_memory.render.files as files_module
    import sandbox_memory.render.patch as patch_module
    import sandbox_memory.render.step as step_module

    monkeypatch.setattr(step_module, "SAVE_FROM_ENTRIES", 10)
    monkeypatch.setattr(files_module, "FILE_LESSONS_LISTED", 3)
    monkeypatch.setattr(patch_module, "PATCH_MARGIN", 4)
    made: list[int] = []
    write = Renderer._write_patch

    async def counting(self: Renderer, patch: Any, *args: Any, **kw: Any) -> None:
        made.append(len(patch.keys))
        await write(self, patch, *args, **kw)

    monkeypatch.setattr(Renderer, "_write_patch", counting)
    return made


async def _apply(client: MemoryClient, command: Remember | Forget) -> None:
    await client.apply(command, expected=(await client.view()).version)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_random_commands_patch_files_equal_to_a_full_render(
    tmp_path: Path, patches: list[int], seed: int
) -> None:
    """Random Remembers (new keys, keys held, every kind, private, procedures), Forgets (of
    entries about files, in the cut, private, shown from a conversation) and closes, through
    fresh clients and one open runtime: after each, ``MEMORY.md``, ``memory_summary.md``,
    ``store/prompt.json`` and ``skills/`` are those of rendering every entry again."""

    root = tmp_path / "w"
    _store(root, 70)
    await adopt_store(root)
    rng = random.Random(seed)
    open_client = _client(root)
    rt = open_client.runtime
    await rt.record(unstamped_noted_run(lesson("alpha")), rollout_id="conv-alpha")
    await rt.close()
    closes = 0
    for step in range(30):
        view = await _client(root).view()
        active = sorted(k for k, e in view.entries.items() if e.status == "active")
        registry = json.loads(unsealed((root / "memories/store/registry.json").read_bytes()) or b"")
        shown_by_conversations = sorted(
            {e["key"] for group in registry.get("conversations", {}).values() for e in group}
        )
        roll = rng.random()
        client = open_client if rng.random() < 0.25 else _client(root)
        if roll < 0.1:
            closes += 1
            said = (
                lesson(f"t{closes}") if closes % 2 else f"Our API {closes} runs on port 84{closes}."
            )
            await rt.record(unstamped_noted_run(said), rollout_id=f"conv-t{closes}")
            await rt.close()
        elif roll < 0.5:
            key = rng.choice(
                [f"new-{step}", f"new-{step}", rng.choice(active), *shown_by_conversations[:2]]
            )
            kind = rng.choice(["fact", "fact", "decision", "procedure", "hypothesis"])
            content = (
                f"Run `make a{step}` then `make b{step}`." if kind == "procedure" else None
            ) or f"Said at step {step} about {key}."
            person = "ana" if rng.random() < 0.1 else None
            held = view.entries.get(key)
            if held is not None and held.person is not None:
                person = held.person
            await _apply(client, Remember(key=key, content=content, kind=kind, person=person))
        elif active:
            newest = sorted(active, key=lambda k: view.entries[k].updated_at)[-3:]
            key = rng.choice([*active, *newest * 6, *shown_by_conversations[:2]])
            await _apply(client, Forget(key=key))
        want = await _full_render(root, tmp_path / "full")
        assert _rendered(root) == want, f"step {step}"
    assert sum(1 for n in patches if n) >= 8, patches  # most commands were patched


async def test_a_store_without_the_record_renders_every_entry_once_then_patches(
    tmp_path: Path, patches: list[int]
) -> None:
    """A workspace rendered before ``store/rendering-patch.json`` existed (or by a build that
    wrote another format): the first command renders every entry and writes the record, the
    next is patched."""

    _store(tmp_path, 40)
    await adopt_store(tmp_path)
    record = tmp_path / "memories/store/rendering-patch.json"
    await _apply(_client(tmp_path), Remember(key="one", content="Fact one.", kind="fact"))
    assert record.exists() and patches == []
    record.unlink()  # as an earlier build left it
    await _apply(_client(tmp_path), Remember(key="two", content="Fact two.", kind="fact"))
    assert record.exists() and patches == []
    await _apply(_client(tmp_path), Remember(key="three", content="Fact three.", kind="fact"))
    assert patches == [1]
    # Another format is not read: rendered from every entry, and the record written anew.
    doc = json.loads(unsealed(record.read_bytes()) or b"")
    assert doc["format"] == 1
    from helpers import sealed_store

    store = sealed_store(tmp_path)
    await store.write_record(
        f"{store.dir}/rendering-patch.json", json.dumps({**doc, "format": 0}).encode()
    )
    await _apply(_client(tmp_path), Forget(key="two"))
    assert patches == [1]
    assert json.loads(unsealed(record.read_bytes()) or b"")["format"] == 1
    assert _rendered(tmp_path) == await _full_render(tmp_path, tmp_path.parent / "full")


async def test_a_forged_record_is_refused_by_its_seal_and_every_entry_rendered(
    tmp_path: Path, patches: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """``store/rendering-patch.json`` is workspace data the agent can write: one whose seal does
    not verify is set aside (WARNING) and never trusted; the files are rendered from every
    entry."""

    _store(tmp_path, 40)
    await adopt_store(tmp_path)
    await _apply(_client(tmp_path), Remember(key="one", content="Fact one.", kind="fact"))
    record = tmp_path / "memories/store/rendering-patch.json"
    forged = record.read_bytes().replace(b"Fact one.", b"Fact forged.")
    assert forged != record.read_bytes()
    record.write_bytes(forged)
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await _apply(_client(tmp_path), Remember(key="two", content="Fact two.", kind="fact"))
    assert patches == []
    assert "rendering-patch.json" in caplog.text
    assert any(p.name.startswith("rendering-patch.json.unsealed-") for p in record.parent.iterdir())
    assert b"Fact forged." not in (tmp_path / "memories/store/prompt.json").read_bytes()
    assert _rendered(tmp_path) == await _full_render(tmp_path, tmp_path.parent / "full")


async def test_a_person_s_edit_of_memory_md_is_taken_in_not_patched_over(
    tmp_path: Path, patches: list[int]
) -> None:
    """``MEMORY.md`` edited by a person since it was rendered: not the file the record
    describes, so the command's phase 2 takes the edit in and renders every entry."""

    _store(tmp_path, 40)
    await adopt_store(tmp_path)
    await _apply(_client(tmp_path), Remember(key="one", content="Fact one.", kind="fact"))
    memory_md = tmp_path / "memories/MEMORY.md"
    text = memory_md.read_text()
    line = next(x for x in text.splitlines() if x.startswith("- **entry-0010** "))
    memory_md.write_text(text.replace(line, "- **entry-0010** (fact): Edited by a person."))
    await _apply(_client(tmp_path), Remember(key="two", content="Fact two.", kind="fact"))
    assert patches == []
    assert "- **entry-0010** (fact): Edited by a person." in memory_md.read_text()
    assert _rendered(tmp_path) == await _full_render(tmp_path, tmp_path.parent / "full")


async def test_a_commit_of_a_writer_killed_before_rendering_is_patched_with_the_next(
    tmp_path: Path, patches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's command committed and killed before its phase 2 rendered it, and a
    command refused on the version it moved: the next command patches both keys (the sealed
    head names them), and the files are those of a full render."""

    from sandbox_memory.consolidate.step import Consolidator

    _store(tmp_path, 40)
    await adopt_store(tmp_path)
    await _apply(_client(tmp_path), Remember(key="one", content="Fact one.", kind="fact"))
    first = _client(tmp_path)
    seen = await first.view()
    consolidate = Consolidator.consolidate_layout

    async def killed(self: Consolidator) -> None:
        raise OSError("killed before rendering")

    monkeypatch.setattr(Consolidator, "consolidate_layout", killed)
    await _apply(_client(tmp_path), Remember(key="two", content="Fact two.", kind="fact"))
    monkeypatch.setattr(Consolidator, "consolidate_layout", consolidate)
    assert b"**two**" not in (tmp_path / "memories/MEMORY.md").read_bytes()
    with pytest.raises(MemoryConflict):
        await first.apply(Forget(key="entry-0010"), expected=seen.version)
    assert patches == []
    await _apply(first, Forget(key="entry-0010"))
    assert patches == [2]
    text = (tmp_path / "memories/MEMORY.md").read_text()
    assert "**two**" in text and "**entry-0010**" not in text
    assert _rendered(tmp_path) == await _full_render(tmp_path, tmp_path.parent / "full")


async def test_a_kill_between_the_patched_memory_md_and_its_stamp_is_no_edit(
    tmp_path: Path, patches: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """The patched ``MEMORY.md`` written, the process killed before ``store/rendered.json``
    records it: the next close knows the file as memory's own rendering (no edit taken in, no
    WARNING), and renders what a full render does."""

    from sandbox_memory.workspace import LocalWorkspace

    class KilledAfterMemoryMd(LocalWorkspace):
        written = False

        async def write_atomic(self, path: str, data: bytes) -> None:
            if path.endswith("store/rendered.json") and self.written:
                raise OSError("killed between MEMORY.md and its stamp")
            await super().write_atomic(path, data)
            if path.endswith("memories/MEMORY.md"):
                self.written = True

    _store(tmp_path, 40)
    await adopt_store(tmp_path)
    await _apply(_client(tmp_path), Remember(key="one", content="Fact one.", kind="fact"))
    client = MemoryClient(KilledAfterMemoryMd(str(tmp_path)), generate=CONFIG, read=READ)
    view = await client.view()
    with caplog.at_level(logging.ERROR, logger="sandbox_memory"):
        await client.apply(Forget(key="entry-0010"), expected=view.version)
    assert patches == [1]  # patched, the stamp not written (logged at ERROR)
    assert "killed between MEMORY.md and its stamp" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await _client(tmp_path).runtime.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    log = (tmp_path / "memories/store/log.jsonl").read_text()
    assert "live_update" not in log
    assert "**entry-0010**" not in (tmp_path / "memories/MEMORY.md").read_text()
    assert _rendered(tmp_path) == await _full_render(tmp_path, tmp_path.parent / "full")


async def test_forgetting_the_newest_entries_past_the_rows_kept_renders_every_entry(
    tmp_path: Path, patches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each Forget of an entry of the prompt's cut takes a kept row: patched while the rows
    kept past the cut last, then rendered from every entry (which keeps as many again), the
    files always those of a full render."""

    import sandbox_memory.render.step as step_module

    monkeypatch.setattr(step_module, "SAVE_AFTER_COMMITS", 1000)
    monkeypatch.setattr(step_module, "SAVE_AFTER_KEYS", 1000)
    _store(tmp_path, 40)
    await adopt_store(tmp_path)
    await _apply(_client(tmp_path), Remember(key="one", content="Fact one.", kind="fact"))
    assert patches == []
    view = await _client(tmp_path).view()
    newest = sorted(
        (k for k, e in view.entries.items() if e.status == "active" and e.person is None),
        key=lambda k: view.entries[k].updated_at,
        reverse=True,
    )
    for key in newest[:12]:
        await _apply(_client(tmp_path), Forget(key=key))
        assert _rendered(tmp_path) == await _full_render(tmp_path, tmp_path.parent / "full")
    assert 4 <= len(patches) < 12  # patched while the kept rows lasted, not always
