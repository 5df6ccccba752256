"""The first record of a conversation: its thread record is written without waiting for the
disk, and rebuilt from the rollout's first line by the next close when a crash loses it."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from faultlib import figure, runtime, scenario_env, warnings_from
from helpers import replay_of, run_payload
from sandbox_memory.config import MemoryLayoutConfig

LAYOUT = MemoryLayoutConfig()
THREADS = Path(LAYOUT.memories_dir) / "store" / "threads"


def first_run() -> dict[str, Any]:
    return run_payload(
        "The invoice total is wrong; fix it.", reply="Fixed the rounding in total().", when=None
    )


def replaying_run() -> dict[str, Any]:
    """A run without a conversation id of its own whose input replays the first run."""

    return replay_of(first_run(), "Add a test.")


CHILD = """
import asyncio, os, signal, sys
from faultlib import runtime
from sandbox_memory.workspace import LocalWorkspace
from test_first_record import first_run

def dies(name):
    orig = getattr(LocalWorkspace, name)
    async def write(self, path, data):
        if "/threads/" in path:
            os.kill(os.getpid(), signal.SIGKILL)  # after the append, before the record
        await orig(self, path, data)
    return write

for name in ("write_atomic", "write_derived"):
    if hasattr(LocalWorkspace, name):
        setattr(LocalWorkspace, name, dies(name))
asyncio.run(runtime(sys.argv[1], engine="offline").record(first_run(), rollout_id="conv"))
"""


def test_a_kill_before_the_thread_record_is_mended_by_the_next_close(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    env = scenario_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env["PYTHONPATH"]])
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    assert (root / LAYOUT.sessions_dir / "conv.jsonl").read_bytes().count(b"\n") == 1
    assert not list((root / THREADS).glob("*")), "the kill came before the thread record"

    async def after() -> str:
        await runtime(root, engine="offline").close()
        return await runtime(root, engine="offline").record(
            replaying_run(), rollout_id="run-2", per_run_id=True
        )

    assert asyncio.run(after()) == "conv", "the replaying run started another conversation"
    # The conversation, then memory's seal of the record.
    assert [p.read_text().split()[0] for p in (root / THREADS).iterdir()] == ["conv"]
    figure("kills.first_record_thread_records_lost", 0)


def test_an_empty_thread_record_is_taken_as_lost_and_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> str:
        rt = runtime(tmp_path, engine="offline")
        await rt.record(first_run(), rollout_id="conv")
        (record,) = (tmp_path / THREADS).iterdir()
        record.write_bytes(b"")  # renamed into place, its data lost with the power
        with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
            await runtime(tmp_path, engine="offline").close()
        assert record.read_text().split()[0] == "conv"
        return await runtime(tmp_path, engine="offline").record(
            replaying_run(), rollout_id="run-2", per_run_id=True
        )

    assert asyncio.run(go()) == "conv"
    assert warnings_from(caplog) == []


def test_the_first_record_waits_for_no_disk_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    rt = runtime(tmp_path, engine="offline")
    asyncio.run(rt.record(first_run(), rollout_id="conv"))
    assert len(list((tmp_path / THREADS).iterdir())) == 1
    assert synced == []
