"""The model engine over real HTTP: the SDK's OpenAI model classes against a local server.

Every test here sends real requests through ``openai.AsyncOpenAI`` to ``tests/http_provider.py``
(127.0.0.1, no network) and checks what memory does with the replies and failures.
"""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
from agents import ModelSettings, OpenAIChatCompletionsModel, OpenAIResponsesModel
from openai import AsyncOpenAI

import http_provider as hp
from faultlib import progress, warnings_from
from helpers import read_segments
from sandbox_memory import MemoryConfigError, MemoryGenerateConfig
from sandbox_memory.config import MemoryLayoutConfig, MemoryReadConfig
from sandbox_memory.engines.model import ModelEngine
from sandbox_memory.manager import LayoutRuntime
from sandbox_memory.workspace import LocalWorkspace

FIX_RUN: dict[str, Any] = {
    "input": [{"role": "user", "content": "The invoice tests fail. Fix the bug."}],
    "generated_items": [
        {
            "type": "function_call",
            "name": "exec_command",
            "call_id": "c1",
            "arguments": json.dumps({"cmd": "python3 -m unittest -q"}),
        },
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": "Process exited with code 0\nOutput:\nOK\n",
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Fixed; the tests pass."}],
        },
    ],
}


def client_for(server: hp.ProviderServer) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def responses_engine(server: hp.ProviderServer, **settings: Any) -> ModelEngine:
    model = OpenAIResponsesModel(model="phase-one-test", openai_client=client_for(server))
    return ModelEngine(model, model_settings=ModelSettings(**settings) if settings else None)


def chat_engine(server: hp.ProviderServer, **settings: Any) -> ModelEngine:
    model = OpenAIChatCompletionsModel(model="phase-one-chat", openai_client=client_for(server))
    return ModelEngine(model, model_settings=ModelSettings(**settings) if settings else None)


def layout_runtime(root: Path, engine: Any, **generate: Any) -> LayoutRuntime:
    return LayoutRuntime(
        LocalWorkspace(root),
        layout=MemoryLayoutConfig(),
        generate=MemoryGenerateConfig(engine="model", **generate),
        read=MemoryReadConfig(),
        engine=engine,
    )


def reply(candidates: list[dict[str, Any]], **fields: Any) -> hp.Reply:
    body = {
        "rollout_summary": fields.get("summary", "Task: fix the invoice bug. Outcome: fixed."),
        "rollout_slug": fields.get("slug", "fix-invoice"),
        "raw_memory": fields.get("raw", "- tests: python3 -m unittest -q"),
        "candidates": [
            {"content": "", "kind": "fact", "action": "remember", "keywords": [], **c}
            for c in candidates
        ],
    }
    return hp.text(body)


def item_ids(root: Path, rollout: str) -> list[str]:
    segs = read_segments(root / f"sessions/{rollout}.jsonl")
    return [i["memory_item_id"] for s in segs for i in [*s["input"], *s["generated_items"]]]


def memory_md(root: Path) -> str:
    return (root / "memories/MEMORY.md").read_text()


def walk_objects(schema: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(schema, dict):
        if schema.get("type") == "object" or "properties" in schema:
            found.append(schema)
        for value in schema.values():
            found.extend(walk_objects(value))
    elif isinstance(schema, list):
        for value in schema:
            found.extend(walk_objects(value))
    return found


def has_key(schema: Any, key: str) -> bool:
    if isinstance(schema, dict):
        return key in schema or any(has_key(v, key) for v in schema.values())
    if isinstance(schema, list):
        return any(has_key(v, key) for v in schema)
    return False


# ------------------------------------------------------------------ requests


@pytest.mark.parametrize("api", ["responses", "chat"])
async def test_the_schema_sent_is_strict_structured_outputs(
    provider: hp.ProviderServer, workspace_root: Path, api: str
) -> None:
    engine = responses_engine(provider) if api == "responses" else chat_engine(provider)
    rt = layout_runtime(workspace_root, engine)
    await rt.record(FIX_RUN, rollout_id="conv")
    provider.script(reply([]))
    await rt.close()

    (request,) = provider.requests
    assert request.api == api
    body = request.body
    fmt = body["text"]["format"] if api == "responses" else body["response_format"]
    fmt = fmt if api == "responses" else fmt["json_schema"]
    assert fmt["strict"] is True
    schema = request.schema
    assert schema is not None
    # Azure OpenAI refuses `default`; OpenAI strict mode needs every property required.
    assert not has_key(schema, "default")
    objects = walk_objects(schema)
    assert len(objects) >= 2  # the extraction and a candidate
    for obj in objects:
        assert obj.get("additionalProperties") is False
        assert sorted(obj["required"]) == sorted(obj["properties"])
    candidate = schema["$defs"]["_CandidateOut"]["properties"]
    assert set(candidate) == {"key", "content", "kind", "sources", "action", "keywords"}


async def test_request_carries_model_settings_and_no_secret(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0" * 2
    run = json.loads(json.dumps(FIX_RUN))
    run["input"][0]["content"] += f" The deploy key is {secret}."
    engine = responses_engine(provider, temperature=0.2, max_tokens=900)
    rt = layout_runtime(workspace_root, engine, external_tools=("fetch_page",))
    await rt.record(run, rollout_id="conv")
    provider.script(reply([]))
    await rt.close()

    (request,) = provider.requests
    assert request.body["model"] == "phase-one-test"
    assert request.body["temperature"] == 0.2
    assert request.body["max_output_tokens"] == 900
    assert request.instructions.startswith(hp.PHASE_ONE_MARKER)
    sent = json.dumps(request.body)
    assert secret not in sent and "[REDACTED" in sent
    assert "The invoice tests fail" in request.user_text


async def test_external_tools_are_marked_in_the_transcript_the_model_receives(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    run = {
        "input": [{"role": "user", "content": "Look up the release notes."}],
        "generated_items": [
            {
                "type": "function_call",
                "name": "fetch_page",
                "call_id": "f1",
                "arguments": json.dumps({"url": "https://example.org/notes"}),
            },
            {"type": "function_call_output", "call_id": "f1", "output": "Release 2.0 is out."},
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": "c1",
                "arguments": json.dumps({"cmd": "ls"}),
            },
            {"type": "function_call_output", "call_id": "c1", "output": "README.md"},
        ],
    }
    rt = layout_runtime(workspace_root, responses_engine(provider), external_tools=("fetch_page",))
    await rt.record(run, rollout_id="conv")
    provider.script(reply([]))
    await rt.close()

    lines = provider.requests[0].user_text.splitlines()
    fetched = next(line for line in lines if "Release 2.0" in line)
    listed = next(line for line in lines if "README.md" in line and "output" in line)
    assert "(external)" in fetched
    assert "(external)" not in listed


# ---------------------------------------------------------------- settings


def test_a_mistyped_model_settings_key_is_refused_naming_it() -> None:
    with pytest.raises(MemoryConfigError) as err:
        MemoryGenerateConfig(phase_one_model_settings={"reasoning_effort": "low"})
    message = str(err.value)
    assert "reasoning_effort" in message and "reasoning" in message and "temperature" in message
    with pytest.raises(MemoryConfigError, match="temperature"):
        MemoryGenerateConfig(phase_one_model_settings={"temperature": "hot"})
    ok = MemoryGenerateConfig(phase_one_model_settings={"reasoning": {"effort": "low"}})
    assert isinstance(ok.phase_one_model_settings, ModelSettings)


async def test_dict_settings_reach_the_request_over_the_defaults(
    openai_env: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = LayoutRuntime(
        LocalWorkspace(workspace_root),
        layout=MemoryLayoutConfig(),
        generate=MemoryGenerateConfig(
            phase_one_model="gpt-test-mini",
            phase_one_model_settings={"reasoning": {"effort": "low"}, "timeout": 7},
        ),
        read=MemoryReadConfig(),
    )
    assert isinstance(rt.engine, ModelEngine)
    assert rt.engine.model_settings.timeout == 7
    assert rt.engine.model_settings.retry is not None  # the default stays
    await rt.record(FIX_RUN, rollout_id="conv")
    openai_env.script(reply([]))
    await rt.close()
    (request,) = openai_env.requests
    assert request.body["model"] == "gpt-test-mini"
    assert request.body["reasoning"] == {"effort": "low"}


# ------------------------------------------------------------ engine choice


@pytest.mark.parametrize("how", ["set_default_openai_key", "set_default_openai_client"])
def test_auto_detects_the_sdks_own_credential_settings(
    how: str, provider: hp.ProviderServer, caplog: pytest.LogCaptureFixture
) -> None:
    import agents
    from agents.models import _openai_shared

    from sandbox_memory.manager import resolve_engine

    caplog.set_level(logging.INFO, logger="sandbox_memory")
    key, client = _openai_shared._default_openai_key, _openai_shared._default_openai_client
    try:
        if how == "set_default_openai_key":
            agents.set_default_openai_key("sk-test-local", use_for_tracing=False)
        else:
            agents.set_default_openai_client(client_for(provider), use_for_tracing=False)
        engine = resolve_engine(MemoryGenerateConfig(phase_one_model="gpt-named-here"))
    finally:
        _openai_shared._default_openai_key, _openai_shared._default_openai_client = key, client
    assert isinstance(engine, ModelEngine)
    lines = [r.getMessage() for r in caplog.records if "engine" in r.getMessage()]
    assert any("gpt-named-here" in line and how in line for line in lines), lines


def test_auto_without_credentials_says_so() -> None:
    from sandbox_memory.engines.offline import OfflineEngine
    from sandbox_memory.manager import resolve_engine

    assert isinstance(resolve_engine(MemoryGenerateConfig()), OfflineEngine)


# --------------------------------------------------------------- citations

CITATION_FORMS = [
    "[{id}]",
    "{id}",
    "item {id}",
    "`{id}`",
    "({id})",
    "{upper}",
    "{seg}: {n}",
    "[{id}, {other}]",
    "{seg}",
]


@pytest.mark.parametrize("form", CITATION_FORMS)
async def test_citations_in_every_plausible_form_are_accepted(
    provider: hp.ProviderServer, workspace_root: Path, form: str
) -> None:
    rt = layout_runtime(workspace_root, responses_engine(provider))
    await rt.record(FIX_RUN, rollout_id="conv")
    ids = item_ids(workspace_root, "conv")
    seg, n = ids[1].split(":")
    cite = form.format(id=ids[1], upper=ids[1].upper(), seg=seg, n=n, other=ids[2])
    provider.script(
        reply(
            [
                {
                    "key": "test-command",
                    "content": "Run the tests with `python3 -m unittest -q`.",
                    "kind": "procedure",
                    "sources": [cite],
                }
            ]
        )
    )
    await rt.close()
    assert "test-command" in memory_md(workspace_root)
    assert len(provider.requests) == 1
    layout = json.loads((workspace_root / "memories/store/layout.json").read_text())
    cited = {s["item"] for s in layout["entries"]["test-command"]["sources"]}
    assert cited and cited <= set(ids)
    assert ids[1] in cited


async def test_a_preference_cited_by_segment_alone_is_not_taken_from_tool_output(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = layout_runtime(workspace_root, responses_engine(provider))
    await rt.record(FIX_RUN, rollout_id="conv")
    seg = item_ids(workspace_root, "conv")[0].split(":")[0]
    bad = {"key": "likes-tabs", "content": "Prefers tabs.", "kind": "preference", "sources": [seg]}
    provider.script(reply([bad]), reply([bad]))
    await rt.close()
    assert "likes-tabs" not in memory_md(workspace_root)


async def test_nonexistent_ids_get_one_retry_with_the_reasons_then_are_visible(
    provider: hp.ProviderServer, workspace_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox_memory")
    rt = layout_runtime(workspace_root, responses_engine(provider))
    await rt.record(FIX_RUN, rollout_id="conv")
    wrong = {"key": "tests", "content": "Run unittest.", "kind": "procedure", "sources": ["x:9"]}
    provider.script(reply([wrong]), reply([wrong]))
    await rt.close()

    first, second = provider.requests
    assert "x:9" not in first.user_text
    assert "had every candidate rejected" in second.user_text and "x:9" in second.user_text
    state = progress(workspace_root)["conv"]
    assert state["last_error"].startswith("all 1 candidate(s) rejected")
    assert "x:9" in state["last_error"]
    # One warning: the rejection of the retry's answer (the first answer's went back to it).
    assert [m for m in warnings_from(caplog) if "rejected" in m] == [
        "memory change to 'tests' rejected: it cites none of the items being processed "
        "(sources=['x:9'])"
    ]


async def test_a_retry_that_cites_correctly_is_kept(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = layout_runtime(workspace_root, responses_engine(provider))
    await rt.record(FIX_RUN, rollout_id="conv")
    good_id = item_ids(workspace_root, "conv")[1]
    cand = {"key": "tests", "content": "Run `python3 -m unittest -q`.", "kind": "procedure"}
    provider.script(reply([{**cand, "sources": ["nope"]}]), reply([{**cand, "sources": [good_id]}]))
    await rt.close()
    assert "`tests`" in memory_md(workspace_root) or "tests" in memory_md(workspace_root)
    assert progress(workspace_root)["conv"]["last_error"] is None


# ------------------------------------------------------------ a whole flow


async def test_record_close_next_run_with_the_model_engine_over_http(
    openai_env: hp.ProviderServer, client: Any, manifest: Any, workspace_root: Path, tmp_path: Path
) -> None:
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import LocalSnapshotSpec, SandboxAgent, SandboxRunConfig
    from agents.sandbox.capabilities import Filesystem, Shell
    from agents.testing import ScriptedModel, assistant_message

    from helpers import TEST_COMMAND, bug_fix_script
    from sandbox_memory import Memory

    def agent(model: ScriptedModel) -> SandboxAgent:
        # engine "auto": OPENAI_API_KEY is set (to the local server), so the model engine.
        return SandboxAgent(
            name="fixer",
            instructions="Fix bugs.",
            model=model,
            capabilities=[Memory(), Filesystem(), Shell()],
        )

    def extraction(request: hp.Request) -> hp.Reply:
        lines = [x for x in request.user_text.splitlines() if re.match(r"\[[\w-]+:\d+\]", x)]
        line = next((x for x in lines if TEST_COMMAND in x), None)
        if line is None:
            return reply([])
        cite = line.split("]")[0] + "]"  # the bracketed id, as models copy it
        return reply(
            [
                {
                    "key": "run-the-tests",
                    "content": f"Run the tests with `{TEST_COMMAND}`.",
                    "kind": "procedure",
                    "sources": [cite],
                }
            ]
        )

    openai_env.respond_with(extraction)
    snapshot = LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    sandbox = await client.create(manifest=manifest, snapshot=snapshot)
    async with sandbox:
        await Runner.run(
            agent(ScriptedModel(bug_fix_script())),
            "The invoice tests fail. Fix the bug.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
    assert len(openai_env.phase_one_requests()) == 1
    assert f"Run the tests with `{TEST_COMMAND}`" in memory_md(workspace_root)
    skill = workspace_root / "memories/skills/run-the-tests/SKILL.md"
    assert TEST_COMMAND in skill.read_text()

    resumed = await client.resume(sandbox.state)
    model2 = ScriptedModel([[assistant_message("Added a regression test.")]])
    async with resumed:
        await Runner.run(
            agent(model2),
            "Add a regression test.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=resumed)),
        )
    assert TEST_COMMAND in (model2.calls[0].system_instructions or "")
    assert len(openai_env.phase_one_requests()) == 2  # run 2 was extracted, once


# ------------------------------------------------------------------ failures


def _elapsed(since: float) -> float:
    return time.monotonic() - since
