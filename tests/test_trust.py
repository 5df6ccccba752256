"""The trust boundary: what the agent writes in the workspace is no one's statement.

The agent's shell and file tools can write anything in the workspace, ``sessions/`` and
``memories/`` included (see "Threat model" in docs/robustness.md). These tests play the agent:
they write to those files the way a tool would, then check what memory makes of it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sandbox_memory import MemoryClient, MemoryGenerateConfig, Remember
from shared_flow import run_payload


def _client(root: Path) -> MemoryClient:
    return MemoryClient(root, generate=MemoryGenerateConfig(engine="offline"))


# ------------------------------------------------------------------ item 9: own edits


async def test_a_conversation_remember_does_not_make_the_next_close_read_the_file_as_replaced(
    tmp_path: Path, caplog
) -> None:
    mc = _client(tmp_path)
    rt = mc.runtime
    await rt.record(run_payload("We decided that alpha ships via deploy-alpha."), rollout_id="c")
    await rt.close()
    view = await mc.view("c")
    await mc.apply(
        Remember(key="budget", content="The budget is 1500 EUR.", kind="fact"),
        expected=view.version,
        conversation="c",
    )
    await rt.record(run_payload("We decided that beta ships via deploy-beta."), rollout_id="c")
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await rt.close()
    assert not [r for r in caplog.records if "than what memory read of it" in r.getMessage()]
    entries = (await mc.view("c")).entries
    assert any("deploy-beta" in e.content for e in entries.values()), entries
