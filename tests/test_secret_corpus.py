"""Issue 10, secrets: a red-team corpus (tests/adversarial_corpus.py) through every path.

Each case is a secret in a form a checker is likely to try (a provider token format, a private
key split over lines or escaped in JSON, a connection string, a header, a cookie, a credential
file, a secret-like name in a dozen syntaxes, a command line, a credential told in words in
ten languages, an encoded form). None of it may survive: not in the text the redactor returns,
not in ``sessions/``, raw notes, summaries, ``MEMORY.md``, keys or any other file memory
writes, not in what the memory model is shown, not in an error stored or logged, not through
``Remember`` or the CLI, not in a file memory sets aside. Texts about secrets that hold none
come out unchanged.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from adversarial_corpus import CASES, NEAR_MISSES, Case, LeakFinder, leaks
from faultlib import PhaseOneModel, extraction, item_id, log_text, runtime
from helpers import exec_items, run_payload
from sandbox_memory.cli import main as cli_main
from sandbox_memory.commands import MemoryClient, MemoryConflict, Remember
from sandbox_memory.config import MemoryGenerateConfig
from sandbox_memory.redact import Redactor, available_matchers

CLASSES = sorted({case.cls for case in CASES})
BY_CLASS: dict[str, list[Case]] = defaultdict(list)
for _case in CASES:
    BY_CLASS[_case.cls].append(_case)


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor()


def _places(text: str) -> list[Any]:
    """The places a run carries text: a user message, a tool's JSON-encoded arguments, its
    output, the assistant's message (as content parts)."""
    return [
        {"role": "user", "content": text},
        {"type": "function_call", "call_id": "c1", "name": "exec_command",
         "arguments": json.dumps({"cmd": text})},
        {"type": "function_call_output", "call_id": "c1", "output": text},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": text}]},
    ]  # fmt: skip


def test_the_corpus_is_broad() -> None:
    counts = {cls: len(cases) for cls, cases in BY_CLASS.items()}
    assert len(CASES) >= 1400, counts
    assert set(counts) >= {"provider", "private-key", "jwt", "url", "header", "cookie", "cloud",
                           "file", "assignment", "command", "words", "encoded"}  # fmt: skip
    assert len({c.text for c in CASES}) == len(CASES)


@pytest.mark.parametrize("cls", CLASSES)
def test_no_piece_of_a_secret_survives_in_any_place_of_a_run(redactor: Redactor, cls: str) -> None:
    missed = []
    for case in BY_CLASS[cls]:
        outs = [redactor.redact_text(case.text)]
        items = redactor.redact_json(_places(case.text))
        outs.append(json.dumps(items, ensure_ascii=False))
        outs.append(json.loads(items[1]["arguments"])["cmd"])  # the arguments stay valid JSON
        for out in outs:
            if leaks(case, out):
                missed.append((case.name, out[:200]))
                break
    assert missed == [], f"{len(missed)} of {len(BY_CLASS[cls])} leak: {missed[:5]}"


def test_texts_about_secrets_that_hold_none_are_unchanged(redactor: Redactor) -> None:
    changed = [(t, redactor.redact_text(t)) for t in NEAR_MISSES if redactor.redact_text(t) != t]
    assert changed == []


@pytest.mark.skipif("hyperscan" not in available_matchers(), reason="hyperscan not installed")
def test_both_matchers_redact_the_corpus_byte_for_byte_alike() -> None:
    compiled, fallback = Redactor(matcher="hyperscan"), Redactor(matcher="python")
    texts = [case.text for case in CASES] + NEAR_MISSES
    assert [compiled.redact_text(t) for t in texts] == [fallback.redact_text(t) for t in texts]
    joined = "\n".join(texts)  # one big text: every rule, gate and context at once
    assert compiled.redact_text(joined) == fallback.redact_text(joined)


# ---- split secrets -------------------------------------------------------------------------------


def test_a_token_split_over_a_user_message_and_the_next_tool_output_is_redacted_in_both(
    redactor: Redactor,
) -> None:
    token = "gh" + "p_" + "a1B2c3D4e5" * 4
    items = [
        {"role": "user", "content": f"My token starts with {token[:16]}"},
        {"type": "function_call", "call_id": "1", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "1", "output": token[16:] + "\nok"},
    ]
    out = json.dumps(redactor.redact_json(items))
    assert token[4:16] not in out and token[16:] not in out, out


def test_a_private_key_split_over_a_user_message_and_a_tool_output_is_redacted(
    redactor: Redactor,
) -> None:
    body = ["MIIEowIBAAKCAQEA" + "x9Kq" * 12 for _ in range(6)]
    items = [
        {"role": "user", "content": "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body[:3])},
        {"type": "function_call_output", "call_id": "1",
         "output": "\n".join(body[3:]) + "\n-----END RSA PRIVATE KEY-----"},
    ]  # fmt: skip
    out = json.dumps(redactor.redact_json(items))
    assert not any(line in out for line in body), out


# ---- every path memory stores text ------------------------------------------------------------

CHUNK_CHARS = 3_000
"""Per run item: under the transcript's per-item cap, so an escaped secret is in plain view."""


def _chunks(cases: list[Case]) -> list[list[Case]]:
    chunks: list[list[Case]] = [[]]
    size = 0
    for case in cases:
        if size + len(case.text) > CHUNK_CHARS and chunks[-1]:
            chunks.append([])
            size = 0
        chunks[-1].append(case)
        size += len(case.text) + 1
    return chunks


def _run(chunk: list[Case], n: int) -> dict[str, Any]:
    body = "\n".join(case.text for case in chunk)
    return run_payload(
        f"Check these still work:\n{body}",
        reply=f"Checked:\n{body}",
        when=None,
        items=exec_items(f"h{n}", f"cat <<'EOF'\n{body}\nEOF", body),
    )


def _stored_texts(root: Path) -> dict[str, str]:
    """Every file memory wrote, as text; JSON files also with their strings decoded (a
    secret written JSON-escaped is still a leak)."""
    out: dict[str, str] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        if not str(path.relative_to(root)).startswith(("sessions", "memories")):
            continue
        text = path.read_text(errors="replace")
        decoded: list[str] = []
        lines = text.splitlines() if path.suffix == ".jsonl" else [text]
        for line in lines if path.suffix in (".json", ".jsonl") else []:
            try:
                decoded.extend(_strings(json.loads(line)))
            except ValueError:
                continue
        out[str(path.relative_to(root))] = text + "\n" + "\n".join(decoded)
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (k, *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _leaked(texts: dict[str, str], cases: list[Case]) -> list[tuple[str, str]]:
    return LeakFinder(texts).leaked(cases)


def _echo(transcript: str) -> dict[str, Any]:
    """A memory model that writes back what it was shown, and proposes keys made from it."""
    user = item_id(transcript, "user")
    words = [w for w in transcript.replace("\n", " ").split(" ") if w][-6:]
    key = "-".join("".join(c for c in w.lower() if c.isalnum()) for w in words)[:60].strip("-")
    return extraction(
        [
            {"key": key or "k", "content": transcript[-600:], "kind": "fact", "sources": [user]},
            {"key": "checked", "content": transcript[:600], "kind": "decision", "sources": [user]},
        ],  # fmt: skip
        summary=transcript[:3000],
        raw=transcript[-3000:],
        slug="check-credentials",
    )


@pytest.mark.parametrize("engine", ["offline", "model"])
async def test_no_secret_of_the_corpus_reaches_a_file_the_model_or_a_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, engine: str
) -> None:
    caplog.set_level(logging.DEBUG)
    failed: list[str] = []

    def answer(transcript: str) -> Any:
        if not failed:  # the first extraction fails with an error quoting what it was shown
            failed.append(transcript)
            return RuntimeError(f"400 bad request: {transcript[-2000:]}")
        return _echo(transcript)

    model = PhaseOneModel(answer)
    generate = {"engine": engine, "phase_one_model": model} if engine == "model" else {}
    rt = runtime(tmp_path, **(generate or {"engine": "offline"}))
    chunks = _chunks(CASES)
    for n, chunk in enumerate(chunks):
        await rt.record(_run(chunk, n), rollout_id=f"conv-{n % 12}")
    await rt.close()
    if engine == "model":
        await rt.close()  # the failed extraction is retried

    stored = _stored_texts(tmp_path)
    assert any(name.startswith("sessions/") for name in stored)
    assert "memories/MEMORY.md" in stored
    assert any("raw_memories" in name or "rollout_summaries" in name for name in stored)
    assert _leaked(stored, CASES) == []
    progress = "\n".join(t for name, t in stored.items() if "progress" in name)
    if engine == "model":
        assert len(model.calls) >= 2
        sent = {f"call {i}": call.text for i, call in enumerate(model.calls)}
        assert "[REDACTED:" in "".join(sent.values())
        assert _leaked(sent, CASES) == []
        assert "400 bad request" in progress or "400 bad request" in log_text(caplog)
    assert _leaked({"log": log_text(caplog)}, CASES) == []


async def test_remember_refuses_every_secret_of_the_corpus(tmp_path: Path) -> None:
    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    accepted = []
    for case in CASES:
        try:
            await client.apply(
                Remember(key="note", content=f"Keep this: {case.text}", kind="fact"), expected=0
            )
        except MemoryConflict as exc:
            assert "refused" in str(exc)
        else:
            accepted.append(case.name)
            break
    assert accepted == []
    assert _leaked(_stored_texts(tmp_path), CASES) == []


def test_the_cli_stores_no_secret_of_the_corpus(tmp_path: Path) -> None:
    def run(*args: str) -> Any:
        return CliRunner().invoke(cli_main, ["--root", str(tmp_path), *args])

    assert run("init").exit_code == 0
    sample = [cases[i] for cases in BY_CLASS.values() for i in range(0, len(cases), 25)]
    for case in sample:
        result = run("remember", "note", f"Keep this: {case.text}", "--expected", "0")
        assert result.exit_code != 0, case.name
        assert not leaks(case, result.output), case.name
    assert _leaked(_stored_texts(tmp_path), sample) == []


async def test_a_memory_file_edited_with_the_corpus_is_set_aside_redacted(tmp_path: Path) -> None:
    rt = runtime(tmp_path, engine="offline")
    run = run_payload("Fix the build.", reply=None, when=None)
    await rt.record(run, rollout_id="c1")
    await rt.close()
    cases = [cases[i] for cases in BY_CLASS.values() for i in range(0, len(cases), 7)]
    body = "\n".join(case.text for case in cases)
    (tmp_path / "memories/MEMORY.md").write_text(f"my notes\n{body}\n")
    await rt.record(run, rollout_id="c1")
    await rt.close()
    aside = {
        str(p): p.read_text() for p in (tmp_path / "memories/store").glob("MEMORY.md.broken-*")
    }
    assert aside, "the edited MEMORY.md is kept aside"
    assert _leaked(aside, cases) == []
    assert _leaked(_stored_texts(tmp_path), cases) == []


def test_a_short_secret_leaks_as_a_token_of_its_own_not_inside_a_longer_number() -> None:
    # The corpus's 4-digit PIN turned up inside a session file's millisecond timestamps
    # now and then, failing the corpus test on what no one leaked.
    case = next(c for c in CASES if c.name.endswith("json-number-password"))
    pin = next(s for s in case.secrets if len(s) < 10)
    assert leaks(case, f'{{"pin": {pin}}}') == [pin]
    assert leaks(case, f"pin={pin}.") == [pin]
    assert leaks(case, f"created_at 176{pin}82100 id a{pin}b") == []
    assert LeakFinder({"s": f"t=99{pin}99"}).leaked([case]) == []
    assert LeakFinder({"s": f"pin {pin}"}).leaked([case]) == [("s", case.name)]
