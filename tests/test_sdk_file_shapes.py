"""The files a reader of the SDK's memory format opens keep the SDK's shape: session lines with
the SDK's keys first and in its order (ours after), rollout summaries with its header lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import Runner
from agents.run import RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message

from sandbox_memory import Memory, MemoryGenerateConfig

SDK_KEYS = ["updated_at", "rollout_id", "input", "generated_items", "terminal_metadata"]


async def run_and_close(client: Any, manifest: Any, text: str) -> str:
    """One run of conversation ``chat`` in a fresh sandbox session, closed after; its id."""

    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            SandboxAgent(
                name="worker",
                instructions="Work.",
                model=ScriptedModel(steps=[[assistant_message(f"done: {text}")]]),
                capabilities=[memory, Filesystem(), Shell()],
            ),
            text,
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="chat"),
        )
        return str(sandbox.state.session_id)


async def test_session_lines_have_the_sdks_keys_first_and_ours_after(
    client, manifest, workspace_root: Path
) -> None:
    await run_and_close(client, manifest, "Run the invoice tests.")
    line = json.loads((workspace_root / "sessions" / "chat.jsonl").read_text().splitlines()[0])
    keys = list(line)
    assert keys[: len(SDK_KEYS)] == SDK_KEYS
    assert keys.index("final_output") == len(SDK_KEYS)
    # ours after the SDK's: the segment's id, the person, and the seal last (docs/robustness.md)
    assert keys[len(SDK_KEYS) + 1 :] == ["segment_id", "person", "memory_seal"]


async def test_rollout_summaries_start_with_the_sdks_header_for_the_newest_segment(
    client, manifest, workspace_root: Path
) -> None:
    await run_and_close(client, manifest, "Run the invoice tests.")
    second_session = await run_and_close(client, manifest, "Now fix the rounding bug.")
    (summary,) = (workspace_root / "memories" / "rollout_summaries").glob("chat_*.md")
    text = summary.read_text()
    header, _, body = text.partition("\n\n")
    lines = header.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "session_id",
        "updated_at",
        "rollout_path",
        "terminal_state",
    ]
    last = json.loads((workspace_root / "sessions" / "chat.jsonl").read_text().splitlines()[-1])
    assert lines[0] == f"session_id: {second_session}"
    assert lines[1] == f"updated_at: {last['updated_at']}"
    assert lines[2] == "rollout_path: sessions/chat.jsonl"
    assert lines[3] == "terminal_state: completed"
    assert text.count("session_id: ") == 1  # rewritten, not stacked
    assert body.count("## Segment(s) up to") == 2  # both extractions' sections are kept
