"""Harmless keys are not taken for credentials (issue 20, item 16), and a refused change is
logged at WARNING.

An engine object at the model seam proposes the keys; real workspace in a temp folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import layout_runtime, run_payload
from sandbox_memory import MemoryClient
from sandbox_memory.engines.base import Candidate, Extraction, ExtractionRequest
from sandbox_memory.redact import default_redactor
from sandbox_memory.rules import key_problem

HARMLESS = [
    "always-use-pnpm-npm-node18",
    "npm-v10-lockfile",
    "pnpm-npm-typetok2-lockfile",
    "npm_v10_lockfile",
    "pnpm-store-v3",
    "hf-hub-cache-v2",
    "sk-proj-layout-rules2",
]
CREDENTIALS = [
    "ghp-" + "a1B2c3D4e5" * 4,  # a vendor prefix spelled with a dash, then the token
    "ghp_" + "a1b2c3d4e5" * 4,
    "password-hunter2xyz",
    "deploy-" + "k9x2m4q8z1w7v3b6",
]


LESSONS = [
    "Use pnpm with Node 18 for every install.",
    "Keep the npm v10 lockfile committed beside package.json.",
    "Run pnpm dedupe after upgrading a dependency.",
    "Regenerate the lockfile with npm 10 when the registry changes.",
]


class KeyedEngine:
    """Proposes one procedure per key, citing the user's message."""

    name = "keyed"

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    async def extract(self, request: ExtractionRequest) -> Extraction:
        item = request.segments[-1]["input"][0]
        return Extraction(
            rollout_summary="Set up the package manager.",
            rollout_slug="package-manager",
            raw_memory="- package manager",
            candidates=[
                Candidate(
                    key=key,
                    # A lesson each (the same words under two keys are folded into one entry).
                    content=LESSONS[n % len(LESSONS)],
                    kind="procedure",
                    sources=[item["memory_item_id"]],
                )
                for n, key in enumerate(self.keys)
            ],
        )


@pytest.mark.parametrize("key", HARMLESS)
def test_a_harmless_key_is_no_credential(key: str) -> None:
    assert key_problem(key, default_redactor()) is None


@pytest.mark.parametrize("key", CREDENTIALS, ids=["dash-vendor", "vendor", "after-noun", "token"])
def test_a_key_holding_a_credential_is_still_refused(key: str) -> None:
    assert key_problem(key, default_redactor()) is not None


async def test_lessons_under_harmless_keys_are_kept_and_a_refusal_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys = [*HARMLESS[:3], CREDENTIALS[0]]
    rt = layout_runtime(tmp_path, engine=KeyedEngine(keys))
    said = "Always use pnpm with Node 18; keep the npm v10 lockfile."
    run = run_payload(said, reply=None, when=None)
    await rt.record(run, rollout_id="setup")
    with caplog.at_level("WARNING", logger="sandbox_memory"):
        await rt.close()
    entries = (await MemoryClient(tmp_path).view("setup")).entries
    assert set(entries) == set(HARMLESS[:3])
    refused = [r for r in caplog.records if r.levelname == "WARNING" and "rejected" in r.message]
    assert len(refused) == 1
    assert "a1B2c3D4e5" not in caplog.text  # the refusal does not repeat the secret
    stored = "".join(p.read_text() for p in (tmp_path / "memories").rglob("*") if p.is_file()
                     and p.suffix in (".json", ".jsonl", ".md"))  # fmt: skip
    assert "a1B2c3D4e5" not in stored


def test_the_cli_refuses_a_person_that_is_a_token_and_does_not_show_it(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sandbox_memory.cli import main

    token = "gh" + "p_" + "a1B2c3D4e5" * 4
    runner = CliRunner()
    assert runner.invoke(main, ["--root", str(tmp_path), "init"]).exit_code == 0
    result = runner.invoke(
        main,
        ["--root", str(tmp_path), "remember", "k", "A fact.", "--person", token, "--expected", "0"],
    )
    assert result.exit_code == 1, result.output
    assert "person" in result.output and "a1B2c3D4e5" not in result.output
    stored = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file()
                     and p.suffix in (".json", ".jsonl", ".md"))  # fmt: skip
    assert "a1B2c3D4e5" not in stored
    show = runner.invoke(main, ["--root", str(tmp_path), "show"])
    assert "a1B2c3D4e5" not in show.output
