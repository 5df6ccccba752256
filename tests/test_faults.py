"""Faults: crashes, races, stale locks, failing models, budgets. Memory bends, the host never breaks.

- crash safety: a writer killed with SIGKILL mid-write leaves every file whole (old or new);
- concurrency: two processes closing over one memory folder keep each other's changes; a lock
  whose holder died is taken over; waiting for a live one is bounded and logged;
- durable progress: runs of a session that died are extracted at the next close; a failing
  extraction is retried with backoff up to a cap, attempts visible in store/progress/;
- the host: closing never raises because of memory and the snapshot is always written;
- budgets per close (calls, input tokens, seconds) and bounded phase-1 concurrency.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.sandbox import LocalSnapshotSpec
from agents.testing import ScriptedModel, assistant_message

from faultlib import (
    PhaseOneModel,
    cite_user,
    each_run_learned,
    figure,
    is_leftover,
    kill_when_ready,
    manager_of,
    race_run,
    rc,
    record_conversations,
    run_markers,
    run_scenario,
    runtime,
    sandbox_agent,
    snapshot_tars,
    start_scenario,
    unparsable_files,
    warnings_from,
)
from helpers import layout_runtime, read_layout, read_progress, run_payload
from sandbox_memory import Memory, MemoryGenerateConfig, MemoryLockTimeout
from sandbox_memory.extract import rollout as phase_one

STORE = "memories/store"


def model_memory(model: PhaseOneModel, **generate: Any) -> Memory:
    return Memory(generate=MemoryGenerateConfig(engine="model", phase_one_model=model, **generate))


async def one_run(client: Any, manifest: Any, memory: Memory, text: str, **kw: Any) -> Any:
    """A sandbox session with one run in it, closed; returns the close's report."""

    sandbox = await client.create(manifest=manifest, **kw)
    async with sandbox:
        await Runner.run(
            sandbox_agent(ScriptedModel([[assistant_message("Done.")]]), memory),
            text,
            run_config=rc(sandbox, group_id="now"),
        )
        manager = manager_of(sandbox, memory)
    return manager.last_report


def write_lock(root: Path, *, expires_in: float, owner: str = "4242-feedface0000") -> Path:
    lock = root / STORE / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(json.dumps({"owner": owner, "expires_at": time.time() + expires_in}))
    return lock


# ------------------------------------------------------------------ crash safety


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_every_file_whole(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    rng = random.Random(7)
    leftovers = 0
    for cycle in range(3):
        proc = start_scenario("write-loop", str(root))
        kill_when_ready(proc, after=rng.uniform(0.2, 0.8))
        assert proc.returncode == -signal.SIGKILL
        assert unparsable_files(root) == [], f"cycle {cycle}"
        big = json.loads((root / STORE / "big.json").read_text())
        assert len(big["entries"]) == 5_000  # the whole old or the whole new document
        leftovers += sum(1 for p in root.rglob("*") if is_leftover(p))
    figure("faults.sigkill_cycles", 3)
    figure("faults.sigkill_interrupted_writes_left_as_tmp_files", leftovers)


@pytest.mark.slow
async def test_after_a_kill_the_next_close_takes_every_recorded_run(tmp_path: Path) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    proc = start_scenario("write-loop", str(root))
    kill_when_ready(proc, after=0.5)
    rt = runtime(root, engine="offline", lock_timeout_seconds=5)
    await rt.record(
        {"input": [{"role": "user", "content": "after the crash"}]}, rollout_id="conv-0"
    )
    await rt.close()
    sizes = {p.stem: p.stat().st_size for p in (root / "sessions").glob("*.jsonl")}
    assert {rid: p["offset"] for rid, p in read_progress(root).items()} == sizes
    assert unparsable_files(root) == []
    assert not list(root.rglob("*.broken-*"))  # no state file had to be set aside


# ------------------------------------------------------------------ concurrency


@pytest.mark.slow
def test_two_processes_closing_over_one_memory_folder_keep_both_conversations(
    tmp_path: Path,
) -> None:
    import concurrent.futures

    root = tmp_path / "shared"
    root.mkdir()
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(
                lambda conv: run_scenario("share-folder", str(root), conv, str(barrier), "3"),
                ["alpha", "beta"],
            )
        )
    figure("faults.two_process_seconds", round(time.monotonic() - started, 2))
    state = read_progress(root)
    for conv in ("alpha", "beta"):
        lines = (root / "sessions" / f"{conv}.jsonl").read_text().splitlines()
        assert len(lines) == 3
        assert state[conv]["offset"] == (root / "sessions" / f"{conv}.jsonl").stat().st_size
        assert state[conv]["consolidated"] is True
        memory = json.loads((root / STORE / "conversations" / f"{conv}.json").read_text())
        assert memory["entries"], conv
    registry = json.loads((root / STORE / "registry.json").read_text())
    assert set(registry["conversations"]) == {"alpha", "beta"}
    threads = [p.read_text().split()[0] for p in (root / STORE / "threads").iterdir()]
    assert sorted(threads) == ["alpha", "beta"]  # each run start finds its conversation
    memory_md = (root / "memories/MEMORY.md").read_text()
    assert "alpha" in memory_md and "beta" in memory_md
    assert not (root / STORE / "lock").exists()
    assert all(r["report"]["deferred"] == [] for r in results)


RACE_WORKERS = 8
RACE_TRIALS = 50
"""Trials of the race below: at most a few seconds each on 2 cores (8 closes in turn)."""


@pytest.mark.slow
def test_eight_processes_recording_and_closing_one_conversation_lose_no_run(
    tmp_path: Path,
) -> None:
    """8 real processes, one workspace folder per trial, all at once: each records a run of one
    conversation at a moment of its own (within 0.3 s: one records while others close),
    extracts it after the run half the time (the bridge does, unless the session closes before
    that work starts) with a model that takes up to 50 ms, and closes. Every trial must end
    with the progress offset at the file's end, every run's lesson in conversation memory, and
    no lock taken from a live holder (nobody dies here, so any takeover is one). The code
    before the fixes left 2 runs unlearned and took 19 live locks in 50 trials."""

    started = time.monotonic()
    procs = [
        start_scenario(
            "one-conversation-race",
            str(tmp_path),
            str(w),
            str(RACE_WORKERS),
            str(RACE_TRIALS),
            "1",
        )
        for w in range(RACE_WORKERS)
    ]
    outs = [proc.communicate(timeout=900) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * RACE_WORKERS, [e[-3000:] for _, e in outs]
    failures = [json.loads(out.splitlines()[-1])["failures"] for out, _ in outs]
    assert failures == [[]] * RACE_WORKERS, failures
    lost_runs = lost_lessons = short_trials = 0
    for t in range(RACE_TRIALS):
        root = tmp_path / f"trial-{t}"
        data = (root / "sessions/shared.jsonl").read_bytes()
        offset = read_progress(root)["shared"]["offset"]
        ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
        assert len(ends) == RACE_WORKERS  # every run recorded, whole
        lost = sum(1 for end in ends if end > offset)
        short_trials += lost > 0
        lost_runs += lost
        memory = json.loads((root / STORE / "conversations/shared.json").read_text())
        markers = {m.decode() for m in re.findall(rb"Run (w\d+t\d+r\d+):", data)}
        lost_lessons += len(markers - {k.removeprefix("run-") for k in memory["entries"]})
    logs = "".join(err for _, err in outs)
    takeovers = len(re.findall(r"memory lock \S+ .*(?:took|taking) it over", logs))
    figure("race.processes", RACE_WORKERS)
    figure("race.trials", RACE_TRIALS)
    figure("race.trials_short", short_trials)
    figure("race.lost_runs", lost_runs)
    figure("race.lost_lessons", lost_lessons)
    figure("race.live_locks_taken_over", takeovers)
    figure("race.extractions_redone_after_a_lost_race", logs.count("is not applied"))
    figure("race.seconds", round(time.monotonic() - started, 1))
    assert (lost_runs, lost_lessons, takeovers) == (0, 0, 0)


async def test_an_extraction_that_loses_the_race_for_progress_extracts_what_is_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Process A reads run 1 and works on it; run 2 is recorded and process B's close reads
    runs 1-2; A applies first (offset after run 1). B's extraction rests on an offset that is
    gone: it is not applied, and run 2 is extracted from A's offset, so nothing is left."""

    caplog.set_level(logging.INFO, logger="sandbox_memory")
    gates = {"a": asyncio.Event(), "b": asyncio.Event()}
    working = {"a": asyncio.Event(), "b": asyncio.Event()}

    def gated(name: str) -> PhaseOneModel:
        async def answer(text: str) -> dict[str, Any]:
            working[name].set()
            await gates[name].wait()
            return each_run_learned(text)

        return PhaseOneModel(answer)

    a_model, b_model = gated("a"), gated("b")
    a = runtime(tmp_path, engine="model", phase_one_model=a_model)
    b = runtime(tmp_path, engine="model", phase_one_model=b_model)
    await a.record(race_run("0", 0, 1), rollout_id="shared")
    a_task = asyncio.create_task(a.consolidate_conversation("shared"))
    await asyncio.wait_for(working["a"].wait(), 10)
    await b.record(race_run("1", 0, 2), rollout_id="shared")
    b_task = asyncio.create_task(b.close())
    await asyncio.wait_for(working["b"].wait(), 10)
    gates["a"].set()
    await asyncio.wait_for(a_task, 10)
    gates["b"].set()
    await asyncio.wait_for(b_task, 10)

    rollout = tmp_path / "sessions/shared.jsonl"
    assert read_progress(tmp_path)["shared"]["offset"] == rollout.stat().st_size
    conversation = json.loads((tmp_path / STORE / "conversations/shared.json").read_text())
    assert {"run-w0t0r1", "run-w1t0r2"} <= set(conversation["entries"])
    # B's second call was sent run 2 alone: the part A had not extracted.
    assert len(b_model.calls) == 2
    sent = [c.input for c in b_model.calls]
    assert [run_markers(text) for text in sent] == [["w0t0r1", "w1t0r2"], ["w1t0r2"]]
    assert any("is not applied" in r.getMessage() for r in caplog.records)


async def test_a_holder_whose_lock_was_taken_over_cannot_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fencing: a close that stalls past its lock's lease while another process takes the
    lock over has its layout commit and progress writes refused (``MemoryLeaseLost``), so two
    writers never change layout memory at once; the one that holds the lock goes on."""

    import threading

    from sandbox_memory import MemoryLeaseLost
    from sandbox_memory import layout_state as state_module
    from sandbox_memory.stores.records import Entry, RolloutProgress, Source

    monkeypatch.setattr(state_module, "DEFAULT_LOCK_LEASE_SECONDS", 0.3)
    a = runtime(tmp_path, engine="offline")
    b = runtime(tmp_path, engine="offline")
    entry = Entry(
        key="deploy",
        content="Deploy with make ship.",
        kind="fact",
        sources=[Source(conversation="c", item="s:0")],
    )
    head = tmp_path / STORE / "layout" / "head.json"
    async with a.write_lock():
        other = b.lock()
        thread = threading.Thread(target=lambda: asyncio.run(other.acquire()))
        thread.start()
        time.sleep(0.6)  # this process stalls past its lease; the other takes the lock
        thread.join()
        with pytest.raises(MemoryLeaseLost, match="taken over"):
            await a.store.commit_layout(version=1, put={"deploy": entry})
        with pytest.raises(MemoryLeaseLost):
            await a.store.put_progress("c", RolloutProgress(offset=10))
    assert not head.exists()
    assert not (tmp_path / STORE / "progress" / "c.json").exists()
    # The lock is the other process's, and stays when this holder lets go.
    assert json.loads((tmp_path / STORE / "lock").read_text())["owner"] == other.token


async def test_a_lock_whose_holder_died_long_ago_is_taken_over(
    client, manifest, workspace_root, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    write_lock(workspace_root, expires_in=-600)
    started = time.monotonic()
    await one_run(
        client, manifest, Memory(generate=MemoryGenerateConfig(engine="offline")), "Ship it."
    )
    assert time.monotonic() - started < 10
    assert read_progress(workspace_root)["now"]["consolidated"] is True
    assert not (workspace_root / STORE / "lock").exists()
    assert any("took it over" in m for m in warnings_from(caplog))


async def test_a_lock_of_a_process_that_is_gone_is_taken_over_before_its_lease_ends(
    client, manifest, workspace_root, caplog
) -> None:
    from sandbox_memory.workspace import _PID_SPACE

    if _PID_SPACE is None:
        pytest.skip("no /proc: a holder's pid cannot be checked here, only its lease")
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    proc = start_scenario("write-loop", str(workspace_root))
    kill_when_ready(proc, after=0.3)
    lock = workspace_root / STORE / "lock"
    if not lock.exists():  # the kill landed outside the lock: leave one as the dead pid would
        write_lock(workspace_root, expires_in=110, owner=f"{proc.pid}-0")
        data = json.loads(lock.read_text())
        lock.write_text(json.dumps({**data, "pid_space": _PID_SPACE}))
    assert json.loads(lock.read_text())["expires_at"] > time.time() + 60  # lease still running
    started = time.monotonic()
    await one_run(
        client,
        manifest,
        Memory(generate=MemoryGenerateConfig(engine="offline", lock_timeout_seconds=5)),
        "Ship it.",
    )
    assert time.monotonic() - started < 5
    assert read_progress(workspace_root)["now"]["consolidated"] is True
    assert any("took it over" in m for m in warnings_from(caplog))


async def test_waiting_for_a_held_lock_raises_lock_timeout_after_the_configured_time(
    workspace_root, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    await record_conversations(workspace_root, ["waiting"])
    write_lock(workspace_root, expires_in=110)  # another process is working
    rt = runtime(workspace_root, engine="offline", lock_timeout_seconds=1.5)
    started = time.monotonic()
    with pytest.raises(MemoryLockTimeout, match="lock_timeout_seconds"):
        await rt.close()
    waited = time.monotonic() - started
    assert 1.5 <= waited < 3.5
    assert any("waiting for memory lock" in m for m in warnings_from(caplog))
    figure("faults.lock_wait_seconds_for_timeout_1_5", round(waited, 2))


async def test_a_close_that_cannot_get_the_lock_logs_and_leaves_the_run_for_later(
    client, manifest, workspace_root, tmp_path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    lock = write_lock(workspace_root, expires_in=110)
    memory = Memory(generate=MemoryGenerateConfig(engine="offline", lock_timeout_seconds=1.1))
    snapshots = tmp_path / "snapshots"
    await one_run(
        client, manifest, memory, "Ship it.", snapshot=LocalSnapshotSpec(base_path=snapshots)
    )
    assert snapshot_tars(snapshots)
    assert any("generate.lock_timeout_seconds" in m for m in warnings_from(caplog))
    assert (workspace_root / "sessions/now.jsonl").exists()
    assert (
        "now" not in read_progress(workspace_root)
        or not read_progress(workspace_root)["now"]["slug"]
    )

    lock.unlink()  # the other process finishes; the next close does the work
    await runtime(workspace_root, engine="offline").close()
    assert read_progress(workspace_root)["now"]["consolidated"] is True


# ------------------------------------------------------------------ durable progress


@pytest.mark.slow
async def test_runs_of_a_session_killed_mid_extraction_are_extracted_at_the_next_close(
    client, manifest, workspace_root
) -> None:
    done = run_scenario_killed("crash-mid-extraction", str(workspace_root))
    assert done == -signal.SIGKILL
    assert (workspace_root / "sessions/crashed.jsonl").exists()
    assert not read_progress(workspace_root).get("crashed", {}).get("slug")

    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    report = await one_run(client, manifest, memory, "Next task.")
    assert "crashed" in report["extracted"]
    state = read_progress(workspace_root)["crashed"]
    assert state["offset"] == (workspace_root / "sessions/crashed.jsonl").stat().st_size
    assert "make targets" in (workspace_root / "memories/MEMORY.md").read_text()


async def test_runs_recorded_by_a_session_that_was_never_closed_are_extracted_at_the_next_close(
    client, manifest, workspace_root
) -> None:
    from agents import Agent

    from sandbox_memory import record_run

    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    abandoned = await client.create(manifest=manifest)
    await abandoned.start()
    plain = Agent(name="plain", model=ScriptedModel([[assistant_message("Use `make lint`.")]]))
    result = await Runner.run(plain, "How do we lint? I prefer make targets.")
    await record_run(abandoned, result, memory=memory, conversation_id="abandoned")
    # ... and the session is dropped without a close: no pre-stop hook, no extraction.
    assert "abandoned" not in read_progress(workspace_root)

    report = await one_run(client, manifest, memory, "Next task.")
    assert "abandoned" in report["extracted"]
    assert read_progress(workspace_root)["abandoned"]["consolidated"] is True


def run_scenario_killed(name: str, *args: str) -> int:
    proc = start_scenario(name, *args)
    proc.wait(timeout=60)
    return proc.returncode


async def test_failed_extraction_is_retried_with_backoff_and_parked_after_max_attempts(
    workspace_root, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    # The clock moves only when the test moves it, so a slow close on a loaded machine cannot
    # outlast the backoff it is checking.
    real_time, skew = time.time, [0.0]
    monkeypatch.setattr(time, "time", lambda: real_time() + skew[0])
    model = PhaseOneModel(lambda text: RuntimeError("memory model is down"))
    await record_conversations(workspace_root, ["flaky"])
    rt = runtime(workspace_root, engine="model", phase_one_model=model, max_attempts=3)

    delays = []
    for attempt in (1, 2, 3):
        await rt.close()
        state = read_progress(workspace_root)["flaky"]
        assert state["attempts"] == attempt
        assert "memory model is down" in state["last_error"]
        if attempt < 3:
            assert state["status"] == "retrying"
            delays.append(state["next_attempt_at"] - time.time())
            await rt.close()  # too early: the backoff holds, no model call
            assert len(model.calls) == attempt
            skew[0] += max(0.0, state["next_attempt_at"] - time.time()) + 0.01
    assert state["status"] == "failed"
    assert delays[1] > 1.5 * delays[0]  # the delay doubles
    await rt.close()
    assert len(model.calls) == 3  # parked: no more attempts
    assert any("attempt 3 of 3" in m and "parked" in m for m in warnings_from(caplog))


async def test_extraction_that_failed_once_succeeds_on_retry_and_clears_the_error(
    workspace_root, monkeypatch
) -> None:
    monkeypatch.setattr(phase_one, "BACKOFF_BASE_SECONDS", 0.05)
    answers = iter([RuntimeError("timeout talking to the model")])
    model = PhaseOneModel(lambda text: next(answers, None) or cite_user(text))
    await record_conversations(workspace_root, ["flaky"])
    rt = runtime(workspace_root, engine="model", phase_one_model=model)
    await rt.close()
    assert read_progress(workspace_root)["flaky"]["attempts"] == 1
    time.sleep(0.1)
    report = await rt.close()
    state = read_progress(workspace_root)["flaky"]
    assert report["extracted"] == ["flaky"]
    assert (state["attempts"], state["last_error"], state["status"]) == (0, None, "ok")


# ------------------------------------------------------------------ never break the host


MODEL_ERRORS = [
    RuntimeError("provider exploded"),
    ConnectionResetError("connection reset by peer"),
    asyncio.CancelledError("stray cancel from a model client"),
]


@pytest.mark.parametrize("error", MODEL_ERRORS, ids=lambda e: type(e).__name__)
async def test_closing_never_raises_when_the_memory_model_raises_and_the_snapshot_is_written(
    client, manifest, workspace_root, tmp_path, caplog, error
) -> None:
    if isinstance(error, asyncio.CancelledError) and sys.version_info < (3, 11):
        pytest.skip("Python 3.10 cannot tell a stray CancelledError from a cancellation")
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    snapshots = tmp_path / "snapshots"
    model = PhaseOneModel(lambda text: error)
    await one_run(
        client,
        manifest,
        model_memory(model),
        "Do it.",
        snapshot=LocalSnapshotSpec(base_path=snapshots),
    )
    assert snapshot_tars(snapshots)
    assert any(type(error).__name__ in m for m in warnings_from(caplog))
    assert read_progress(workspace_root)["now"]["attempts"] >= 1


async def test_closing_never_raises_when_consolidation_itself_fails_and_the_snapshot_is_written(
    client, manifest, workspace_root, tmp_path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    # Not a state file (those are set aside): a folder where the rendered MEMORY.md goes.
    (workspace_root / "memories/MEMORY.md").mkdir(parents=True)
    snapshots = tmp_path / "snapshots"
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    await one_run(
        client, manifest, memory, "Do it.", snapshot=LocalSnapshotSpec(base_path=snapshots)
    )
    assert snapshot_tars(snapshots)
    assert any("snapshot goes ahead" in m for m in warnings_from(caplog))


def test_closing_with_a_read_only_memory_folder_never_raises_and_the_snapshot_is_written(
    tmp_path: Path,
) -> None:
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: no way to make a folder read-only for this test")
    root = tmp_path / "workspace"
    root.mkdir()
    asyncio.run(record_conversations(root, ["before"]))
    asyncio.run(runtime(root, engine="offline").close())
    before = {p: p.read_bytes() for p in (root / "memories").rglob("*") if p.is_file()}
    make_read_only(root / "memories")
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    try:
        result = run_scenario(
            "read-only-close", str(root), str(snapshots), unprivileged=True, timeout=60
        )
    finally:
        make_writable(root / "memories")
    assert result["raised"] is None
    assert snapshot_tars(snapshots)
    assert "WARNING" in result["stderr"] and "PermissionError" in result["stderr"]
    after = {p: p.read_bytes() for p in (root / "memories").rglob("*") if p.is_file()}
    assert after == before  # nothing half-written
    lines = (root / "sessions/read-only.jsonl").read_text().splitlines()
    assert len(lines) == 1  # the run is recorded, once

    asyncio.run(runtime(root, engine="offline").close())  # writable again: the run is learned
    assert read_progress(root)["read-only"]["consolidated"] is True


def make_read_only(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    folder.chmod(0o555)


def make_writable(folder: Path) -> None:
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


# ------------------------------------------------------------------ budgets per close


async def test_model_call_budget_leaves_the_rest_for_the_next_close(workspace_root, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    await record_conversations(workspace_root, ["c1", "c2", "c3"])
    model = PhaseOneModel()
    rt = runtime(
        workspace_root,
        engine="model",
        phase_one_model=model,
        max_model_calls_per_close=1,
        phase_one_concurrency=1,
    )
    first = await rt.close()
    assert (len(first["extracted"]), len(first["deferred"]), first["model_calls"]) == (1, 2, 1)
    assert sorted(first["extracted"] + first["deferred"]) == ["c1", "c2", "c3"]
    assert any("left 2 rollout(s) for the next close" in m for m in warnings_from(caplog))
    state = read_progress(workspace_root)
    for rid in first["deferred"]:
        assert state.get(rid, {}).get("attempts", 0) == 0  # waiting is not failing
    second = await rt.close()
    third = await rt.close()
    assert len(second["extracted"]) == len(third["extracted"]) == 1
    assert all(p["consolidated"] for p in read_progress(workspace_root).values())


async def test_input_token_budget_leaves_the_rest_for_the_next_close(workspace_root) -> None:
    await record_conversations(workspace_root, ["t1", "t2", "t3"], size=8_000)
    one_rollout = (workspace_root / "sessions/t1.jsonl").stat().st_size // 4
    rt = runtime(
        workspace_root,
        engine="model",
        phase_one_model=PhaseOneModel(),
        max_input_tokens_per_close=int(one_rollout * 1.5),
        phase_one_concurrency=1,
    )
    report = await rt.close()
    assert (len(report["extracted"]), len(report["deferred"])) == (1, 2)


async def test_extraction_cut_off_by_the_time_budget_waits_for_the_next_close(
    workspace_root, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    await record_conversations(workspace_root, ["slow"])
    model = PhaseOneModel(delay=20.0)
    rt = runtime(workspace_root, engine="model", phase_one_model=model, max_seconds_per_close=0.3)
    started = time.monotonic()
    report = await rt.close()
    assert time.monotonic() - started < 5  # the budget, not the model's 20 s
    assert report["deferred"] == ["slow"]
    assert read_progress(workspace_root).get("slow", {}).get("attempts", 0) == 0
    # One line says what waits for the next close.
    deferred = [m for m in warnings_from(caplog) if "for the next close" in m]
    assert len(deferred) == 1 and "slow" in deferred[0]

    model.delay = 0
    assert (await rt.close())["extracted"] == ["slow"]


async def test_phase_one_of_several_rollouts_runs_concurrently_within_the_bound(
    workspace_root,
) -> None:
    names = [f"r{i}" for i in range(8)]
    await record_conversations(workspace_root, names)
    model = PhaseOneModel(delay=0.2)
    rt = runtime(workspace_root, engine="model", phase_one_model=model, phase_one_concurrency=3)
    started = time.monotonic()
    report = await rt.close()
    elapsed = time.monotonic() - started
    assert sorted(report["extracted"]) == names
    assert model.max_active == 3  # three calls in flight at once, never more
    figure("faults.concurrency_bound_3_max_seen", model.max_active)
    figure("faults.eight_rollouts_seconds_at_0_2s_per_call", round(elapsed, 2))


# ------------------------------------------------------------------ only the workspace

OUTSIDE_MARKER = "OUTSIDE-THE-WORKSPACE-7f3a"
OUTSIDE_MEMORY = f"# Memory\n\n- [decision] outside-entry: {OUTSIDE_MARKER} use the outside tool\n"


def outside_tree(base: Path) -> Path:
    """A folder outside the workspace, with files a link could make memory read or overwrite."""

    out = base / "outside"
    (out / "store" / "layout").mkdir(parents=True)
    (out / "MEMORY.md").write_text(OUTSIDE_MEMORY)
    (out / "memory_summary.md").write_text(OUTSIDE_MEMORY)
    (out / "store" / "layout" / "head.json").write_text('{"version": 0, "stamp": "outside"}')
    (out / "SKILL.md").write_text(f"# outside skill {OUTSIDE_MARKER}\n")
    (out / "conv.jsonl").write_text("")
    other = sqlite3.connect(out / "index.sqlite")  # another program's database
    other.execute("CREATE TABLE notes(body TEXT)")
    other.execute("INSERT INTO notes VALUES (?)", (OUTSIDE_MARKER,))
    other.commit()
    other.close()
    return out


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def place_link(root: Path, target: str, outside: Path) -> None:
    """Replace ``target`` (relative to the workspace) with a link to the outside folder."""

    link = root / target
    if link.is_dir() and not link.is_symlink():
        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    points_to = {
        "memories/MEMORY.md": outside / "MEMORY.md",
        "sessions/now.jsonl": outside / "conv.jsonl",
        "memories/skills/run-tests": outside,
        "memories/store/search.sqlite": outside / "index.sqlite",
    }.get(target, outside)
    link.symlink_to(points_to)


async def run_in_session(client: Any, manifest: Any, memory: Memory, model: Any, text: str) -> None:
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(sandbox_agent(model, memory), text, run_config=rc(sandbox, group_id="now"))


async def memory_with_a_procedure(
    client: Any, manifest: Any, monkeypatch: pytest.MonkeyPatch, path_kind: str
) -> Memory:
    """Memory over the local fast path or the session API, after one run whose offline
    extraction yields a procedure (so ``skills/<key>/`` exists)."""

    from helpers import bug_fix_script
    from sandbox_memory import _sdk
    from sandbox_memory.workspace import SessionWorkspace

    if path_kind == "session":
        monkeypatch.setattr(_sdk, "workspace_for_session", SessionWorkspace)
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    await run_in_session(
        client, manifest, memory, ScriptedModel(bug_fix_script()), "Fix the failing test."
    )
    return memory


@pytest.mark.parametrize("path_kind", ["local", "session"])
@pytest.mark.parametrize(
    "target",
    [
        "memories",
        "memories/store",
        "memories/MEMORY.md",
        "sessions/now.jsonl",
        "sessions",
        "memories/store/search.sqlite",
    ],
)
async def test_a_link_placed_beforehand_never_takes_memory_out_of_the_workspace(
    client: Any,
    manifest: Any,
    workspace_root: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    path_kind: str,
    target: str,
) -> None:
    memory = await memory_with_a_procedure(client, manifest, monkeypatch, path_kind)
    outside = outside_tree(tmp_path)
    place_link(workspace_root, target, outside)
    before = tree_bytes(outside)
    agent_model = ScriptedModel([[assistant_message("Done.")]])
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await run_in_session(client, manifest, memory, agent_model, "Run the tests again.")
    assert tree_bytes(outside) == before, "memory wrote outside the workspace"
    assert OUTSIDE_MARKER not in (agent_model.calls[0].system_instructions or "")
    inside = memory_text_inside(workspace_root)
    assert OUTSIDE_MARKER not in inside, "memory read a file outside the workspace"
    refusals = [w for w in warnings_from(caplog) if "symbolic link" in w]
    assert refusals, "the refusal is not logged"
    figure(f"workspace.link_{path_kind}_{target.replace('/', '_')}_paths_escaped", 0)


@pytest.mark.parametrize("path_kind", ["local", "session"])
@pytest.mark.parametrize("target", ["memories/skills/run-tests", "memories/MEMORY.md"])
async def test_a_remember_refused_for_a_link_where_it_renders_applies_nothing(
    client: Any, manifest: Any, workspace_root: Path, tmp_path: Path, path_kind: str, target: str
) -> None:
    """A ``Remember`` whose skill folder (or ``MEMORY.md``) is a link raises
    ``MemoryPathError`` before its commit: the version and the entries are as they were
    (before: the change was applied, version 0 -> 1, and then the error raised)."""

    from sandbox_memory import MemoryClient, MemoryPathError, Remember
    from sandbox_memory.workspace import LocalWorkspace, SessionWorkspace

    outside = outside_tree(tmp_path)
    before = tree_bytes(outside)
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        ws = LocalWorkspace(workspace_root) if path_kind == "local" else SessionWorkspace(sandbox)
        memory = MemoryClient(ws, generate=MemoryGenerateConfig(engine="offline"))
        await memory.create()
        place_link(workspace_root, target, outside)
        view = await memory.view(None)
        remember = Remember(
            key="run-tests",
            content="Run `make gen`, then the tests with `make check`.",
            kind="procedure",
        )
        with pytest.raises(MemoryPathError, match="symbolic link"):
            await memory.apply(remember, expected=view.version)
        fresh = MemoryClient(ws, generate=MemoryGenerateConfig(engine="offline"))
        after = await fresh.view(None)
    assert (after.version, sorted(after.entries)) == (view.version, sorted(view.entries))
    assert tree_bytes(outside) == before


async def test_a_remember_whose_rendering_fails_after_its_commit_returns_what_was_applied(
    workspace_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once committed, a command is applied: a rendering that fails after it (a folder where
    ``memory_summary.md`` belongs) does not tell the caller it failed; the view returned holds
    the change, the failure is logged once at ERROR, and the next close renders the files."""

    from sandbox_memory import MemoryClient, Remember
    from sandbox_memory.workspace import LocalWorkspace

    memory = MemoryClient(
        LocalWorkspace(workspace_root), generate=MemoryGenerateConfig(engine="offline")
    )
    await memory.create()
    summary = workspace_root / "memories" / "memory_summary.md"
    summary.unlink()
    summary.mkdir()
    (summary / "kept").write_text("not memory's")
    view = await memory.view(None)
    remember = Remember(
        key="run-tests",
        content="Run `make gen`, then the tests with `make check`.",
        kind="procedure",
    )
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        after = await memory.apply(remember, expected=view.version)
    assert after.version == view.version + 1 and "run-tests" in after.entries
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "memory applied Remember of 'run-tests'" in errors[0], errors
    shutil.rmtree(summary)
    await runtime(workspace_root, engine="offline").close()
    assert "make check" in (workspace_root / "memories/MEMORY.md").read_text()
    assert "make check" in summary.read_text()


def memory_text_inside(root: Path) -> str:
    parts: list[str] = []
    for d in ("memories", "sessions"):
        base = root / d
        if base.is_symlink() or not base.is_dir():
            continue
        for p in base.rglob("*"):
            if p.is_file() and not any(q.is_symlink() for q in [p, *p.parents]):
                parts.append(p.read_text(errors="replace"))
    return "\n".join(parts)


@pytest.mark.parametrize("path_kind", ["local", "session"])
async def test_links_the_agent_makes_during_its_run_are_never_followed(
    client: Any,
    manifest: Any,
    workspace_root: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    path_kind: str,
) -> None:
    from helpers import shell

    memory = await memory_with_a_procedure(client, manifest, monkeypatch, path_kind)
    assert (workspace_root / "memories/skills").is_dir()
    outside = outside_tree(tmp_path)
    before = tree_bytes(outside)
    script = (
        f"rm -rf memories/skills/run-tests && ln -s {outside} memories/skills/run-tests; "
        f"rm -rf memories/raw_memories && ln -s {outside} memories/raw_memories; "
        f"rm -f memories/memory_summary.md && ln -s {outside}/memory_summary.md "
        "memories/memory_summary.md; "
        "mv memories/store/layout/head.json memories/store/old && ln -s "
        f"{outside}/store/layout/head.json memories/store/layout/head.json"
    )
    agent_model = ScriptedModel([[shell(script, "ln1")], [assistant_message("Linked.")]])
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await run_in_session(client, manifest, memory, agent_model, "Tidy the memory folder.")
    assert tree_bytes(outside) == before, "memory wrote outside the workspace"
    assert any("symbolic link" in w for w in warnings_from(caplog))
    figure(f"workspace.agent_links_{path_kind}_paths_escaped", 0)


# ------------------------------------------------------------------ appends


@pytest.mark.slow
@pytest.mark.parametrize("path_kind", ["local", "session"])
def test_a_run_cut_short_by_a_full_disk_is_logged_as_lost_and_never_glued_to_the_next(
    tmp_path: Path, path_kind: str
) -> None:
    root = tmp_path / "workspace"
    root.mkdir()
    out = run_scenario("nearly-full-disk", str(root), path_kind, str(12 * 1024))
    # Every line of the rollout is a whole run: the cut run was undone, the next one is whole.
    assert out["runs"] == ["First run: a", "Third."], out
    assert out["tail"] == ""
    lost = [m for m in out["messages"] if "could not record a run of conversation full" in m]
    assert len(lost) == 1, out["messages"]
    assert "The run is not in sessions" in lost[0]
    # The kernel's short write, caught and undone.
    assert ("wrote only" if path_kind == "local" else "did not write them all") in lost[0]
    figure(f"appends.full_disk_{path_kind}_torn_lines_left", 0)


async def test_concurrent_appends_through_the_session_api_are_written_whole(
    client: Any, tmp_path: Path
) -> None:
    from agents.sandbox import Manifest

    from sandbox_memory.workspace import SessionWorkspace

    root = tmp_path / "ws"
    root.mkdir()
    size = 1 << 20
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        ws = SessionWorkspace(sandbox)
        lines = [(f'{{"n":{n},"pad":"' + chr(97 + n) * size + '"}\n').encode() for n in range(8)]
        await asyncio.gather(*(ws.append_line("sessions/c.jsonl", line) for line in lines))
    got = (root / "sessions/c.jsonl").read_bytes().split(b"\n")
    assert got[-1] == b""
    assert sorted(json.loads(line)["n"] for line in got[:-1]) == list(range(8))
    assert sorted(got[:-1]) == sorted(line[:-1] for line in lines)
    figure("appends.session_api_concurrent_1mb_segments_whole", "8 of 8")


# ------------------------------------------------------------------ folders where files belong


@pytest.mark.parametrize(
    "name",
    ["lock", "progress/second.json", "layout/head.json", "registry.json", "rendered.json"],
)
async def test_a_folder_where_a_state_file_belongs_is_set_aside_and_memory_goes_on(
    workspace_root: Path, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    await record_conversations(workspace_root, ["first"])
    await runtime(workspace_root, engine="offline").close()
    state = workspace_root / STORE / name
    await record_conversations(workspace_root, ["second"])
    if state.exists():
        state.unlink()
    state.mkdir(parents=True)
    (state / "kept.txt").write_text("something a person put here")
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await runtime(workspace_root, engine="offline").close()
    done = read_progress(workspace_root)
    sizes = {p.stem: p.stat().st_size for p in (workspace_root / "sessions").glob("*.jsonl")}
    assert {rid: p["offset"] for rid, p in done.items()} == sizes
    assert "second" in (workspace_root / "memories/MEMORY.md").read_text()
    kept = list(state.parent.glob(f"{state.name}.broken-*/kept.txt"))
    assert len(kept) == 1 and kept[0].read_text() == "something a person put here"
    assert len([w for w in warnings_from(caplog) if "found a folder" in w]) == 1
    assert not state.is_dir()


# ------------------------------------------------------------------ kills at every write point


@pytest.mark.slow
def test_a_close_killed_at_any_write_point_then_closed_again_equals_an_uninterrupted_close(
    tmp_path: Path,
) -> None:
    out = run_scenario("kill-points", str(tmp_path), timeout=300)
    points, results = out["points"], out["results"]
    assert len(points) >= 30, points  # the close writes notes, progress, layout, views
    assert {p.split()[0] for p in points} >= {"write_atomic", "append_line", "remove"}
    # The lock's steps too: taken (created whole), renewed at each commit, released (swaps).
    assert {p for p in points if p.endswith("/store/lock")} == {
        "create_exclusive memories/store/lock",
        "swap memories/store/lock",
    }, points
    assert all(r["killed"] for r in results), [r for r in results if not r["killed"]]
    lost = [(r["k"], r["point"], r["differs"], r["detail"]) for r in results if r["differs"]]
    assert lost == [], lost
    figure("kills.write_points_of_a_close", len(points))
    figure("kills.survived", sum(1 for r in results if not r["differs"]))


@pytest.mark.slow
@pytest.mark.parametrize("patched", [False, True], ids=["rendered", "patched"])
@pytest.mark.parametrize("command", ["remember", "forget"])
def test_a_command_killed_at_any_write_point_is_whole_or_absent_after_the_next_close(
    tmp_path: Path, command: str, patched: bool
) -> None:
    """``patched``: a command that patches the rendered files (``render/patch.py``) killed at
    each of its writes, between the patched ``MEMORY.md`` and its stamp included."""

    args = (command, "patched") if patched else (command,)
    out = run_scenario("kill-points-command", str(tmp_path), *args, timeout=300)
    assert out["patched"] == (1 if patched else 0)
    points, results = out["points"], out["results"]
    # The change (entry shard, head, log, citations) and its phase 2 (views, skills).
    assert {p.split()[0] for p in points} >= {"write_atomic", "append_line", "remove"}
    assert any("/layout/shard-" in p for p in points), points
    assert "swap memories/store/lock" in points  # the lock's renewal at the commit, its release
    assert all(r["killed"] for r in results), [r for r in results if not r["killed"]]
    torn = [r for r in results if r["like"] is None]
    assert torn == [], torn
    lost = [r for r in results if r["after"] and r["like"] != "with"]
    assert lost == [], lost
    assert any(r["like"] == "without" for r in results)  # killed before its commit point
    stale = [r for r in results if not r["index_as_rebuilt"]]
    assert stale == [], stale
    figure(f"kills.write_points_of_a_{command}", len(points))


async def test_a_failed_layout_write_loses_nothing_the_next_close_consolidates_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from faultlib import _prepare_close, _timeless, close_state, killing_workspace

    prepared, clean, failed = (tmp_path / n for n in ("prepared", "clean", "failed"))
    prepared.mkdir()
    await _prepare_close(str(prepared))
    shutil.copytree(prepared, clean)
    shutil.copytree(prepared, failed)
    await runtime(clean, engine="offline").close()

    class FullDisk(type(killing_workspace(str(failed), 0))):  # type: ignore[misc]
        async def write_atomic(self, path: str, data: bytes) -> None:
            if path.endswith("store/layout/commit.json") and not self.failed:
                self.failed = True
                raise OSError(28, "No space left on device", path)
            await super().write_atomic(path, data)

    ws = FullDisk(str(failed))
    ws.points, ws.failed = [], False
    rt = layout_runtime(ws)
    with pytest.raises(OSError, match="No space left"):
        await rt.close()
    assert ws.failed
    assert not any(p["consolidated"] for p in read_progress(failed).values())
    await runtime(failed, engine="offline").close()  # the disk has room again
    assert _timeless(await close_state(failed)) == _timeless(await close_state(clean))


async def test_setting_aside_unreadable_progress_does_not_write_notes_twice(
    workspace_root: Path,
) -> None:
    from faultlib import _prepare_close

    await _prepare_close(str(workspace_root))
    await runtime(workspace_root, engine="offline").close()
    mem = workspace_root / "memories"
    summaries = sorted(mem.glob("rollout_summaries/*.md"))
    sections = {p.name: p.read_text().count("## Segment(s) up to") for p in summaries}
    assert sections and all(n >= 1 for n in sections.values())
    for p in (mem / "store/progress").glob("*.json"):
        p.write_text("{ not json")
    await runtime(workspace_root, engine="offline").close()
    assert len(list((mem / "store/progress").glob("*.json.broken-*"))) == 3
    # Every rollout was read again from its first byte: its notes replace the old ones.
    for p in sorted(mem.glob("rollout_summaries/*.md")):
        text = p.read_text()
        assert text.count("## Segment(s) up to") == 1, text
        assert text.count("<!-- segments from byte 0 -->") == 1
    for p in sorted(mem.glob("raw_memories/*.md")):
        text = p.read_text()
        assert text.count("- task: Run 1 of") == 1, text


# ------------------------------------------------------------------ locks and clocks

TEN_YEARS = 10 * 365 * 24 * 3600.0


async def test_a_lock_stamped_years_ahead_is_taken_over_and_the_log_says_why(
    workspace_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_lock(workspace_root, expires_in=TEN_YEARS, owner="1-otherhost000")
    await record_conversations(workspace_root, ["later"])
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await runtime(workspace_root, engine="offline", lock_timeout_seconds=1).close()
    assert read_progress(workspace_root)["later"]["consolidated"] is True
    taken = [w for w in warnings_from(caplog) if "took it over" in w]
    assert len(taken) == 1 and "beyond the longest lease" in taken[0], taken


async def test_a_live_lease_of_another_host_is_waited_for_not_taken(
    workspace_root: Path,
) -> None:
    lock = write_lock(workspace_root, expires_in=110, owner="1-otherhost000")
    await record_conversations(workspace_root, ["later"])
    with pytest.raises(MemoryLockTimeout):
        await runtime(workspace_root, engine="offline", lock_timeout_seconds=0.3).close()
    assert json.loads(lock.read_text())["owner"] == "1-otherhost000"


@pytest.mark.parametrize("when", [1e308, float("nan")])
async def test_an_absurd_next_attempt_time_is_retried_now(
    workspace_root: Path, caplog: pytest.LogCaptureFixture, when: float
) -> None:
    await record_conversations(workspace_root, ["stuck"])
    record = workspace_root / STORE / "progress" / "stuck.json"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(
        json.dumps({"offset": 0, "attempts": 1, "status": "retrying", "next_attempt_at": when})
    )
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        report = await runtime(workspace_root, engine="offline").close()
    assert "stuck" in report["extracted"]
    assert read_progress(workspace_root)["stuck"]["attempts"] == 0
    assert any("beyond the longest backoff" in w for w in warnings_from(caplog))


def test_an_entry_stamped_a_year_ahead_does_not_outrank_a_newer_correction() -> None:
    from sandbox_memory.consolidate.selection import promote
    from sandbox_memory.stores.records import (
        ConversationMemory,
        Entry,
        LayoutMemory,
        Source,
        now_ms,
    )

    year_ms = 365 * 24 * 3600 * 1000
    stale = Entry(
        key="deploy",
        content="Deploy with the old script.",
        kind="decision",
        sources=[Source(conversation="old", item="a:0")],
        updated_at=now_ms() + year_ms,
    )
    layout = LayoutMemory(entries={"deploy": stale})
    correction = Entry(
        key="deploy",
        content="Deploy with make deploy.",
        kind="decision",
        sources=[Source(conversation="new", item="b:0")],
    )
    conversation = ConversationMemory(rollout_id="new", entries={"deploy": correction})
    assert promote(layout, conversation, since=0) == ["deploy"]
    assert layout.entries["deploy"].content == "Deploy with make deploy."


# ------------------------------------------------------------------ a rollout replaced


async def record_learning(root: Path, name: str, runs: range) -> None:
    from faultlib import learning_run

    rt = runtime(root, engine="offline")
    for n in runs:
        await rt.record(learning_run(name, n), rollout_id=name)


def runs_learned(root: Path, name: str) -> list[str]:
    """The runs (segment ids) a result fact was learned from: one fact per run."""

    doc = json.loads((root / STORE / "conversations" / f"{name}.json").read_text())
    return sorted(
        s["item"].split(":")[0]
        for e in doc["entries"].values()
        if e["content"].startswith("Result: ")
        for s in e["sources"]
    )


def notes_twice(root: Path, name: str) -> list[str]:
    """Items cited by more than one block of the conversation's raw notes."""

    text = (root / "memories/raw_memories" / f"{name}.md").read_text()
    blocks = re.split(r"<!-- segments from byte \d+ -->", text)
    cited = [set(re.findall(r"\[([0-9a-f]{8}):0\]", b)) for b in blocks]
    return sorted({i for n, c in enumerate(cited) for i in c if any(i in o for o in cited[:n])})


async def test_a_cleared_rollout_file_is_read_again_and_every_later_run_is_learned_once(
    workspace_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await record_learning(workspace_root, "conv", range(1, 4))
    await runtime(workspace_root, engine="offline").close()
    (workspace_root / "sessions/conv.jsonl").write_bytes(b"")  # cleared
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        for n in range(4, 9):  # five later runs, each followed by a close
            await record_learning(workspace_root, "conv", range(n, n + 1))
            await runtime(workspace_root, engine="offline").close()
    learned = runs_learned(workspace_root, "conv")
    assert len(learned) == len(set(learned)) == 8, learned  # 3 before, 5 after the clear
    assert notes_twice(workspace_root, "conv") == []
    assert any("read again from its start" in w for w in warnings_from(caplog))
    figure("rollouts.cleared_later_runs_learned", "5 of 5")


async def test_an_older_copy_of_sessions_restored_learns_only_the_new_runs_once(
    workspace_root: Path, tmp_path: Path
) -> None:
    await record_learning(workspace_root, "conv", range(1, 3))
    await runtime(workspace_root, engine="offline").close()
    snapshot = tmp_path / "snapshot.jsonl"
    shutil.copy(workspace_root / "sessions/conv.jsonl", snapshot)
    await record_learning(workspace_root, "conv", range(3, 5))
    await runtime(workspace_root, engine="offline").close()
    shutil.copy(snapshot, workspace_root / "sessions/conv.jsonl")  # runs 3 and 4 are gone
    await record_learning(workspace_root, "conv", range(5, 7))
    await runtime(workspace_root, engine="offline").close()
    learned = runs_learned(workspace_root, "conv")
    assert len(learned) == len(set(learned)) == 6, learned  # 3 and 4 before the restore
    assert notes_twice(workspace_root, "conv") == []
    size = (workspace_root / "sessions/conv.jsonl").stat().st_size
    assert read_progress(workspace_root)["conv"]["offset"] == size


@pytest.mark.parametrize("learned", ["nothing", "a preference"])
async def test_a_kill_between_memory_md_and_its_stamp_leaves_no_edit_to_take_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, learned: str
) -> None:
    """``MEMORY.md`` written, the process killed before ``store/rendered.json`` records its
    digest: the next close knows the file as memory's own rendering, not a person's edit (a
    rendering without entry lines was set aside as nonsense, with a WARNING)."""

    from sandbox_memory.workspace import LocalWorkspace

    class KilledAfterMemoryMd(LocalWorkspace):
        armed = False
        memory_md_written = False

        async def write_atomic(self, path: str, data: bytes) -> None:
            if self.armed and path.endswith("store/rendered.json") and self.memory_md_written:
                raise OSError("killed between MEMORY.md and its stamp")
            await super().write_atomic(path, data)
            if self.armed and path.endswith("memories/MEMORY.md"):
                self.memory_md_written = True

    said = "Hello there." if learned == "nothing" else "I prefer tabs over spaces."
    ws = KilledAfterMemoryMd(str(tmp_path))
    rt = layout_runtime(ws)
    await rt.record(run_payload(f"{said} First run."), rollout_id="c1")
    await rt.close()
    ws.armed = True
    await rt.record(run_payload(f"{said} Second run."), rollout_id="c2")
    with pytest.raises(OSError, match="killed"):
        await rt.close()
    assert ws.memory_md_written  # the kill came after MEMORY.md was replaced
    layout_before = read_layout(tmp_path)

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await runtime(tmp_path, engine="offline").close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not list(tmp_path.rglob("*.broken-*"))
    assert read_layout(tmp_path)["entries"].keys() == layout_before["entries"].keys()
    fresh = tmp_path / "fresh"
    shutil.copytree(tmp_path, fresh, ignore=shutil.ignore_patterns("fresh"))
    (fresh / "memories/store/rendered.json").unlink()
    await runtime(fresh, engine="offline").close()
    assert (tmp_path / "memories/MEMORY.md").read_text() == (
        fresh / "memories/MEMORY.md"
    ).read_text()


# ------------------------------------------------------------------ files that are not files

FIFO_TARGETS = (
    "memories/MEMORY.md",
    "memories/memory_summary.md",
    "memories/store/layout/head.json",
    "memories/store/registry.json",
    "memories/raw_memories.md",
    "memories/store/search.sqlite",
    "memories/store/lock",
    "sessions/now.jsonl",
)
"""Files memory reads at a run's start, at its close or at the next run, each replaced by a
FIFO: opening one to read waits for a writer that never comes."""


class _FifoWatchdog:
    """Opens every FIFO for writing once ``after`` seconds have passed without :meth:`stop`
    (a reader blocked on one gets its end of file), and notes that it had to: memory hung."""

    def __init__(self, fifos: list[Path], after: float) -> None:
        import threading

        self.fifos = fifos
        self.after = after
        self.done = threading.Event()
        self.hung: list[str] = []
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        if self.done.wait(self.after):
            return
        while not self.done.is_set():
            for fifo in self.fifos:
                try:  # a writer waiting to open it is freed (not counted: undetectable)
                    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
                    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    continue  # no reader has it open (or it was replaced)
                try:
                    os.write(fd, b"\0" * 4096)  # a reader that holds both ends wakes too
                except OSError:
                    pass
                os.close(fd)
                if str(fifo) not in self.hung:
                    self.hung.append(str(fifo))
            time.sleep(0.05)

    def stop(self) -> list[str]:
        self.done.set()
        self.thread.join()
        return self.hung


@pytest.mark.parametrize("path_kind", ["local", "session"])
async def test_fifos_the_agent_makes_where_memory_keeps_files_never_hang_memory(
    client: Any,
    manifest: Any,
    workspace_root: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    path_kind: str,
) -> None:
    """The agent's shell can put a FIFO (or a socket, a device) where memory keeps a file.
    Memory opens what it reads without waiting (``O_NONBLOCK``) and refuses anything but a
    regular file or a folder, so neither the close nor the next run waits for a writer: before,
    the local path's open of a FIFO blocked the event loop for good. Each such file is treated
    as damaged (refused with a warning, rebuilt or rewritten), never as memory's text."""

    from helpers import shell

    memory = await memory_with_a_procedure(client, manifest, monkeypatch, path_kind)
    script = "; ".join(f"rm -f {t} && mkfifo {t}" for t in FIFO_TARGETS)
    agent_model = ScriptedModel([[shell(script, "fifo1")], [assistant_message("Made pipes.")]])
    fifos = [workspace_root / t for t in FIFO_TARGETS]
    watchdog = _FifoWatchdog(fifos, after=60.0)
    try:
        with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
            await run_in_session(client, manifest, memory, agent_model, "Tidy the memory folder.")
            follow = ScriptedModel([[assistant_message("Done.")]])
            await run_in_session(client, manifest, memory, follow, "Run the tests again.")
    finally:
        hung = watchdog.stop()
    assert hung == [], f"memory waited on a FIFO: {hung}"
    # The next run was still handed memory: the procedure learned before the pipes.
    assert "test-command" in (follow.calls[0].system_instructions or "")
