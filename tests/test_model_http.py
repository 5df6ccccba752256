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
from faultlib import warnings_from
from helpers import (
    exec_items,
    layout_runtime,
    read_layout,
    read_progress,
    read_segments,
    run_payload,
)
from sandbox_memory import MemoryConfigError, MemoryGenerateConfig
from sandbox_memory.engines.model import ModelEngine
from sandbox_memory.runtime import LayoutRuntime

FIX_RUN: dict[str, Any] = run_payload(
    "The invoice tests fail. Fix the bug.",
    reply="Fixed; the tests pass.",
    when=None,
    items=[
        *exec_items("c1", "python3 -m unittest -q", "Process exited with code 0\nOutput:\nOK\n"),
    ],
)


def client_for(server: hp.ProviderServer) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)


def responses_engine(server: hp.ProviderServer, **settings: Any) -> ModelEngine:
    model = OpenAIResponsesModel(model="phase-one-test", openai_client=client_for(server))
    return ModelEngine(model, model_settings=ModelSettings(**settings) if settings else None)


def chat_engine(server: hp.ProviderServer, **settings: Any) -> ModelEngine:
    model = OpenAIChatCompletionsModel(model="phase-one-chat", openai_client=client_for(server))
    return ModelEngine(model, model_settings=ModelSettings(**settings) if settings else None)


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
    rt = layout_runtime(workspace_root, engine=engine)
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
    assert set(candidate) == {"key", "content", "kind", "sources", "action", "keywords", "subjects"}
    subjects = schema["$defs"]["_SubjectsOut"]["properties"]
    assert set(subjects) == {"files", "commands", "tests", "people", "tools"}


async def test_request_carries_model_settings_and_no_secret(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    secret = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0" * 2
    run = json.loads(json.dumps(FIX_RUN))
    run["input"][0]["content"] += f" The deploy key is {secret}."
    engine = responses_engine(provider, temperature=0.2, max_tokens=900)
    rt = layout_runtime(workspace_root, engine=engine, external_tools=("fetch_page",))
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
    run = run_payload(
        "Look up the release notes.",
        reply=None,
        when=None,
        items=[
            {
                "type": "function_call",
                "name": "fetch_page",
                "call_id": "f1",
                "arguments": json.dumps({"url": "https://example.org/notes"}),
            },
            {"type": "function_call_output", "call_id": "f1", "output": "Release 2.0 is out."},
            *exec_items("c1", "ls", "README.md"),
        ],
    )
    rt = layout_runtime(
        workspace_root, engine=responses_engine(provider), external_tools=("fetch_page",)
    )
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
    rt = layout_runtime(
        workspace_root,
        engine="auto",
        phase_one_model="gpt-test-mini",
        phase_one_model_settings={"reasoning": {"effort": "low"}, "timeout": 7},
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

    from sandbox_memory.runtime import resolve_engine

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
    from sandbox_memory.runtime import resolve_engine

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
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
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
    layout = read_layout(workspace_root)
    cited = {s["item"] for s in layout["entries"]["test-command"]["sources"]}
    assert cited and cited <= set(ids)
    assert ids[1] in cited


async def test_a_preference_cited_by_segment_alone_is_not_taken_from_tool_output(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
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
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
    await rt.record(FIX_RUN, rollout_id="conv")
    wrong = {"key": "tests", "content": "Run unittest.", "kind": "procedure", "sources": ["x:9"]}
    provider.script(reply([wrong]), reply([wrong]))
    await rt.close()

    first, second = provider.requests
    assert "x:9" not in first.user_text
    assert "had every candidate rejected" in second.user_text and "x:9" in second.user_text
    state = read_progress(workspace_root)["conv"]
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
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
    await rt.record(FIX_RUN, rollout_id="conv")
    good_id = item_ids(workspace_root, "conv")[1]
    cand = {"key": "tests", "content": "Run `python3 -m unittest -q`.", "kind": "procedure"}
    provider.script(reply([{**cand, "sources": ["nope"]}]), reply([{**cand, "sources": [good_id]}]))
    await rt.close()
    assert "`tests`" in memory_md(workspace_root) or "tests" in memory_md(workspace_root)
    assert read_progress(workspace_root)["conv"]["last_error"] is None


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
    # One command is a line of MEMORY.md; a skill of its own would only repeat it.
    assert not (workspace_root / "memories/skills/run-the-tests").exists()

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


BUDGET_SECONDS = 3.0
"""The close's time budget in the failure tests: short, so they stay fast."""


def sandbox_agent(model: Any, memory: Any) -> Any:
    from agents.sandbox import SandboxAgent
    from agents.sandbox.capabilities import Filesystem, Shell

    return SandboxAgent(
        name="fixer",
        instructions="Fix bugs.",
        model=model,
        capabilities=[memory, Filesystem(), Shell()],
    )


def http_memory(server: hp.ProviderServer, **generate: Any) -> Any:
    from sandbox_memory import Memory

    model = OpenAIResponsesModel(model="phase-one-test", openai_client=client_for(server))
    return Memory(
        generate=MemoryGenerateConfig(
            phase_one_model=model, max_seconds_per_close=BUDGET_SECONDS, **generate
        )
    )


def good_extraction(request: hp.Request) -> hp.Reply:
    ids = re.findall(r"^\[([\w-]+:\d+)\]", request.user_text, flags=re.MULTILINE)
    return reply(
        [
            {
                "key": "invoice-fix",
                "content": "invoice_total ignored the discount; fixed in invoice.py.",
                "kind": "fact",
                "sources": ids[:1],
            }
        ]
    )


FAILURES: dict[str, Any] = {
    "hang": hp.hang,
    "429 retry-after": lambda: hp.status(429, retry_after=30),
    "500": lambda: hp.status(500),
    "invalid JSON": lambda: hp.text('{"rollout_summary": "cut'),
    "schema mismatch": lambda: hp.text({"summary": "no such field"}),
    "refusal": lambda: hp.refusal("I won't summarise this."),
    "incomplete": lambda: hp.incomplete('{"rollout_summary": "Fixed the'),
}


@pytest.mark.slow
@pytest.mark.parametrize("failure", list(FAILURES))
async def test_a_failing_provider_never_holds_the_close_past_its_budget(
    failure: str,
    provider: hp.ProviderServer,
    client: Any,
    manifest: Any,
    workspace_root: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import LocalSnapshotSpec, SandboxRunConfig
    from agents.testing import ScriptedModel, assistant_message

    from helpers import bug_fix_script
    from sandbox_memory import _sdk
    from sandbox_memory.extract import rollout as phase_one

    monkeypatch.setattr(phase_one, "BACKOFF_BASE_SECONDS", 0.0)  # the next close may retry
    real_time, skew = time.time, [0.0]
    monkeypatch.setattr(time, "time", lambda: real_time() + skew[0])
    caplog.set_level(logging.INFO, logger="sandbox_memory")
    provider.respond_with(lambda request: FAILURES[failure]())
    snapshots = tmp_path / "snapshots"
    sandbox = await client.create(
        manifest=manifest, snapshot=LocalSnapshotSpec(base_path=snapshots)
    )
    async with sandbox:
        await Runner.run(
            sandbox_agent(ScriptedModel(bug_fix_script()), http_memory(provider)),
            "The invoice tests fail. Fix the bug.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
        closing = time.monotonic()
    took = _elapsed(closing)

    assert took < BUDGET_SECONDS + _sdk.CLOSE_GRACE_SECONDS, took
    assert provider.phase_one_requests()  # the provider was asked (and failed)
    assert any(snapshots.iterdir())  # the snapshot was taken
    (rollout,) = [p.stem for p in (workspace_root / "sessions").glob("*.jsonl")]
    state = read_progress(workspace_root).get(rollout, {})
    assert state.get("offset", 0) == 0  # nothing extracted: still pending
    lines = warnings_from(caplog)
    assert len(lines) == 1, lines
    if failure == "hang":
        assert "for the next close" in lines[0] and rollout in lines[0]
        assert state.get("attempts", 0) == 0
    else:
        assert f"memory extraction of rollout {rollout} failed" in lines[0]
        assert state["last_error"] and state["attempts"] == 1
    expected = {
        "429 retry-after": "HTTP 429",
        "500": "HTTP 500",
        "invalid JSON": "not valid JSON",
        "schema mismatch": "does not match the schema",
        "refusal": "refused",
        "incomplete": "incomplete",
    }.get(failure)
    if expected:
        assert expected in state["last_error"]

    if failure == "429 retry-after":  # the next attempt waits for the time the provider asked
        assert state["next_attempt_at"] >= time.time() + 25, state
        skew[0] += 31

    # The provider recovers: the next close extracts the first run too.
    provider.respond_with(good_extraction)
    resumed = await client.resume(sandbox.state)
    async with resumed:
        await Runner.run(
            sandbox_agent(
                ScriptedModel([[assistant_message("Nothing to do.")]]), http_memory(provider)
            ),
            "Check the workspace.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=resumed)),
        )
    state = read_progress(workspace_root)[rollout]
    assert state["offset"] > 0 and state["status"] == "ok"
    assert "invoice-fix" in memory_md(workspace_root)


@pytest.mark.slow
async def test_a_run_waits_a_bounded_time_for_the_previous_runs_extraction(
    provider: hp.ProviderServer, client: Any, manifest: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import SandboxRunConfig
    from agents.testing import ScriptedModel, assistant_message

    from sandbox_memory import _sdk

    wait = 0.3
    provider.respond_with(lambda request: hp.hang())
    sandbox = await client.create(manifest=manifest)
    memory = http_memory(provider, wait_for_extraction_seconds=wait)
    async with sandbox:
        config = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(
            sandbox_agent(ScriptedModel([[assistant_message("Done.")]]), memory),
            "Say done.",
            run_config=config,
        )
        started = time.monotonic()
        second = ScriptedModel([[assistant_message("Done again.")]])
        await Runner.run(sandbox_agent(second, memory), "Say it again.", run_config=config)
        took = _elapsed(started)
        closing = time.monotonic()
    assert took < wait + 1.0, took
    assert _elapsed(closing) < BUDGET_SECONDS + _sdk.CLOSE_GRACE_SECONDS
    assert any("still being extracted" in m for m in warnings_from(caplog))


# ------------------------------------------------------ counts and summaries


async def test_the_close_counts_every_request_and_the_after_run_extraction(
    provider: hp.ProviderServer,
    client: Any,
    manifest: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import SandboxRunConfig
    from agents.testing import ScriptedModel

    from helpers import bug_fix_script
    from sandbox_memory.engines import model as model_module

    monkeypatch.setattr(model_module, "RETRY_BACKOFF_SECONDS", 0.01)
    caplog.set_level(logging.INFO, logger="sandbox_memory")
    provider.script(hp.status(500), hp.status(503), good_extraction)
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            sandbox_agent(ScriptedModel(bug_fix_script()), http_memory(provider)),
            "The invoice tests fail. Fix the bug.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
    assert len(provider.phase_one_requests()) == 3
    (summary,) = [
        r.getMessage() for r in caplog.records if r.getMessage().startswith("memory close:")
    ]
    assert summary.startswith("memory close: 1 rollout(s) extracted, 3 model call(s)"), summary


# ------------------------------------------------- keys across the memory


async def _learn(
    rt: LayoutRuntime, provider: hp.ProviderServer, rollout: str, text: str, cands: list[Any]
) -> list[str]:
    await rt.record({"input": [{"role": "user", "content": text}]}, rollout_id=rollout)
    ids = item_ids(rt.ws.root, rollout)  # type: ignore[attr-defined]
    provider.script(reply([{**c, "sources": [ids[-1]]} for c in cands]))
    await rt.close()
    return ids


async def test_forget_of_a_shared_entry_retracts_it_through_the_engine(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
    steps = "Run `make generate`, then `make test`."
    procedure = {"key": "run-tests", "content": steps, "kind": "procedure"}
    await _learn(rt, provider, "a", "Tests run with make test.", [procedure])
    assert "run-tests" in memory_md(workspace_root)
    assert (workspace_root / "memories/skills/run-tests/SKILL.md").exists()

    forget = {"key": "run-tests", "kind": "procedure", "action": "forget"}
    await _learn(rt, provider, "b", "Forget that: make test is gone, use tox.", [forget])
    # The model was shown the shared entry it may retract.
    assert '"key": "run-tests"' in provider.requests[-1].user_text
    assert "run-tests" not in memory_md(workspace_root)
    assert not (workspace_root / "memories/skills/run-tests/SKILL.md").exists()
    layout = read_layout(workspace_root)
    entry = layout["entries"]["run-tests"]
    assert entry["status"] == "retracted"
    assert {s["conversation"] for s in entry["sources"]} == {"a", "b"}


async def test_one_key_is_one_fact_and_a_live_edit_touches_only_its_line(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
    host = {"key": "staging-host", "kind": "fact"}
    await _learn(rt, provider, "a", "Staging is on host-a.", [{**host, "content": "host-a"}])
    other = {"key": "ci-runner", "kind": "fact", "content": "CI runs on runner-1."}
    await _learn(
        rt, provider, "b", "Staging moved to host-b.", [{**host, "content": "host-b"}, other]
    )

    text = memory_md(workspace_root)
    lines = [line for line in text.splitlines() if "**staging-host**" in line]
    assert len(lines) == 1 and "host-b" in lines[0]

    # A third conversation's model sees the key it may update, as MEMORY.md shows it.
    await _learn(rt, provider, "c", "Nothing new.", [])
    known = provider.requests[-1].user_text
    assert '"key": "staging-host"' in known and "host-b" in known

    # A live edit of an unrelated line changes that line only.
    edited = text.replace("CI runs on runner-1.", "CI runs on runner-2.")
    (workspace_root / "memories/MEMORY.md").write_text(edited)
    await rt.close()
    conv_a = await rt.store.load_conversation("a")
    conv_b = await rt.store.load_conversation("b")
    assert conv_a.entries["staging-host"].content == "host-a"
    assert conv_b.entries["staging-host"].content == "host-b"
    assert conv_b.entries["ci-runner"].content == "CI runs on runner-2."
    lines = [line for line in memory_md(workspace_root).splitlines() if "**staging-host**" in line]
    assert len(lines) == 1 and "host-b" in lines[0]


# ------------------------------------------------------------ history replay


async def test_a_replayed_history_is_recognised_not_recorded_or_extracted_again(
    provider: hp.ProviderServer, client: Any, manifest: Any, workspace_root: Path
) -> None:
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import SandboxRunConfig
    from agents.testing import ScriptedModel, assistant_message

    from helpers import TEST_COMMAND, bug_fix_script

    cited: list[list[str]] = []

    def extraction(request: hp.Request) -> hp.Reply:
        ids = re.findall(r"^\[([\w-]+:\d+)\]", request.user_text, flags=re.MULTILINE)
        cited.append(ids)
        return reply([])

    provider.respond_with(extraction)
    memory = http_memory(provider)
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        config = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        first = await Runner.run(
            sandbox_agent(ScriptedModel(bug_fix_script()), memory),
            "Fix the bug.",
            run_config=config,
        )
        second = await Runner.run(
            sandbox_agent(ScriptedModel([[assistant_message("Added.")]]), memory),
            [*first.to_input_list(), {"role": "user", "content": "Now add a test."}],
            run_config=config,
        )
        await Runner.run(
            sandbox_agent(ScriptedModel([[assistant_message("You're welcome.")]]), memory),
            [*second.to_input_list(), {"role": "user", "content": "Thanks."}],
            run_config=config,
        )

    (rollout,) = list((workspace_root / "sessions").glob("*.jsonl"))  # one conversation
    segments = read_segments(rollout)
    assert len(segments) == 3
    first_ids = [
        i["memory_item_id"] for i in [*segments[0]["input"], *segments[0]["generated_items"]]
    ]
    replayed = [i for i in segments[2]["input"] if i.get("type") == "memory_replayed_item"]
    new = [i for i in segments[2]["input"] if i.get("type") != "memory_replayed_item"]
    # Run 3 replays run 1 (8 items), run 2's message and reply: all recognised, by their ids.
    assert [i["memory_item_id"] for i in replayed][: len(first_ids)] == first_ids
    assert len(replayed) == len(first_ids) + 2
    assert [i.get("content") for i in new] == ["Thanks."]
    assert TEST_COMMAND not in json.dumps(segments[2])  # not stored again
    # Each item is extracted once, under one id.
    assert len(cited) == 3
    assert set(cited[1]).isdisjoint(cited[0]) and set(cited[2]).isdisjoint(cited[0] + cited[1])
    assert all(
        TEST_COMMAND not in r.user_text.split("Transcript of the new part:")[1]
        for r in provider.phase_one_requests()[1:]
    )
    # A line grows by what is new, not by the history.
    sizes = [len(json.dumps(s)) for s in segments]
    assert sizes[2] < sizes[0]


@pytest.mark.parametrize("state", ["extracted", "pending", "notes lost"])
async def test_replays_are_recognised_by_a_new_process(workspace_root: Path, state: str) -> None:
    from sandbox_memory.engines.offline import OfflineEngine

    first = layout_runtime(workspace_root, engine=OfflineEngine())
    await first.record(FIX_RUN, rollout_id="conv")
    notes = workspace_root / "memories/store/items/conv.txt"
    if state != "pending":
        await first.close()
        assert notes.exists()
    if state == "notes lost":
        notes.unlink()  # rebuilt from the rollout
    later = layout_runtime(workspace_root, engine=OfflineEngine())
    history = [*FIX_RUN["input"], *FIX_RUN["generated_items"]]
    # Written out: a payload without generated_items, a form run_payload does not build.
    again = {"input": [*history, {"role": "user", "content": "Fix the bug."}]}
    await later.record(again, rollout_id="conv")
    segments = read_segments(workspace_root / "sessions/conv.jsonl")
    kinds = [i.get("type") for i in segments[1]["input"]]
    assert kinds == ["memory_replayed_item"] * len(history) + [None]
    # Said again as the new message, the same words are new: kept in full.
    assert segments[1]["input"][-1]["content"] == "Fix the bug."


async def test_replays_of_items_another_process_recorded_are_recognised(
    workspace_root: Path,
) -> None:
    """A process keeps its conversations' item digests between runs; at a run's start they
    are checked against the rollouts, so items another process recorded meanwhile are
    recognised as replayed, not recorded again."""

    from sandbox_memory.engines.offline import OfflineEngine

    first = layout_runtime(workspace_root, engine=OfflineEngine())
    await first.start_run()
    await first.record(FIX_RUN, rollout_id="conv")
    history = [*FIX_RUN["input"], *FIX_RUN["generated_items"]]
    asked = {"role": "user", "content": "And the docs?"}
    other = layout_runtime(workspace_root, engine=OfflineEngine())
    await other.record({"input": [*history, asked]}, rollout_id="conv")
    await first.start_run()
    await first.record(
        {"input": [*history, asked, {"role": "user", "content": "Thanks."}]}, rollout_id="conv"
    )
    segments = read_segments(workspace_root / "sessions/conv.jsonl")
    assert len(segments) == 3
    kinds = [i.get("type") for i in segments[2]["input"]]
    assert kinds == ["memory_replayed_item"] * (len(history) + 1) + [None]


# ------------------------------------------------------------------- prompt


def test_the_phase_one_prompt_states_the_limits_the_code_enforces() -> None:
    from sandbox_memory.engines.base import ENTRY_KINDS
    from sandbox_memory.extract.rollout import SLUG_MAX
    from sandbox_memory.render.files import load_prompt
    from sandbox_memory.stores.records import KEY_RE, MAX_CONTENT_CHARS

    prompt = load_prompt("phase_one.md")
    assert len(prompt) / 4 < 1_000  # well under 1,000 tokens
    key_limit = re.search(r"`key`: .*?at most (\d+) characters", prompt, flags=re.S)
    content_limit = re.search(r"`content`: .*?at most (\d+) characters", prompt, flags=re.S)
    slug_limit = re.search(r"`rollout_slug`: .*?at most (\d+) characters", prompt, flags=re.S)
    assert key_limit and content_limit and slug_limit
    assert KEY_RE.fullmatch("a" * int(key_limit.group(1)))
    assert not KEY_RE.fullmatch("a" * (int(key_limit.group(1)) + 1))
    assert int(content_limit.group(1)) == MAX_CONTENT_CHARS
    assert int(slug_limit.group(1)) == SLUG_MAX
    for kind in ENTRY_KINDS:
        assert f"`{kind}` (" in prompt
    assert "empty `candidates` list is right" in prompt
    for part in ("the task", "the outcome", "what worked and what", "files changed"):
        assert part in prompt.replace("\n  ", " ")


# ------------------------------------------------------------ one entry per subject


def _log_details(root: Path) -> str:
    return "\n".join(
        str(json.loads(line).get("detail") or "")
        for line in (root / "memories/store/log.jsonl").open()
    )


async def test_two_new_entries_on_one_subject_are_one_entry_and_the_fold_is_logged(
    provider: hp.ProviderServer, workspace_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
    subjects = {
        "files": ["acme/invoice.py"],
        "commands": [],
        "tests": ["tests/test_invoice.py::test_tax"],
        "people": [],
        "tools": [],
    }
    fix = {
        "key": "fix-invoice-tax",
        "content": "`tests/test_invoice.py::test_tax` failed: `acme/invoice.py` added the rate.",
        "subjects": subjects,
    }
    again = {
        "key": "invoice-tax-bug",
        "content": "Fixed `acme/invoice.py` so `tests/test_invoice.py::test_tax` passes.",
        "subjects": subjects,
    }

    with caplog.at_level(logging.INFO, logger="sandbox_memory"):
        await _learn(rt, provider, "a", "The tax test fails; fix it.", [fix, again])

    entries = (await rt.store.load_conversation("a")).entries
    assert [k for k, e in entries.items() if e.status == "active"] == ["fix-invoice-tax"]
    assert "added the rate" in entries["fix-invoice-tax"].content
    assert "so `tests/test_invoice.py::test_tax` passes" in entries["fix-invoice-tax"].content
    assert "invoice-tax-bug folded into fix-invoice-tax" in _log_details(workspace_root)
    assert any("invoice-tax-bug" in r.getMessage() for r in caplog.records)


async def test_a_new_entry_repeating_a_known_one_updates_it_instead(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
    first = {
        "key": "test-command",
        "kind": "procedure",
        "content": "Run the tests with `make check`.",
    }
    await _learn(rt, provider, "a", "Run the tests with make check.", [first])
    repeat = {
        "key": "run-the-suite",
        "kind": "procedure",
        "content": "Use `make check` to run the whole test suite.",
    }
    await _learn(rt, provider, "b", "As always, the suite is make check.", [repeat])

    layout = read_layout(workspace_root)
    procedures = [k for k, e in layout["entries"].items() if e["kind"] == "procedure"]
    assert procedures == ["test-command"]
    assert "run-the-suite folded into test-command" in _log_details(workspace_root)


async def test_two_changes_to_one_key_in_one_answer_are_merged_not_rejected(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = layout_runtime(workspace_root, engine=responses_engine(provider))
    host = {"key": "staging", "kind": "fact"}
    await _learn(
        rt,
        provider,
        "a",
        "Staging is on host-a; it runs Postgres 16.",
        [
            {**host, "content": "Staging is on host-a."},
            {**host, "content": "Staging runs Postgres 16."},
        ],
    )

    entry = (await rt.store.load_conversation("a")).entries["staging"]
    assert entry.content == "Staging is on host-a. Staging runs Postgres 16."
    assert "rejected" not in _log_details(workspace_root)
