"""An open runtime (a sandbox session's memory, a long-lived client) keeps what it rendered
between closes; what another process wrote since is what its next rendering starts from.

A Forget made by another process (a fresh ``MemoryClient``, the CLI, the MCP server, another
machine) rewrites a rollout's raw notes; the open runtime's next close must not hand the
forgotten text back in ``raw_memories.md`` or any other file a run opens, nor find it in its
search index. Real workspaces in temp folders (the folder, or a sandbox session on it), an
engine at the model seam that quotes the user (as a model would).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import layout_runtime, run_payload
from sandbox_memory import Forget, MemoryClient
from sandbox_memory.engines.base import Candidate, Extraction, ExtractionRequest
from sandbox_memory.workspace import Workspace
from test_forget_derived import memory_files, run


class QuotingEngine:
    """Quotes the user in the summary, the notes and the slug, and learns what they said
    (a procedure, promoted to layout memory, under its second word)."""

    name = "quoting"

    async def extract(self, request: ExtractionRequest) -> Extraction:
        item = request.segments[-1]["input"][0]
        said = str(item["content"])
        words = [w.strip(".,").lower() for w in said.split()]
        return Extraction(
            rollout_summary=f"## Task\nThe user said: {said}\n## Outcome\nPlanned.",
            rollout_slug="-".join(words[:6]),
            raw_memory=f"- the user said: {said}\n- planning went on",
            candidates=[
                Candidate(
                    key=words[1], content=said, kind="procedure", sources=[item["memory_item_id"]]
                )
            ],
        )


def assert_nothing_says(root: Path, text: str) -> None:
    for name, body in memory_files(root).items():
        assert text not in body, name


async def forget_elsewhere(root: Path, door: str, key: str) -> None:
    """``key`` forgotten in layout memory by another process: a fresh ``MemoryClient`` on the
    folder, or the command line in a process of its own."""

    if door == "client":
        client = MemoryClient(root)
        view = await client.view(None)
        await client.apply(Forget(key=key), expected=view.version)
        return

    async def cli(*args: str) -> str:
        command = [sys.executable, "-m", "sandbox_memory.cli", "--root", str(root), *args]
        done = await asyncio.to_thread(
            subprocess.run, command, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    version = json.loads(await cli("--json", "show"))["version"]
    await cli("forget", key, "--expected", str(version))


@pytest.mark.parametrize("door", ["client", "cli"])
async def test_an_open_runtime_renders_no_note_another_process_forgot(
    ws: Workspace, tmp_path: Path, door: str
) -> None:
    root = tmp_path / "ws"  # the workspace's folder (ws: the folder, or a session on it)
    rt = layout_runtime(ws, engine=QuotingEngine())
    await rt.record(run(), rollout_id="trip")
    await rt.close()  # rendered once: raw_memories.md holds the trip's notes
    assert "1500" in (root / "memories" / "raw_memories.md").read_text()
    await forget_elsewhere(root, door, "trip")  # the rollout's progress stays where it was
    assert_nothing_says(root, "1500")
    # The open runtime closes again after a new run of another conversation.
    await rt.record(run_payload("Book the train to Lyon.", when=None), rollout_id="train")
    await rt.close()
    assert "Lyon" in (root / "memories" / "raw_memories.md").read_text()
    assert_nothing_says(root, "1500")
    # And once more with nothing new.
    await rt.close()
    assert_nothing_says(root, "1500")


async def test_an_open_runtime_renders_notes_another_process_rewrote_to_the_same_size(
    ws: Workspace, tmp_path: Path
) -> None:
    """Notes rewritten by hand (a person, the agent's tools) to text of the very same size:
    the next rendering that writes ``raw_memories.md`` hands over the file as it is."""

    root = tmp_path / "ws"
    rt = layout_runtime(ws, engine=QuotingEngine())
    await rt.record(run(), rollout_id="trip")
    await rt.close()
    notes = root / "memories" / "raw_memories" / "trip.md"
    text = notes.read_text()
    notes.write_text(text.replace("1500 EUR", "9999 EUR"))
    await rt.record(run_payload("Book the train to Lyon.", when=None), rollout_id="train")
    await rt.close()
    raw = (root / "memories" / "raw_memories.md").read_text()
    assert "9999 EUR" in raw and "1500 EUR" not in raw


async def test_an_open_runtime_finds_nothing_another_process_forgot(
    ws: Workspace, tmp_path: Path
) -> None:
    """Its search index (through a session, a copy fetched once and written back at each
    close) is synced before each search: another process's Forget hides the fact from it,
    before and after its next close, and from a fresh process after that close."""

    root = tmp_path / "ws"
    rt = layout_runtime(ws, engine=QuotingEngine())
    await rt.record(run(), rollout_id="trip")
    await rt.close()
    query = "trip budget 1500 EUR"
    assert any("1500" in h.text for h in await rt.search_index.search(query))
    client = MemoryClient(root)
    view = await client.view(None)
    await client.apply(Forget(key="trip"), expected=view.version)
    assert not [h for h in await rt.search_index.search(query) if "1500" in h.text]
    await rt.record(run_payload("Book the train to Lyon.", when=None), rollout_id="train")
    await rt.close()
    for searcher in (rt.search_index, MemoryClient(root)):
        assert not [h for h in await searcher.search(query) if "1500" in h.text]
