"""Another person's private entry does not exist for a run or a client acting for someone
else, through every door: the agent's memory tools, a live edit of ``MEMORY.md``,
``MemoryClient`` views, commands and search, and the injected prompt.

Real runs on a local sandbox (``for_person``) with ``ScriptedModel``, and the offline engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from faultlib import rc
from helpers import agent, layout_runtime, run_payload, shell
from sandbox_memory import (
    Forget,
    MemoryClient,
    MemoryConfigError,
    MemoryConflict,
    Remember,
    for_person,
)
from sandbox_memory.engines.base import Candidate, Extraction, ExtractionRequest

ANN_KEY = "ann-diet"
ANN_SAYS = "Ann is allergic to peanuts."


async def anns_private_entries(root: Path) -> MemoryClient:
    """Ann's private entry in layout memory and in her conversation ``ann-1``."""

    host = MemoryClient(root)
    view = await host.create()
    await host.apply(
        Remember(key=ANN_KEY, content=ANN_SAYS, kind="preference", person="ann"),
        expected=view.version,
    )
    conv = await host.create("ann-1")
    await host.apply(
        Remember(key=ANN_KEY, content=ANN_SAYS, kind="fact", person="ann"),
        expected=conv.version,
        conversation="ann-1",
    )
    return host


async def assert_anns_entries_intact(host: MemoryClient) -> None:
    for scope in (None, "ann-1"):
        entry = (await host.view(scope)).entries[ANN_KEY]
        assert (entry.status, entry.person, entry.content) == ("active", "ann", ANN_SAYS), scope


async def test_bobs_run_cannot_forget_or_remember_anns_private_key_with_its_tools(
    client: Any, manifest: Any, workspace_root: Path
) -> None:
    host = await anns_private_entries(workspace_root)
    model = ScriptedModel(
        [
            [function_call("memory_forget", {"key": ANN_KEY}, call_id="f1")],
            [
                function_call(
                    "memory_remember",
                    {"key": ANN_KEY, "content": "Anyone may eat peanuts.", "kind": "fact"},
                    call_id="r1",
                )
            ],
            [function_call("memory_search", {"query": "peanuts allergic"}, call_id="s1")],
            [assistant_message("done")],
        ]
    )
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        with for_person("bob"):
            await Runner.run(
                agent(model, name="helper"), "Tidy memory.", run_config=rc(sandbox, "ann-1")
            )
    await assert_anns_entries_intact(host)
    answers = json.dumps(model.calls[-1].input)
    assert "retracted" not in answers and "remembered" not in answers
    assert "no active entry" in answers  # as for a key that does not exist
    assert "peanuts" not in (model.calls[0].system_instructions or "")
    assert "Ann is allergic" not in answers  # the search found nothing of hers


async def test_bobs_live_edit_of_memory_md_does_not_replace_anns_private_entry(
    client: Any, manifest: Any, workspace_root: Path
) -> None:
    host = await anns_private_entries(workspace_root)
    line = f"- **{ANN_KEY}** (fact): Anyone may eat peanuts."
    edit = shell(f"echo '{line}' >> memories/MEMORY.md", "e1")
    model = ScriptedModel([[edit], [assistant_message("edited")]])
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        with for_person("bob"):
            await Runner.run(
                agent(model, name="helper"), "Fix memory.", run_config=rc(sandbox, "bob-1")
            )
    await assert_anns_entries_intact(host)


async def test_a_client_acting_for_bob_sees_and_changes_nothing_of_anns(tmp_path: Path) -> None:
    host = await anns_private_entries(tmp_path)
    bob = MemoryClient(tmp_path, person="bob")
    layout = await bob.view(None)
    conv = await bob.view("ann-1")
    assert ANN_KEY not in layout.entries and ANN_KEY not in conv.entries
    assert await bob.holders(ANN_KEY, conversation="ann-1") == []
    with pytest.raises(MemoryConflict, match="no entry"):
        await bob.apply(Forget(key=ANN_KEY), expected=layout.version)
    with pytest.raises(MemoryConflict, match="no entry"):
        await bob.apply(Forget(key=ANN_KEY), expected=conv.version, conversation="ann-1")
    with pytest.raises(MemoryConflict, match="in use"):
        await bob.apply(Remember(key=ANN_KEY, content="Peanuts are fine."), expected=layout.version)
    with pytest.raises(MemoryConflict, match="in use"):
        await bob.apply(
            Remember(key=ANN_KEY, content="Peanuts are fine."),
            expected=conv.version,
            conversation="ann-1",
        )
    with pytest.raises(MemoryConfigError) as caught:
        await bob.apply(
            Remember(key="ann-other", content="Ann likes tea.", person="ann"),
            expected=layout.version,
        )
    assert caught.value.field == "person"
    assert not [h for h in await bob.search("peanuts allergic") if "peanuts" in h.text]
    with pytest.raises(MemoryConfigError) as caught:
        await bob.search("peanuts", person="ann")
    assert (caught.value.field, caught.value.value) == ("person", "ann")
    await assert_anns_entries_intact(host)
    # Ann, and the host (a client acting for no one), still see and change hers.
    ann = MemoryClient(tmp_path, person="ann")
    assert ANN_KEY in (await ann.view(None)).entries
    assert [h.key for h in await ann.search("peanuts allergic") if h.kind == "entry"]
    view = await host.view(None)
    await host.apply(Forget(key=ANN_KEY), expected=view.version)
    assert (await host.view(None)).entries[ANN_KEY].status == "retracted"


class OverwritingEngine:
    """An engine (at the model seam) proposing to replace the key of Ann's private entry."""

    name = "overwriting"

    async def extract(self, request: ExtractionRequest) -> Extraction:
        item = request.segments[-1]["input"][0]
        return Extraction(
            rollout_summary="Talked about the menu.",
            rollout_slug="menu",
            raw_memory="- menu",
            candidates=[
                Candidate(
                    key=ANN_KEY,
                    content="The menu may hold peanuts.",
                    kind="procedure",
                    sources=[item["memory_item_id"]],
                )
            ],
        )


async def test_bobs_run_cannot_replace_anns_private_entry_through_extraction(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = await anns_private_entries(tmp_path)
    rt = layout_runtime(tmp_path, engine=OverwritingEngine())
    for rid in ("ann-1", "bob-1"):
        await rt.record(
            run_payload("Plan the menu.", reply=None, when=None),
            rollout_id=rid,
            person="bob",
        )
    with caplog.at_level("WARNING", logger="sandbox_memory"):
        await rt.close()
    await assert_anns_entries_intact(host)
    # Bob's own conversation keeps what it learned; it is not promoted over Ann's entry.
    assert (await host.view("bob-1")).entries[ANN_KEY].person is None
    assert "another person's private entry" in caplog.text
    assert "did not promote" in caplog.text
