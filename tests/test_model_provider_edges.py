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
from pathlib import Path
from typing import Any

import pytest
from agents import ModelSettings, OpenAIResponsesModel

import http_provider as hp
from faultlib import progress, warnings_from
from sandbox_memory import MemoryGenerateConfig
from sandbox_memory.config import MemoryLayoutConfig, MemoryReadConfig
from sandbox_memory.engines.model import ModelEngine
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.workspace import LocalWorkspace
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
    return LayoutRuntime(
        LocalWorkspace(root),
        layout=MemoryLayoutConfig(),
        generate=MemoryGenerateConfig(
            engine="model", phase_one_model=model, max_seconds_per_close=BUDGET_SECONDS
        ),
        read=MemoryReadConfig(),
        engine=ModelEngine(model),
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
    state = progress(workspace_root)["conv"]
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
    assert progress(workspace_root)["conv"]["offset"] == 0

    # Past the time it asked for, the next close extracts the run.
    clock.advance(61)
    await rt.close()
    assert len(provider.requests) == 2
    state = progress(workspace_root)["conv"]
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
    assert progress(workspace_root)["conv"]["status"] == "ok"


def test_retry_after_forms_are_read_as_seconds_from_now() -> None:
    import httpx2
    import openai

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
    generate = MemoryGenerateConfig(engine="model", phase_one_model="phase-one-test")
    roots = [tmp_path / "one", tmp_path / "two"]
    engine: list[Any] = []

    async def one_run(root: Path) -> None:
        root.mkdir()
        rt = LayoutRuntime(
            LocalWorkspace(root),
            layout=MemoryLayoutConfig(),
            generate=generate,
            read=MemoryReadConfig(),
            engine=engine[0] if engine else None,
        )
        engine[:] = [rt.engine]
        await rt.record(FIX_RUN, rollout_id="conv")
        await rt.close()

    for root in roots:
        asyncio.run(one_run(root))
    assert len(openai_env.phase_one_requests()) == 2
    for root in roots:
        state = progress(root)["conv"]
        assert state["status"] == "ok" and state["last_error"] is None, state
        assert "test-command" in memory_md(root)

    # A fresh engine (a new Memory in the same process) works on a third loop as well.
    engine.clear()
    asyncio.run(one_run(tmp_path / "three"))
    assert progress(tmp_path / "three")["conv"]["status"] == "ok"
