"""Extraction and the search index at scale: cost that follows the new work, counted, not timed.

An extraction is shown the known entries that share words with its transcript, found through
the search index, instead of every entry memory holds; syncing the index after a run costs the
same however many entries there are.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from helpers import layout_runtime, run_payload
from sandbox_memory.engines.base import Extraction, ExtractionRequest
from sandbox_memory.engines.offline import OfflineEngine
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.search.index import (
    KNOWN_CANDIDATES,
    KNOWN_NEWEST,
    SearchIndex,
)
from sandbox_memory.stores.records import (
    ConversationMemory,
    Entry,
    LayoutMemory,
    LogRecord,
    Source,
    now_ms,
)
from sandbox_memory.stores.seam import MemoryStore
from sandbox_memory.workspace import LocalWorkspace

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
    "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee"
).split()


class RecordingEngine:
    """The offline engine, keeping every request it is given (the model seam)."""

    name = "offline"

    def __init__(self) -> None:
        self.requests: list[ExtractionRequest] = []
        self._inner = OfflineEngine()

    async def extract(self, request: ExtractionRequest) -> Extraction:
        self.requests.append(request)
        return await self._inner.extract(request)


def filler(i: int) -> str:
    """Content of an entry that shares no word with the runs below."""

    return f"Note {' '.join(WORDS[(i + k) % len(WORDS)] for k in range(6))} number {i}."


async def seed_layout(rt: LayoutRuntime, entries: list[Entry]) -> None:
    """Layout memory holding ``entries``, saved and logged as a phase 2 would."""

    store = rt.state.store
    layout = LayoutMemory(version=1, entries={e.key: e for e in entries})
    await store.append_log(
        LogRecord(version=1, at=now_ms(), cause="promotion", scope="layout", keys=[])
    )
    await store.save_layout(layout)


async def save_layout_change(store: MemoryStore, layout: LayoutMemory, keys: list[str]) -> None:
    """``layout`` changed at ``keys``: its next version, logged and saved as phase 2 would."""

    layout.version += 1
    await store.append_log(
        LogRecord(
            version=layout.version, at=now_ms(), cause="consolidation", scope="layout", keys=keys
        )
    )
    await store.save_layout(layout)


def entry(key: str, content: str, at: int, **kw: Any) -> Entry:
    return Entry(
        key=key,
        content=content,
        kind="fact",
        sources=[Source(conversation="old", item="00000000:0")],
        updated_at=at,
        **kw,
    )


async def test_an_extraction_is_shown_the_entries_sharing_its_words_not_every_entry(
    tmp_path: Path,
) -> None:
    engine = RecordingEngine()
    rt = layout_runtime(tmp_path, engine=engine)
    many = [entry(f"note-{i:04d}", filler(i), 2_000_000 + i) for i in range(KNOWN_CANDIDATES + 150)]
    # The oldest entry of all is the one this run is about.
    about = entry("ferry-to-zanzibar", "The ferry to Zanzibar leaves from pier 9.", 1_000_000)
    await seed_layout(rt, [*many, about])
    await rt.record(
        run_payload("Which pier does the Zanzibar ferry leave from?"), rollout_id="trip"
    )
    await rt.close()

    (request,) = engine.requests
    keys = [k.key for k in request.known_entries]
    assert "ferry-to-zanzibar" in keys
    assert len(keys) <= KNOWN_CANDIDATES + KNOWN_NEWEST
    # Of the entries sharing no word with the run, only the newest few are listed.
    unrelated = sorted(k for k in keys if k.startswith("note-"))
    assert unrelated == [e.key for e in many[-KNOWN_NEWEST:]]


async def test_known_entries_follow_changes_made_since_the_index_was_synced(
    tmp_path: Path,
) -> None:
    engine = RecordingEngine()
    rt = layout_runtime(tmp_path, engine=engine)
    await seed_layout(
        rt,
        [
            entry("zanzibar-ferry-pier", "The Zanzibar ferry leaves from pier 9.", 1_000),
            entry("zanzibar-hotel", "The Zanzibar hotel is booked.", 2_000),
        ],
    )
    await rt.record(run_payload("Zanzibar plans: the ferry and the hotel."), rollout_id="a")
    await rt.close()
    assert {"zanzibar-ferry-pier", "zanzibar-hotel"} <= {
        k.key for k in engine.requests[0].known_entries
    }

    # Another process changes layout memory: one entry retracted, one added.
    other = layout_runtime(tmp_path)
    store = other.state.store
    layout = await store.load_layout()
    layout.entries["zanzibar-hotel"].status = "retracted"
    layout.entries["zanzibar-visa"] = entry("zanzibar-visa", "A Zanzibar visa is needed.", 3_000)
    await save_layout_change(store, layout, ["zanzibar-hotel", "zanzibar-visa"])

    await rt.record(
        run_payload("More Zanzibar plans: the ferry, the hotel, the visa."), rollout_id="b"
    )
    await rt.close()
    keys = [k.key for k in engine.requests[-1].known_entries]
    assert "zanzibar-visa" in keys
    assert "zanzibar-hotel" not in keys
    assert "zanzibar-ferry-pier" in keys


async def test_without_a_usable_index_every_entry_is_known_and_it_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = RecordingEngine()
    rt = layout_runtime(tmp_path, engine=engine)
    entries = [entry(f"note-{i:02d}", filler(i), 1_000 + i) for i in range(5)]
    await seed_layout(rt, entries)
    # SQLite cannot open the index file (as for a file it may not open).

    def unopenable(self: Any, path: Path) -> Any:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(SearchIndex, "_connect", unopenable)
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    for rid in ("a", "b"):
        await rt.record(run_payload(f"Zanzibar ferry for {rid}."), rollout_id=rid)
        await rt.close()
    assert len(engine.requests) == 2
    for request in engine.requests:
        # Newest first, as without the index.
        assert [k.key for k in request.known_entries] == [e.key for e in reversed(entries)]
    said = [r for r in caplog.records if "could not list the entries known" in r.getMessage()]
    assert len(said) == 1


async def _sync_steps(root: Path, entries: int) -> int:
    """SQLite virtual-machine steps of the index sync after one more run, with ``entries``
    layout entries already indexed."""

    root.mkdir()
    rt = layout_runtime(root)
    await seed_layout(rt, [entry(f"note-{i:05d}", filler(i), 1_000 + i) for i in range(entries)])
    index = rt.search_index
    await index.sync()  # the first sync: every entry indexed
    # The run cites a key and shows an entry line, so the usage lookups run too.
    segment = run_payload("Look at note-00001 please.")
    segment["generated_items"][0]["content"][0]["text"] = "I used `note-00001` here."
    await rt.record(segment, rollout_id="new")
    db = await index._open()
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    db.set_progress_handler(count, 100)
    await index.sync()
    db.set_progress_handler(None, 0)
    assert (await index.usage()).get("old", (0, 0))[0] >= 1  # the cited key was found
    return steps


async def test_syncing_the_index_after_a_run_does_not_grow_with_the_entries(
    tmp_path: Path,
) -> None:
    small = await _sync_steps(tmp_path / "small", 200)
    large = await _sync_steps(tmp_path / "large", 4_000)
    assert large <= 1.5 * small + 50, (small, large)


async def _known_steps(root: Path, entries: int) -> tuple[int, list[str]]:
    """SQLite virtual-machine steps of one known-entries lookup with ``entries`` layout
    entries indexed (a transcript sharing a word with one of them), and the keys found."""

    root.mkdir()
    rt = layout_runtime(root)
    many = [entry(f"note-{i:05d}", filler(i), 1_000 + i) for i in range(entries)]
    about = entry("ferry-to-zanzibar", "The ferry to Zanzibar leaves from pier 9.", 500)
    await seed_layout(rt, [*many, about])
    index = rt.search_index
    await index.sync()
    await index.known_entries("Zanzibar", scopes={"layout"})  # brought up to date
    db = await index._open()
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    db.set_progress_handler(count, 100)
    found = await index.known_entries(
        "Which pier does the Zanzibar ferry leave from?", scopes={"layout"}
    )
    db.set_progress_handler(None, 0)
    return steps, [e.key for e in found]


async def test_the_known_entries_lookup_does_not_grow_with_the_entries(tmp_path: Path) -> None:
    small, small_keys = await _known_steps(tmp_path / "small", 300)
    large, large_keys = await _known_steps(tmp_path / "large", 4_000)
    # The entry sharing the words, then the newest others, newest first.
    assert small_keys[0] == large_keys[0] == "ferry-to-zanzibar"
    assert large_keys[1:] == [f"note-{i:05d}" for i in range(3_999, 3_999 - KNOWN_NEWEST, -1)]
    assert large <= 1.5 * small + 50, (small, large)


async def save_conversation(rt: LayoutRuntime, rid: str, *entries: Entry) -> None:
    """Conversation ``rid`` holding ``entries``, saved and logged as an extraction would."""

    store = rt.state.store
    memory = await store.load_conversation(rid)
    memory.entries.update({e.key: e for e in entries})
    memory.version += 1
    await store.append_log(
        LogRecord(
            version=memory.version,
            at=now_ms(),
            cause="consolidation",
            scope=f"conversation:{rid}",
            keys=[e.key for e in entries],
        )
    )
    await store.save_conversation(memory)


async def test_known_entries_lookups_share_word_lists_until_an_entry_of_their_scopes_changes(
    tmp_path: Path,
) -> None:
    rt = layout_runtime(tmp_path)
    many = [entry(f"note-{i:05d}", filler(i), 1_000 + i) for i in range(60)]
    about = entry("ferry-to-zanzibar", "The ferry to Zanzibar leaves from pier 9.", 500)
    await seed_layout(rt, [*many, about])
    index = rt.search_index
    scopes = {"layout", "conversation:c1"}
    text = "Which pier does the Zanzibar ferry leave from?"
    first = await index.known_entries(text, scopes=scopes)
    assert first[0].key == "ferry-to-zanzibar"
    db = await index._open()
    statements: list[str] = []
    db.set_trace_callback(statements.append)

    def read_postings() -> bool:
        """Whether a per-word list was read since the last call."""

        read = any("json_group_array" in s for s in statements)
        statements.clear()
        return read

    assert await index.known_entries(text, scopes=scopes) == first
    assert not read_postings()  # the word lists of the first lookup, reused
    # A change to a scope not looked in (a conversation phase 2 has not taken in) keeps them.
    await save_conversation(rt, "c2", entry("zanzibar-pier", "Zanzibar ferry pier: 9.", 2_000))
    found = [e.key for e in await index.known_entries(text, scopes=scopes)]
    assert not read_postings()
    assert "zanzibar-pier" not in found and found[0] == "ferry-to-zanzibar"
    # A change to one that is looked in is found.
    await save_conversation(
        rt, "c1", entry("zanzibar-ferry-pier", "Zanzibar ferry: pier 9.", 3_000)
    )
    found = [e.key for e in await index.known_entries(text, scopes=scopes)]
    assert read_postings()
    assert found[:2] == ["ferry-to-zanzibar", "zanzibar-ferry-pier"]
    # So is one another process's index took in (this one's sync then finds nothing new).
    other = layout_runtime(tmp_path)
    await save_conversation(
        other, "c1", entry("pier-of-zanzibar-ferry", "Zanzibar ferry pier 9.", 4_000)
    )
    await other.search_index.known_entries("anything", scopes=scopes)
    statements.clear()
    found = [e.key for e in await index.known_entries(text, scopes=scopes)]
    assert read_postings()
    assert found[:3] == ["ferry-to-zanzibar", "pier-of-zanzibar-ferry", "zanzibar-ferry-pier"]
    # Without layout memory among the scopes, its entries are left out too.
    found = [e.key for e in await index.known_entries(text, scopes={"conversation:c1"})]
    assert sorted(found) == ["pier-of-zanzibar-ferry", "zanzibar-ferry-pier"]
    other.search_index.close()


async def test_an_entry_built_by_an_earlier_lookup_is_built_again_once_it_changes(
    tmp_path: Path,
) -> None:
    # The lookups keep the entries they built, by the index row each came from: an entry
    # rewritten (here under the rowid its old row had, the newest one) comes back as it is now.
    rt = layout_runtime(tmp_path)
    await save_conversation(rt, "c1", entry("ferry-pier", "The Zanzibar ferry leaves pier 9.", 10))
    index = rt.search_index
    scopes = {"conversation:c1"}
    first = await index.known_entries("Zanzibar ferry pier", scopes=scopes)
    assert [(e.key, e.content) for e in first] == [
        ("ferry-pier", "The Zanzibar ferry leaves pier 9.")
    ]
    assert await index.known_entries("Zanzibar ferry pier", scopes=scopes) == first
    db = await index._open()
    (old_id,) = db.execute("SELECT id FROM docs WHERE key = 'ferry-pier'").fetchone()
    await save_conversation(rt, "c1", entry("ferry-pier", "The Zanzibar ferry leaves pier 4.", 20))
    again = await index.known_entries("Zanzibar ferry pier", scopes=scopes)
    (new_id,) = db.execute("SELECT id FROM docs WHERE key = 'ferry-pier'").fetchone()
    assert new_id == old_id  # SQLite gave the rewritten row the old one's rowid
    assert [(e.key, e.content, e.updated_at) for e in again] == [
        ("ferry-pier", "The Zanzibar ferry leaves pier 4.", 20)
    ]


async def test_a_word_held_by_many_entries_is_not_counted_again_until_an_entry_is_dropped(
    tmp_path: Path,
) -> None:
    rt = layout_runtime(tmp_path)
    many = [entry(f"zanzibar-{i:03d}", f"Zanzibar note {i}.", 1_000 + i) for i in range(210)]
    pier = entry("ferry-pier", "The ferry leaves from pier 9.", 500)
    await seed_layout(rt, [*many, pier])
    index = rt.search_index
    text = "Zanzibar pier"
    first = [e.key for e in await index.known_entries(text, scopes={"layout"})]
    db = await index._open()
    statements: list[str] = []
    db.set_trace_callback(statements.append)

    def words_counted() -> int:
        counted = sum(s.count("count(*) FROM (SELECT rowid FROM entry_fts") for s in statements)
        statements.clear()
        return counted

    # "zanzibar" is at the cap: only "pier" is counted again, and the same entries come back.
    assert [e.key for e in await index.known_entries(text, scopes={"layout"})] == first
    assert words_counted() == 1
    # An entry dropped (retracted) may leave the word under the cap: both are counted again.
    store = rt.state.store
    layout = await store.load_layout()
    layout.entries["zanzibar-000"].status = "retracted"
    await save_layout_change(store, layout, ["zanzibar-000"])
    found = [e.key for e in await index.known_entries(text, scopes={"layout"})]
    assert words_counted() == 2
    # What an index with nothing kept from earlier lookups finds.
    fresh = layout_runtime(tmp_path).search_index
    assert found == [e.key for e in await fresh.known_entries(text, scopes={"layout"})]
    assert "ferry-pier" in found
    fresh.close()


class ListingCounter(LocalWorkspace):
    """A local folder that counts folder listings (``sizes``), by folder."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listed: list[str] = []

    async def sizes(self, path: str) -> dict[str, int]:
        self.listed.append(path)
        return await super().sizes(path)


async def test_a_runs_extraction_syncs_the_index_for_its_rollout_without_listing_all(
    tmp_path: Path,
) -> None:
    ws = ListingCounter(tmp_path)
    rt = layout_runtime(ws)
    for k in range(3):
        await rt.record(
            run_payload(f"Old run {k}: we use the staging database."), rollout_id=f"old{k}"
        )
    await rt.close()
    ws.listed.clear()

    await rt.record(run_payload("We use the Zanzibar ferry on Tuesdays."), rollout_id="new")
    assert await rt.consolidate_conversation("new")  # what runs after a run, in the background
    assert ws.listed == []  # no listing of sessions/ or rollout_summaries/
    assert await rt.search_index.sync() == 0  # a whole sync finds nothing left to index
    hits = await rt.search_index.search("Zanzibar ferry")
    assert {"entry", "rollout_summary"} <= {h.kind for h in hits if h.conversation == "new"}


async def test_a_persons_private_entries_are_shown_to_the_model_only_in_their_runs(
    tmp_path: Path,
) -> None:
    engine = RecordingEngine()
    rt = layout_runtime(tmp_path, engine=engine)
    await seed_layout(
        rt,
        [
            entry("zanzibar-ferry", "The Zanzibar ferry leaves from pier 9.", 1_000),
            entry(
                "zanzibar-allergy", "Ana is allergic to Zanzibar spice mixes.", 2_000, person="ana"
            ),
        ],
    )
    await rt.record(
        run_payload("Zanzibar: the ferry and spice mixes."), rollout_id="b", person="bob"
    )
    await rt.close()
    await rt.record(
        run_payload("Zanzibar: the ferry and spice mixes."), rollout_id="a", person="ana"
    )
    await rt.close()
    await rt.record(run_payload("Zanzibar: the ferry and spice mixes."), rollout_id="n")
    await rt.close()

    bob, ana, nobody = ([k.key for k in r.known_entries] for r in engine.requests)
    assert "zanzibar-ferry" in bob and "zanzibar-allergy" not in bob
    assert {"zanzibar-ferry", "zanzibar-allergy"} <= set(ana)
    assert "zanzibar-allergy" not in nobody


def test_the_model_engine_is_built_without_importing_the_offline_engine() -> None:
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from agents.testing import ScriptedModel\n"
        "from sandbox_memory import MemoryGenerateConfig\n"
        "from sandbox_memory.engines.resolve import resolve_engine\n"
        "engine = resolve_engine(MemoryGenerateConfig(engine='model', "
        "phase_one_model=ScriptedModel([])))\n"
        "assert engine.name == 'model', engine.name\n"
        "print('sandbox_memory.engines.offline' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


async def test_a_known_lookup_leaves_unwanted_scopes_to_the_next_sync_and_loses_none(
    tmp_path: Path,
) -> None:
    """The lookup of known entries syncs layout memory and the scopes it wants; the entries
    another extraction just wrote in a conversation it does not want are left, with the log's
    mark where it was, so the next sync (this process' or a new one's) indexes them."""

    rt = layout_runtime(tmp_path)
    await seed_layout(
        rt, [entry("zanzibar-ferry-pier", "The Zanzibar ferry leaves from pier 9.", 1)]
    )
    index = rt.search_index
    await index.sync()
    store = rt.state.store
    await store.save_conversation(
        ConversationMemory(
            rollout_id="fresh",
            version=1,
            entries={"zanzibar-visa": entry("zanzibar-visa", "A Zanzibar visa is needed.", 2)},
        )
    )
    await store.append_log(
        LogRecord(
            version=1, at=now_ms(), cause="consolidation", scope="conversation:fresh", keys=[]
        )
    )

    def indexed(search: SearchIndex, scope: str) -> int:
        assert search._db is not None
        (count,) = search._db.execute(
            "SELECT count(*) FROM docs WHERE kind = 'entry' AND scope = ?", (scope,)
        ).fetchone()
        return int(count)

    found = await index.known_entries("Zanzibar ferry and visa", scopes={"layout"})
    assert [e.key for e in found] == ["zanzibar-ferry-pier"]
    assert indexed(index, "conversation:fresh") == 0  # left for the next sync

    # A new process, whose index file holds what the lookup wrote: its sync takes in every
    # scope the log names since the mark (none is lost).
    other = layout_runtime(tmp_path).search_index
    await other.sync()
    assert indexed(other, "conversation:fresh") == 1
    assert await other.search("visa")


async def test_a_known_lookup_syncs_the_conversations_it_wants(tmp_path: Path) -> None:
    rt = layout_runtime(tmp_path)
    await seed_layout(
        rt, [entry("zanzibar-ferry-pier", "The Zanzibar ferry leaves from pier 9.", 1)]
    )
    index = rt.search_index
    await index.sync()
    await rt.state.store.save_conversation(
        ConversationMemory(
            rollout_id="fresh",
            version=1,
            entries={"zanzibar-visa": entry("zanzibar-visa", "A Zanzibar visa is needed.", 2)},
        )
    )
    await rt.state.store.append_log(
        LogRecord(
            version=1, at=now_ms(), cause="consolidation", scope="conversation:fresh", keys=[]
        )
    )
    found = await index.known_entries("Zanzibar visa", scopes={"layout", "conversation:fresh"})
    assert "zanzibar-visa" in [e.key for e in found]
