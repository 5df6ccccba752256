"""Forget means gone: a retracted entry leaves everything memory shows, at once, and stays gone.

Runs are real (local sandbox, scripted agent turns, the offline engine); the entries are the
ones the bug-fix run teaches: a fact about the fix (in its conversation, listed in MEMORY.md
through the registry) and the test command (a procedure, promoted to layout memory).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents import Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from faultlib import rc
from helpers import agent, bug_fix_script, shell
from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, Remember

OFFLINE = MemoryGenerateConfig(engine="offline")
PROCEDURE = "test-command"


def instructions(model: ScriptedModel) -> str:
    return model.calls[0].system_instructions or ""


async def learn(client: Any, manifest: Any) -> Any:
    """The bug-fix run in conversation ``fix``, closed: memory learned. Returns the sandbox."""

    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            agent(ScriptedModel(bug_fix_script())), "Fix it.", run_config=rc(sandbox, "fix")
        )
    return sandbox


async def next_run(
    client: Any, sandbox: Any, conversation: str, script: list[Any] | None = None
) -> ScriptedModel:
    """One more run in a resumed sandbox (closed afterwards); returns its model (its prompt)."""

    model = ScriptedModel(script or [[assistant_message("ok")]])
    resumed = await client.resume(sandbox.state)
    async with resumed:
        await Runner.run(agent(model), "Next task.", run_config=rc(resumed, conversation))
    return model


async def fact_key(root: Path) -> tuple[str, str]:
    view = await MemoryClient(root).view("fix")
    entry = next(e for e in view.entries.values() if e.kind == "fact" and e.status == "active")
    return entry.key, entry.content


def shown(root: Path) -> str:
    """Everything memory renders for a run to read or search."""

    mem = root / "memories"
    skills = sorted((mem / "skills").rglob("SKILL.md"))
    return "\n".join(
        [
            (mem / "MEMORY.md").read_text(),
            (mem / "memory_summary.md").read_text(),
            (mem / "store" / "registry.json").read_text(),
            *(p.read_text() for p in skills),
        ]
    )


async def test_forgetting_a_conversation_fact_removes_it_from_every_file_and_the_next_prompts(
    client, manifest, workspace_root
) -> None:
    sandbox = await learn(client, manifest)
    key, content = await fact_key(workspace_root)
    assert f"**{key}**" in shown(workspace_root)

    mc = MemoryClient(workspace_root)

    async def found() -> bool:
        hits = await mc.search(content[:80], limit=50)
        return any(h.kind == "entry" and h.key == key for h in hits)

    assert await found()
    view = await mc.view("fix")
    await mc.apply(Forget(key=key), expected=view.version, conversation="fix")

    assert key not in shown(workspace_root) and content not in shown(workspace_root)
    assert not await found()  # the search index forgets it too
    other = await next_run(client, sandbox, "other")
    same = await next_run(client, sandbox, "fix")
    assert key not in instructions(other) and key not in instructions(same)
    assert content[:60] not in instructions(other)


async def test_forgetting_a_learned_procedure_in_its_conversation_retracts_the_layout_copy(
    client, manifest, workspace_root
) -> None:
    sandbox = await learn(client, manifest)
    assert (await MemoryClient(workspace_root).view()).entries[PROCEDURE]

    mc = MemoryClient(workspace_root)
    view = await mc.view("fix")
    await mc.apply(Forget(key=PROCEDURE), expected=view.version, conversation="fix")

    assert (await mc.view()).entries[PROCEDURE].status == "retracted"
    assert PROCEDURE not in shown(workspace_root)
    model = await next_run(client, sandbox, "other")
    assert "Run the tests with" not in instructions(model)


async def test_forgetting_a_layout_entry_retracts_it_in_every_conversation_that_learned_it(
    client, manifest, workspace_root
) -> None:
    sandbox = await learn(client, manifest)
    # The same command again: nothing new, so no second copy (an identical version is no change)
    await next_run(client, sandbox, "again", bug_fix_script())
    mc = MemoryClient(workspace_root)
    view = await mc.view()
    await mc.apply(Forget(key=PROCEDURE), expected=view.version)

    assert (await mc.view("fix")).entries[PROCEDURE].status == "retracted"
    again = (await mc.view("again")).entries
    assert PROCEDURE not in again or again[PROCEDURE].status == "retracted"
    model = await next_run(client, sandbox, "fix")  # this conversation's own entries
    assert PROCEDURE not in instructions(model) and "Run the tests with" not in instructions(model)


async def test_a_forgotten_entry_stays_retracted_when_later_runs_relearn_it(
    client, manifest, workspace_root
) -> None:
    sandbox = await learn(client, manifest)
    key, _ = await fact_key(workspace_root)
    mc = MemoryClient(workspace_root)
    await mc.apply(Forget(key=key), expected=(await mc.view("fix")).version, conversation="fix")
    await mc.apply(Forget(key=PROCEDURE), expected=(await mc.view()).version)

    # The same work again, in its own conversation and in a new one: both relearn both.
    await next_run(client, sandbox, "fix", bug_fix_script())
    await next_run(client, sandbox, "again", bug_fix_script())

    assert (await mc.view()).entries[PROCEDURE].status == "retracted"
    fix = (await mc.view("fix")).entries
    assert fix[key].status == "retracted" and fix[PROCEDURE].status == "retracted"
    again = (await mc.view("again")).entries
    assert PROCEDURE not in again or again[PROCEDURE].status == "retracted"
    assert PROCEDURE not in shown(workspace_root)
    model = await next_run(client, sandbox, "later")
    assert "Run the tests with" not in instructions(model)

    # Only a direct Remember revives it.
    await mc.apply(
        Remember(key=PROCEDURE, content="Run the tests with `make test`.", kind="procedure"),
        expected=(await mc.view()).version,
    )
    assert "make test" in shown(workspace_root)


async def test_the_memory_forget_tool_retracts_a_conversation_fact_listed_in_memory_md(
    client, manifest, workspace_root
) -> None:
    sandbox = await learn(client, manifest)
    key, content = await fact_key(workspace_root)
    model = await next_run(
        client,
        sandbox,
        "cleanup",
        [
            [function_call("memory_forget", {"key": key}, call_id="f1")],
            [assistant_message("forgot it")],
        ],
    )
    assert f"retracted {key!r}" in json.dumps(model.calls[1].input)
    assert (await MemoryClient(workspace_root).view("fix")).entries[key].status == "retracted"
    assert content not in shown(workspace_root)


async def test_an_agent_deleting_an_entry_line_is_a_forget_with_the_run_as_source(
    client, manifest, workspace_root
) -> None:
    sandbox = await learn(client, manifest)
    delete = f"sed -i '/\\*\\*{PROCEDURE}\\*\\*/d' memories/MEMORY.md"
    await next_run(
        client,
        sandbox,
        "cleanup",
        [[shell(delete, "d1")], [assistant_message("removed the stale test command")]],
    )
    mc = MemoryClient(workspace_root)
    entry = (await mc.view()).entries[PROCEDURE]
    assert entry.status == "retracted" and entry.sources[-1].conversation == "cleanup"
    assert (await mc.view("fix")).entries[PROCEDURE].status == "retracted"
    assert PROCEDURE not in shown(workspace_root)
    await next_run(client, sandbox, "fix", bug_fix_script())  # relearns it: still retracted
    assert (await mc.view()).entries[PROCEDURE].status == "retracted"
    model = await next_run(client, sandbox, "later")
    assert "Run the tests with" not in instructions(model)
