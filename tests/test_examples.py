"""The examples, run offline: scripted agent turns, real local sandboxes, the offline engine."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from helpers import exec_items, run_payload

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


async def test_two_run_example_learns_the_fix_and_the_test_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = _load("memory")
    outcome = await example.main()  # no OPENAI_API_KEY (conftest): offline by default

    assert outcome.offline
    printed = capsys.readouterr().out
    assert printed.startswith("mode: OFFLINE")

    # Closing the first sandbox wrote memory that names the bug, the fix and the test command.
    memory_md = outcome.memory_after_close["memories/MEMORY.md"]
    assert "test_applies_tax_rate" in memory_md
    assert "120.08 != 129.6" in memory_md
    assert "acme_billing/invoice.py" in memory_md
    assert f"Run the tests with `{example.TEST_COMMAND}`" in memory_md
    assert example.TEST_COMMAND in outcome.memory_after_close["memories/memory_summary.md"]
    assert outcome.rollout_summary.startswith("memories/rollout_summaries/fix-invoice-bug_")
    summary = outcome.memory_after_close[outcome.rollout_summary]
    assert "failed (exit 1)" in summary and "passed" in summary
    assert "updated `acme_billing/invoice.py`" in summary

    # Run 2 started from the snapshot in a new session and its instructions carried the memory.
    section = outcome.run2_memory_section
    assert section.startswith("## Memory")
    assert "MEMORY_SUMMARY BEGINS" in section and section.endswith(
        ("MEMORY_SUMMARY ENDS =========", "RELEVANT_TO_THIS_TASK ENDS =========")
    )
    assert example.TEST_COMMAND in section
    assert "fix-invoice" in section
    assert section in outcome.run2_instructions

    # Run 2 really added the regression test and ran it with the command from memory.
    assert "tests/test_invoice_regression.py" in outcome.files_after_run2
    assert "invoice_total([(10, 100.0)], tax_rate=0.1)" in outcome.regression_test
    assert f"Ran `{example.TEST_COMMAND}`" in outcome.second_output
    # Run 2 was recorded and distilled too: two rollout summaries after it closed.
    summaries = [f for f in outcome.files_after_run2 if "/rollout_summaries/" in f]
    assert len(summaries) == 2

    assert outcome.checks and all(outcome.checks.values()), outcome.checks
    assert "check: run-2 instructions carry the learned test command" in printed
    assert ": NO" not in printed


async def test_multi_agent_example_keeps_layouts_apart_and_turns_together() -> None:
    example = _load("memory_multi_agent_multiturn")
    outcome = await example.main(offline=True)

    gtm_rollout = "sessions/gtm/gtm-q2-pipeline-review.jsonl"
    eng_rollout = "sessions/engineering/eng-invoice-test-fix.jsonl"
    # Both GTM turns shared one SQLiteSession: one rollout file named by its id, two lines.
    assert outcome.under("sessions/gtm") == [gtm_rollout]
    segments = [json.loads(line) for line in outcome.files[gtm_rollout].splitlines()]
    assert len(segments) == 2
    assert {seg["rollout_id"] for seg in segments} == {"gtm-q2-pipeline-review"}
    assert segments[0]["segment_id"] != segments[1]["segment_id"]
    assert "leads.csv" in json.dumps(segments[0]["input"])
    assert "gtm_hypothesis.md" in json.dumps(segments[1]["input"])
    # Turn 1 was learned from before turn 2 started: it shows as this conversation's memory.
    assert "### This conversation" in outcome.gtm_turn2_memory
    assert "I prefer short answers" in outcome.gtm_turn2_memory
    assert outcome.under("sessions/engineering") == [eng_rollout]
    assert len(outcome.files[eng_rollout].splitlines()) == 1

    # Each layout has its own memory; nothing landed in the default layout.
    assert not any(
        f.startswith(("memories/MEMORY.md", "memories/store/", "sessions/run-"))
        for f in outcome.files
    )
    gtm = outcome.files["memories/gtm/MEMORY.md"]
    eng = outcome.files["memories/engineering/MEMORY.md"]
    assert "(preference): User preference: I prefer short answers" in gtm
    assert "gtm-q2-pipeline-review" in gtm and "eng-invoice-test-fix" not in gtm
    assert "invoice" not in gtm.lower()
    assert f"Run the tests with `{example.TEST_COMMAND}`" in eng
    assert "eng-invoice-test-fix" in eng and "gtm-q2-pipeline-review" not in eng
    assert "leads" not in eng.lower() and "preference" not in eng
    assert outcome.under("memories/gtm/skills") == []
    # One command is a line of MEMORY.md, not a skill of its own.
    assert outcome.under("memories/engineering/skills") == []
    assert all(outcome.checks.values()), outcome.checks


@pytest.mark.slow
def test_two_run_example_runs_as_a_script_without_an_api_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "memory.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.startswith("mode: OFFLINE")
    assert "check: run-2 instructions carry the learned test command" in done.stdout
    assert ": NO" not in done.stdout


# --------------------------------------------------------------------- the docs' claims
# docs/migrating.md and docs/workspace-layout.md describe these behaviours; keep them true.

TEST_CMD = "python3 -m unittest discover -s tests -v"


def _exec_output(code: int, text: str) -> str:
    return f"Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code {code}\nOutput:\n{text}"


def _bug_fix_payload() -> dict[str, object]:
    """One recorded run in the SDK's payload shape: a failing test, a patch, a passing test."""

    items = [
        *exec_items(
            "c1",
            TEST_CMD,
            _exec_output(1, "FAIL: test_tax (t.T.test_tax)\nAssertionError: 1 != 2\n"),
        ),
        {
            "type": "custom_tool_call",
            "name": "apply_patch",
            "call_id": "c2",
            "input": "*** Begin Patch\n*** Update File: invoice.py\n@@\n-a\n+b\n*** End Patch\n",
        },
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Updated invoice.py"},
        *exec_items("c3", TEST_CMD, _exec_output(0, "OK\n")),
    ]
    return run_payload(
        "The invoice tests fail. I prefer short answers.",
        reply=None,
        when="2025-01-01T00:00:00+00:00",
        items=items,
        completed=True,
        final_output="Fixed invoice.py.",
    )


def test_docs_migrating_memory_accepts_the_sdks_config_objects() -> None:
    from agents.sandbox import MemoryGenerateConfig as SDKGenerate
    from agents.sandbox import MemoryLayoutConfig as SDKLayout
    from agents.sandbox import MemoryReadConfig as SDKRead

    from sandbox_memory import Memory, MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig

    memory = Memory(
        layout=SDKLayout(memories_dir="memories/gtm", sessions_dir="sessions/gtm"),
        read=SDKRead(live_update=False),
        generate=SDKGenerate(max_raw_memories_for_consolidation=128),
    )
    assert isinstance(memory.layout, MemoryLayoutConfig)
    assert memory.layout.memories_dir == "memories/gtm"
    assert isinstance(memory.read, MemoryReadConfig) and memory.read.live_update is False
    assert isinstance(memory.generate, MemoryGenerateConfig)
    assert memory.generate.max_raw_memories_for_consolidation == 128
    with pytest.raises(ValueError, match="must differ from layout.memories_dir"):
        Memory(layout=SDKLayout(memories_dir="m", sessions_dir="m"))


async def test_docs_migrating_an_sdk_memories_folder(tmp_path: Path) -> None:
    from sandbox_memory import MemoryClient, MemoryGenerateConfig, Refresh

    root = tmp_path / "ws"
    memories = root / "memories"
    (memories / "skills" / "run-tests").mkdir(parents=True)
    (memories / "skills" / "run-tests" / "SKILL.md").write_text("---\nname: run-tests\n---\nok\n")
    (memories / "MEMORY.md").write_text("# Task group: invoices\n- tests: pytest -q\n")
    (root / "sessions").mkdir()
    line = {"rollout_id": "old-rollout", **_bug_fix_payload()}  # no segment or item ids
    (root / "sessions" / "old-rollout.jsonl").write_text(json.dumps(line) + "\n")

    client = MemoryClient(root, generate=MemoryGenerateConfig(engine="offline"))
    await client.adopt()  # the SDK's runs carry no seal: a person vouches for them
    await client.apply(Refresh(), expected=0)  # what the first close does

    memory_md = (memories / "MEMORY.md").read_text()
    # The SDK's text is kept and taken in as a fact citing the kept file and line.
    assert (memories / "store" / "sdk" / "MEMORY.md").read_text().startswith("# Task group")
    assert "Task group: invoices: - tests: pytest -q" in memory_md
    assert "sdk-memory#store/sdk/MEMORY.md:2" in memory_md
    assert f"Run the tests with `{TEST_CMD}`" in memory_md
    assert "old-rollout#segment-0:" in memory_md  # positional ids, cited
    assert "(preference): User preference: I prefer short answers." in memory_md
    assert (memories / "skills" / "run-tests" / "SKILL.md").read_text().endswith("ok\n")
    assert not (memories / "skills" / "test-command").exists()  # one command: no skill


async def test_docs_layout_a_hand_edit_of_memory_md_is_one_change(tmp_path: Path) -> None:
    from sandbox_memory import MemoryClient, MemoryGenerateConfig, Refresh

    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    await client.runtime.record(_bug_fix_payload(), rollout_id="conv-a")
    await client.apply(Refresh(), expected=0)
    before = await client.view()
    memory_md = tmp_path / "memories" / "MEMORY.md"
    text = memory_md.read_text()
    assert "(fact):" in text  # a conversation fact is shown, from the registry
    memory_md.write_text(
        text.replace("## Facts\n\n", "## Facts\n\n- **python-version** (fact): Python 3.11.\n")
    )

    await client.apply(Refresh(), expected=before.version)

    after = await client.view()
    assert set(after.entries) - set(before.entries) == {"python-version"}
    assert after.entries["python-version"].sources[0].conversation == "person"
    last = (await client.log())[-1]
    assert (last.cause, last.keys) == ("person", ["python-version"])


async def test_docs_layout_forgetting_is_logged(tmp_path: Path) -> None:
    from sandbox_memory import MemoryClient, MemoryGenerateConfig, Refresh

    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    for rid, day in (("older", "01"), ("newer", "02")):
        payload = {**_bug_fix_payload(), "updated_at": f"2025-01-{day}T00:00:00+00:00"}
        await client.runtime.record(payload, rollout_id=rid)
    await client.apply(Refresh(), expected=0)
    keep_one = MemoryClient(
        tmp_path,
        generate=MemoryGenerateConfig(engine="offline", max_raw_memories_for_consolidation=1),
    )
    await keep_one.apply(Refresh(), expected=(await keep_one.view()).version)

    forgetting = [r for r in await keep_one.log() if r.cause == "forgetting"]
    assert len(forgetting) == 1 and "older" in (forgetting[0].detail or "")
    summaries = sorted(p.name for p in (tmp_path / "memories" / "rollout_summaries").iterdir())
    assert [s.split("_")[0] for s in summaries] == ["newer"]


@pytest.mark.slow
def test_docs_facts_walkthrough_runs_on_the_workspace_the_example_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shlex

    from click.testing import CliRunner

    from sandbox_memory.cli import EXIT_CONFLICT
    from sandbox_memory.cli import main as cli

    doc = (Path(__file__).resolve().parents[1] / "docs" / "facts.md").read_text()
    block = doc.split("<!-- walkthrough:", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    assert commands[0] == ["python", "examples/memory.py", "--keep", "ws"]
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "memory.py"), "--keep", str(tmp_path / "ws")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    monkeypatch.chdir(tmp_path)
    for args in commands[1:]:
        assert args[0] == "sandbox-memory"
        result = CliRunner().invoke(cli, args[1:])
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
    stale = CliRunner().invoke(cli, ["--root", "ws", "forget", "tests-first", "--expected", "0"])
    assert stale.exit_code == EXIT_CONFLICT and "version" in stale.stderr
    skills = tmp_path / "ws" / "memories" / "skills"
    assert not (skills / "test-command" / "SKILL.md").exists()
    assert (skills / "tests-first" / "SKILL.md").exists()


async def test_the_two_run_example_leaves_only_the_store_files_docs_workspace_layout_lists(
    tmp_path: Path,
) -> None:
    """docs/workspace-layout.md says what ``memories/store/`` holds after the example."""

    import re

    example = _load("memory")
    await example.main(offline=True, keep=tmp_path / "ws")
    store = tmp_path / "ws" / "memories" / "store"
    found = sorted(str(p.relative_to(store)) for p in store.rglob("*") if p.is_file())
    conversations = "(fix-invoice-bug|verify-invoice-fix)"
    listed = [
        rf"conversations/{conversations}\.json",
        rf"progress/{conversations}\.json",
        rf"items/{conversations}\.txt",
        rf"layout/cites/{conversations}",
        r"threads/[0-9a-f]+",
        r"held/\.complete",
        r"held/[a-z0-9][a-z0-9._-]*",
        r"layout/head\.json",
        r"layout/shard-\d\d\.json",
        r"(log\.jsonl|registry|prompt|rendered|skills|settings)(\.json)?",
        r"search\.sqlite",
        r"pending/verify-invoice-fix",
        r"\.lock\.guard-sbm",
    ]
    assert [f for f in found if not any(re.fullmatch(p, f) for p in listed)] == []
    for kind in ("conversations", "progress", "items", "threads"):
        assert len([f for f in found if f.startswith(kind + "/")]) == 2, kind
    # Layout memory cites the conversation that learned the test command; run 2 met it again
    # word for word, which is no new version, so nothing in layout memory cites run 2.
    assert [f for f in found if f.startswith("layout/cites/")] == ["layout/cites/fix-invoice-bug"]
    assert "pending/verify-invoice-fix" in found and "held/.complete" in found


async def test_multi_agent_example_keeps_its_workspace_for_the_cli(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sandbox_memory.cli import main as cli

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    example = _load("memory_multi_agent_multiturn")
    with pytest.raises(SystemExit, match="not an empty folder"):
        await example.main(offline=True, keep=taken)  # refused before any run
    await example.main(offline=True, keep=tmp_path / "ws")
    args = ["--root", str(tmp_path / "ws"), "--memories-dir", "memories/gtm"]
    result = await asyncio.to_thread(  # the command line runs its own event loop
        CliRunner().invoke, cli, [*args, "--sessions-dir", "sessions/gtm", "conversations"]
    )
    assert result.exit_code == 0 and result.stdout.startswith("gtm-q2-pipeline-review  ")


@pytest.mark.slow
def test_the_readme_offline_snippet_runs_and_prints_what_it_says(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    after = readme.split("<!-- offline snippet:", 1)[1]
    code = after.split("```python\n", 1)[1].split("```", 1)[0]
    shown = after.split("```text\n", 1)[1].split("```", 1)[0]
    (tmp_path / "snippet.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY",)}
    env.pop("OPENAI_AGENTS_DISABLE_TRACING", None)  # the snippet turns tracing off itself
    done = subprocess.run(
        [sys.executable, str(tmp_path / "snippet.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == shown.strip()
    assert "OPENAI_API_KEY" not in done.stderr


async def test_getting_started_shows_the_memory_files_the_example_produces(
    tmp_path: Path,
) -> None:
    """docs/getting-started.md shows ``MEMORY.md`` and ``memory_summary.md`` after the two-run
    example as a run produces them (item ids and times aside): regenerate it when they change."""

    import re

    example = _load("memory")
    await example.main(offline=True, keep=tmp_path / "ws")
    doc = (EXAMPLES.parent / "docs" / "getting-started.md").read_text("utf-8")
    section = doc[doc.index("### What the two-run example leaves in memory") :]
    shown = re.findall(r"```markdown\n(.*?)\n```", section, flags=re.S)[:2]

    def plain(text: str) -> str:
        text = re.sub(r"#[0-9a-f]{8}:", "#<segment>:", text)
        return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", "<time>", text).strip()

    produced = [
        (tmp_path / "ws" / "memories" / name).read_text("utf-8")
        for name in ("MEMORY.md", "memory_summary.md")
    ]
    assert [plain(t) for t in shown] == [plain(t) for t in produced]
