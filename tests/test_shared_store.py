"""Memory shared through PostgreSQL by sandboxes on several "machines" (workspace roots).

A real server (``pg_server``), the real SDK, real ``UnixLocalSandboxClient`` workspaces, the
offline engine; separate processes where the issue says machines or processes.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from agents import function_tool
from agents.testing import assistant_message, function_call

from helpers import BUGGY_INVOICE, INVOICE_TEST, TEST_COMMAND, shell
from pgserver import PostgresServer
from sandbox_memory import Forget, MemoryClient, MemoryConflict, Remember
from sandbox_memory.errors import MemoryStoreUnavailable
from sandbox_memory.stores import PostgresStore
from sandbox_memory.stores.shared import conversation_scope
from shared_flow import lesson, run_once, store_runtime, unstamped_noted_run

FLOW = str(Path(__file__).with_name("shared_flow.py"))


def machine(tmp_path: Path, name: str, *, with_bug: bool = False) -> Path:
    root = tmp_path / name
    root.mkdir()
    if with_bug:
        (root / "invoice.py").write_text(BUGGY_INVOICE)
        (root / "test_invoice.py").write_text(INVOICE_TEST)
    return root


def spawn(spec: dict[str, Any]) -> subprocess.Popen[str]:
    env = {**os.environ, "OPENAI_API_KEY": "", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    return subprocess.Popen(
        [sys.executable, FLOW, json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


@pytest.mark.slow
async def test_two_machines_learn_from_each_other_through_one_database(
    pg_dsn: str, tmp_path: Path
) -> None:
    root_a = machine(tmp_path, "machine-a", with_bug=True)
    root_b = machine(tmp_path, "machine-b")
    # Machine A (its own process) fixes the bug and learns how the tests are run.
    code = (
        "import asyncio, sys; sys.path.insert(0, sys.argv[3]);"
        "from helpers import bug_fix_script; from shared_flow import run_once;"
        "from sandbox_memory.stores import PostgresStore;"
        "from pathlib import Path;"
        "asyncio.run(run_once(Path(sys.argv[1]), PostgresStore(sys.argv[2], namespace='acme'),"
        "'The invoice tests fail. Fix the bug.', bug_fix_script()))"
    )
    env = {**os.environ, "OPENAI_API_KEY": "", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(root_a), pg_dsn, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Machine B (another process, another workspace) starts knowing it, and learns a decision.
    spec = {"dsn": pg_dsn, "namespace": "acme", "root": str(root_b), "runs": 1, "name": "b"}
    finish(spawn(spec))
    b_memory = (root_b / "memories" / "MEMORY.md").read_text()
    assert TEST_COMMAND in b_memory
    assert "deploy-bx0" in b_memory
    # Machine A's next run is told what B learned.
    store = PostgresStore(pg_dsn, namespace="acme")
    model = await run_once(root_a, store, "Deploy service bx0.", [[assistant_message("ok")]])
    instructions = model.calls[0].system_instructions or ""
    assert "deploy-bx0" in instructions and TEST_COMMAND in instructions
    assert "deploy-bx0" in (root_a / "memories" / "MEMORY.md").read_text()
    # Both machines' runs are in the store, and in each workspace copy.
    rollouts = await store.rollouts()
    assert len(rollouts) == 3 and all(r.watermark == r.segments == 1 for r in rollouts.values())
    assert sorted(os.listdir(root_a / "sessions")) == sorted(f"{r}.jsonl" for r in rollouts)
    await store.aclose()


@pytest.mark.slow
async def test_processes_recording_closing_and_editing_at_once_lose_nothing(
    pg_dsn: str, tmp_path: Path
) -> None:
    """8 processes at once, each recording a run, closing, and applying a versioned command
    (one run each keeps the 2-core CI machine within its time; the bench runs 8 x 50)."""

    procs, runs, commands = 8, 1, 1
    specs = [
        {
            "dsn": pg_dsn,
            "namespace": "acme",
            "root": str(tmp_path / f"m{i}"),
            "runs": runs,
            "commands": commands,
            "name": f"p{i}",
        }
        for i in range(procs)
    ]
    results = [finish(p) for p in [spawn(s) for s in specs]]
    store = PostgresStore(pg_dsn, namespace="acme")
    rollouts = await store.rollouts()
    # 0 runs lost: every run is stored, and extracted.
    assert len(rollouts) == procs * runs
    assert all(r.segments == 1 and r.watermark == 1 for r in rollouts.values())
    # 0 lessons lost: each run's decision is in its conversation's memory.
    for i in range(procs):
        for j in range(runs):
            tag = f"p{i}x{j}"
            conv = await store.read_scope(conversation_scope(f"conv-{tag}"))
            assert any(f"deploy-{tag}" in e.content for e in conv.entries.values()), tag
    # Every command applied exactly once, on the version it read; every stale one conflicted.
    layout = await store.read_scope("layout")
    applied = [a for r in results for a in r["applied"]]
    assert len(applied) == procs * runs * commands
    for key, seen, after in applied:
        assert layout.entries[key].status == "active" and after > seen
    log = [r for _, r in await store.read_log() if r.scope == "layout" and r.cause == "person"]
    assert sorted(k for r in log for k in r.keys) == sorted(a[0] for a in applied)
    versions_read = [seen for _, seen, _ in applied]
    assert len(set(versions_read)) == len(versions_read), "two commands applied on one version"
    await store.aclose()


async def test_a_stale_command_is_a_conflict_and_another_client_sees_the_change(
    pg_dsn: str,
) -> None:
    one = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"))
    two = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"))
    seen = await one.create()
    await one.apply(Remember(key="budget", content="The budget is 40k."), expected=seen.version)
    with pytest.raises(MemoryConflict, match="version"):
        await two.apply(Remember(key="budget", content="It is 50k."), expected=seen.version)
    now = await two.view()
    assert now.entries["budget"].content == "The budget is 40k."
    after = await two.apply(Forget(key="budget"), expected=now.version)
    assert (await one.view()).entries["budget"].status == "retracted"
    assert after.version == now.version + 1


async def test_live_edits_go_back_conditionally_and_keep_what_others_changed(
    pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(pg_dsn, namespace="acme")
    other = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"))
    v = await other.create()
    v = await other.apply(
        Remember(key="port", content="The API listens on 8080."), expected=v.version
    )
    v = await other.apply(
        Remember(key="region", content="We run in eu-west-1."), expected=v.version
    )
    root = machine(tmp_path, "a")

    @function_tool
    async def meanwhile() -> str:
        """Another sandbox changes memory while this run goes on."""
        seen = await other.view()
        seen = await other.apply(Forget(key="region"), expected=seen.version)
        await other.apply(
            Remember(key="owner", content="Team Blue owns it."), expected=seen.version
        )
        return "done"

    edit = (
        "sed -i 's/The API listens on 8080./The API listens on 9090./; "
        "s/We run in eu-west-1./We run in us-east-2./' memories/MEMORY.md"
    )
    script = [
        [function_call("meanwhile", {}, call_id="m1")],
        [shell(edit, "e1")],
        [assistant_message("Updated memory.")],
    ]
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import Manifest, SandboxRunConfig
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from agents.testing import ScriptedModel

    from shared_flow import agent

    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
    bot = agent(ScriptedModel(script), store)
    bot.tools = [meanwhile]
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        async with sandbox:
            await Runner.run(
                bot,
                "Fix the memory.",
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
            )
    layout = (await store.read_scope("layout")).entries
    assert layout["port"].content == "The API listens on 9090."  # the edit went back
    assert layout["owner"].status == "active"  # what the other sandbox added is kept
    assert layout["region"].status == "retracted"  # a stale edit did not revive it
    assert "rejected for region" in caplog.text
    await store.aclose()


async def test_a_sandbox_keeps_working_when_the_server_goes_away_mid_run_and_catches_up(
    pg_server: PostgresServer, pg_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(pg_dsn, namespace="acme", connect_timeout=1)
    root = machine(tmp_path, "a")

    @function_tool
    def server_goes_away() -> str:
        """The database server stops."""
        pg_server.stop()
        return "stopped"

    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import Manifest, SandboxRunConfig
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from agents.testing import ScriptedModel

    from shared_flow import agent

    client = UnixLocalSandboxClient()
    try:
        with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
            sandbox = await client.create(manifest=Manifest(root=str(root)))
            async with sandbox:
                bot = agent(
                    ScriptedModel(
                        [
                            [function_call("server_goes_away", {}, call_id="s1")],
                            [assistant_message("Noted.")],
                            [assistant_message("Noted again.")],
                        ]
                    ),
                    store,
                )
                bot.tools = [server_goes_away]
                cfg = RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="conv-1")
                await Runner.run(bot, lesson("alpha"), run_config=cfg)
                cfg2 = RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="conv-2")
                await Runner.run(bot, lesson("beta"), run_config=cfg2)
            # The close went ahead on the copy: memory is there, the runs are in the files.
            assert "deploy-beta" in (root / "memories" / "MEMORY.md").read_text()
            assert caplog.text.count("memory store unreachable") == 1
            with pytest.raises(MemoryStoreUnavailable, match="unreachable|failed"):
                await store.ping()
    finally:
        pg_server.start()
    # Back: the next session on this machine sends both runs and what the close learned.
    await run_once(root, store, "Anything new?", [[assistant_message("no")]], conversation="c3")
    rollouts = await store.rollouts()
    assert {"conv-1", "conv-2", "c3"} <= set(rollouts)
    layout = (await store.read_scope("layout")).entries.values()
    assert any("deploy-alpha" in e.content for e in layout)
    assert any("deploy-beta" in e.content for e in layout)
    await store.aclose()


async def test_a_namespace_never_sees_another_namespaces_memory(
    pg_dsn: str, tmp_path: Path
) -> None:
    acme = PostgresStore(pg_dsn, namespace="acme")
    await run_once(machine(tmp_path, "a"), acme, lesson("secretx"), [[assistant_message("ok")]])
    globex = PostgresStore(pg_dsn, namespace="globex")
    root = machine(tmp_path, "g")
    model = await run_once(root, globex, "hello", [[assistant_message("hi")]])
    assert "secretx" not in (model.calls[0].system_instructions or "")
    assert "secretx" not in "".join(
        p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()
    )
    assert len(await globex.rollouts()) == 1
    await acme.aclose()
    await globex.aclose()


class Killed(BaseException):
    """The process dies here: nothing after this point of the close runs."""


class DyingStore(PostgresStore):
    """Counts the store writes of a close; dies at write ``die_at`` and never releases."""

    WRITES = (
        "write_scope",
        "put_files",
        "advance",
        "map_threads",
        "append_segment",
        "append_segments",
    )

    def __init__(self, *args: Any, die_at: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.die_at = die_at
        self.writes: list[str] = []
        for name in self.WRITES:
            setattr(self, name, self._wrap(name, getattr(self, name)))

    def _wrap(self, name: str, method: Any) -> Any:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.writes.append(name)
            if self.die_at is not None and len(self.writes) == self.die_at:
                raise Killed(name)
            return await method(*args, **kwargs)

        return wrapped

    async def release(self, fence: Any) -> None:
        if self.die_at is None or len(self.writes) < self.die_at:
            await super().release(fence)


@pytest.mark.slow
async def test_a_kill_at_each_write_point_of_a_close_loses_nothing_and_the_lease_is_taken_over(
    pg_dsn: str, tmp_path: Path
) -> None:
    # A close of a machine that has one earlier lesson in the store and one new run.
    async def prepare(ns: str, die_at: int | None) -> DyingStore:
        seed = PostgresStore(pg_dsn, namespace=ns)
        await store_runtime(tmp_path / ns / "seed", seed).record(
            unstamped_noted_run(lesson("old")), rollout_id="r0"
        )
        await store_runtime(tmp_path / ns / "seed", seed).close()
        await seed.aclose()
        dying = DyingStore(pg_dsn, namespace=ns, lease_seconds=10)
        await store_runtime(tmp_path / ns / "a", dying).record(
            unstamped_noted_run(lesson("new")), rollout_id="r1"
        )
        dying.writes.clear()
        dying.die_at = die_at
        return dying

    counting = await prepare("count", None)
    await store_runtime(tmp_path / "count" / "a", counting).close()
    points = list(counting.writes)
    assert len(points) >= 4, points
    await counting.aclose()
    for k in range(1, len(points) + 1):
        ns = f"kill{k}"
        dying = await prepare(ns, k)
        with pytest.raises(Killed):
            await store_runtime(tmp_path / ns / "a", dying).close()
        # Time passes: the dead holder's lease runs out (no renewal came).
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            lapsed = conn.execute(
                "UPDATE sbm_leases SET expires_at = now() - interval '1 second' "
                "WHERE namespace = %s AND holder IS NOT NULL",
                (ns,),
            ).rowcount
        assert lapsed == 1, "the dead holder released its lease"
        # Another machine closes: it takes the lapsed lease over and finishes the work.
        other = PostgresStore(pg_dsn, namespace=ns)
        await store_runtime(tmp_path / ns / "b", other).close()
        layout = (await other.read_scope("layout")).entries.values()
        for tag in ("old", "new"):
            assert any(f"deploy-{tag}" in e.content for e in layout), (k, points[k - 1], tag)
        rollouts = await other.rollouts()
        assert {r: (s.segments, s.watermark) for r, s in rollouts.items()} == {
            "r0": (1, 1),
            "r1": (1, 1),
        }, (k, points[k - 1])
        # The dead machine's workspace, resumed later, catches up without a duplicate run.
        await store_runtime(tmp_path / ns / "a", other).close()
        assert (await other.rollouts())["r1"].segments == 1
        await dying.aclose()
        await other.aclose()


async def test_each_run_of_a_long_session_starts_with_what_others_changed_meanwhile(
    pg_dsn: str, tmp_path: Path
) -> None:
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import Manifest, SandboxRunConfig
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from agents.testing import ScriptedModel

    from shared_flow import agent

    store = PostgresStore(pg_dsn, namespace="acme")
    other = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"))
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(tmp_path / "a")))
    async with sandbox:
        cfg = RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="conv-long")
        await Runner.run(agent(model, store), lesson("first"), run_config=cfg)
        # Another machine changes memory between this session's runs.
        seen = await other.view()
        await other.apply(
            Remember(key="owner", content="Team Blue owns the billing service."),
            expected=seen.version,
        )
        await Runner.run(agent(model, store), "What next?", run_config=cfg)
    second = model.calls[-1].system_instructions or ""
    assert "Team Blue owns the billing service." in second
    # The first run's lesson, extracted after it in this sandbox, reached the store too.
    layout = (await store.read_scope("layout")).entries.values()
    assert any("deploy-first" in e.content for e in layout)
    await store.aclose()
