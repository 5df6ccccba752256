"""The workspace seam: the same behaviour over a local folder and through a live sandbox session.

`SessionWorkspace` is what every backend other than UnixLocal uses (Docker, hosted): here it
runs through a real UnixLocal session's public file and exec API, so the generic path is tested.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.run import RunConfig
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message

from helpers import TEST_COMMAND, bug_fix_script
from sandbox_memory import Memory, MemoryGenerateConfig, MemoryLockTimeout, _sdk
from sandbox_memory.workspace import LeaseLock, LocalWorkspace, SessionWorkspace, Workspace


@pytest.fixture(params=["local", "session"])
async def ws(request: Any, client: Any, tmp_path: Path) -> AsyncIterator[Workspace]:
    root = tmp_path / "ws"
    root.mkdir()
    if request.param == "local":
        yield LocalWorkspace(root)
        return
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        yield SessionWorkspace(sandbox)


async def test_missing_file_reads_as_none(ws: Workspace) -> None:
    assert await ws.read_bytes("a/b.txt") is None
    assert await ws.read_range("a/b.txt", 0, 10) is None
    assert await ws.size("a/b.txt") is None
    assert await ws.listdir("a") == []


async def test_atomic_write_replaces_the_file_and_leaves_no_temporary(ws: Workspace) -> None:
    await ws.write_atomic("d/f.json", b'{"v": 1}')
    await ws.write_atomic("d/f.json", b'{"v": 2}')
    assert json.loads(await ws.read_bytes("d/f.json") or b"") == {"v": 2}
    assert await ws.listdir("d") == ["f.json"]


async def test_append_adds_a_line_and_mends_a_torn_one(ws: Workspace) -> None:
    await ws.append_line("s/r.jsonl", b'{"n":1}\n')
    await ws.write_atomic("s/torn.jsonl", b'{"n":1}\n{"n":')
    await ws.append_line("s/torn.jsonl", b'{"n":2}\n')
    await ws.append_line("s/r.jsonl", b'{"n":2}\n')
    assert await ws.read_bytes("s/r.jsonl") == b'{"n":1}\n{"n":2}\n'
    assert (await ws.read_bytes("s/torn.jsonl") or b"").splitlines()[-1] == b'{"n":2}'


async def test_partial_reads_return_the_requested_bytes(ws: Workspace) -> None:
    await ws.write_atomic("f.txt", b"0123456789")
    assert await ws.read_range("f.txt", 4, 100) == b"456789"
    assert await ws.read_range("f.txt", 2, 3) == b"234"
    assert await ws.size("f.txt") == 10


async def test_create_exclusive_succeeds_once(ws: Workspace) -> None:
    assert await ws.create_exclusive("locks/l", b"one") is True
    assert await ws.create_exclusive("locks/l", b"two") is False
    assert await ws.read_bytes("locks/l") == b"one"


async def test_rename_and_remove(ws: Workspace) -> None:
    await ws.write_atomic("x/a", b"A")
    assert await ws.rename("x/a", "x/b") is True
    assert await ws.rename("x/a", "x/c") is False
    await ws.remove("x/b")
    await ws.remove("x/b")  # missing is fine
    assert await ws.listdir("x") == []


async def test_lease_lock_excludes_a_second_holder_until_released(ws: Workspace) -> None:
    first = LeaseLock(ws, "store/lock", timeout=5, lease=60)
    await first.acquire()
    second = LeaseLock(ws, "store/lock", timeout=0.3, lease=60, poll=0.05)
    with pytest.raises(MemoryLockTimeout):
        await second.acquire()
    await first.release()
    third = LeaseLock(ws, "store/lock", timeout=5, lease=60)
    await asyncio.wait_for(third.acquire(), 5)
    await third.release()


async def test_whole_flow_through_the_generic_session_path(
    client: Any, workspace_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sdk, "workspace_for_session", SessionWorkspace)
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    sandbox = await client.create(manifest=Manifest(root=str(workspace_root)))
    async with sandbox:
        await Runner.run(
            SandboxAgent(
                name="r",
                model=ScriptedModel(bug_fix_script()),
                capabilities=[memory, Filesystem(), Shell()],
            ),
            "Fix it.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="g"),
        )
        manager = _sdk.find_manager(sandbox, memory)
        assert manager is not None and isinstance(manager.runtime.ws, SessionWorkspace)
    second = ScriptedModel([[assistant_message("ok")]])
    sandbox = await client.create(manifest=Manifest(root=str(workspace_root)))
    async with sandbox:
        await Runner.run(
            SandboxAgent(name="r", model=second, capabilities=[memory, Filesystem(), Shell()]),
            "Verify.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="h"),
        )
    assert TEST_COMMAND in (workspace_root / "memories" / "MEMORY.md").read_text()
    assert TEST_COMMAND in (second.calls[0].system_instructions or "")


async def test_sizes_lists_the_files_of_a_folder_in_one_call(ws: Workspace) -> None:
    await ws.write_atomic("s/a.jsonl", b"12345")
    await ws.write_atomic("s/b.jsonl", b"")
    await ws.mkdir("s/sub")
    assert await ws.sizes("s") == {"a.jsonl": 5, "b.jsonl": 0}
    assert await ws.sizes("missing") == {}


async def test_sizes_of_gives_each_path_its_size_in_order(ws: Workspace) -> None:
    await ws.write_atomic("s/a.jsonl", b"12345")
    await ws.write_atomic("s/b.jsonl", b"")
    await ws.mkdir("s/sub")
    got = await ws.sizes_of(["s/b.jsonl", "s/missing", "s/a.jsonl", "s/sub"])
    assert got == [0, None, 5, None]  # a folder is not a file
    assert await ws.sizes_of([]) == []


@pytest.mark.parametrize("size", [0, 40, 5_000])
async def test_a_derived_write_replaces_the_file_whole(ws: Workspace, size: int) -> None:
    data = ("é" * size).encode()[:size] if size < 5_000 else b"\x00\xff" * (size // 2)
    await ws.write_derived("new/dir/rec", b"old")
    await ws.write_derived("new/dir/rec", data)
    assert await ws.read_bytes("new/dir/rec") == data
    assert await ws.listdir("new/dir") == ["rec"]  # no temporary left
    await ws.mkdir("new/dir/folder")
    with pytest.raises(IsADirectoryError):
        await ws.write_derived("new/dir/folder", b"x")


async def test_a_first_record_through_the_session_api_takes_three_execs(
    client: Any, tmp_path: Path
) -> None:
    # Every exec and file transfer is a round trip on a remote backend: the size of the new
    # rollout and of its notes in one, the append, the thread record as one (it took two
    # execs and a file transfer). The built-in takes two execs and two transfers; a later
    # record is the append alone (tests/test_scale.py).
    from sandbox_memory.config import MemoryLayoutConfig, MemoryReadConfig
    from sandbox_memory.runtime import LayoutRuntime

    root = tmp_path / "ws"
    root.mkdir()
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        rt = LayoutRuntime(
            SessionWorkspace(sandbox),
            layout=MemoryLayoutConfig(),
            generate=MemoryGenerateConfig(engine="offline"),
            read=MemoryReadConfig(),
        )
        await rt.record({"input": [{"role": "user", "content": "hi"}]}, rollout_id="warm")
        calls: list[str] = []
        for name in ("exec", "write", "read"):
            orig = getattr(sandbox, name)

            async def counted(*a: Any, _orig: Any = orig, _name: str = name, **k: Any) -> Any:
                calls.append(_name)
                return await _orig(*a, **k)

            setattr(sandbox, name, counted)
        reply = {"role": "assistant", "content": "Two days in Porto, then Lisbon."}
        payload = {
            "input": [{"role": "user", "content": "Plan the trip to Porto."}],
            "generated_items": [reply],
        }
        await rt.record(payload, rollout_id="porto")
        assert calls == ["exec", "exec", "exec"], calls
        threads = list((root / "memories/store/threads").iterdir())
        assert [p.read_text() for p in threads if p.read_text() == "porto"] == ["porto"]
