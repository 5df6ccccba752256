"""The SDK's data policies (``OPENAI_AGENTS_DONT_LOG_MODEL_DATA`` / ``_TOOL_DATA``, both on by
default) hold in memory's log lines: exception text and quotes of model output are withheld
while either is on, and shown when both are off."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import agents._debug as sdk_debug
import pytest
from agents import Runner
from agents.run import RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ScriptedModel, assistant_message

from sandbox_memory import Memory, MemoryGenerateConfig
from sandbox_memory.datapolicy import WITHHELD

POLICIES = [(True, True), (True, False), (False, True), (False, False)]
SECRET = "SECRET_MODEL_OUTPUT_7f3a"


def logged(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(logging.Formatter().format(r) for r in caplog.records)


async def run_once(client: Any, manifest: Any, memory: Memory) -> None:
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            SandboxAgent(
                name="worker",
                instructions="Work.",
                model=ScriptedModel(steps=[[assistant_message("done")]]),
                capabilities=[memory, Filesystem(), Shell()],
            ),
            "hello",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="chat"),
        )


@pytest.mark.parametrize(("model_policy", "tool_policy"), POLICIES)
async def test_a_run_memory_could_not_record_is_logged_by_the_data_policies(
    client,
    manifest,
    workspace_root: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    model_policy: bool,
    tool_policy: bool,
) -> None:
    monkeypatch.setattr(sdk_debug, "DONT_LOG_MODEL_DATA", model_policy)
    monkeypatch.setattr(sdk_debug, "DONT_LOG_TOOL_DATA", tool_policy)
    (workspace_root / "sessions").write_text("a file where the sessions folder belongs")
    caplog.set_level(logging.WARNING)

    await run_once(client, manifest, Memory(generate=MemoryGenerateConfig(engine="offline")))

    record = next(r for r in caplog.records if "could not record a run" in r.getMessage())
    assert record.levelno == logging.ERROR
    if model_policy or tool_policy:  # the SDK's shape: the message alone, no exception
        assert record.msg == "%s" and record.exc_info is None
        assert "Not a directory" not in logged(caplog)
    else:
        assert record.exc_info is not None
        assert "Not a directory" in logged(caplog)


@pytest.mark.parametrize(("model_policy", "tool_policy"), POLICIES)
async def test_model_output_quoted_by_a_failed_extraction_is_withheld_by_the_policies(
    client,
    manifest,
    workspace_root: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    model_policy: bool,
    tool_policy: bool,
) -> None:
    monkeypatch.setattr(sdk_debug, "DONT_LOG_MODEL_DATA", model_policy)
    monkeypatch.setattr(sdk_debug, "DONT_LOG_TOOL_DATA", tool_policy)
    caplog.set_level(logging.WARNING)
    extractor = ScriptedModel(steps=[[assistant_message(f"not json {SECRET}")]] * 4)
    memory = Memory(generate=MemoryGenerateConfig(engine="model", phase_one_model=extractor))

    await run_once(client, manifest, memory)

    text = logged(caplog)
    assert "memory extraction of rollout chat failed" in text
    if model_policy or tool_policy:
        assert SECRET not in text and WITHHELD in text
    else:
        assert SECRET in text
