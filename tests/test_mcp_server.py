"""`sandbox-memory mcp`: the real server process, driven over stdio by the MCP SDK's own client
and by the Agents SDK's ``MCPServerStdio``, as an agent would call it."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call
from click.testing import CliRunner
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from sandbox_memory import Forget, MemoryClient, MemoryConflict, Remember
from sandbox_memory.cli import main
from sandbox_memory.mcp_server import READ_TOOLS, WRITE_TOOLS

SCRIPT = str(Path(sys.executable).with_name("sandbox-memory"))
"""The installed ``sandbox-memory`` command of this environment."""

SECRET = "ghp_" + "Zq7Lm2Xc9Vb4Nn8Kk3Jj6Hh1Gg5Ff0Dd2Ss9A"


def _env() -> dict[str, str]:
    """What the server process needs beyond the MCP SDK's safe default environment."""

    return {k: v for k, v in os.environ.items() if k.startswith("SANDBOX_MEMORY_")}


@asynccontextmanager
async def served(
    root: Path | None,
    *args: str,
    errlog: Path | None = None,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    """An MCP client session on ``sandbox-memory --root ROOT mcp ARGS`` (a real process)."""

    where = ["--root", str(root)] if root is not None else []
    params = StdioServerParameters(
        command=SCRIPT, args=[*where, "mcp", *args], env={**_env(), **(env or {})}
    )
    with open(errlog or os.devnull, "w") as err:
        async with Client(stdio_client(params, errlog=err)) as client:
            yield client


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    data: dict[str, Any] = result.structured_content
    return data


def _error(result: Any) -> str:
    assert result.is_error, result
    text: str = result.content[0].text
    return text


async def _memory(root: Path) -> MemoryClient:
    """Layout memory with a shared fact and Bob's private preference, and a conversation."""

    client = MemoryClient(root)
    await client.create()
    await client.create("chat")
    await client.apply(
        Remember(key="deploy-day", content="Deploys go out on Fridays after the freeze."),
        expected=0,
    )
    await client.apply(
        Remember(
            key="bob-diet",
            content="Bob is vegetarian; order lunch without meat.",
            kind="preference",
            person="bob",
        ),
        expected=1,
    )
    return client


@pytest.mark.slow  # a server process
async def test_read_only_server_lists_no_write_tool_and_refuses_a_write(tmp_path: Path) -> None:
    await _memory(tmp_path)
    async with served(tmp_path) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == set(READ_TOOLS)
        refused = await client.call_tool(
            "memory_remember", {"key": "x", "content": "y", "expected_version": 2}
        )
        assert refused.is_error
        shown = _data(await client.call_tool("memory_show", {}))
    assert shown["version"] == 2  # nothing changed
    assert [e["key"] for e in shown["entries"]] == ["deploy-day"]


@pytest.mark.slow  # a server process
async def test_no_tool_takes_a_person(tmp_path: Path) -> None:
    await _memory(tmp_path)
    async with served(tmp_path, "--allow-writes", "--person", "ann") as client:
        tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == set(READ_TOOLS) | set(WRITE_TOOLS)
    for tool in tools:
        assert "person" not in tool.input_schema.get("properties", {}), tool.name


@pytest.mark.slow  # a server process
async def test_a_stale_version_is_a_conflict_that_names_the_current_version(
    tmp_path: Path,
) -> None:
    await _memory(tmp_path)
    async with served(tmp_path, "--allow-writes") as client:
        stale = await client.call_tool(
            "memory_remember",
            {"key": "deploy-day", "content": "Deploys go out on Mondays.", "expected_version": 1},
        )
        assert "conflict" in _error(stale) and "current version: 2" in _error(stale)
        done = _data(
            await client.call_tool(
                "memory_remember",
                {
                    "key": "deploy-day",
                    "content": "Deploys go out on Mondays.",
                    "expected_version": 2,
                },
            )
        )
        assert done["version"] == 3
        assert done["entries"][0]["content"] == "Deploys go out on Mondays."
        gone = await client.call_tool("memory_forget", {"key": "deploy-day", "expected_version": 2})
        assert "current version: 3" in _error(gone)
        got = _data(await client.call_tool("memory_get", {"key": "deploy-day"}))
    assert got["entry"]["status"] == "active"
    # An agent's edit, not the person's words: logged as live_update.
    assert [r["cause"] for r in got["history"]] == ["person", "live_update"]
    view = await MemoryClient(tmp_path).view()
    assert view.entries["deploy-day"].content == "Deploys go out on Mondays."


@pytest.mark.slow  # a server process
async def test_another_persons_private_entries_do_not_exist_for_the_server(
    tmp_path: Path,
) -> None:
    await _memory(tmp_path)
    async with served(tmp_path, "--allow-writes", "--person", "ann") as client:
        shown = _data(await client.call_tool("memory_show", {}))
        assert [e["key"] for e in shown["entries"]] == ["deploy-day"]
        assert "not an entry" in _error(await client.call_tool("memory_get", {"key": "bob-diet"}))
        hits = _data(await client.call_tool("memory_search", {"query": "vegetarian lunch meat"}))
        assert not any("vegetarian" in h["text"] for h in hits["hits"])
        log = _data(await client.call_tool("memory_log", {}))
        assert "bob" not in json.dumps(log) and "vegetarian" not in json.dumps(log)
        forget = await client.call_tool("memory_forget", {"key": "bob-diet", "expected_version": 2})
        assert "no entry with key 'bob-diet'" in _error(forget)
        take = await client.call_tool(
            "memory_remember",
            {"key": "bob-diet", "content": "Anything goes.", "expected_version": 2},
        )
        assert "not available" in _error(take)
    bob = (await MemoryClient(tmp_path).view()).entries["bob-diet"]
    assert bob.status == "active" and bob.person == "bob" and "vegetarian" in bob.content
    # The same server for Bob sees his entry.
    async with served(tmp_path, "--person", "bob") as client:
        got = _data(await client.call_tool("memory_get", {"key": "bob-diet"}))
        hits = _data(await client.call_tool("memory_search", {"query": "vegetarian lunch meat"}))
    assert got["entry"]["private"] is True and "person" not in got["entry"]
    assert any(h["key"] == "bob-diet" for h in hits["hits"])


@pytest.mark.slow  # a server process
async def test_private_remember_belongs_to_the_server_person_only(tmp_path: Path) -> None:
    await _memory(tmp_path)
    async with served(tmp_path, "--allow-writes", "--person", "ann") as client:
        made = _data(
            await client.call_tool(
                "memory_remember",
                {
                    "key": "ann-editor",
                    "content": "Ann reviews in vim.",
                    "expected_version": 2,
                    "private": True,
                },
            )
        )
        assert made["entries"][0]["private"] is True
        # Changing her own private entry keeps it hers, even without private=true.
        changed = _data(
            await client.call_tool(
                "memory_remember",
                {"key": "ann-editor", "content": "Ann reviews in helix.", "expected_version": 3},
            )
        )
        assert changed["entries"][0]["private"] is True
    entry = (await MemoryClient(tmp_path).view()).entries["ann-editor"]
    assert entry.person == "ann" and entry.content == "Ann reviews in helix."
    async with served(tmp_path, "--allow-writes") as client:  # no person: shared memory only
        shown = _data(await client.call_tool("memory_show", {}))
        assert "ann-editor" not in {e["key"] for e in shown["entries"]}
        refused = await client.call_tool(
            "memory_remember",
            {"key": "k", "content": "Something.", "expected_version": 4, "private": True},
        )
        assert "--person" in _error(refused)


@pytest.mark.slow  # a server process
async def test_a_secret_in_remember_is_refused_and_lands_nowhere(tmp_path: Path) -> None:
    await _memory(tmp_path)
    errlog = tmp_path.parent / "server-stderr.txt"
    async with served(tmp_path, "--allow-writes", errlog=errlog) as client:
        refused = await client.call_tool(
            "memory_remember",
            {
                "key": "registry-login",
                "content": f"Log in to the registry with {SECRET}.",
                "expected_version": 2,
                "conversation": "chat",
            },
        )
        text = _error(refused)
        assert "secret" in text and SECRET not in text
        shown = _data(await client.call_tool("memory_show", {"conversation": "chat"}))
        assert shown["version"] == 0 and shown["entries"] == []
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in errlog.read_text()


@pytest.mark.slow  # a server process
async def test_configure_switches_a_conversation_and_needs_a_switch(tmp_path: Path) -> None:
    await _memory(tmp_path)
    async with served(tmp_path, "--allow-writes") as client:
        nothing = await client.call_tool(
            "memory_configure", {"conversation": "chat", "expected_version": 0}
        )
        assert "use" in _error(nothing) and "generate" in _error(nothing)
        done = _data(
            await client.call_tool(
                "memory_configure",
                {"conversation": "chat", "expected_version": 0, "generate": "off"},
            )
        )
    assert done["settings"] == {"use": True, "generate": False}
    assert done["overrides"] == {"generate": False} and done["version"] == 1


@pytest.mark.slow  # a server process
async def test_log_and_conversations_tools(tmp_path: Path) -> None:
    client = await _memory(tmp_path)
    await client.apply(Forget(key="deploy-day"), expected=2)
    async with served(tmp_path) as mcp:
        log = _data(await mcp.call_tool("memory_log", {"key": "deploy-day"}))
        convs = _data(await mcp.call_tool("memory_conversations", {}))
        unknown = await mcp.call_tool("memory_show", {"conversation": "nope"})
    assert [r["version"] for r in log["records"]] == [1, 3]
    assert log["records"][1]["detail"]["command"]["_tag"] == "Forget"
    assert [c["rollout_id"] for c in convs["conversations"]] == ["chat"]
    assert "no conversation 'nope'" in _error(unknown)


def test_mcp_on_a_missing_workspace_fails_before_serving(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--root", str(tmp_path / "nope"), "mcp"])
    assert result.exit_code == 1 and "does not exist" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["--root", str(empty), "mcp"])
    assert result.exit_code == 1 and "no memory in" in result.stderr


@pytest.mark.slow  # a server process
async def test_the_agents_sdk_mcp_server_stdio_snippet_works(tmp_path: Path) -> None:
    """docs/mcp.md's snippet: an SDK agent searches memory through MCPServerStdio."""

    await _memory(tmp_path)
    model = ScriptedModel(
        [
            [function_call("memory_search", {"query": "deploy day"}, call_id="s1")],
            [assistant_message("We deploy on Fridays.")],
        ]
    )
    # The command by name, as the snippet has it, found on PATH (this environment's first).
    path = f"{Path(SCRIPT).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    async with MCPServerStdio(
        name="memory",
        params={
            "command": "sandbox-memory",
            "args": ["--root", str(tmp_path), "mcp"],
            "env": {**_env(), "PATH": path},
        },
    ) as memory:
        agent = Agent(name="helper", model=model, mcp_servers=[memory])
        result = await Runner.run(agent, "When do we deploy?")
    outputs = [i for i in result.new_items if i.type == "tool_call_output_item"]
    assert outputs and "Fridays after the freeze" in str(outputs[0].output)
    assert result.final_output == "We deploy on Fridays."


async def test_an_agents_edit_may_not_make_a_preference(tmp_path: Path) -> None:
    """The shared layer's rule every agent door meets (the MCP server's writes are an agent's)."""

    client = await _memory(tmp_path)
    with pytest.raises(MemoryConflict, match="preference"):
        await client.apply_for(
            Remember(key="ann-tea", content="Ann likes green tea.", kind="preference"),
            person="ann",
            expected=2,
        )
    assert "ann-tea" not in (await client.view()).entries


@pytest.mark.slow  # a server process
async def test_two_servers_share_one_postgres_namespace_with_versions(pg_dsn: str) -> None:
    env = {"SANDBOX_MEMORY_DSN": pg_dsn, "SANDBOX_MEMORY_NAMESPACE": "acme"}
    result = await asyncio.to_thread(CliRunner().invoke, main, ["init"], env=env)
    assert result.exit_code == 0, result.stderr
    async with (
        served(None, "--allow-writes", env=env) as one,
        served(None, "--allow-writes", env=env) as two,
    ):
        made = _data(
            await one.call_tool(
                "memory_remember",
                {"key": "api-port", "content": "The API listens on 8080.", "expected_version": 0},
            )
        )
        assert made["version"] == 1
        seen = _data(await two.call_tool("memory_get", {"key": "api-port"}))
        assert seen["entry"]["content"] == "The API listens on 8080." and seen["version"] == 1
        stale = await two.call_tool(
            "memory_remember",
            {"key": "api-port", "content": "It is 9090.", "expected_version": 0},
        )
        assert "current version: 1" in _error(stale)
        hits = _data(await two.call_tool("memory_search", {"query": "API port listens"}))
    assert any(h["key"] == "api-port" for h in hits["hits"])
