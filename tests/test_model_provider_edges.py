"""The model engine at the edges of a provider's behaviour, over real HTTP.

- A ``retry-after`` the close cannot wait for is carried into the rollout's next attempt, in
  each form a provider sends it (seconds, an HTTP date, ``retry-after-ms``).
- A memory model given by name works in a process that runs ``asyncio.run`` more than once.
- A model object that is neither of the SDK's OpenAI classes (as ``LitellmModel`` is) drives
  phase 1 through the SDK's ``Model`` interface alone.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from agents import AgentOutputSchemaBase, Handoff, ModelSettings, OpenAIResponsesModel, Tool
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.usage import Usage

import http_provider as hp
from faultlib import warnings_from
from helpers import layout_runtime, read_progress
from sandbox_memory import MemoryGenerateConfig
from sandbox_memory.engines.model import ExtractionSchema, ModelEngine
from sandbox_memory.runtime import LayoutRuntime
from test_model_http import FIX_RUN, client_for, memory_md, reply

BUDGET_SECONDS = 3.0


class Clock:
    """``time.time`` moved on by hand (the wall clock the rollout's schedule is kept in)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.skew = 0.0
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + self.skew)

    def advance(self, seconds: float) -> None:
        self.skew += seconds


def runtime(root: Path, server: hp.ProviderServer) -> LayoutRuntime:
    model = OpenAIResponsesModel(model="phase-one-test", openai_client=client_for(server))
    return layout_runtime(
        root,
        engine=ModelEngine(model),
        phase_one_model=model,
        max_seconds_per_close=BUDGET_SECONDS,
    )


def good(request: hp.Request) -> hp.Reply:
    cite = next(line.split("]")[0][1:] for line in request.user_text.splitlines() if "[" in line)
    return reply(
        [
            {
                "key": "test-command",
                "content": "Run the tests with `python3 -m unittest -q`.",
                "kind": "procedure",
                "sources": [cite],
            }
        ]
    )


def http_date(seconds_from_now: float) -> str:
    return email.utils.formatdate(time.time() + seconds_from_now, usegmt=True)


# --------------------------------------------------------------- retry-after


RETRY_AFTER_FORMS: dict[str, Any] = {
    "seconds": lambda: {"retry-after": "120"},
    "http-date": lambda: {"retry-after": http_date(120)},
    "milliseconds": lambda: {"retry-after-ms": "120000"},
}


@pytest.mark.parametrize("form", list(RETRY_AFTER_FORMS))
async def test_a_retry_after_longer_than_the_close_is_carried_into_the_next_attempt(
    form: str,
    provider: hp.ProviderServer,
    workspace_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock(monkeypatch)
    caplog.set_level(logging.INFO, logger="sandbox_memory")
    rt = runtime(workspace_root, provider)
    await rt.record(FIX_RUN, rollout_id="conv")
    provider.respond_with(lambda request: hp.status(429, headers=RETRY_AFTER_FORMS[form]()))
    asked_at = time.time()
    await rt.close()

    assert len(provider.requests) == 1  # not retried within the close: it cannot wait 120 s
    state = read_progress(workspace_root)["conv"]
    assert state["offset"] == 0 and state["attempts"] == 1
    assert "HTTP 429" in state["last_error"]
    assert asked_at + 115 <= state["next_attempt_at"] <= time.time() + 121, state
    (line,) = warnings_from(caplog)
    assert "retry-after" in line and "conv" in line

    # A minute later the provider would answer, but it asked for two: no request yet.
    provider.respond_with(good)
    clock.advance(60)
    await rt.close()
    assert len(provider.requests) == 1
    assert read_progress(workspace_root)["conv"]["offset"] == 0

    # Past the time it asked for, the next close extracts the run.
    clock.advance(61)
    await rt.close()
    assert len(provider.requests) == 2
    state = read_progress(workspace_root)["conv"]
    assert state["offset"] > 0 and state["status"] == "ok"
    assert "test-command" in memory_md(workspace_root)


async def test_a_short_retry_after_ms_is_waited_for_within_the_close(
    provider: hp.ProviderServer, workspace_root: Path
) -> None:
    rt = runtime(workspace_root, provider)
    await rt.record(FIX_RUN, rollout_id="conv")
    provider.script(hp.status(429, headers={"retry-after-ms": "50"}), good)
    await rt.close()
    first, second = provider.requests
    # retry-after-ms wins over the engine's own first backoff of a second.
    assert second.at - first.at < 0.9
    assert read_progress(workspace_root)["conv"]["status"] == "ok"


def test_retry_after_forms_are_read_as_seconds_from_now() -> None:
    from sandbox_memory.engines import model as engine

    def error(headers: dict[str, str]) -> openai.RateLimitError:
        request = httpx2.Request("POST", "http://127.0.0.1/v1/responses")
        response = httpx2.Response(429, headers=headers, request=request)
        return openai.RateLimitError("slow down", response=response, body=None)

    def after(headers: dict[str, str]) -> float | None:
        return engine._retry_after(error(headers))

    assert after({"retry-after": "7"}) == 7.0
    assert after({"retry-after-ms": "1500"}) == 1.5
    assert after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert after({"retry-after-ms": "soon", "retry-after": "9"}) == 9.0
    got = after({"retry-after": http_date(300)})
    assert got is not None and 298 <= got <= 300
    assert after({"retry-after": http_date(-300)}) == 0.0  # a date passed: now
    assert after({"retry-after": "next tuesday"}) is None
    assert after({}) is None
    failure = engine.describe_failure(error({"retry-after": "120"}), ModelSettings())
    assert failure.transient and failure.retry_at is not None
    assert time.time() + 119 <= failure.retry_at <= time.time() + 120


# ------------------------------------------------------- two event loops


def test_a_model_given_by_name_works_across_two_asyncio_runs(
    openai_env: hp.ProviderServer, tmp_path: Path
) -> None:
    """A script that runs ``asyncio.run`` twice (one run each) with ``phase_one_model`` a name:
    the second extraction reaches the provider too (it failed with "Event loop is closed")."""

    openai_env.respond_with(good)
    roots = [tmp_path / "one", tmp_path / "two"]
    engine: list[Any] = []

    async def one_run(root: Path) -> None:
        root.mkdir()
        rt = layout_runtime(
            root, engine=engine[0] if engine else "model", phase_one_model="phase-one-test"
        )
        engine[:] = [rt.engine]
        await rt.record(FIX_RUN, rollout_id="conv")
        await rt.close()

    for root in roots:
        asyncio.run(one_run(root))
    assert len(openai_env.phase_one_requests()) == 2
    for root in roots:
        state = read_progress(root)["conv"]
        assert state["status"] == "ok" and state["last_error"] is None, state
        assert "test-command" in memory_md(root)

    # A fresh engine (a new Memory in the same process) works on a third loop as well.
    engine.clear()
    asyncio.run(one_run(tmp_path / "three"))
    assert read_progress(tmp_path / "three")["conv"]["status"] == "ok"


def test_the_agents_own_model_given_by_name_works_across_two_asyncio_runs(
    openai_env: hp.ProviderServer, tmp_path: Path
) -> None:
    """A script running a ``SandboxAgent(model="<name>")`` with memory in two ``asyncio.run``
    calls: the agent's turn in the second reaches the provider too (the SDK's shared HTTP
    client belonged to the first, closed loop: "Event loop is closed")."""

    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
    from agents.sandbox.capabilities import Filesystem, Shell
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

    from sandbox_memory import Memory

    def respond(request: hp.Request) -> hp.Reply:
        return good(request) if request.is_phase_one else hp.text("Done: the tests pass.")

    openai_env.respond_with(respond)
    generate = MemoryGenerateConfig(engine="model", phase_one_model="phase-one-test")

    async def one_run(root: Path) -> str:
        root.mkdir()
        sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
        agent = SandboxAgent(
            name="fixer",
            instructions="Fix bugs.",
            model="agent-test-model",
            capabilities=[Memory(generate=generate), Filesystem(), Shell()],
        )
        async with sandbox:
            result = await Runner.run(
                agent,
                "Run the tests with `python3 -m unittest -q`.",
                run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
            )
        return str(result.final_output)

    outputs = [asyncio.run(one_run(tmp_path / name)) for name in ("one", "two")]
    assert outputs == ["Done: the tests pass."] * 2
    turns = [r for r in openai_env.requests if not r.is_phase_one]
    assert [r.body.get("model") for r in turns] == ["agent-test-model"] * 2
    assert len(openai_env.phase_one_requests()) == 2
    for name in ("one", "two"):
        states = [p["status"] for p in read_progress(tmp_path / name).values()]
        assert states == ["ok"], states


# ------------------------------------------------- a LitellmModel-like model


class LitellmStyleRateLimit(openai.RateLimitError):
    """Raised the way LiteLLM raises a provider's 429: an ``openai`` error class (LiteLLM's
    inherit from them) whose ``response`` is a stand-in without the provider's headers,
    which travel in ``litellm_response_headers``."""

    def __init__(self, message: str, headers: httpx2.Headers) -> None:
        request = httpx2.Request("POST", "https://litellm.invalid/chat/completions")
        super().__init__(message, response=httpx2.Response(429, request=request), body=None)
        self.litellm_response_headers = headers


class LitellmLikeModel(Model):
    """An ``agents.Model`` used the way the SDK's ``LitellmModel`` is: not one of the SDK's
    OpenAI classes, its own HTTP call to a chat-completions endpoint (messages and
    ``response_format`` built with the SDK's chat converter, as LitellmModel builds them),
    ``ModelSettings.timeout`` not passed on (LitellmModel does not pass it; a ``timeout`` in
    ``extra_args`` reaches the call), and failures raised as LiteLLM raises them."""

    def __init__(self, model: str, base_url: str) -> None:
        self.model = model
        self.base_url = base_url
        self.timeouts: list[float | None] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any | None = None,
    ) -> ModelResponse:
        from agents.models.chatcmpl_converter import Converter
        from openai import omit
        from openai.types.chat import ChatCompletionMessage

        messages: list[Any] = list(Converter.items_to_messages(input, model=self.model))
        if system_instructions:
            messages.insert(0, {"role": "system", "content": system_instructions})
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        response_format = Converter.convert_response_format(output_schema)
        if response_format is not omit:
            body["response_format"] = response_format
        extra = dict(model_settings.extra_args or {})
        timeout = extra.pop("timeout", None)
        self.timeouts.append(timeout)
        async with httpx2.AsyncClient(timeout=timeout) as http:
            reply = await http.post(f"{self.base_url}/chat/completions", json={**body, **extra})
        if reply.status_code == 429:
            raise LitellmStyleRateLimit("litellm.RateLimitError: slow down", reply.headers)
        if reply.status_code >= 400:
            raise openai.InternalServerError(
                f"litellm.InternalServerError: {reply.text[:80]}", response=reply, body=None
            )
        message = ChatCompletionMessage.model_validate(reply.json()["choices"][0]["message"])
        return ModelResponse(
            output=Converter.message_to_output_items(message),
            usage=Usage(requests=1),
            response_id=None,
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("phase 1 does not stream")


def litellm_memory(model: LitellmLikeModel, **generate: Any) -> Any:
    from sandbox_memory import Memory

    return Memory(
        generate=MemoryGenerateConfig(
            phase_one_model=model, max_seconds_per_close=BUDGET_SECONDS, **generate
        )
    )


async def sandbox_run(client: Any, manifest: Any, memory: Any, resume: Any = None) -> Any:
    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import SandboxAgent, SandboxRunConfig
    from agents.sandbox.capabilities import Filesystem, Shell
    from agents.testing import ScriptedModel

    from helpers import bug_fix_script

    sandbox = await (
        client.resume(resume) if resume is not None else client.create(manifest=manifest)
    )
    agent = SandboxAgent(
        name="fixer",
        instructions="Fix bugs.",
        model=ScriptedModel(bug_fix_script()),
        capabilities=[memory, Filesystem(), Shell()],
    )
    async with sandbox:
        await Runner.run(
            agent,
            "The invoice tests fail. Fix the bug.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox)),
        )
    return sandbox


async def test_a_litellm_like_model_extracts_through_the_engine(
    provider: hp.ProviderServer,
    client: Any,
    manifest: Any,
    workspace_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox_memory")
    provider.respond_with(good)
    model = LitellmLikeModel("anthropic/claude-test", provider.base_url)
    settings = {"extra_args": {"timeout": 30.0}}
    await sandbox_run(client, manifest, litellm_memory(model, phase_one_model_settings=settings))

    (request,) = provider.phase_one_requests()
    assert request.api == "chat" and request.body["model"] == "anthropic/claude-test"
    fmt = request.body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"] == ExtractionSchema().json_schema()  # strict, no default
    assert model.timeouts == [30.0]  # the documented way to bound a LiteLLM attempt
    assert "test-command" in memory_md(workspace_root)
    assert any("model engine with LitellmLikeModel" in r.getMessage() for r in caplog.records)
    assert warnings_from(caplog) == []


async def test_a_litellm_rate_limit_keeps_its_retry_after(
    provider: hp.ProviderServer,
    client: Any,
    manifest: Any,
    workspace_root: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """LiteLLM carries the provider's ``retry-after`` in ``litellm_response_headers``, not in
    its error's response: it is read there, and carried into the next attempt."""

    clock = Clock(monkeypatch)
    provider.respond_with(lambda request: hp.status(429, retry_after=120))
    model = LitellmLikeModel("anthropic/claude-test", provider.base_url)
    sandbox = await sandbox_run(client, manifest, litellm_memory(model))
    (rollout,) = [p.stem for p in (workspace_root / "sessions").glob("*.jsonl")]
    state = read_progress(workspace_root)[rollout]
    assert "HTTP 429" in state["last_error"] and "retry-after 120s" in state["last_error"]
    assert state["next_attempt_at"] >= time.time() + 115
    (line,) = warnings_from(caplog)
    assert "retry-after" in line

    provider.respond_with(good)
    clock.advance(125)
    await sandbox_run(client, manifest, litellm_memory(model), resume=sandbox.state)
    assert read_progress(workspace_root)[rollout]["status"] == "ok"
    assert "test-command" in memory_md(workspace_root)


@pytest.mark.slow
async def test_a_hung_litellm_like_model_is_bounded_by_the_close(
    provider: hp.ProviderServer,
    client: Any,
    manifest: Any,
    workspace_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """LitellmModel does not pass ``ModelSettings.timeout`` on: the phase-1 default of 60 s
    does not reach it, and the close's own deadline still ends the attempt."""

    from sandbox_memory import _sdk

    provider.respond_with(lambda request: hp.hang())
    model = LitellmLikeModel("anthropic/claude-test", provider.base_url)
    started = time.monotonic()
    await sandbox_run(client, manifest, litellm_memory(model))
    assert time.monotonic() - started < 2 * BUDGET_SECONDS + _sdk.CLOSE_GRACE_SECONDS + 5
    assert model.timeouts and set(model.timeouts) == {None}
    (rollout,) = [p.stem for p in (workspace_root / "sessions").glob("*.jsonl")]
    state = read_progress(workspace_root).get(rollout, {})
    assert state.get("offset", 0) == 0 and state.get("attempts", 0) == 0  # deferred
    assert any("for the next close" in m for m in warnings_from(caplog))
