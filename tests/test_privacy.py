"""Privacy between people sharing one agent: what a person says about themselves stays theirs.

Real runs on a local sandbox for two people (``for_person``), the offline engine, and an engine
object at the model seam that quotes everything, to show the rule holds whatever the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents import Runner
from agents.run import RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message

from helpers import bug_fix_script
from sandbox_memory import Memory, MemoryClient, MemoryGenerateConfig, MemoryReadConfig, for_person
from sandbox_memory.config import MemoryLayoutConfig
from sandbox_memory.engines.base import Candidate, Extraction, ExtractionRequest
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.workspace import LocalWorkspace

ANA_TASK = "Fix the failing test in invoice.py. I prefer short answers with a list of changes."


def agent(model: Any) -> SandboxAgent:
    return SandboxAgent(
        name="reviewer",
        instructions="Work in the workspace.",
        model=model,
        capabilities=[
            Memory(generate=MemoryGenerateConfig(engine="offline")),
            Filesystem(),
            Shell(),
        ],
    )


def rc(sandbox: Any, group_id: str) -> RunConfig:
    return RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id=group_id)


def shared_files(root: Path) -> dict[str, str]:
    """Every memory file any run can read (the store's private records excluded)."""

    mem = root / "memories"
    files = {
        str(p.relative_to(root)): p.read_text()
        for p in mem.rglob("*")
        if p.is_file() and "store" not in p.relative_to(mem).parts
    }
    files["memories/store/registry.json"] = (mem / "store" / "registry.json").read_text()
    return files


async def test_a_persons_self_statements_never_reach_shared_files_or_anothers_prompt(
    client, manifest, workspace_root
) -> None:
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        with for_person("ana"):
            await Runner.run(
                agent(ScriptedModel(bug_fix_script())), ANA_TASK, run_config=rc(sandbox, "ana-1")
            )
    bob = ScriptedModel([[assistant_message("ok")]])
    ana = ScriptedModel([[assistant_message("ok")]])
    resumed = await client.resume(sandbox.state)
    async with resumed:
        with for_person("bob"):
            await Runner.run(agent(bob), "Hello.", run_config=rc(resumed, "bob-1"))
        with for_person("ana"):
            await Runner.run(agent(ana), "Hello again.", run_config=rc(resumed, "ana-2"))

    files = shared_files(workspace_root)
    leaks = {name for name, text in files.items() if "prefer" in text.lower()}
    assert leaks == set(), leaks
    assert "short answers" not in (bob.calls[0].system_instructions or "")
    assert "short answers" in (ana.calls[0].system_instructions or "")  # hers, in her runs
    # The shared work is still shared.
    assert "invoice.py" in files["memories/MEMORY.md"]


class QuotingEngine:
    """An engine (at the model seam) that repeats the whole user message everywhere."""

    name = "quoting"

    async def extract(self, request: ExtractionRequest) -> Extraction:
        item = request.segments[-1]["input"][0]
        said = item["content"]
        cite = [item["memory_item_id"]]
        return Extraction(
            rollout_summary=f"The user asked: {said}\nThe test was fixed.",
            rollout_slug="fix-calc-prefer-short-answers",
            raw_memory=f"- task: {said}\n- allergy: I'm allergic to peanuts.\n- fixed calc.py",
            candidates=[
                Candidate(key="task-calc", content=f"Asked: {said}", kind="fact", sources=cite),
                Candidate(key="peanuts", content="I'm allergic to peanuts.", sources=cite),
                Candidate(
                    key="short-answers",
                    content="Prefers short answers with a list of changes.",
                    kind="preference",
                    sources=cite,
                ),
            ],
        )


def quoting_runtime(root: Path) -> LayoutRuntime:
    return LayoutRuntime(
        LocalWorkspace(root),
        layout=MemoryLayoutConfig(),
        generate=MemoryGenerateConfig(),
        read=MemoryReadConfig(),
        engine=QuotingEngine(),
    )


async def test_shared_entries_and_files_lose_self_statements_whatever_the_engine(
    tmp_path: Path,
) -> None:
    rt = quoting_runtime(tmp_path)
    said = "Fix the failing test in calc.py. I prefer short answers with a list of changes. I'm allergic to peanuts."
    await rt.record(
        {"input": [{"role": "user", "content": said}], "generated_items": []},
        rollout_id="ana-1",
        person="ana",
    )
    await rt.close()
    entries = (await MemoryClient(tmp_path).view("ana-1")).entries
    assert entries["task-calc"].content == "Asked: Fix the failing test in calc.py."
    assert entries["task-calc"].person is None
    assert (entries["peanuts"].person, entries["short-answers"].person) == ("ana", "ana")
    files = shared_files(tmp_path)
    for name, text in files.items():
        assert "prefer" not in text.lower() and "peanut" not in text.lower(), name
    summary = next(t for n, t in files.items() if "rollout_summaries/" in n)
    assert "Fix the failing test in calc.py." in summary and "The test was fixed." in summary
    assert "- fixed calc.py" in files["memories/raw_memories/ana-1.md"]


async def test_without_a_person_nothing_is_held_back(tmp_path: Path) -> None:
    rt = quoting_runtime(tmp_path)
    said = "Fix calc.py. I prefer short answers with a list of changes."
    await rt.record(
        {"input": [{"role": "user", "content": said}], "generated_items": []}, rollout_id="solo"
    )
    await rt.close()
    assert (await MemoryClient(tmp_path).view("solo")).entries[
        "task-calc"
    ].content == f"Asked: {said}"


async def test_the_prompt_names_the_person_and_gives_the_privacy_rules_every_turn(
    client, manifest
) -> None:
    sandbox = await client.create(manifest=manifest)
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    solo = ScriptedModel([[assistant_message("ok")]])
    async with sandbox:
        with for_person("bob"):
            await Runner.run(agent(model), "Hello.", run_config=rc(sandbox, "bob-1"))
            await Runner.run(agent(model), "Again.", run_config=rc(sandbox, "bob-1"))
        await Runner.run(agent(solo), "Hello.", run_config=rc(sandbox, "solo"))
    for call in model.calls:  # memory is still empty: the rules come anyway
        text = call.system_instructions or ""
        assert "You are working with bob." in text
        assert "clearly belongs to the shared work" in text
        assert "another person's preferences" in text
    assert "You are working with" not in (solo.calls[0].system_instructions or "")
