"""Search: ranked full-text hits over entries, rollout summaries and recorded items.

From Python (`MemoryClient.search`), the CLI and the agent tool (`memory_search`), over a local
folder and through the session API; retracted and other people's private memory never appear;
layouts stay isolated; the index is derived, incremental and rebuildable.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.run import RunConfig
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message, function_call
from click.testing import CliRunner

from helpers import TEST_COMMAND, bug_fix_script, run_payload
from sandbox_memory import (
    Forget,
    Memory,
    MemoryClient,
    MemoryConfigError,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    Remember,
    _sdk,
)
from sandbox_memory.cli import main
from sandbox_memory.consolidate.selection import select_rollouts
from sandbox_memory.search.index import INDEX_FILE, fts_query
from sandbox_memory.stores.records import RolloutProgress
from sandbox_memory.workspace import LocalWorkspace, SessionWorkspace

OFFLINE = MemoryGenerateConfig(engine="offline")


def payload(user: str, reply: str, *, when: str = "2026-03-01T10:00:00+00:00") -> dict[str, Any]:
    return run_payload(user, reply=reply, when=when, completed=True)


def client_for(root: Path, **kw: Any) -> MemoryClient:
    return MemoryClient(root, generate=OFFLINE, **kw)


async def record(client: MemoryClient, rid: str, user: str, reply: str, **kw: Any) -> None:
    await client.runtime.record(payload(user, reply, **kw), rollout_id=rid)


# ------------------------------------------------------------------ Python API


async def test_hits_carry_text_kind_sources_time_and_score(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    await record(c, "trip", "We booked the ferry to Naxos for Tuesday.", "Noted the ferry.")
    await record(c, "work", "The staging database is on port 6543.", "Understood.")
    await c.runtime.close()
    view = await c.view(None)
    await c.apply(
        Remember(key="ferry-day", content="The ferry to Naxos leaves on Tuesday."),
        expected=view.version,
    )

    hits = await c.search("ferry Naxos")

    kinds = {h.kind for h in hits}
    assert {"entry", "item", "rollout_summary"} <= kinds
    assert all("naxos" in h.text.lower() or "ferry" in h.text.lower() for h in hits)
    item = next(h for h in hits if h.kind == "item")
    assert item.conversation == "trip" and item.detail in ("user", "assistant")
    assert item.sources[0].conversation == "trip" and item.sources[0].item
    assert item.updated_at > 0 and item.path == "sessions/trip.jsonl"
    entry = next(h for h in hits if h.key == "ferry-day")
    assert entry.kind == "entry" and entry.sources and entry.conversation is None
    assert all(h.score >= 0 for h in hits)
    assert not any(h.conversation == "work" for h in hits)


async def test_a_summary_hit_shows_what_happened_not_its_file_header(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    await record(c, "trip", "We booked the ferry to Naxos for Tuesday.", "Noted the ferry.")
    await c.runtime.close()

    summary = next(h for h in await c.search("ferry Naxos") if h.kind == "rollout_summary")

    assert summary.path is not None and summary.path.startswith("memories/rollout_summaries/")
    assert summary.conversation == "trip"
    assert "rollout_path" not in summary.text and "terminal_state" not in summary.text
    assert "Naxos" in summary.text


async def test_an_entry_and_the_item_it_was_learned_from_take_one_place(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    await record(c, "trip", "We decided to take the night ferry to Naxos.", "Noted.")
    for n in range(6):
        await record(c, f"other{n}", f"The Naxos ferry timetable page {n}.", "Ok.")
    await c.runtime.close()
    hits = await c.search("night ferry Naxos decided", limit=5)
    learned = [h for h in hits if h.kind == "entry" and h.conversation == "trip"]
    assert learned, hits
    cited = {(s.conversation, s.item) for h in learned for s in h.sources}
    shown = {(s.conversation, s.item) for h in hits if h.kind == "item" for s in h.sources}
    assert not cited & shown  # the entry stands for its item
    assert len(hits) == 5  # the freed place went to the next best hit


async def test_an_item_id_in_a_hit_is_the_recorded_item(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    await record(c, "trip", "Our hotel in Oia is called Lunar Cliffs.", "Great.")
    hit = (await c.search("Lunar Cliffs hotel", limit=1))[0]
    lines = (tmp_path / "sessions" / "trip.jsonl").read_text().splitlines()
    items = {i["memory_item_id"]: i for line in lines for i in json.loads(line)["input"]}
    assert "Lunar Cliffs" in items[hit.sources[0].item]["content"]


async def test_conversation_and_limit_narrow_the_hits(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    for n in range(4):
        await record(c, f"c{n}", f"The parser bug number {n} is in lexer.py.", "Fixing it.")
    assert len(await c.search("parser bug", limit=2)) == 2
    only = await c.search("parser bug", conversation="c3")
    assert only and {h.conversation for h in only} == {"c3"}


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("limit", {"query": "x", "limit": 0}),
        ("limit", {"query": "x", "limit": 101}),
        ("limit", {"query": "x", "limit": "5"}),
        ("query", {"query": "  ?! "}),
    ],
)
async def test_bad_search_input_is_refused_naming_the_field(
    tmp_path: Path, field: str, kwargs: dict[str, Any]
) -> None:
    c = client_for(tmp_path)
    await c.create()
    with pytest.raises(MemoryConfigError, match=field):
        await c.search(**kwargs)


def test_query_words_become_an_any_of_expression_safe_for_fts() -> None:
    assert fts_query('Where is "config" -- AND (port)?') == '"config" OR "port"'
    assert fts_query("What is it?") == '"what" OR "is" OR "it"'  # nothing else is left
    assert fts_query("Where is the automobile?") == '"automobile"'  # "the" is a function word
    assert fts_query("测试命令") == '"测 试" OR "试 命" OR "命 令"'


async def test_chinese_text_is_found_by_a_word_inside_it(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    await record(c, "zh", "我们决定每次提交前运行测试命令。", "好的。")
    await record(c, "other", "我们明天去公园。", "好。")
    hits = await c.search("测试命令")
    assert hits[0].conversation == "zh"


# ------------------------------------------------------------ what never appears


async def test_a_retracted_entry_leaves_the_index_at_once(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    view = await c.create()
    view = await c.apply(
        Remember(key="deploy-host", content="Deploy to orion-7 with the blue pipeline."),
        expected=view.version,
    )
    assert [h.key for h in await c.search("orion pipeline")] == ["deploy-host"]
    await c.apply(Forget(key="deploy-host"), expected=view.version)
    # The index file itself no longer holds it (not only filtered at query time).
    assert await c.runtime.search_index.count("entry") == 0
    assert await c.search("orion pipeline") == []


async def test_a_retracted_conversation_entry_never_appears(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    view = await c.create("trip")
    view = await c.apply(
        Remember(key="budget", content="The trip budget is 1500 EUR."),
        expected=view.version,
        conversation="trip",
    )
    await c.apply(Forget(key="budget"), expected=view.version, conversation="trip")
    fresh = client_for(tmp_path)  # another process: syncs from the log
    assert not [h for h in await fresh.search("trip budget EUR") if h.kind == "entry"]


async def test_private_memory_is_found_only_by_its_person(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    view = await c.create()
    await c.apply(
        Remember(
            key="ann-editor",
            content="Ann prefers vim keybindings.",
            kind="preference",
            person="ann",
        ),
        expected=view.version,
    )
    await c.runtime.record(
        payload("My badge number is 4471, keep it between us.", "OK."),
        rollout_id="ann-chat",
        person="ann",
    )
    assert await c.search("vim keybindings") == []
    assert await c.search("vim keybindings", person="bob") == []
    assert [h.key for h in await c.search("vim keybindings", person="ann")] == ["ann-editor"]
    assert await c.search("badge number", person="bob") == []
    assert (await c.search("badge number", person="ann"))[0].conversation == "ann-chat"


async def test_layouts_stay_isolated(tmp_path: Path) -> None:
    a = client_for(tmp_path, layout=MemoryLayoutConfig(memories_dir="mem_a", sessions_dir="s_a"))
    b = client_for(tmp_path, layout=MemoryLayoutConfig(memories_dir="mem_b", sessions_dir="s_b"))
    await record(a, "one", "The kiln fires at 1240 degrees.", "Noted.")
    await record(b, "two", "The kiln room key is with Maria.", "Noted.")
    assert {h.conversation for h in await a.search("kiln")} == {"one"}
    assert {h.conversation for h in await b.search("kiln")} == {"two"}
    assert (tmp_path / "mem_a" / "store" / INDEX_FILE).exists()


# --------------------------------------------------------- derived, incremental


async def test_index_update_costs_only_the_new_material(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    for n in range(5):
        await record(c, "long", f"Step {n}: measured {n * 7} ms.", f"Logged step {n}.")
    index = c.runtime.search_index
    assert await index.sync() == 10  # two items per run
    assert await index.sync() == 0
    await record(c, "long", "Step 5: measured 35 ms.", "Logged step 5.")
    assert await index.sync() == 2
    assert await index.count("item") == 12


async def test_a_deleted_index_is_rebuilt_with_the_same_hits(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    await record(c, "trip", "The rental car is a red Fiat Panda.", "Got it.")
    await c.runtime.close()
    before = [(h.kind, h.text) for h in await c.search("rental car")]
    c.runtime.search_index.close()
    (tmp_path / "memories" / "store" / INDEX_FILE).unlink()
    after = [(h.kind, h.text) for h in await client_for(tmp_path).search("rental car")]
    assert before and after == before


async def test_an_unreadable_index_is_set_aside_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    c = client_for(tmp_path)
    await record(c, "trip", "The rental car is a red Fiat Panda.", "Got it.")
    (tmp_path / "memories" / "store").mkdir(parents=True, exist_ok=True)
    (tmp_path / "memories" / "store" / INDEX_FILE).write_bytes(b"not a database" * 100)
    assert (await c.search("Fiat"))[0].conversation == "trip"
    assert (tmp_path / "memories" / "store" / f"{INDEX_FILE}.broken").exists()
    assert "unreadable" in caplog.text


async def test_an_index_damaged_inside_is_set_aside_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    c = client_for(tmp_path)
    for n in range(40):
        await record(c, f"c{n}", f"Ticket {n}: the invoice export fails on row {n}.", "Ok.")
    assert await c.search("invoice export")
    c.runtime.search_index.close()
    index = tmp_path / "memories" / "store" / INDEX_FILE
    data = bytearray(index.read_bytes())
    half = len(data) // 2 // 4096 * 4096
    data[half:] = b"\xff" * (len(data) - half)  # the schema stays readable, the data does not
    index.write_bytes(bytes(data))
    assert (await client_for(tmp_path).search("invoice export row 7"))[0].conversation == "c7"
    assert (tmp_path / "memories" / "store" / f"{INDEX_FILE}.broken").exists()
    assert "unreadable" in caplog.text


# ------------------------------------------------------------------------- CLI


def cli(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--root", str(root), *args])
    return result.exit_code, result.stdout, result.stderr


def test_cli_search_prints_hits_and_json(tmp_path: Path) -> None:
    async def setup() -> None:
        c = client_for(tmp_path)
        await record(c, "trip", "The museum pass costs 30 EUR.", "Noted.")
        await record(c, "other", "The museum closes at noon on Mondays.", "Noted.")

    asyncio.run(setup())

    code, out, _ = cli(tmp_path, "search", "museum pass", "--json", "--limit", "1")
    assert code == 0
    hits = json.loads(out)
    assert len(hits) == 1 and hits[0]["conversation"] == "trip" and hits[0]["sources"]
    code, out, _ = cli(tmp_path, "search", "museum", "-c", "other")
    assert code == 0 and "closes at noon" in out and "30 EUR" not in out
    assert "sessions/other.jsonl" in out
    code, _, err = cli(tmp_path, "search", "museum", "--limit", "0")
    assert code == 1 and "limit" in err


def test_the_text_form_leaves_out_a_score_that_says_nothing(tmp_path: Path) -> None:
    # BM25 gives a word found in more than half the indexed documents almost no weight (FTS5
    # floors its IDF at 1e-6): with one document every hit scored 0.00, read as "irrelevant".
    async def one_entry() -> None:
        c = client_for(tmp_path)
        await c.create()
        await c.apply(Remember(key="budget", content="The trip budget is 1500 EUR."), expected=0)

    asyncio.run(one_entry())
    code, out, _ = cli(tmp_path, "search", "budget")
    assert code == 0 and "entry budget (fact);" in out and "1500 EUR" in out
    assert "score" not in out, out
    code, out, _ = cli(tmp_path, "search", "budget", "--json")
    assert json.loads(out)[0]["score"] < 0.005  # the API keeps BM25's own figure

    async def more() -> None:  # a word in few of many documents: a score worth showing
        c = client_for(tmp_path)
        for n in range(6):
            await record(c, f"c{n}", f"The ferry leaves at {n} pm.", "Noted.")
        await record(c, "trip", "The museum pass costs 30 EUR.", "Noted.")

    asyncio.run(more())
    code, out, _ = cli(tmp_path, "search", "museum", "--limit", "1")
    shown = [float(x) for x in re.findall(r"; score (\d+\.\d\d);", out)]
    assert code == 0 and len(shown) == 1 and shown[0] > 0, out


# ---------------------------------------------------------------- agent tool


async def run(client: Any, root: Path, memory: Memory, model: Any, prompt: str, group: str) -> Any:
    """One run in a fresh live sandbox over ``root``, closed afterwards (memory generated)."""

    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        return await Runner.run(
            SandboxAgent(name="r", model=model, capabilities=[memory, Filesystem(), Shell()]),
            prompt,
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id=group),
        )


def searching_model() -> ScriptedModel:
    return ScriptedModel(
        [
            [function_call("memory_search", {"query": "discount test failed"}, call_id="s1")],
            [assistant_message("Found it.")],
        ]
    )


def tool_outputs(result: Any) -> list[str]:
    return [
        str(i.output) for i in result.new_items if getattr(i, "type", "") == "tool_call_output_item"
    ]


async def test_agent_finds_an_earlier_run_with_memory_search(
    client: Any, workspace_root: Path
) -> None:
    memory = Memory(generate=OFFLINE)
    await run(client, workspace_root, memory, ScriptedModel(bug_fix_script()), "Fix it.", "first")
    model = searching_model()
    result = await run(client, workspace_root, memory, model, "What went wrong?", "second")
    assert "memory_search" in (model.calls[0].system_instructions or "")
    outputs = tool_outputs(result)
    assert outputs and "100.0 != 90.0" in outputs[0] and "first#" in outputs[0]
    # The tool's own call and result are not indexed: old hits never echo back as new ones.
    again = await MemoryClient(workspace_root, generate=OFFLINE).search("discount", limit=50)
    assert not any(h.conversation == "second" for h in again)


async def test_search_through_the_session_api_is_written_back_at_close(
    client: Any, workspace_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sdk, "workspace_for_session", SessionWorkspace)
    memory = Memory(generate=OFFLINE)
    index = workspace_root / "memories" / "store" / INDEX_FILE
    await run(client, workspace_root, memory, ScriptedModel(bug_fix_script()), "Fix it.", "first")
    assert index.exists()  # the local copy went back into the workspace before the snapshot
    result = await run(client, workspace_root, memory, searching_model(), "What broke?", "second")
    assert "100.0 != 90.0" in tool_outputs(result)[0]
    sandbox = await client.create(manifest=Manifest(root=str(workspace_root)))
    async with sandbox:
        session_client = MemoryClient.for_session(sandbox, memory)
        assert isinstance(session_client.runtime.ws, SessionWorkspace)
        hits = await session_client.search("unittest test_invoice")
        assert any(TEST_COMMAND in h.text for h in hits)
    local = MemoryClient(LocalWorkspace(workspace_root), generate=OFFLINE)
    assert await local.runtime.search_index.sync() == 0  # written back up to date
    assert await local.search("discount")


# ----------------------------------------------------------------------- usage


def test_selection_keeps_a_used_rollout_over_a_newer_unused_one() -> None:
    rollouts = {
        "old": RolloutProgress(slug="a", updated_at="2026-01-01T00:00:00+00:00"),
        "new": RolloutProgress(slug="b", updated_at="2026-02-01T00:00:00+00:00"),
    }
    assert [r for r, _ in select_rollouts(rollouts, 1).selected] == ["new"]
    used_in_march = {"old": (1, 1_772_323_200_000)}  # 2026-03-01
    selection = select_rollouts(rollouts, 1, usage=used_in_march)
    assert [r for r, _ in selection.selected] == ["old"]
    assert [r for r, _ in selection.forgotten] == ["new"]


async def test_a_later_run_reading_a_summary_keeps_that_conversation(
    client: Any, workspace_root: Path
) -> None:
    c = MemoryClient(
        workspace_root,
        generate=MemoryGenerateConfig(engine="offline", max_raw_memories_for_consolidation=2),
    )
    await record(c, "alpha", "The alpha build needs GCC 12.", "Ok.", when="2026-01-01T00:00:00Z")
    await record(c, "beta", "The beta build uses clang.", "Ok.", when="2026-01-02T00:00:00Z")
    await c.runtime.close()
    summary = next((workspace_root / "memories" / "rollout_summaries").glob("alpha_*.md"))
    await c.runtime.record(
        run_payload(
            "Build it.",
            reply=None,
            when="2026-01-03T00:00:00Z",
            items=[
                {
                    "type": "function_call",
                    "name": "exec_command",
                    "call_id": "r1",
                    "arguments": json.dumps(
                        {"cmd": f"cat memories/rollout_summaries/{summary.name}"}
                    ),
                },
            ],
        ),
        rollout_id="gamma",
    )
    await c.runtime.close()
    kept = json.loads((workspace_root / "memories" / "phase_two_selection.json").read_text())
    assert {s["rollout_id"] for s in kept["selected"]} == {"gamma", "alpha"}
    assert not list((workspace_root / "memories" / "rollout_summaries").glob("beta_*.md"))
    assert [h.uses for h in await c.search("alpha GCC") if h.conversation == "alpha"][0] == 1


async def test_the_local_copy_of_a_remote_index_goes_with_it(client: Any, tmp_path: Path) -> None:
    sandbox = await client.create(manifest=Manifest(root=str(tmp_path)))
    async with sandbox:
        c = MemoryClient(SessionWorkspace(sandbox), generate=OFFLINE)
        await record(c, "trip", "The rental car is a red Fiat Panda.", "Got it.")
        assert (await c.search("Fiat"))[0].conversation == "trip"
        assert (tmp_path / "memories" / "store" / INDEX_FILE).exists()  # written back
        copy = Path(str(c.runtime.search_index._tmpdir))
        assert copy.is_dir()
        del c
        gc.collect()
        assert not copy.exists()


async def test_the_items_a_retracted_entry_rests_on_are_not_found_until_it_is_remembered(
    tmp_path: Path,
) -> None:
    c = client_for(tmp_path)
    await record(c, "ops", "We use the staging database on port 6543.", "Noted.")
    await record(c, "trip", "We booked the ferry to Naxos for Tuesday.", "Noted the ferry.")
    await c.runtime.close()
    view = await c.view(None)
    (learned,) = [e for e in view.entries.values() if "6543" in e.content and e.sources]
    rests_on = {(s.conversation, s.item) for s in learned.sources}

    def items(hits: list[Any]) -> set[tuple[str, str]]:
        return {(s.conversation, s.item) for h in hits if h.kind == "item" for s in h.sources}

    query = "staging database port 6543"
    assert [h.key for h in await c.search(query) if h.kind == "entry"] == [learned.key]

    view = await c.apply(Forget(key=learned.key), expected=view.version)
    for searcher in (c, client_for(tmp_path)):  # this process, and another one
        hits = await searcher.search(query)
        assert not [h for h in hits if h.kind == "entry"]
        assert not items(hits) & rests_on
        assert not items(await searcher.search(query, conversation="ops")) & rests_on
    assert items(await c.search("ferry Naxos"))  # other runs' items are still found

    await c.apply(Remember(key=learned.key, content=learned.content), expected=view.version)
    assert [h.key for h in await c.search(query) if h.kind == "entry"] == [learned.key]


async def test_an_entry_learned_in_several_conversations_is_one_hit_citing_each(
    tmp_path: Path,
) -> None:
    c = client_for(tmp_path)
    # The second says it anew (a word for word repeat of a shared entry is no copy of its own).
    for rid, said in (
        ("ops", "We use the staging database on port 6543."),
        ("ops2", "We use the staging database on port 6543 for every test run."),
    ):
        await record(c, rid, said, "Noted.")
        await c.runtime.close()
    holders = {
        rid: [e.key for e in (await c.view(rid)).entries.values() if "6543" in e.content]
        for rid in ("ops", "ops2")
    }
    (key,) = set(holders["ops"]) & set(holders["ops2"])  # the second reused the key
    hits = [h for h in await c.search("staging database port 6543") if h.kind == "entry"]
    assert [h.key for h in hits] == [key]
    assert {s.conversation for s in hits[0].sources} == {"ops", "ops2"}
    # Within one conversation, only what that conversation holds is cited.
    (one,) = [
        h for h in await c.search("staging database 6543", conversation="ops2") if h.kind == "entry"
    ]
    assert {s.conversation for s in one.sources} == {"ops2"}


async def test_a_conversation_phase_two_forgot_is_not_found_by_its_entries_or_summary(
    tmp_path: Path,
) -> None:
    keep_one = MemoryGenerateConfig(engine="offline", max_raw_memories_for_consolidation=1)
    c = MemoryClient(tmp_path, generate=keep_one)
    await record(c, "old", "We use the staging database on port 6543.", "Noted.")
    await c.runtime.close()
    kinds = {
        h.kind for h in await c.search("staging database port 6543") if h.conversation == "old"
    }
    assert {"entry", "rollout_summary"} <= kinds

    later = "2026-03-02T10:00:00+00:00"
    await record(c, "new", "We booked the hotel in Stone Town.", "Noted.", when=later)
    await c.runtime.close()  # keeps one conversation: "old" is forgotten
    for searcher in (c, MemoryClient(tmp_path, generate=keep_one)):  # also a fresh process
        hits = [
            h
            for h in await searcher.search("staging database port 6543")
            if h.conversation == "old"
        ]
        # Its recorded items stay (the rollout file stays in sessions/); nothing else.
        assert {h.kind for h in hits} <= {"item"}, hits

    # A new run of the forgotten conversation brings it back.
    await record(c, "old", "We use the staging database on port 6543 again.", "Noted.", when=later)
    await c.runtime.close()
    hits = await c.search("staging database port 6543")
    assert "rollout_summary" in {h.kind for h in hits if h.conversation == "old"}


async def test_a_forgotten_fact_is_not_found_through_its_runs_summary(tmp_path: Path) -> None:
    c = client_for(tmp_path)
    await record(c, "ops", "We use the staging database on port 6543.", "Noted.")
    await record(c, "ops", "Also: the deploy window is Friday noon.", "Noted.")
    await c.runtime.close()
    view = await c.view(None)
    (learned,) = [e for e in view.entries.values() if "6543" in e.content and e.sources]
    query = "staging database port 6543"

    def summaries(hits: list[Any]) -> list[Any]:
        return [h for h in hits if h.kind == "rollout_summary" and h.conversation == "ops"]

    assert summaries(await c.search(query))
    await c.apply(Forget(key=learned.key), expected=view.version)
    for searcher in (c, client_for(tmp_path)):  # this process, and another one
        hits = await searcher.search(query)
        assert not summaries(hits)
        assert not [h for h in hits if "6543" in h.text]
    # The run's other material is still found through its items.
    assert [h for h in await c.search("deploy window Friday") if h.conversation == "ops"]
