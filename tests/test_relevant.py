"""The read prompt's section "relevant to this task": memory looked up with the run's input.

Real runs on a local sandbox (``UnixLocalSandboxClient``), ``ScriptedModel`` for the agent; the
memory is written through the store, as earlier runs and consolidations leave it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.run import RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message

from helpers import fact, sealed_store
from sandbox_memory import (
    Forget,
    Memory,
    MemoryClient,
    MemoryConfigError,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    for_person,
)
from sandbox_memory.render.files import RELEVANT_BEGIN, RELEVANT_END, render_read_prompt
from sandbox_memory.stores.records import Entry, LayoutMemory, Source

OFFLINE = MemoryGenerateConfig(engine="offline")
TASK = "parse_header in src/acme/parser.py drops the last field of a header again"
OLD_FIX = Entry(
    key="fix-parse-header",
    content=(
        "The header bug was fixed in `src/acme/parser.py` (`parse_header`): the loop stopped "
        "one field early. Run the tests with `python -m pytest tests/test_parser.py`."
    ),
    kind="fact",
    sources=[Source(conversation="task-1", item="a1b2c3d4:5")],
    updated_at=1_000,
)


def filler(count: int, *, start: int = 10_000) -> dict[str, Entry]:
    """Newer entries about other things: enough to fill the summary's budget."""

    return {
        f"fact-{i:04d}": Entry(
            key=f"fact-{i:04d}",
            content=f"Invoice rounding rule number {i} keeps two decimals for the total "
            + "x" * 40,
            kind="fact",
            sources=[Source(conversation="task-0", item=f"s:{i}")],
            updated_at=start + i,
        )
        for i in range(count)
    }


async def save(root: Path, *entries: Entry, memories_dir: str = "memories") -> None:
    layout = LayoutMemory(version=1, entries=filler(400))
    for entry in entries:
        layout.entries[entry.key] = entry
    await sealed_store(root, memories_dir).save_layout(layout)


async def handed(
    client: Any,
    manifest: Any,
    message: Any,
    memory: Memory | None = None,
    *,
    person: str | None = None,
) -> str:
    """The system instructions of the first turn of one run."""

    model = ScriptedModel([[assistant_message("ok")]])
    agent = SandboxAgent(
        name="coder",
        instructions="Work in the workspace.",
        model=model,
        capabilities=[memory or Memory(generate=OFFLINE), Filesystem(), Shell()],
    )
    sandbox = await client.create(manifest=manifest)
    with for_person(person):
        async with sandbox:
            await Runner.run(
                agent,
                message,
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="t"),
            )
    return model.calls[0].system_instructions or ""


def relevant_of(instructions: str) -> str:
    if RELEVANT_BEGIN not in instructions:
        return ""
    return instructions.split(RELEVANT_BEGIN, 1)[1].split(RELEVANT_END, 1)[0]


def summary_of(instructions: str) -> str:
    return instructions.split("MEMORY_SUMMARY BEGINS", 1)[1].split("MEMORY_SUMMARY ENDS", 1)[0]


async def test_an_old_fix_the_summary_has_no_room_for_is_handed_whole_with_sources(
    client, manifest, workspace_root
) -> None:
    await save(workspace_root, OLD_FIX)
    text = await handed(client, manifest, TASK)
    assert "fix-parse-header" not in summary_of(text)  # 400 newer entries fill the summary
    section = relevant_of(text)
    assert f"- **fix-parse-header** (fact): {OLD_FIX.content} (sources: task-1#a1b2c3d4:5)" in (
        section
    )
    # The same run with the section switched off: the summary only.
    off = await handed(
        client, manifest, TASK, Memory(generate=OFFLINE, read=MemoryReadConfig(relevant=False))
    )
    assert RELEVANT_BEGIN not in off
    assert summary_of(off) == summary_of(text)


async def test_the_conversation_so_far_is_the_query_when_the_input_is_items(
    client, manifest, workspace_root
) -> None:
    await save(workspace_root, OLD_FIX)
    history = [
        {"role": "user", "content": TASK},
        {"role": "assistant", "content": "Looking at it."},
        {"role": "user", "content": "Go on."},
    ]
    assert "fix-parse-header" in relevant_of(await handed(client, manifest, history))


async def test_what_the_summary_shows_is_not_repeated(client, manifest, workspace_root) -> None:
    newest = OLD_FIX.model_copy(update={"updated_at": 99_999})
    await save(workspace_root, newest)
    text = await handed(client, manifest, TASK)
    assert "fix-parse-header" in summary_of(text)
    assert "fix-parse-header" not in relevant_of(text)


async def test_the_section_keeps_its_own_budget_with_whole_entries(
    client, manifest, workspace_root
) -> None:
    many = [
        Entry(
            key=f"parser-note-{i:03d}",
            content=f"Note {i} on parse_header in src/acme/parser.py: " + "field " * 30 + "end.",
            kind="fact",
            sources=[Source(conversation="task-2", item=f"n:{i}")],
            updated_at=100 + i,
        )
        for i in range(60)
    ]
    await save(workspace_root, *many)
    budget = 1_000
    text = await handed(
        client,
        manifest,
        TASK,
        Memory(generate=OFFLINE, read=MemoryReadConfig(max_relevant_chars=budget)),
    )
    section = relevant_of(text).strip("\n")
    assert 0 < len(section) <= budget
    lines = [line for line in section.splitlines() if line.startswith("- **")]
    assert lines and all(re.search(r"end\. \(sources: task-2#n:\d+\)$", line) for line in lines)


async def test_a_private_entry_reaches_only_its_persons_runs(
    client, manifest, workspace_root
) -> None:
    private = OLD_FIX.model_copy(update={"person": "ana", "key": "ana-parser-habit"})
    await save(workspace_root, private)
    assert "ana-parser-habit" in relevant_of(await handed(client, manifest, TASK, person="ana"))
    assert "ana-parser-habit" not in await handed(client, manifest, TASK, person="bob")
    assert "ana-parser-habit" not in await handed(client, manifest, TASK)


async def test_a_forgotten_entry_is_gone_from_the_next_run(
    client, manifest, workspace_root
) -> None:
    await save(workspace_root, OLD_FIX)
    assert "fix-parse-header" in relevant_of(await handed(client, manifest, TASK))
    memory = MemoryClient(workspace_root, generate=OFFLINE)
    view = await memory.view(None)
    await memory.apply(Forget(key="fix-parse-header"), expected=view.version)
    text = await handed(client, manifest, TASK)
    assert "fix-parse-header" not in text
    assert "the loop stopped one field early" not in text


async def test_each_layout_sees_only_its_own_memory(client, manifest, workspace_root) -> None:
    await save(workspace_root, OLD_FIX, memories_dir="team_a/memories")
    layout_a = MemoryLayoutConfig(memories_dir="team_a/memories", sessions_dir="team_a/sessions")
    layout_b = MemoryLayoutConfig(memories_dir="team_b/memories", sessions_dir="team_b/sessions")
    await save(workspace_root, memories_dir="team_b/memories")
    a = await handed(client, manifest, TASK, Memory(generate=OFFLINE, layout=layout_a))
    b = await handed(client, manifest, TASK, Memory(generate=OFFLINE, layout=layout_b))
    assert "fix-parse-header" in relevant_of(a)
    assert "fix-parse-header" not in b


def test_memory_text_holding_a_placeholder_is_not_substituted() -> None:
    text = render_read_prompt(
        memory_dir="memories",
        summary="- **odd** (fact): the template says {relevant} and {memory_dir}",
        live_update=False,
        relevant="- **x** (fact): mentions {summary}",
    )
    assert "the template says {relevant} and {memory_dir}" in text
    assert "mentions {summary}" in text


@pytest.mark.parametrize(
    ("field", "value"),
    [("relevant", "yes"), ("max_relevant_chars", 10), ("max_relevant_chars", True)],
)
def test_bad_read_settings_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(MemoryConfigError) as raised:
        MemoryReadConfig(**{field: value})
    assert f"MemoryReadConfig.{field}" in str(raised.value) and repr(value) in str(raised.value)


def test_summary_lines_restating_what_is_shown_are_left_out() -> None:
    from sandbox_memory.render.relevant import render_relevant
    from sandbox_memory.search.index import SearchHit

    summary_text = (
        "### Learned in earlier conversations\n"
        "- **result-parser** (fact): Result: fixed parse_header in src/acme/parser.py; "
        "the loop stopped one field early."
    )
    hit = SearchHit(
        kind="rollout_summary",
        text=(
            "# parser fix\n\nconversation: task-1\nrollout_path: sessions/task-1.jsonl\n\n"
            "- completed [a1]: fixed parse_header in src/acme/parser.py; the loop stopped one "
            "field early.\n"
            "- user: parse_header drops the last field [a1:0]\n"
            "- user: parse_header drops the last field of a header [a1:0]\n"
            "- `python -m pytest tests/test_parser.py`: last exit 0 [a1:5]\n"
        ),
        score=1.0,
        updated_at=1,
        conversation="task-1",
        path="memories/rollout_summaries/task-1_parser-fix.md",
    )
    section = render_relevant([hit], summary=summary_text, query=TASK, budget=4_000)
    assert "completed [a1]" not in section  # the summary's entry says it
    assert "conversation: task-1" not in section and "rollout_path" not in section
    assert section.count("[a1:0]") == 1  # two lines saying nearly the same: one is shown
    assert "`python -m pytest tests/test_parser.py`: last exit 0" in section


async def test_each_run_of_one_session_gets_the_section_its_own_input_points_at(
    client, manifest, workspace_root
) -> None:
    # Read-only memory records nothing, so memory's generation does not move between the two
    # runs: the section must still follow each run's own input, not the first run's.
    other = Entry(
        key="fix-render-footer",
        content="The footer bug was fixed in `src/acme/footer.py` (`render_footer`).",
        kind="fact",
        sources=[Source(conversation="task-2", item="e5f6a7b8:1")],
        updated_at=2_000,
    )
    await save(workspace_root, OLD_FIX, other)
    memory = Memory(generate=None)
    sandbox = await client.create(manifest=manifest)
    handed_to: list[str] = []
    async with sandbox:
        for message in (TASK, "render_footer in src/acme/footer.py prints nothing"):
            model = ScriptedModel([[assistant_message("ok")]])
            agent = SandboxAgent(
                name="coder",
                instructions="Work in the workspace.",
                model=model,
                capabilities=[memory, Filesystem(), Shell()],
            )
            await Runner.run(
                agent,
                message,
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="t"),
            )
            handed_to.append(relevant_of(model.calls[0].system_instructions or ""))
    assert "fix-parse-header" in handed_to[0]
    assert "fix-render-footer" in handed_to[1]


async def test_an_old_fix_of_a_file_the_task_names_comes_before_entries_sharing_more_words(
    client, manifest, workspace_root
) -> None:
    # The task names `axes/_axes.py` only in a traceback's installed path; newer entries
    # share many more of its words.
    await save(
        workspace_root,
        fact("fix-axes-bar", "Fixed `lib/plotlib/axes/_axes.py`: an empty first value.", 1_000),
        fact("bar-chart-nan", "Axes.bar raises StopIteration for all-nan data in bar charts.", 2),
        fact("nan-data-bars", "In bar charts, Axes.bar with all-nan data raises again.", 3),
    )
    task = (
        "ax.bar raises StopIteration for all-nan data in bar charts\n"
        "File ~/envs/py310/lib/python3.10/site-packages/plotlib/axes/_axes.py:2182, in Axes.bar"
    )
    section = relevant_of(await handed(client, manifest, task))
    keys = re.findall(r"\*\*([a-z0-9-]+)\*\*", section)
    assert keys[0] == "fix-axes-bar"
    assert {"bar-chart-nan", "nan-data-bars"} <= set(keys)
