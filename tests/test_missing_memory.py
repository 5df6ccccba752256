"""Reading memory that is not there: a clear error naming it, in Python as on the command line.

An unknown conversation, or a root (or shared namespace) without memory, raises
``MemoryNotFound`` (a ``MemoryConfigError``, which the CLI maps to exit code 1) naming the
value; nothing is created by the read. Memory starts only with ``create()`` / ``init``. A
sandbox's own tools keep working in its first run, before any memory file exists.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.testing import ScriptedModel, assistant_message

from helpers import function_call
from sandbox_memory import (
    Configure,
    Forget,
    MemoryClient,
    MemoryConfigError,
    MemoryGenerateConfig,
    MemoryNotFound,
    Refresh,
    Remember,
)
from sandbox_memory.cli import EXIT_BAD_INPUT
from test_cli import run as cli


def offline(root: Path, **kw: Any) -> MemoryClient:
    return MemoryClient(root, generate=MemoryGenerateConfig(engine="offline"), **kw)


async def with_trip(root: Path) -> MemoryClient:
    c = offline(root)
    await c.create("trip")
    await c.apply(Remember(key="budget", content="The budget is 1500 EUR."), expected=0,
                  conversation="trip")  # fmt: skip
    return c


async def test_an_unknown_conversation_is_an_error_naming_it(tmp_path: Path) -> None:
    c = await with_trip(tmp_path)
    with pytest.raises(MemoryNotFound) as info:
        await c.view("nosuch")
    err = info.value
    assert isinstance(err, MemoryConfigError) and isinstance(err, ValueError)
    assert (err.field, err.value) == ("conversation", "nosuch")
    assert "'nosuch'" in str(err) and "trip" in str(err)  # names it, and what is there
    assert not (tmp_path / "sessions/nosuch.jsonl").exists()
    assert (await c.view("trip")).entries["budget"].status == "active"


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.view("nosuch"),
        lambda c: c.search("budget", conversation="nosuch"),
        lambda c: c.apply(Refresh(), expected=0, conversation="nosuch"),
    ],
    ids=["view", "search", "refresh"],
)
async def test_every_read_of_an_unknown_conversation_names_it(tmp_path: Path, call: Any) -> None:
    c = await with_trip(tmp_path)
    with pytest.raises(MemoryNotFound, match="'nosuch'"):
        await call(c)
    assert [s.rollout_id for s in await c.conversations()] == ["trip"]


@pytest.mark.parametrize(
    "command",
    [
        Remember(key="budget", content="The budget is 2000 EUR."),
        Forget(key="budget"),
        Configure(generate=False),
    ],
    ids=["remember", "forget", "configure"],
)
async def test_a_command_on_an_unknown_conversation_starts_no_memory(
    tmp_path: Path, command: Any
) -> None:
    # A mistyped rollout id is an error naming it, as for a read: nothing is written for it
    # (no memory, no history line, no log record), and what is there is unchanged.
    c = await with_trip(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    log = await c.log()
    with pytest.raises(MemoryNotFound) as info:
        await c.apply(command, expected=0, conversation="tirp")
    assert (info.value.field, info.value.value) == ("conversation", "tirp")
    assert "'tirp'" in str(info.value) and "trip" in str(info.value)
    assert [s.rollout_id for s in await c.conversations()] == ["trip"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()) == before
    assert await c.log() == log
    assert (await c.view("trip")).entries["budget"].content == "The budget is 1500 EUR."
    # create() starts it; then the command applies.
    await c.create("tirp")
    if not isinstance(command, Forget):
        assert (await c.apply(command, expected=0, conversation="tirp")).version == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.view(),
        lambda c: c.view("trip"),
        lambda c: c.log(),
        lambda c: c.search("budget"),
        lambda c: c.apply(Refresh(), expected=0),
    ],
    ids=["layout", "conversation", "log", "search", "refresh"],
)
@pytest.mark.parametrize("where", ["empty", "missing"])
async def test_a_root_without_memory_is_an_error_naming_it(
    tmp_path: Path, call: Any, where: str
) -> None:
    root = tmp_path / "workspace"
    if where == "empty":
        root.mkdir()
        (root / "notes.txt").write_text("not memory")
    with pytest.raises(MemoryNotFound) as info:
        await call(offline(root))
    assert info.value.field == "workspace" and str(root) in str(info.value)
    assert "create()" in str(info.value)  # says how to start memory
    assert not (root / "memories").exists() and not (root / "sessions").exists()


async def test_create_starts_memory_then_views_work(tmp_path: Path) -> None:
    c = offline(tmp_path)
    assert (await c.create()).version == 0
    assert (await c.view()).entries == {}
    assert (await c.create("trip")).entries == {}
    assert (await c.view("trip")).version == 0


def test_the_cli_gives_the_python_error_and_maps_it_to_bad_input(tmp_path: Path) -> None:
    c = asyncio.run(with_trip(tmp_path))
    with pytest.raises(MemoryNotFound) as info:
        asyncio.run(c.view("nosuch"))
    code, out, err = cli(tmp_path, "show", "-c", "nosuch")
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.strip() == f"error: {info.value}"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MemoryNotFound) as info:
        asyncio.run(offline(empty).view())
    code, _, err = cli(empty, "show")
    assert code == EXIT_BAD_INPUT and err.strip() == f"error: {info.value}"


async def test_the_agent_tools_work_in_a_first_run_and_refuse_unknown_keys(
    client: Any, manifest: Any, workspace_root: Path
) -> None:
    """The live tools' client is the sandbox's own memory: no memory file exists yet in the
    first run, and that is not an error; a Forget of a key nowhere in memory is refused in
    words the model reads."""

    from agents.run import RunConfig
    from agents.sandbox import SandboxAgent, SandboxRunConfig
    from agents.sandbox.capabilities import Filesystem, Shell

    from sandbox_memory import Memory

    model = ScriptedModel(
        [
            [function_call("memory_forget", {"key": "nosuch"}, call_id="t1")],
            [
                function_call(
                    "memory_remember",
                    {"key": "ci-cmd", "content": "CI runs `make ci`.", "kind": "procedure"},
                    call_id="t2",
                )
            ],
            [assistant_message("done")],
        ]
    )
    agent = SandboxAgent(
        name="fixer",
        instructions="Fix bugs.",
        model=model,
        capabilities=[
            Memory(generate=MemoryGenerateConfig(engine="offline")),
            Filesystem(),
            Shell(),
        ],  # fmt: skip
    )
    assert not (workspace_root / "memories").exists()
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            agent, "Forget nosuch, remember the CI command.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )  # fmt: skip
    outputs = [i for i in model.calls[1].input if isinstance(i, dict) and "output" in i]
    assert any("refused" in str(i["output"]) and "nosuch" in str(i["output"]) for i in outputs)
    assert (await offline(workspace_root).view()).entries["ci-cmd"].status == "active"


async def test_a_shared_namespace_without_memory_is_named_and_a_first_run_tool_works(
    pg_dsn: str, tmp_path: Path
) -> None:
    from agents.run import RunConfig
    from agents.sandbox import Manifest, SandboxRunConfig
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

    from sandbox_memory.stores import PostgresStore
    from shared_flow import agent

    with pytest.raises(MemoryNotFound, match="namespace fresh"):
        await MemoryClient(store=PostgresStore(pg_dsn, namespace="fresh")).view()
    model = ScriptedModel(
        [
            [
                function_call(
                    "memory_remember",
                    {"key": "owner", "content": "Team Blue owns billing.", "kind": "fact"},
                    call_id="t1",
                )
            ],
            [assistant_message("done")],
        ]
    )
    root = tmp_path / "a"
    root.mkdir()
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
    async with sandbox:
        await Runner.run(
            agent(model, PostgresStore(pg_dsn, namespace="fresh")),
            "Note who owns billing.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
    assert "remembered 'owner'" in str(model.calls[1].input)
    view = await MemoryClient(store=PostgresStore(pg_dsn, namespace="fresh")).view()
    assert view.entries["owner"].content == "Team Blue owns billing."
