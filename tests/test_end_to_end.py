"""The two-run flow, end to end: run, close, resume, second run sees memory."""

from __future__ import annotations

import json
from pathlib import Path

from agents import Runner, SQLiteSession
from agents.run import RunConfig
from agents.sandbox import LocalSnapshotSpec, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message

from helpers import TEST_COMMAND, bug_fix_script
from sandbox_memory import Memory, MemoryGenerateConfig


def _agent(model: ScriptedModel, memory: Memory | None = None) -> SandboxAgent:
    return SandboxAgent(
        name="reviewer",
        instructions="Fix bugs in the workspace.",
        model=model,
        capabilities=[
            memory or Memory(generate=MemoryGenerateConfig(engine="offline")),
            Filesystem(),
            Shell(),
        ],
    )


async def test_second_run_instructions_carry_what_the_first_run_learned(
    client, manifest, workspace_root: Path, tmp_path: Path
) -> None:
    snapshot = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    model1 = ScriptedModel(bug_fix_script())
    sandbox = await client.create(manifest=manifest, snapshot=snapshot)
    async with sandbox:
        await Runner.run(
            _agent(model1),
            "The invoice tests fail. Fix the bug.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
    memory_md = (workspace_root / "memories" / "MEMORY.md").read_text()
    assert "invoice" in memory_md.lower()
    assert TEST_COMMAND in memory_md

    resumed = await client.resume(sandbox.state)
    model2 = ScriptedModel([[assistant_message("Added a regression test.")]])
    async with resumed:
        await Runner.run(
            _agent(model2),
            "Add a regression test for the invoice fix.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=resumed)),
        )
    instructions = model2.calls[0].system_instructions or ""
    assert "MEMORY_SUMMARY BEGINS" in instructions
    assert TEST_COMMAND in instructions
    assert "current instructions" in instructions


async def test_every_run_appends_one_line_with_item_ids(client, manifest, workspace_root) -> None:
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    session = SQLiteSession("conv-a")
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        for text in ("first", "second"):
            await Runner.run(
                _agent(model),
                text,
                session=session,
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
            )
    lines = (workspace_root / "sessions" / "conv-a.jsonl").read_text().splitlines()
    assert len(lines) == 2
    seg = json.loads(lines[1])
    assert seg["rollout_id"] == "conv-a"
    assert all("memory_item_id" in item for item in seg["input"] + seg["generated_items"])
    assert seg["final_output"] == "two"
