"""The workspace seam: the same behaviour over a local folder and through a live sandbox session.

`SessionWorkspace` is what every backend other than UnixLocal uses (Docker, hosted): here it
runs through a real UnixLocal session's public file and exec API, so the generic path is tested.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.run import RunConfig
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message

from helpers import TEST_COMMAND, bug_fix_script, layout_runtime, run_payload
from sandbox_memory import Memory, MemoryGenerateConfig, MemoryLockTimeout, _sdk
from sandbox_memory.workspace import LeaseLock, LocalWorkspace, SessionWorkspace, Workspace


async def test_missing_file_reads_as_none(ws: Workspace) -> None:
    assert await ws.read_bytes("a/b.txt") is None
    assert await ws.read_range("a/b.txt", 0, 10) is None
    assert await ws.size("a/b.txt") is None
    assert await ws.listdir("a") == []


def _root_of(ws: Workspace) -> Path:
    if isinstance(ws, LocalWorkspace):
        return ws.root
    assert isinstance(ws, SessionWorkspace)
    return Path(ws.session.state.manifest.root)


async def test_a_fifo_where_memory_keeps_a_file_is_never_waited_on(
    ws: Workspace, caplog: pytest.LogCaptureFixture
) -> None:
    """Every operation on a path the agent made a FIFO returns at once: a read sees the
    file missing (the FIFO set aside, logged once), an append or a flag starts a fresh
    regular file, a write replaces it; nothing is read from or written into the pipe.
    Before, the local read's open waited for a writer forever on the event loop."""

    import os

    root = _root_of(ws)
    (root / "m").mkdir()
    names = ["read", "range", "size", "append", "flag", "write"]
    for name in names:
        os.mkfifo(root / "m" / name)
    with caplog.at_level(logging.ERROR, logger="sandbox_memory"):
        assert await asyncio.wait_for(ws.read_bytes("m/read"), 30) is None
        assert await asyncio.wait_for(ws.read_range("m/range", 0, 10), 30) is None
        assert await asyncio.wait_for(ws.size("m/size"), 30) is None
        await asyncio.wait_for(ws.append_line("m/append", b"one", flag="m/flag"), 30)
        await asyncio.wait_for(ws.write_atomic("m/write", b"new"), 30)
    assert (root / "m/append").read_bytes().rstrip(b"\n") == b"one"
    assert (root / "m/flag").is_file() and (root / "m/write").read_bytes() == b"new"
    for name in ["read", "range", "append", "flag"]:
        aside = [p for p in (root / "m").iterdir() if p.name.startswith(f"{name}.broken-")]
        assert len(aside) == 1 and aside[0].is_fifo(), (name, sorted((root / "m").iterdir()))
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    for name in ["read", "range", "append", "flag"]:
        assert sum(f"m/{name} " in m and "FIFO" in m for m in logged) == 1, (name, logged)


async def test_a_library_file_never_opens_through_a_link_or_a_fifo(tmp_path: Path) -> None:
    """What SQLite opens by name: a link there (to another program's database) or a FIFO is
    set aside before the library opens the path; a link on the way is refused."""

    import os

    from sandbox_memory import MemoryPathError

    root = tmp_path / "ws"
    (root / "store").mkdir(parents=True)
    outside = tmp_path / "other.sqlite"
    outside.write_bytes(b"another program's database")
    (root / "store/index.sqlite").symlink_to(outside)
    os.mkfifo(root / "store/pipe.sqlite")
    ws = LocalWorkspace(root)
    for name in ["index.sqlite", "pipe.sqlite"]:
        path = ws.library_file(f"store/{name}")
        assert path == root / "store" / name and not os.path.lexists(path)
    assert outside.read_bytes() == b"another program's database"
    (root / "linked").symlink_to(root / "store")
    with pytest.raises(MemoryPathError, match="symbolic link"):
        ws.library_file("linked/index.sqlite")


async def test_atomic_write_replaces_the_file_and_leaves_no_temporary(ws: Workspace) -> None:
    await ws.write_atomic("d/f.json", b'{"v": 1}')
    await ws.write_atomic("d/f.json", b'{"v": 2}')
    assert json.loads(await ws.read_bytes("d/f.json") or b"") == {"v": 2}
    assert await ws.listdir("d") == ["f.json"]


async def test_writing_many_files_replaces_each_whole_and_leaves_no_temporary(
    ws: Workspace,
) -> None:
    await ws.write_atomic("d/a.json", b'{"v": 1}')
    await ws.write_atomic_many(
        [("d/a.json", b'{"v": 2}'), ("d/b.json", b'{"v": 3}'), ("e/c.json", b"{}")]
    )
    assert json.loads(await ws.read_bytes("d/a.json") or b"") == {"v": 2}
    assert json.loads(await ws.read_bytes("d/b.json") or b"") == {"v": 3}
    assert await ws.listdir("d") == ["a.json", "b.json"]
    assert await ws.listdir("e") == ["c.json"]


async def test_writing_many_files_where_one_cannot_be_written_leaves_no_temporary(
    tmp_path: Path,
) -> None:
    ws = LocalWorkspace(tmp_path)
    (tmp_path / "d" / "b.json").mkdir(parents=True)  # a folder where a file belongs
    with pytest.raises(IsADirectoryError):
        await ws.write_atomic_many([("d/a.json", b"{}"), ("d/b.json", b"{}")])
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["a.json", "b.json"]


async def _old_files(root: Path, batches: int) -> tuple[LocalWorkspace, list[str]]:
    """A folder of files holding ``old``, enough for waits side by side ``batches`` times over."""

    from sandbox_memory import workspace

    ws = LocalWorkspace(root)
    names = [f"d/f{i:02d}.json" for i in range(batches * workspace.PARALLEL_SYNC_FILES)]
    await ws.write_atomic_many([(n, b"old") for n in names])
    return ws, names


async def test_many_files_are_each_on_disk_before_any_replaces_its_old_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from sandbox_memory.workspace import local as workspace

    ws, names = await _old_files(tmp_path, 3)
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        real_fsync(fd)
        events.append("sync")

    def replace(*args: Any, **kwargs: Any) -> None:
        events.append("replace")
        real_replace(*args, **kwargs)

    monkeypatch.setattr(workspace.os, "fsync", fsync)
    monkeypatch.setattr(workspace.os, "replace", replace)
    await ws.write_atomic_many([(n, b"new") for n in names])
    assert events == ["sync"] * len(names) + ["replace"] * len(names)
    assert all((tmp_path / n).read_bytes() == b"new" for n in names)


async def test_a_failed_wait_for_the_disk_among_many_files_replaces_none_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from sandbox_memory.workspace import local as workspace

    ws, names = await _old_files(tmp_path, 2)
    real_fsync = os.fsync
    calls: list[int] = []
    counted = threading.Lock()  # the waits run on several threads

    def fsync(fd: int) -> None:
        with counted:
            calls.append(fd)
            fail = len(calls) == 5
        if fail:
            raise OSError(5, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(workspace.os, "fsync", fsync)
    with pytest.raises(OSError, match="Input/output"):
        await ws.write_atomic_many([(n, b"new") for n in names])
    assert len(calls) == len(names)  # every wait finished before the error came back
    assert all((tmp_path / n).read_bytes() == b"old" for n in names)
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == sorted(
        n.split("/")[1] for n in names
    )


async def test_a_workspace_that_changes_one_write_sees_each_file_of_many(tmp_path: Path) -> None:
    class Counting(LocalWorkspace):
        written: list[str] = []

        async def write_atomic(self, path: str, data: bytes) -> None:
            self.written.append(path)
            await super().write_atomic(path, data)

    ws = Counting(tmp_path)
    await ws.write_atomic_many([("a", b"1"), ("b/c", b"2")])
    assert ws.written == ["a", "b/c"]
    assert (tmp_path / "b" / "c").read_bytes() == b"2"


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


def test_a_lock_file_is_never_seen_empty_while_it_is_created(tmp_path: Path) -> None:
    """A waiter reading the lock while a holder creates it sees no file or the whole lease,
    never an empty file (the old create-then-write showed it empty, taken as expired)."""

    import threading

    ws = LocalWorkspace(tmp_path)
    lock = tmp_path / "store" / "lock"
    payload = json.dumps({"owner": "1-holder", "expires_at": 4e9}).encode()
    done = threading.Event()
    seen: dict[bytes, int] = {}

    def read() -> None:
        while not done.is_set():
            try:
                data = lock.read_bytes()
            except FileNotFoundError:
                continue
            seen[data] = seen.get(data, 0) + 1

    async def create_and_remove() -> None:
        for _ in range(3000):
            assert await ws.create_exclusive("store/lock", payload)
            await ws.remove("store/lock")

    reader = threading.Thread(target=read)
    reader.start()
    try:
        asyncio.run(create_and_remove())
    finally:
        done.set()
        reader.join()
    assert set(seen) <= {payload}, {k[:20]: n for k, n in seen.items()}
    assert seen.get(payload, 0) > 0
    assert [p.name for p in lock.parent.iterdir()] == []  # no temporary left


async def test_swap_replaces_or_removes_only_the_bytes_it_expects(ws: Workspace) -> None:
    await ws.write_atomic("store/lock", b"one")
    assert await ws.swap("store/lock", b"two", b"three") is False
    assert await ws.swap("store/lock", b"on", b"three") is False  # a prefix is not the file
    assert await ws.read_bytes("store/lock") == b"one"
    assert await ws.swap("store/lock", b"one", b"three") is True
    assert await ws.read_bytes("store/lock") == b"three"
    assert await ws.swap("store/lock", b"one", None) is False
    assert await ws.swap("store/lock", b"three", None) is True
    assert await ws.read_bytes("store/lock") is None
    assert await ws.swap("store/lock", b"three", b"four") is False  # missing: nothing made
    assert await ws.read_bytes("store/lock") is None
    assert [n for n in await ws.listdir("store") if "tmp" in n] == []


async def test_a_waiter_never_takes_over_a_lock_its_holder_is_still_writing(
    ws: Workspace, tmp_path: Path
) -> None:
    """An empty lock is a holder between creating and writing it (an older version), not an
    expired one: the waiter waits, and the holder's lease, once written, is respected."""

    (tmp_path / "ws" / "store").mkdir()
    (tmp_path / "ws" / "store" / "lock").write_bytes(b"")
    lease = json.dumps({"owner": "1-holder", "expires_at": time.time() + 60}).encode()

    async def holder_writes() -> None:
        await asyncio.sleep(0.2)
        (tmp_path / "ws" / "store" / "lock").write_bytes(lease)

    writing = asyncio.create_task(holder_writes())
    waiter = LeaseLock(ws, "store/lock", timeout=1.0, lease=60, poll=0.02)
    with pytest.raises(MemoryLockTimeout):
        await waiter.acquire()
    await writing
    assert await ws.read_bytes("store/lock") == lease


async def test_an_unreadable_lock_is_taken_over_after_its_grace(
    ws: Workspace, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "ws" / "store").mkdir()
    (tmp_path / "ws" / "store" / "lock").write_bytes(b"")  # a writer died between the two
    waiter = LeaseLock(ws, "store/lock", timeout=1.0, lease=60, poll=0.02)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await waiter.acquire()
    assert 0.5 <= time.monotonic() - started < 1.0  # the grace: half the waiter's timeout
    assert json.loads(await ws.read_bytes("store/lock") or b"")["owner"] == waiter.token
    assert any("unreadable" in r.getMessage() for r in caplog.records)
    await waiter.release()
    assert await ws.read_bytes("store/lock") is None


async def test_two_waiters_taking_over_one_stale_lock_leave_one_holder(
    ws: Workspace, tmp_path: Path
) -> None:
    (tmp_path / "ws" / "store").mkdir()
    stale = json.dumps({"owner": "1-gone", "expires_at": time.time() - 600}).encode()
    (tmp_path / "ws" / "store" / "lock").write_bytes(stale)
    waiters = [LeaseLock(ws, "store/lock", timeout=1.0, lease=60, poll=0.02) for _ in range(2)]
    outcomes = await asyncio.gather(*(w.acquire() for w in waiters), return_exceptions=True)
    held = [w for w, out in zip(waiters, outcomes, strict=True) if out is None]
    assert len(held) == 1, outcomes
    assert [type(o) for o in outcomes if o is not None] == [MemoryLockTimeout]
    assert json.loads(await ws.read_bytes("store/lock") or b"")["owner"] == held[0].token
    await held[0].release()


async def test_checks_and_renewals_of_one_holder_never_take_each_other_for_a_takeover(
    ws: Workspace,
) -> None:
    """The holder's renewal (every lease/3) and its checks before commits each swap the bytes
    it last wrote: one at a time, or the second would find the first's and think it lost."""

    lock = LeaseLock(ws, "store/lock", timeout=5, lease=0.15)
    await lock.acquire()
    for _ in range(25):
        await lock.check()
        await asyncio.sleep(0.005)
    assert not lock.lost
    await lock.release()
    assert await ws.read_bytes("store/lock") is None


async def test_a_holder_that_outlived_its_lease_never_overwrites_the_lock_taken_from_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Holder A stalls past its lease; B takes the lock over. A's renewal, when A runs again,
    must not write over B's lock (two holders at once), nor A's release remove it."""

    import threading

    ws = LocalWorkspace(tmp_path)
    a = LeaseLock(ws, "store/lock", timeout=5, lease=0.3)
    await a.acquire()
    b = LeaseLock(LocalWorkspace(tmp_path), "store/lock", timeout=5, lease=60, poll=0.02)
    taken = threading.Event()

    def other_process() -> None:
        asyncio.run(b.acquire())
        taken.set()

    thread = threading.Thread(target=other_process)
    thread.start()
    time.sleep(0.6)  # A's event loop stalls: no renewal while its lease runs out
    thread.join()
    assert taken.is_set()
    with caplog.at_level(logging.ERROR, logger="sandbox_memory"):
        await asyncio.sleep(0.3)  # A runs again: its renewal is due
        await a.release()
    assert json.loads((tmp_path / "store" / "lock").read_text())["owner"] == b.token
    assert any("taken over by another process" in r.getMessage() for r in caplog.records)


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

    root = tmp_path / "ws"
    root.mkdir()
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        rt = layout_runtime(SessionWorkspace(sandbox), engine="offline")
        await rt.record({"input": [{"role": "user", "content": "hi"}]}, rollout_id="warm")
        calls: list[str] = []
        for name in ("exec", "write", "read"):
            orig = getattr(sandbox, name)

            async def counted(*a: Any, _orig: Any = orig, _name: str = name, **k: Any) -> Any:
                calls.append(_name)
                return await _orig(*a, **k)

            setattr(sandbox, name, counted)
        reply = {"role": "assistant", "content": "Two days in Porto, then Lisbon."}
        payload = run_payload("Plan the trip to Porto.", reply=None, when=None, items=[reply])
        await rt.record(payload, rollout_id="porto")
        assert calls == ["exec", "exec", "exec"], calls
        threads = list((root / "memories/store/threads").iterdir())
        named = [p.read_text().split()[0] for p in threads]  # the conversation, then a seal
        assert [n for n in named if n == "porto"] == ["porto"]


async def test_a_link_is_refused_in_a_check_of_ten_paths_or_more(ws: Workspace) -> None:
    """Every path of one check is checked for links, the tenth and later ones too (a shell's
    ``$10`` is ``$1`` followed by a 0)."""

    from sandbox_memory.errors import MemoryPathError

    root = _root_of(ws)
    (root / "elsewhere").mkdir()
    (root / "memories").mkdir()
    (root / "memories" / "skills").symlink_to(root / "elsewhere")
    paths = [f"memories/file-{i}.md" for i in range(9)]
    await ws.check_paths(paths)
    with pytest.raises(MemoryPathError, match="symbolic link"):
        await ws.check_paths([*paths, "memories/skills/run-tests/SKILL.md"])


async def test_stamps_move_whenever_a_files_bytes_change(ws: Workspace, tmp_path: Path) -> None:
    await ws.write_atomic("n/a.md", b"12345")
    await ws.write_atomic("n/b.md", b"abc")
    await ws.mkdir("n/sub")
    first = await ws.stamps("n")
    assert set(first) == {"a.md", "b.md"}  # a folder is not a file
    assert await ws.stamps("n") == first  # nothing changed: the same stamps
    await ws.write_atomic("n/a.md", b"54321")  # memory's own rewrite, of the same size
    second = await ws.stamps("n")
    assert second["a.md"] != first["a.md"] and second["b.md"] == first["b.md"]
    # Edited in place (the agent's shell, a person), again of the same size, a clock tick on.
    time.sleep(0.02)
    (tmp_path / "ws" / "n" / "a.md").write_bytes(b"99999")
    assert (await ws.stamps("n"))["a.md"] != second["a.md"]
    assert await ws.stamps("missing") == {}
