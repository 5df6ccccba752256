"""The examples' online mode end to end over real HTTP: the local server plays every model.

``OPENAI_API_KEY`` is set (to a test key) and ``OPENAI_BASE_URL`` points at
``tests/http_provider.py``, so each example takes its online path unchanged: the agent is the
SDK's real ``OpenAIResponsesModel`` (a model name resolved by the default provider) and memory
uses engine ``auto`` -> the model engine. The server scripts the agent's turns (tool calls that
really run in the local sandbox, then a final message) from what the runner sent back, and
answers the phase-1 extraction requests with strict JSON citing the transcript's item ids.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from typing import Any

import pytest

import http_provider as hp
from test_examples import EXAMPLES, _load

KEY = "sk-test-local"  # what the openai_env fixture sets as OPENAI_API_KEY
ITEM_LINE = re.compile(r"^(\[[\w-]+:\d+\])")


def guarded(responder: hp.Responder, errors: list[BaseException]) -> hp.Responder:
    """Run ``responder`` in the server thread, keeping what it raised for the test to report."""

    def reply(request: hp.Request) -> hp.Reply:
        try:
            return responder(request)
        except Exception as exc:
            errors.append(exc)
            return hp.status(400, message=f"scripted turn failed: {exc}")

    return reply


def assert_printed_checks(printed: str) -> None:
    assert printed.startswith("mode: ONLINE")
    assert re.search(r"^check: .*: yes$", printed, re.M) and ": NO" not in printed


def assert_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    """The happy path logs no dropped run, failed extraction or rejected candidate."""

    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warned, warned


def exit_code(output: str) -> int | None:
    match = re.search(r"Process exited with code (-?\d+)", output)
    return int(match.group(1)) if match else None


def shell(cmd: str, call_id: str) -> hp.Reply:
    return hp.items([hp.function_call("exec_command", {"cmd": cmd}, call_id)])


def patch(text: str, call_id: str) -> hp.Reply:
    item = {
        "type": "custom_tool_call",
        "id": f"ctc_{call_id}",
        "call_id": call_id,
        "name": "apply_patch",
        "input": text,
        "status": "completed",
    }
    return hp.items([item])


def cite(request: hp.Request, needle: str) -> str:
    """The id of the first transcript line containing ``needle`` (as the model would copy it)."""

    for line in request.user_text.splitlines():
        match = ITEM_LINE.match(line)
        if match and needle in line:
            return match.group(1)
    raise AssertionError(f"no transcript line with {needle!r} in the phase-1 request")


def extraction(candidates: list[dict[str, Any]], summary: str, slug: str) -> hp.Reply:
    return hp.text(
        {
            "rollout_summary": summary,
            "rollout_slug": slug,
            "raw_memory": "",
            "candidates": [{"action": "remember", "keywords": [], **c} for c in candidates],
        }
    )


def assert_no_secret(server: hp.ProviderServer) -> None:
    for request in server.requests:
        assert KEY not in json.dumps(request.body)
        assert request.headers.get("authorization") == f"Bearer {KEY}"


def assert_strict_schema(request: hp.Request) -> None:
    schema = request.schema
    assert schema is not None and "candidates" in schema["properties"]
    assert set(schema["required"]) == set(schema["properties"])
    assert schema["additionalProperties"] is False


# --------------------------------------------------------------- examples/memory.py


MEMORY_EXAMPLE = _load("memory")
LESSON = (
    f"Run the tests with `{MEMORY_EXAMPLE.TEST_COMMAND}`; test_applies_tax_rate failed until "
    "acme_billing/invoice.py applied tax_rate as a percentage."
)


def two_run_responder(agent_models: set[str]) -> hp.Responder:
    """The agent's turns of both runs of examples/memory.py, and their extraction replies."""

    example = MEMORY_EXAMPLE
    command = example.TEST_COMMAND
    lesson = LESSON

    def fix_turn(out: dict[str, str]) -> hp.Reply:
        if "rerun" in out:
            assert exit_code(out["rerun"]) == 0, out["rerun"]
            return hp.text(f"Fixed acme_billing/invoice.py; `{command}` passes now.")
        if "fix" in out:
            assert "Updated" in out["fix"], out["fix"]
            return shell(command, "rerun")
        if "run-tests" in out:
            assert exit_code(out["run-tests"]) == 1, out["run-tests"]
            return patch(example.FIX_PATCH, "fix")
        return shell(command, "run-tests")

    def verify_turn(out: dict[str, str]) -> hp.Reply:
        if "verify" in out:
            assert exit_code(out["verify"]) == 0, out["verify"]
            return hp.text(f"Added the regression test; `{command}` passes.")
        if "add" in out:
            learned = example.LEARNED_COMMAND_RE.search(out["recall"])
            assert learned is not None, out["recall"]
            return shell(learned.group(1), "verify")
        if "recall" in out:
            assert command in out["recall"], out["recall"]
            body = example.REGRESSION_TEST
            return patch(_add_file(example.REGRESSION_TEST_PATH, body), "add")
        return shell("grep -n -i 'test' memories/MEMORY.md", "recall")

    def responder(request: hp.Request) -> hp.Reply:
        if request.is_phase_one:
            assert_strict_schema(request)
            if "Find and fix the invoice total bug" not in request.user_text:
                return extraction([], "Task: add a regression test. Outcome: done.", "verify")
            source = cite(request, command)
            return extraction(
                [
                    {
                        "key": "run-the-tests",
                        "content": lesson,
                        "kind": "procedure",
                        "sources": [source],
                    }
                ],
                "Task: fix the invoice total. Outcome: fixed acme_billing/invoice.py.",
                "fix-invoice",
            )
        agent_models.add(str(request.body.get("model")))
        out = request.function_outputs()
        return fix_turn(out) if example.FIRST_PROMPT in request.user_text else verify_turn(out)

    return responder


async def test_two_run_example_online_over_http(
    openai_env: hp.ProviderServer,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    example = MEMORY_EXAMPLE
    command = example.TEST_COMMAND
    lesson = LESSON
    agent_models: set[str] = set()
    responder = two_run_responder(agent_models)
    errors: list[BaseException] = []
    openai_env.respond_with(guarded(responder, errors))
    outcome = await example.main(model="agent-under-test", offline=False)

    assert not errors, errors
    assert_no_warning(caplog)
    assert not outcome.offline
    assert_printed_checks(capsys.readouterr().out)
    assert outcome.checks and all(outcome.checks.values()), outcome.checks
    assert agent_models == {"agent-under-test"}
    # Memory came from the model engine: the scripted lesson, in MEMORY.md and in run 2's prompt.
    assert lesson in outcome.memory_after_close["memories/MEMORY.md"]
    assert command in outcome.run2_memory_section
    assert "invoice_total([(10, 100.0)], tax_rate=0.1)" in outcome.regression_test
    phase_one = openai_env.phase_one_requests()
    assert len(phase_one) == 2  # each run extracted once
    assert {r.body.get("model") for r in phase_one} == {"gpt-5.4-mini"}
    assert_no_secret(openai_env)


def _add_file(path: str, content: str) -> str:
    body = "".join(f"+{line}\n" for line in content.splitlines())
    return f"*** Begin Patch\n*** Add File: {path}\n{body}*** End Patch\n"


# ------------------------------------------------ examples/memory_multi_agent_multiturn.py


async def test_multi_agent_example_online_over_http(
    openai_env: hp.ProviderServer,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    example = _load("memory_multi_agent_multiturn")
    command = example.TEST_COMMAND

    def gtm_turn(request: hp.Request, out: dict[str, str]) -> hp.Reply:
        if example.GTM_TURN_2 in request.user_text:
            if "hypothesis" in out:
                return hp.text("Saved gtm_hypothesis.md: a pilot offer to healthcare.")
            text = "# Outreach hypothesis: healthcare\n\nPilot offer to top trial accounts.\n"
            return patch(_add_file("gtm_hypothesis.md", text), "hypothesis")
        if "by-segment" in out:
            assert "healthcare" in out["by-segment"], out["by-segment"]
            return hp.text("Promising segment: healthcare (spend 21900, data/leads.csv).")
        return shell(example.SEGMENT_TOTALS, "by-segment")

    def engineering_turn(out: dict[str, str]) -> hp.Reply:
        if "rerun" in out:
            assert exit_code(out["rerun"]) == 0, out["rerun"]
            return hp.text("Fixed invoice_total; the tests pass.")
        if "fix" in out:
            return shell(command, "rerun")
        if "run-tests" in out:
            assert exit_code(out["run-tests"]) == 1, out["run-tests"]
            return patch(example.FIX_PATCH, "fix")
        return shell(command, "run-tests")

    def responder(request: hp.Request) -> hp.Reply:
        text = request.user_text
        if request.is_phase_one:
            assert_strict_schema(request)
            if example.ENGINEERING_TURN in text:
                return extraction(
                    [
                        {
                            "key": "run-the-tests",
                            "content": f"Run the tests with `{command}`.",
                            "kind": "procedure",
                            "sources": [cite(request, command)],
                        }
                    ],
                    "Task: fix invoice_total. Outcome: fixed, tests pass.",
                    "invoice-fix",
                )
            if example.GTM_TURN_1 not in text:
                # GTM turn 2: only the new segment is sent (turn 1 was extracted already).
                assert example.GTM_TURN_2 in text
                return extraction([], "Task: write the outreach hypothesis. Outcome: saved.", "gtm")
            return extraction(
                [
                    {
                        "key": "answer-style",
                        "content": "The user prefers short answers that quote the numbers.",
                        "kind": "preference",
                        "sources": [cite(request, "I prefer short answers")],
                    }
                ],
                "Task: find a GTM segment in the lead data. Outcome: healthcare.",
                "gtm-segment",
            )
        out = request.function_outputs()
        if example.ENGINEERING_TURN in text:
            return engineering_turn(out)
        return gtm_turn(request, out)

    errors: list[BaseException] = []
    openai_env.respond_with(guarded(responder, errors))
    outcome = await example.main(model="agent-under-test", offline=False)

    assert not errors, errors
    assert_no_warning(caplog)
    assert not outcome.offline
    assert_printed_checks(capsys.readouterr().out)
    assert outcome.checks and all(outcome.checks.values()), outcome.checks
    gtm = outcome.files["memories/gtm/MEMORY.md"]
    eng = outcome.files["memories/engineering/MEMORY.md"]
    assert "The user prefers short answers that quote the numbers." in gtm
    assert f"Run the tests with `{command}`." in eng and "short answers" not in eng
    assert "short answers" in outcome.gtm_turn2_memory
    phase_one = openai_env.phase_one_requests()
    assert sum(example.GTM_TURN_1 in r.user_text for r in phase_one) == 1  # not re-extracted
    assert sum(example.ENGINEERING_TURN in r.user_text for r in phase_one) == 1
    assert_no_secret(openai_env)


@pytest.mark.slow
def test_two_run_example_online_as_a_script(provider: hp.ProviderServer) -> None:
    """``python examples/memory.py`` as a user runs it: the key and base URL from the env."""

    agent_models: set[str] = set()
    errors: list[BaseException] = []
    provider.respond_with(guarded(two_run_responder(agent_models), errors))
    env = {**os.environ, "OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": provider.base_url}
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "memory.py"), "--model", "agent-under-test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not errors, errors
    assert done.returncode == 0, done.stderr
    assert_printed_checks(done.stdout)
    assert "WARNING" not in done.stderr, done.stderr
    assert LESSON in done.stdout  # MEMORY.md as the example printed it after run 1
    assert agent_models == {"agent-under-test"}
    assert len(provider.phase_one_requests()) == 2
    assert_no_secret(provider)
