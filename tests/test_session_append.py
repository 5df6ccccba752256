"""The durable append through the session API (`SessionWorkspace.append_line`), what every
backend other than the local folder records with: one exec whose shell starts no other
process on the common path, and still never writes through a link, never leaves a run half
written or glued to another, and never interleaves two runs.

Faults are injected at the session seam: a wrapper around the real UnixLocal session's
``exec`` changes what the append's shell finds on ``PATH`` or the file-size limit it runs
under; everything else is the real script on a real file.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox import Manifest

from faultlib import figure
from sandbox_memory.errors import MemoryPathError
from sandbox_memory.workspace import (
    _APPEND_SCRIPT,
    SessionWorkspace,
    ShortWriteError,
    append_marker,
)

TOOLS = ("mkdir", "tail", "wc", "flock", "cat", "rm", "truncate", "dirname")
"""Every program the append script may start (each on a rare path only)."""


class Seam:
    """A live session whose ``exec`` can be changed: the rest is passed through."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self.prefix = ""
        """Shell text run before the append script (``sh -c <script>``)."""
        self.wrap: tuple[str, ...] = ()
        """A program the command runs under (``strace ...``)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def exec(self, *command: Any, **kw: Any) -> Any:
        if self.prefix and command[:2] == ("sh", "-c") and _APPEND_SCRIPT in command[2]:
            command = (command[0], command[1], self.prefix + command[2], *command[3:])
        return await self._session.exec(*self.wrap, *command, **kw)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
async def seam(client: Any, root: Path) -> AsyncIterator[Seam]:
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        yield Seam(sandbox)


def tool_dir(base: Path, *, without: tuple[str, ...] = (), log: Path | None = None) -> Path:
    """A folder of the append's tools for ``PATH``: each logs its name to ``log`` (when given)
    and runs the real one; the tools in ``without`` are missing."""

    bindir = base / "bin"
    bindir.mkdir(exist_ok=True)
    for name in TOOLS:
        real = shutil.which(name)
        if real is None or name in without:
            continue
        tool = bindir / name
        note = f'echo {name} >> "{log}"\n' if log is not None else ""
        tool.write_text(f'#!/bin/sh\n{note}exec "{real}" "$@"\n')
        tool.chmod(0o755)
    return bindir


def line(n: int, size: int = 200) -> bytes:
    return (json.dumps({"n": n, "pad": chr(97 + n % 26) * size}) + "\n").encode()


def lines_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data.endswith(b"\n"), "the file does not end with a whole line"
    return data[:-1].split(b"\n")


def parsed(raw: list[bytes]) -> list[Any]:
    out: list[Any] = []
    for one in raw:
        try:
            out.append(json.loads(one))
        except ValueError:
            out.append(None)  # a partial run, kept apart (readers skip it)
    return out


async def test_an_append_starts_no_process_but_its_shell(seam: Seam, root: Path) -> None:
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    await ws.append_line("sessions/r.jsonl", line(0), flag="store/pending/r")
    log = root.parent / "started.log"
    seam.prefix = f"PATH={tool_dir(root.parent, log=log)}\n"
    for n in range(1, 4):
        await ws.append_line("sessions/r.jsonl", line(n), flag="store/pending/r")
    started = log.read_text().split() if log.exists() else []
    assert started == [], f"the append started {started}"
    assert [json.loads(x)["n"] for x in lines_of(root / "sessions/r.jsonl")] == [0, 1, 2, 3]
    assert (root / "store/pending/r").exists()
    # The wrappers do log when they run: the first append to a file written by something
    # else looks at its last byte, under flock.
    (root / "sessions/other.jsonl").write_bytes(b'{"n":9}\n{"n":')
    await ws.append_line("sessions/other.jsonl", line(10))
    assert log.read_text().split() == ["flock", "tail"]
    figure("appends.session_api_helper_processes_per_append", len(started))


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see write calls")
@pytest.mark.parametrize("size", [9_000, 300_000])
async def test_each_line_is_one_write_call(
    seam: Seam, root: Path, tmp_path: Path, size: int
) -> None:
    # One write(2) with O_APPEND is applied whole by the kernel among other appenders: what
    # keeps lines from other processes apart without a lock (9 KB come as an argument, 300 KB
    # as a copy).
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    assert await ws.append_line("sessions/r.jsonl", line(0, size)), "a first line is new"
    assert not await ws.append_line("sessions/r.jsonl", line(1, size))
    trace = tmp_path / "trace"
    seam.wrap = ("strace", "-f", "-qq", "-e", "trace=write", "-o", str(trace))
    one = line(2, size)
    await ws.append_line("sessions/r.jsonl", one)
    writes = re.findall(r"write\(\d+, .*\) += (\d+)$", trace.read_text(), re.M)
    assert str(len(one)) in writes, writes
    assert [json.loads(x)["n"] for x in lines_of(root / "sessions/r.jsonl")] == [0, 1, 2]


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to see open calls")
async def test_an_append_truncates_nothing(seam: Seam, root: Path, tmp_path: Path) -> None:
    # Truncating a file that holds data waits on ext4's journal (milliseconds while other
    # processes sync): the marker's byte is overwritten in place instead of reset by O_TRUNC.
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    await ws.append_line("sessions/r.jsonl", line(0), flag="store/pending/r")
    trace = tmp_path / "trace"
    seam.wrap = ("strace", "-f", "-qq", "-e", "trace=open,openat,truncate,ftruncate")
    seam.wrap += ("-o", str(trace))
    await ws.append_line("sessions/r.jsonl", line(1), flag="store/pending/r")
    # The workspace's own files (the paths reach the shell relative to its root).
    calls = [c for c in trace.read_text().splitlines() if "sessions/" in c or "store/" in c]
    marker = root / append_marker("sessions/r.jsonl")
    assert any(append_marker("sessions/r.jsonl") in c for c in calls), calls
    assert not [c for c in calls if "O_TRUNC" in c or "truncate(" in c], calls
    assert marker.read_bytes() == b"0"
    assert [json.loads(x)["n"] for x in lines_of(root / "sessions/r.jsonl")] == [0, 1]


async def test_appends_through_separate_sessions_never_interleave(
    client: Any, root: Path, tmp_path: Path
) -> None:
    # Eight sessions on one workspace have no lock in common in this process: only each
    # line being one write keeps the lines whole (2 MB lines come as a copy, 9 KB ones as an
    # argument). The shells wait at a gate, so their writes meet.
    gate = tmp_path / "gate"
    gate.mkdir()
    os.mkfifo(gate / "go")
    seams = [Seam(await client.create(manifest=Manifest(root=str(root)))) for _ in range(8)]
    for seam in seams:
        seam.prefix = f': > "{gate}/$$"; read _ <> "{gate}/go"\n'
        await seam._session.__aenter__()
    want = [line(n, 2 << 20 if n < 6 else 9_000) for n in range(8)]

    def release() -> None:
        fd = os.open(gate / "go", os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, b"\n" * len(want))  # a newline for each shell: all go at once
        os.close(fd)

    async def open_gate() -> None:
        while len(list(gate.iterdir())) <= len(want):
            await asyncio.sleep(0.01)
        release()

    try:
        writers = [SessionWorkspace(s) for s in seams]  # type: ignore[arg-type]
        appends = (writers[n].append_line("sessions/c.jsonl", x) for n, x in enumerate(want))
        await asyncio.wait_for(asyncio.gather(open_gate(), *appends), timeout=120)
    except BaseException:
        release()  # no shell is left waiting
        raise
    finally:
        for seam in seams:
            await seam._session.__aexit__(None, None, None)
    # An append that looks at the last byte while another's write is under way may see it
    # unfinished and put a newline first: an empty line, which readers skip.
    got = [x for x in lines_of(root / "sessions/c.jsonl") if x]
    torn = [(len(x), x[:40]) for x in got if x + b"\n" not in want]
    assert sorted(got) == sorted(x[:-1] for x in want), (len(got), torn)
    figure("appends.session_api_eight_sessions_segments_whole", "8 of 8")


async def test_a_torn_line_written_after_a_session_append_is_mended(seam: Seam, root: Path) -> None:
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    path = root / "sessions/r.jsonl"
    await ws.append_line("sessions/r.jsonl", line(0))
    with open(path, "ab") as fh:  # something else appends half a line
        fh.write(b'{"n": 1, "pad": "hal')
    marker = root / append_marker("sessions/r.jsonl")
    stamp = path.stat().st_mtime_ns
    os.utime(marker, ns=(stamp - 10**9, stamp - 10**9))  # it wrote after the marker
    await ws.append_line("sessions/r.jsonl", line(2))
    runs = parsed(lines_of(path))
    assert runs[0]["n"] == 0 and runs[1] is None and runs[2]["n"] == 2


async def test_an_append_that_died_mid_line_is_never_glued_to_the_next(
    seam: Seam, root: Path
) -> None:
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    path = root / "sessions/r.jsonl"
    await ws.append_line("sessions/r.jsonl", line(0))
    # What a shell killed in the middle of its write leaves: the marker set, half a line.
    marker = root / append_marker("sessions/r.jsonl")
    marker.write_bytes(b"1")
    with open(path, "ab") as fh:
        fh.write(line(1)[:50])
    stamp = path.stat().st_mtime_ns
    os.utime(marker, ns=(stamp + 10**9, stamp + 10**9))  # only the mark tells
    await ws.append_line("sessions/r.jsonl", line(2))
    runs = parsed(lines_of(path))
    assert runs[0]["n"] == 0 and runs[1] is None and runs[2]["n"] == 2
    assert marker.read_bytes() == b"0"  # whole again: the mark is reset in place


@pytest.mark.parametrize("undo", ["truncate", "no_truncate"])
async def test_a_short_write_is_reported_and_never_glued_to_the_next_line(
    seam: Seam, root: Path, undo: str
) -> None:
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    path = root / "sessions/r.jsonl"
    await ws.append_line("sessions/r.jsonl", line(0, 100))
    without = ("truncate",) if undo == "no_truncate" else ()
    bindir = tool_dir(root.parent, without=without)
    # The file may grow by one or two 512-byte blocks more: a full disk, as the kernel cuts it.
    seam.prefix = f"ulimit -f {path.stat().st_size // 512 + 2}; PATH={bindir}\n"
    with pytest.raises(ShortWriteError, match="did not write them all") as failed:
        await ws.append_line("sessions/r.jsonl", line(1, 20_000))
    seam.prefix = ""
    await ws.append_line("sessions/r.jsonl", line(2, 100))
    runs = parsed(lines_of(path))
    if undo == "truncate":
        assert "the partial line was removed" in str(failed.value)
        assert [r["n"] for r in runs] == [0, 2]
    else:
        assert "partial line may be left" in str(failed.value)
        assert runs[0]["n"] == 0 and runs[1] is None and runs[2]["n"] == 2
    figure(f"appends.session_api_short_write_{undo}_runs_glued", 0)


@pytest.mark.parametrize("target", ["marker", "flag_folder"])
async def test_a_link_at_the_marker_or_flag_is_refused(
    seam: Seam, root: Path, tmp_path: Path, target: str
) -> None:
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    await ws.append_line("sessions/r.jsonl", line(0), flag="store/pending/r")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("kept")
    if target == "marker":
        marker = root / append_marker("sessions/r.jsonl")
        marker.unlink()
        marker.symlink_to(outside / "f")
    else:
        shutil.rmtree(root / "store/pending")
        (root / "store/pending").symlink_to(outside)
    before = (root / "sessions/r.jsonl").read_bytes()
    with pytest.raises(MemoryPathError, match="symbolic link"):
        await ws.append_line("sessions/r.jsonl", line(1), flag="store/pending/r")
    assert sorted(p.name for p in outside.iterdir()) == ["f"]
    assert (outside / "f").read_text() == "kept"
    assert (root / "sessions/r.jsonl").read_bytes() == before
    figure(f"workspace.session_append_link_at_{target}_paths_escaped", 0)


@pytest.mark.parametrize("size", [9_000, 200_000])
async def test_the_first_line_of_a_file_is_new_whether_argument_or_copy(
    seam: Seam, root: Path, size: int
) -> None:
    ws = SessionWorkspace(seam)  # type: ignore[arg-type]
    assert await ws.append_line("sessions/new/r.jsonl", line(0, size), flag="store/p/r")
    assert not await ws.append_line("sessions/new/r.jsonl", line(1, size), flag="store/p/r")
    assert [json.loads(x)["n"] for x in lines_of(root / "sessions/new/r.jsonl")] == [0, 1]
    assert (root / "store/p/r").exists()
    assert not [p for p in (root / "sessions/new").iterdir() if p.name.endswith(".tmp-sbm")]
