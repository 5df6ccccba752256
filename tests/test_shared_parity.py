"""A shared store answers as the workspace store does: conversations, switch defaults, search.

Real server (``pg_dsn``), real runtimes on workspace folders, the offline engine. Each history
is played once into a plain workspace and once through PostgreSQL, and what memory answers is
compared.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from agents import Runner
from agents.run import RunConfig
from agents.sandbox import Manifest, SandboxRunConfig
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.testing import ScriptedModel, assistant_message, function_call
from click.testing import CliRunner

from helpers import layout_runtime
from sandbox_memory import (
    MemoryClient,
    MemoryGenerateConfig,
    MemoryReadConfig,
    Remember,
)
from sandbox_memory.cli import main
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.search.index import SearchHit
from sandbox_memory.stores import PostgresStore
from sandbox_memory.stores.records import Defaults
from shared_flow import agent, lesson, remember_ann_and_forget_bravo, unstamped_noted_run

OFFLINE = MemoryGenerateConfig(engine="offline")


async def cli(*args: str) -> tuple[int, str, str]:
    """The command line (its own event loop, so in a thread of this test)."""

    result = await asyncio.to_thread(CliRunner().invoke, main, list(args))
    return result.exit_code, result.stdout, result.stderr


SEGMENT_ID = re.compile(r"\b[0-9a-f]{8}(?=[:\]#])")
"""A recorded segment's random id (in item ids and the texts citing them)."""

STAMP = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00|(?<=edit-)\d+")
"""A time in a text, and in the item id a command's entry rests on."""


def hits(found: list[SearchHit]) -> list[tuple[Any, ...]]:
    """What a hit says, without when it was made: two plays of one history differ only in
    times and segment ids."""

    def same(text: str) -> str:
        return STAMP.sub("<time>", SEGMENT_ID.sub("<segment>", text))

    return [
        (h.kind, h.key, h.conversation, same(h.text), h.path, [same(s.item) for s in h.sources])
        for h in found
    ]


async def test_conversations_and_switch_defaults_are_read_from_the_store(
    pg_dsn: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_dsn, namespace="acme")
    # A sandbox whose Memory reads nothing by default (Memory(read=None)) learns from a run.
    rt = layout_runtime(tmp_path / "a", store=store, read=None, mkdir=True)
    await rt.record(unstamped_noted_run(lesson("alpha")), rollout_id="conv-a")
    await rt.close()
    # Memory started for a conversation before any run, and a run not extracted yet.
    admin = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"))
    await admin.create("conv-empty")
    await store.append_segment("conv-late", "seg-late-1", json.dumps({"segment_id": "x"}) + "\n")

    assert await store.list_conversations() == ["conv-a", "conv-empty", "conv-late"]
    recorded = Defaults(use=False, generate=True, max_summary_chars=8000)
    assert await store.load_defaults() == recorded
    assert await PostgresStore(pg_dsn, namespace="globex").load_defaults() is None

    # A client with no workspace of its own sees them, as a client of the workspace would.
    fresh = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"))
    listed = {c.rollout_id: c for c in await fresh.conversations()}
    assert set(listed) == {"conv-a", "conv-empty", "conv-late"}
    assert listed["conv-a"].active == 1 and listed["conv-a"].recorded
    view = await fresh.view("conv-a")
    assert view.settings == {"use": False, "generate": True}
    # The workspace's client holds the store (its copy's records, the switches among them,
    # are sealed with the namespace's key, kept in the store).
    local = MemoryClient(tmp_path / "a", store=PostgresStore(pg_dsn, namespace="acme"))
    assert view.settings == (await local.view("conv-a")).settings
    code, out, err = await cli(
        "show", "-c", "conv-a", "--json", "--dsn", pg_dsn, "--namespace", "acme"
    )
    assert code == 0, err
    assert json.loads(out)["settings"] == {"use": False, "generate": True}
    code, out, err = await cli("conversations", "--dsn", pg_dsn, "--namespace", "acme")
    assert code == 0, err
    assert all(rid in out for rid in ("conv-a", "conv-empty", "conv-late"))

    # The same defaults again write nothing; others are recorded (the last close's config).
    _, rev = await store.files()
    await store.save_defaults(recorded)
    assert (await store.files(after=rev))[0] == {}
    on = Defaults(use=True, generate=True, max_summary_chars=4000)
    await store.save_defaults(on)
    assert await store.load_defaults() == on
    await store.aclose()


async def play(rt: LayoutRuntime, client: MemoryClient) -> None:
    """One history: two conversations learn, a person keeps something private, one lesson is
    forgotten, and the close after it."""

    # Each run at its own time, the same in every history: hits that differ only in time (the
    # two "Noted." replies) then come in the same order in each (search.HIT_ORDER), however
    # close together a loaded machine records them.
    def at(payload: dict[str, Any], second: int) -> dict[str, Any]:
        return {**payload, "updated_at": f"2026-12-04T10:00:{second:02d}+00:00"}

    await rt.record(at(unstamped_noted_run(lesson("alpha")), 1), rollout_id="conv-a")
    await rt.record(at(unstamped_noted_run(lesson("bravo")), 2), rollout_id="conv-b")
    await rt.record(
        at(unstamped_noted_run("My locker code is 4471, keep it between us."), 3),
        rollout_id="ann-chat",
        person="ann",
    )
    await remember_ann_and_forget_bravo(client, rt)
    # An old fix naming a file, and newer facts sharing more of a task's words (a search
    # naming that file puts the fix first: both backends the same way).
    for key, content in (
        ("fix-axes-bar", "Fixed `lib/plotlib/axes/_axes.py`: an empty first value."),
        ("bar-chart-nan", "Axes.bar raises StopIteration for all-nan data in bar charts."),
        ("nan-data-bars", "In bar charts, Axes.bar with all-nan data raises again."),
        # Entries about other things, so that the shared words weigh.
        *((f"rule-{i}", f"Invoice rounding rule {i} keeps two decimals.") for i in range(12)),
    ):
        view = await client.view()
        await client.apply(Remember(key=key, content=content, kind="fact"), expected=view.version)
    await rt.close()


TRACEBACK_TASK = (
    "ax.bar raises StopIteration for all-nan data in bar charts\n"
    "File ~/envs/py310/lib/python3.10/site-packages/plotlib/axes/_axes.py:2182, in Axes.bar"
)


QUERIES: list[tuple[str, dict[str, Any]]] = [
    (TRACEBACK_TASK, {}),
    ("alpha deploy", {}),
    ("bravo", {}),
    ("noted", {"limit": 20}),
    ("deploy", {"conversation": "conv-a"}),
    ("vim keybindings", {}),
    ("vim keybindings", {"person": "ann"}),
    ("locker code", {}),
    ("locker code", {"person": "ann"}),
]


async def test_search_over_the_store_answers_as_over_the_workspace(
    pg_dsn: str, tmp_path: Path
) -> None:
    plain = layout_runtime(tmp_path / "plain", store=None, read=MemoryReadConfig(), mkdir=True)
    await play(plain, MemoryClient(tmp_path / "plain", generate=OFFLINE))
    shared_rt = layout_runtime(
        tmp_path / "m1", store=PostgresStore(pg_dsn, namespace="acme"), mkdir=True
    )
    await play(shared_rt, MemoryClient(store=PostgresStore(pg_dsn, namespace="acme")))

    local = MemoryClient(tmp_path / "plain", generate=OFFLINE)
    # A client on another machine, with no workspace: its copy comes from the store.
    remote = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    for query, kw in QUERIES:
        want = hits(await local.search(query, **kw))
        # The same hits in the same order: hits that tie (the same text, score and time, as
        # the two "Noted." replies) come in the fixed tie order (search.HIT_ORDER), however
        # each index was filled.
        assert hits(await remote.search(query, **kw)) == want, (query, kw)
    # What the file store hides is hidden here too: the forgotten lesson, the items it was
    # learned from and its run's summary, which states it (as there), and a person's private
    # memory from everyone else.
    assert await local.search("bravo") == []
    assert await remote.search("bravo") == []
    assert await remote.search("vim keybindings") == []
    assert await remote.search("locker code") == []
    assert [h.key for h in await remote.search("vim keybindings", person="ann")] == ["ann-editor"]
    assert (await remote.search("locker code", person="ann"))[0].conversation == "ann-chat"
    found = await remote.search("alpha deploy")
    assert {h.kind for h in found} == {"entry", "rollout_summary"}
    assert [h.key for h in await remote.search(TRACEBACK_TASK) if h.kind == "entry"][
        0
    ] == "fix-axes-bar"
    replies = await remote.search("noted", limit=20)
    assert {h.conversation for h in replies if h.kind == "item"} == {"conv-a", "conv-b"}

    # The CLI on the store, no workspace.
    code, out, err = await cli(
        "search", "alpha deploy", "--json", "--dsn", pg_dsn, "--namespace", "acme"
    )
    assert code == 0, err
    assert [(h["kind"], h["key"], h["conversation"]) for h in json.loads(out)] == [
        (h.kind, h.key, h.conversation) for h in found
    ]


async def test_a_copy_finds_what_other_sandboxes_learned_after_its_own_changes(
    pg_dsn: str, tmp_path: Path
) -> None:
    """A copy that changed memory itself (an extraction after a run) takes in the store's log
    in place of its own at the next close; the search index still sees every scope that
    changed in the store meanwhile."""

    b = layout_runtime(tmp_path / "b", store=PostgresStore(pg_dsn, namespace="acme"), mkdir=True)
    await b.record(unstamped_noted_run(lesson("one")), rollout_id="conv-b1")
    await b.close()
    a = layout_runtime(tmp_path / "a", store=PostgresStore(pg_dsn, namespace="acme"), mkdir=True)
    for i, tag in enumerate(("alpha", "bravo", "charlie")):
        await a.record(unstamped_noted_run(lesson(tag)), rollout_id=f"conv-a{i}")
    await b.record(unstamped_noted_run(lesson("two")), rollout_id="conv-b2")
    await b.consolidate_conversation("conv-b2")  # extraction after the run, on the copy
    await a.close()
    await b.close()
    for i, tag in enumerate(("alpha", "bravo", "charlie")):
        found = await b.search_index.search(tag, conversation=f"conv-a{i}")
        assert any(h.kind == "entry" and tag in h.text for h in found), tag


async def test_the_agent_searches_what_another_machine_learned(pg_dsn: str, tmp_path: Path) -> None:
    a = layout_runtime(tmp_path / "a", store=PostgresStore(pg_dsn, namespace="acme"), mkdir=True)
    await a.record(unstamped_noted_run(lesson("zephyr")), rollout_id="conv-a")
    await a.close()
    model = ScriptedModel(
        [
            [function_call("memory_search", {"query": "zephyr deploy"}, call_id="s1")],
            [assistant_message("Found it.")],
        ]
    )
    root = tmp_path / "b"
    root.mkdir()
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
    async with sandbox:
        result = await Runner.run(
            agent(model, PostgresStore(pg_dsn, namespace="acme")),
            "How does zephyr ship?",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
    outputs = [
        str(getattr(item, "output", ""))
        for item in result.new_items
        if type(item).__name__ == "ToolCallOutputItem"
    ]
    assert outputs and "deploy-zephyr" in outputs[0] and "conv-a" in outputs[0]
