"""Memory's work in the SDK's traces: spans of ``agents.tracing``, figures only, never a secret."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Runner, set_trace_processors, set_tracing_disabled, trace
from agents.run import RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.tracing import Span, Trace, TracingProcessor
from agents.tracing.processors import default_processor
from agents.usage import Usage

from helpers import bug_fix_script, extraction_reply, read_segments, shell
from sandbox_memory import Memory, MemoryClient, MemoryGenerateConfig, spans

SECRET = "ghp_" + "Zq7Lm2Xc9Vb4Nn8Kk3Jj6Hh1Gg5Ff0Dd2Ss9A"
"""A GitHub token shape the redactor knows; planted in what the user says."""


class Recorder(TracingProcessor):
    """Keeps every finished span's exported data and every trace started."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.traces: list[str] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace.trace_id)

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        exported = span.export()
        assert exported is not None
        self.spans.append(exported)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def memory(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["span_data"].get("name") == name]

    def of_memory(self) -> list[dict[str, Any]]:
        return [
            s for s in self.spans if str(s["span_data"].get("name", "")).startswith(spans.PREFIX)
        ]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    set_trace_processors([rec])
    set_tracing_disabled(False)
    try:
        yield rec
    finally:
        set_tracing_disabled(True)  # as the suite runs (conftest)
        set_trace_processors([default_processor()])


def _agent(model: ScriptedModel, memory: Memory) -> SandboxAgent:
    return SandboxAgent(
        name="ops",
        instructions="Help with deployments.",
        model=model,
        capabilities=[memory, Filesystem(), Shell()],
    )


def _memory(root: Path) -> Memory:
    """The model engine on a scripted phase-1 model: one change to keep and three to refuse
    (an unsafe key, a secret as content, a secret as key)."""

    calls = 0

    async def respond(call: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:
            return extraction_reply()  # the second run teaches nothing new
        segs = read_segments(root / "sessions" / "deploys.jsonl")
        user = segs[-1]["input"][0]["memory_item_id"]
        return extraction_reply(
            [
                {
                    "key": "deploy-target",
                    "content": "The deploy target is staging.",
                    "kind": "fact",
                    "sources": [user],
                },
                {"key": "Bad Key!", "content": "Anything.", "kind": "fact", "sources": [user]},
                {
                    "key": "registry-token",
                    "content": f"The registry token is {SECRET}.",
                    "kind": "fact",
                    "sources": [user],
                },
                {
                    "key": f"token {SECRET}",
                    "content": "A token.",
                    "kind": "fact",
                    "sources": [user],
                },
            ]
        )

    phase_one = ScriptedModel(
        [ModelStep.respond(respond), ModelStep.respond(respond)],
        default_usage=Usage(requests=1, input_tokens=1200, output_tokens=90, total_tokens=1290),
    )
    return Memory(generate=MemoryGenerateConfig(engine="model", phase_one_model=phase_one))


async def _two_runs(client: Any, manifest: Any, root: Path, *, disabled: bool = False) -> None:
    memory = _memory(root)
    sandbox = await client.create(manifest=manifest)
    config = RunConfig(
        sandbox=SandboxRunConfig(session=sandbox), group_id="deploys", tracing_disabled=disabled
    )
    with trace("deploy work", disabled=disabled):
        async with sandbox:
            await Runner.run(
                _agent(
                    ScriptedModel(
                        [[shell("echo deployed", "c1")], [assistant_message("Deployed.")]]
                    ),
                    memory,
                ),
                f"Deploy to staging. The registry token is {SECRET}.",
                run_config=config,
            )
            await Runner.run(
                _agent(ScriptedModel([[assistant_message("Staging, as before.")]]), memory),
                "Where do we deploy?",
                run_config=config,
            )


async def test_each_step_of_memory_is_a_span_with_figures(
    recorder: Recorder, client, manifest, workspace_root: Path
) -> None:
    await _two_runs(client, manifest, workspace_root)
    names = [s["span_data"].get("name") for s in recorder.spans]
    for name in (spans.READ, spans.RECORD, spans.EXTRACT, spans.CONSOLIDATE, spans.CLOSE):
        assert name in names, f"{name} missing from {names}"

    record = recorder.memory(spans.RECORD)[0]["span_data"]["data"]
    assert record["bytes"] > 0 and record["redacted"] >= 1  # the token was redacted

    extract = recorder.memory(spans.EXTRACT)[0]["span_data"]["data"]
    assert extract["engine"] == "model" and extract["model_calls"] == 1
    assert extract["input_tokens"] == 1200 and extract["output_tokens"] == 90
    assert extract["accepted"] == 1 and extract["rejected"] == 3 and extract["changed"] is True
    reasons = extract["rejected_reasons"]
    assert any("not a safe slug" in r for r in reasons)
    assert any("contains a secret" in r for r in reasons)

    # The second run reads what the first taught: one entry injected.
    reads = [s["span_data"]["data"] for s in recorder.memory(spans.READ)]
    assert any(r.get("entries") == 1 and r["prompt_chars"] > 0 for r in reads)

    consolidate = recorder.memory(spans.CONSOLIDATE)[-1]["span_data"]["data"]
    assert consolidate["selected"] == 1 and "promoted" in consolidate
    close = recorder.memory(spans.CLOSE)[0]["span_data"]["data"]
    assert set(close) == {"extracted", "deferred", "model_calls", "redactions"}


async def test_memory_spans_nest_under_the_run_trace(
    recorder: Recorder, client, manifest, workspace_root: Path
) -> None:
    await _two_runs(client, manifest, workspace_root)
    by_id = {s["id"]: s for s in recorder.spans}
    (trace_id,) = set(recorder.traces)
    memory_spans = recorder.of_memory()
    assert memory_spans and all(s["trace_id"] == trace_id for s in memory_spans)

    # A turn's read and a run's record sit inside the agent's span of that run.
    # An extraction after a run sits inside that run's agent span; one at close, in the close.
    def ancestors(s: dict[str, Any]) -> list[str]:
        found = []
        while s["parent_id"] in by_id:
            s = by_id[s["parent_id"]]
            found.append(s["span_data"].get("name") or s["span_data"]["type"])
        return found

    for name in (spans.READ, spans.RECORD):
        assert all("ops" in ancestors(s) for s in recorder.memory(name))
    extracts = [ancestors(s) for s in recorder.memory(spans.EXTRACT)]
    assert any("ops" in a for a in extracts)
    assert all("ops" in a or a == [spans.CLOSE] for a in extracts)
    # The close (outside any run, inside the application's trace) holds its own steps.
    (close,) = recorder.memory(spans.CLOSE)
    assert {by_id[s["parent_id"]]["span_data"].get("name") for s in recorder.memory(spans.CONSOLIDATE)} == {spans.CLOSE}  # fmt: skip
    assert close["parent_id"] is None


async def test_a_planted_secret_is_in_no_memory_span(
    recorder: Recorder, client, manifest, workspace_root: Path
) -> None:
    await _two_runs(client, manifest, workspace_root)
    memory_spans = recorder.of_memory()
    assert len(memory_spans) >= 6
    exported = json.dumps(memory_spans)
    assert SECRET not in exported and SECRET.lower() not in exported
    assert "staging" not in exported  # content is never in span data either
    # Nor keys, even in a rejection's reason (a key can be private).
    assert "registry-token" not in exported and "deploy-target" not in exported
    assert "Bad Key!" not in exported


async def test_search_span_counts_the_query_and_hits_only(
    recorder: Recorder, client, manifest, workspace_root: Path
) -> None:
    await _two_runs(client, manifest, workspace_root)
    with trace("search"):
        hits = await MemoryClient(workspace_root).search("deploy target staging")
    (search,) = recorder.memory(spans.SEARCH)[-1:]
    data = search["span_data"]["data"]
    assert data["query_chars"] == len("deploy target staging")
    assert data["hits"] == len(hits) > 0 and sum(data["hits_by_kind"].values()) == len(hits)
    assert "staging" not in json.dumps(data)


async def test_no_memory_span_when_tracing_is_disabled(
    recorder: Recorder, client, manifest, workspace_root: Path
) -> None:
    await _two_runs(client, manifest, workspace_root, disabled=True)
    assert not recorder.of_memory()
    assert (workspace_root / "memories" / "MEMORY.md").is_file()  # memory itself still works


async def test_the_offline_engine_extracts_with_no_model_call(
    recorder: Recorder, client, manifest, workspace_root: Path
) -> None:
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    sandbox = await client.create(manifest=manifest)
    with trace("offline"):
        async with sandbox:
            await Runner.run(
                _agent(ScriptedModel(bug_fix_script()), memory),
                "The invoice tests fail. Fix the bug.",
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
            )
    extracts = [s["span_data"]["data"] for s in recorder.memory(spans.EXTRACT)]
    assert extracts and all(e["engine"] == "offline" for e in extracts)
    assert all(e["model_calls"] == e["input_tokens"] == e["output_tokens"] == 0 for e in extracts)
    assert sum(e["accepted"] for e in extracts) >= 1
