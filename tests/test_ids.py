"""Conversation ids and person names: two ids never share a rollout file or a memory, and an id
that is not text is refused cleanly, before anything is written.

Real workspaces in a temp folder, the offline engine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_payload
from sandbox_memory import (
    Memory,
    MemoryClient,
    MemoryConfigError,
    MemoryGenerateConfig,
    Remember,
    for_person,
)
from sandbox_memory.stores.segments import run_rollout_id, safe_rollout_id

OFFLINE = MemoryGenerateConfig(engine="offline")


async def test_an_id_spelled_like_a_derived_one_never_shares_its_file(tmp_path: Path) -> None:
    client = MemoryClient(tmp_path, generate=OFFLINE)
    raw = "team/alice chat"
    derived = run_rollout_id(raw)
    # The literal ids an adversary could pick: the old derived form, and this one.
    ids = [raw, "team-alice-chat-e08e1ebd27ec", derived]
    recorded = [
        await client.runtime.record(
            run_payload(f"Message number {n} of its own.", reply=None, when=None), rollout_id=rid
        )
        for n, rid in enumerate(ids)
    ]
    assert len(set(recorded)) == 3, recorded
    sessions = sorted(p.name for p in (tmp_path / "sessions").iterdir())
    assert len(sessions) == 3
    for n, rid in enumerate(recorded):
        text = (tmp_path / "sessions" / f"{rid}.jsonl").read_text()
        assert text.count("Message number") == 1 and f"number {n} " in text
    # A view names a derived conversation by the id it lists.
    await client.runtime.close()
    listed = {c.rollout_id for c in await client.conversations()}
    assert listed == set(recorded)
    assert (await client.view(derived)).rollout_id == derived
    assert safe_rollout_id(raw) == derived


@pytest.mark.parametrize("bad", ["x\udfff", "\ud800", "team/\udc80chat"])
async def test_a_lone_surrogate_in_a_conversation_id_is_refused_naming_it(
    tmp_path: Path, bad: str
) -> None:
    client = MemoryClient(tmp_path, generate=OFFLINE)
    with pytest.raises(MemoryConfigError) as caught:
        await client.runtime.record(run_payload("Hello.", reply=None, when=None), rollout_id=bad)
    assert caught.value.field == "rollout_id" and caught.value.value == bad
    assert "surrogate" in str(caught.value)
    assert not (tmp_path / "sessions").exists() or not list((tmp_path / "sessions").iterdir())
    await client.create()
    with pytest.raises(MemoryConfigError) as caught:
        await client.view(bad)
    assert caught.value.field == "rollout_id"


async def test_a_lone_surrogate_in_a_person_or_content_is_refused_and_nothing_stored(
    tmp_path: Path,
) -> None:
    client = MemoryClient(tmp_path, generate=OFFLINE)
    view = await client.create("trip")
    with pytest.raises(MemoryConfigError) as caught:
        await client.runtime.record(
            run_payload("Hello.", reply=None, when=None), rollout_id="trip", person="ann\ud800"
        )
    assert caught.value.field == "person"
    for command, field in (
        (Remember(key="k", content="A fact.", person="b\ud800"), "person"),
        (Remember(key="k", content="A fact \ud800."), "content"),
    ):
        with pytest.raises(MemoryConfigError) as caught:
            await client.apply(command, expected=view.version, conversation="trip")
        assert caught.value.field == field
    after = await client.view("trip")
    assert after.version == view.version and not after.entries
    assert not (tmp_path / "sessions" / "trip.jsonl").exists()
    with pytest.raises(ValueError, match="person holds a lone surrogate"):
        Memory(person="ann\ud800")
    with pytest.raises(MemoryConfigError, match="person holds a lone surrogate"):
        with for_person("ann\ud800"):
            pass
