"""Secrets never reach memory: not its files, not its model, not its logs.

Every secret of the corpus (tests/secret_corpus.py) is put, in its realistic context, into the
four places a run carries text: the user's messages, tool arguments (shell heredocs), tool
outputs (real shell commands in the sandbox echo them, and ``cat`` a file holding them) and
the final output. After the runs and the close, none of the secret values is found in any file
of ``sessions/`` or ``memories/``, in anything sent to the memory model, or in any log line.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.sandbox import LocalSnapshotSpec
from agents.testing import ScriptedModel, assistant_message, function_call

from faultlib import (
    PhaseOneModel,
    extraction,
    figure,
    item_id,
    log_text,
    manager_of,
    memory_bytes,
    rc,
    runtime,
    sandbox_agent,
)
from sandbox_memory import Memory, MemoryGenerateConfig
from secret_corpus import SECRETS, secret_values

CHUNK = 15
"""Secrets per run: keeps every item under the transcript's per-item cap (4,000 chars), so a
secret that escaped redaction would be in plain view of the memory model."""

PLACES = 5
"""Copies of each secret per run: user message, heredoc argument, its echo, ``cat`` of a file,
final output."""


def chunks() -> list[list[str]]:
    texts = [text for _, text in SECRETS]
    return [texts[i : i + CHUNK] for i in range(0, len(texts), CHUNK)]


def write_secret_files(root: Path) -> None:
    (root / "vault").mkdir()
    for n, chunk in enumerate(chunks()):
        (root / "vault" / f"part{n}.txt").write_text("\n".join(chunk) + "\n")


def run_script(n: int, chunk: list[str]) -> list[Any]:
    body = "\n".join(chunk)
    return [
        [function_call("exec_command", {"cmd": f"cat <<'EOF'\n{body}\nEOF"}, call_id=f"h{n}")],
        [function_call("exec_command", {"cmd": f"cat vault/part{n}.txt"}, call_id=f"c{n}")],
        [assistant_message(f"Checked them all. For your records:\n{body}")],
    ]


async def run_every_secret_and_close(
    client: Any, manifest: Any, memory: Memory, tmp_path: Path
) -> dict[str, Any]:
    """One conversation, one run per chunk of secrets; returns the close's report."""

    write_secret_files(Path(manifest.root))
    sandbox = await client.create(
        manifest=manifest, snapshot=LocalSnapshotSpec(base_path=tmp_path / "snapshots")
    )
    async with sandbox:
        for n, chunk in enumerate(chunks()):
            body = "\n".join(chunk)
            result = await Runner.run(
                sandbox_agent(ScriptedModel(run_script(n, chunk)), memory),
                f"Please check that these credentials still work:\n{body}",
                run_config=rc(sandbox, group_id="credentials"),
            )
            assert body in str(result.final_output)  # the agent itself saw them all
        manager = manager_of(sandbox, memory)
    report: dict[str, Any] = manager.last_report
    return report


def leaked(text: str) -> list[str]:
    return [fmt for (fmt, _), value in zip(SECRETS, secret_values(), strict=True) if value in text]


def echo_transcript(text: str) -> dict[str, Any]:
    """A memory model that writes back what it was shown and proposes facts quoting it."""

    user = item_id(text, "user")
    output = item_id(text, "output exec_command")
    return extraction(
        [
            {
                "key": "checked-credentials",
                "content": text[-400:],
                "kind": "fact",
                "sources": [user],
            },
            {"key": "vault-contents", "content": text[:400], "kind": "fact", "sources": [output]},
        ],
        summary=text[:3000],
        raw=text[-3000:],
        slug="check-credentials",
    )


def test_the_corpus_puts_every_secret_in_view_of_the_memory_model() -> None:
    # Guard for the suite itself: every run's items fit the per-item cap of the transcript.
    from sandbox_memory.engines.transcript import ITEM_CHAR_CAP

    for chunk in chunks():
        assert len("Please check that these credentials still work:\n" + "\n".join(chunk)) < (
            ITEM_CHAR_CAP
        )
    assert len(secret_values()) == len(SECRETS) >= 80


async def test_no_secret_reaches_sessions_or_memories_with_the_offline_engine(
    client, manifest, workspace_root, tmp_path, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    report = await run_every_secret_and_close(client, manifest, memory, tmp_path)
    files = memory_bytes(workspace_root)
    assert any(name.startswith("sessions/") for name in files)
    assert (workspace_root / "memories/MEMORY.md").exists()
    for name, data in files.items():
        assert leaked(data.decode("utf-8", "replace")) == [], name
    figure("secrets.formats", len(SECRETS))
    figure("secrets.files_checked_offline", len(files))
    figure("secrets.bytes_checked_offline", sum(len(d) for d in files.values()))
    assert report["redactions"] >= PLACES * len(SECRETS)


async def test_no_secret_reaches_sessions_memories_or_the_memory_model_with_the_model_engine(
    client, manifest, workspace_root, tmp_path, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    model = PhaseOneModel(echo_transcript)
    memory = Memory(generate=MemoryGenerateConfig(engine="model", phase_one_model=model))
    await run_every_secret_and_close(client, manifest, memory, tmp_path)

    assert model.calls, "the memory model was never called"
    sent = "\n".join(call.text for call in model.calls)
    assert "[REDACTED:" in sent  # it was shown the runs, with markers where secrets were
    assert leaked(sent) == []
    files = memory_bytes(workspace_root)
    for name, data in files.items():
        assert leaked(data.decode("utf-8", "replace")) == [], name
    figure("secrets.model_calls", len(model.calls))
    figure("secrets.chars_sent_to_model", len(sent))


async def test_no_secret_appears_in_any_log_line(
    client, manifest, workspace_root, tmp_path, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    failures = iter([RuntimeError("model down"), None])

    def flaky(text: str) -> Any:
        error = next(failures, None)
        return error if error is not None else echo_transcript(text)

    memory = Memory(
        generate=MemoryGenerateConfig(engine="model", phase_one_model=PhaseOneModel(flaky))
    )
    await run_every_secret_and_close(client, manifest, memory, tmp_path)
    lines = log_text(caplog)
    assert "sandbox_memory" in lines  # memory did log (redaction counts, the failure)
    assert leaked(lines) == []
    figure("secrets.log_records_checked", len(caplog.records))


async def test_close_reports_how_many_secrets_it_redacted(
    client, manifest, workspace_root, tmp_path
) -> None:
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    report = await run_every_secret_and_close(client, manifest, memory, tmp_path)
    recorded = b"".join(
        data for name, data in memory_bytes(workspace_root).items() if name.startswith("sessions/")
    ).decode()
    markers = recorded.count("[REDACTED:")
    # Every marker written to the rollout is one counted redaction.
    assert report["redactions"] == markers
    assert markers >= PLACES * len(SECRETS)
    figure("secrets.redactions_per_close", report["redactions"])


async def test_a_close_without_secrets_reports_zero_redactions(
    client, manifest, workspace_root
) -> None:
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            sandbox_agent(ScriptedModel([[assistant_message("Done.")]]), memory),
            "Tidy the README.",
            run_config=rc(sandbox),
        )
        manager = manager_of(sandbox, memory)
    assert manager.last_report["redactions"] == 0


@pytest.mark.parametrize("engine", ["offline", "model"])
async def test_a_secret_the_user_asks_to_remember_is_not_remembered(
    client, manifest, workspace_root, engine
) -> None:
    fmt, text = next((f, t) for f, t in SECRETS if f == "github-oauth-token")
    value = secret_values()[[f for f, _ in SECRETS].index(fmt)]

    def propose(transcript: str) -> dict[str, Any]:
        user = item_id(transcript, "user")
        return extraction(
            [
                {
                    "key": "github-token",
                    "content": f"The GitHub token is {value}",
                    "kind": "fact",
                    "sources": [user],
                }
            ]
        )

    generate = MemoryGenerateConfig(
        engine=engine, phase_one_model=PhaseOneModel(propose) if engine == "model" else "x"
    )
    memory = Memory(generate=generate)
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            sandbox_agent(ScriptedModel([[assistant_message("Noted.")]]), memory),
            f"Remember this for next time, I always forget it: {text}",
            run_config=rc(sandbox),
        )
    for name, data in memory_bytes(workspace_root).items():
        assert value not in data.decode("utf-8", "replace"), name


async def test_each_close_reports_only_the_redactions_made_since_the_previous_close(
    workspace_root,
) -> None:
    rt = runtime(workspace_root, engine="offline")  # one runtime serving several closes
    texts = [text for fmt, text in SECRETS if fmt in ("github-oauth-token", "slack-bot-token")]
    await rt.record({"input": [{"role": "user", "content": "\n".join(texts)}]}, rollout_id="a")
    first = await rt.close()
    markers = (workspace_root / "sessions/a.jsonl").read_text().count("[REDACTED:")
    assert first["redactions"] == markers == 2
    await rt.record({"input": [{"role": "user", "content": "Nothing secret."}]}, rollout_id="b")
    second = await rt.close()
    assert second["redactions"] == 0


async def test_a_model_error_quoting_a_secret_is_redacted_in_progress_and_logs(
    client, manifest, workspace_root, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    value = secret_values()[[f for f, _ in SECRETS].index("openai-project-key")]
    error = PermissionError(f"401 Incorrect API key provided: {value}. You can find yours at ...")
    memory = Memory(
        generate=MemoryGenerateConfig(
            engine="model", phase_one_model=PhaseOneModel(lambda transcript: error)
        )
    )
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            sandbox_agent(ScriptedModel([[assistant_message("Done.")]]), memory),
            "Summarise the README.",
            run_config=rc(sandbox),
        )
    stored = "".join(
        p.read_text() for p in (workspace_root / "memories/store/progress").glob("*.json")
    )
    assert "Incorrect API key provided: [REDACTED:" in stored
    assert value not in stored
    assert value not in log_text(caplog)
