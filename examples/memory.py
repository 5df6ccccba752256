"""Two runs of one sandbox agent with memory: fix a bug, then verify it in a resumed sandbox.

Run 1 gets a small package whose invoice total is wrong. The agent runs the tests (they fail),
patches the bug and reruns them (they pass). Closing the sandbox generates memory under
``memories/`` before the snapshot is taken. The first workspace is then deleted and the
snapshot is resumed into a new sandbox session, so run 2 knows only what the snapshot carries.
Run 2, a verifier, adds a regression test and runs it with the test command memory recorded.

    python examples/memory.py            # real models when OPENAI_API_KEY is set
    python examples/memory.py --offline  # scripted agent turns + the offline memory engine
    python examples/memory.py --keep ws  # also leave the workspace in ./ws to try the CLI on

Offline (no ``OPENAI_API_KEY``, or ``--offline``), the agent's turns are scripted with
``agents.testing.ScriptedModel``, but every command really runs in the local sandbox: the
tests really fail before the patch and pass after it, and run 2 reads the test command from
``memories/MEMORY.md`` with ``grep`` before using it. Memory comes from the offline engine.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import Runner
from agents.models.interface import Model
from agents.sandbox import LocalSnapshotSpec, Manifest, SandboxAgent
from agents.sandbox.capabilities import Filesystem, Shell
from agents.sandbox.entries import File
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.testing import ScriptedModel
from agents.testing.model import ModelCall

from sandbox_memory import Memory, MemoryGenerateConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _scripted as s  # noqa: E402

FIRST_PROMPT = (
    "The invoice tests fail. Find and fix the invoice total bug in acme_billing/invoice.py, "
    "and show that the test suite passes."
)
SECOND_PROMPT = (
    "Add a regression test for the invoice bug fixed in an earlier session, then run the "
    "project's test suite the way this project runs it."
)
FIX_CONVERSATION = "fix-invoice-bug"
VERIFY_CONVERSATION = "verify-invoice-fix"
"""Rollout ids of the two runs (their ``group_id``): names to address them by in the CLI."""
TEST_COMMAND = "python3 -m unittest discover -s tests -v"
"""How this project runs its tests (stdlib only, so nothing needs installing in the sandbox)."""

BUGGY_INVOICE = '''"""Invoice arithmetic for Acme Billing."""

from __future__ import annotations


def line_total(quantity: int, unit_price: float) -> float:
    return quantity * unit_price


def invoice_total(lines: list[tuple[int, float]], tax_rate: float) -> float:
    """Sum of the lines plus tax at ``tax_rate`` (0.08 means 8 %), rounded to cents."""
    subtotal = sum(line_total(quantity, price) for quantity, price in lines)
    return round(subtotal + tax_rate, 2)
'''

INVOICE_TEST = """import unittest

from acme_billing.invoice import invoice_total


class InvoiceTotalTest(unittest.TestCase):
    def test_applies_tax_rate(self):
        self.assertEqual(invoice_total([(2, 50.0), (1, 20.0)], tax_rate=0.08), 129.6)


if __name__ == "__main__":
    unittest.main()
"""

FIX_PATCH = """*** Begin Patch
*** Update File: acme_billing/invoice.py
@@ def invoice_total(lines: list[tuple[int, float]], tax_rate: float) -> float:
     subtotal = sum(line_total(quantity, price) for quantity, price in lines)
-    return round(subtotal + tax_rate, 2)
+    return round(subtotal * (1 + tax_rate), 2)
*** End Patch
"""

REGRESSION_TEST_PATH = "tests/test_invoice_regression.py"
REGRESSION_TEST = """import unittest

from acme_billing.invoice import invoice_total


class TaxRateIsAPercentageTest(unittest.TestCase):
    # Regression: invoice_total once added tax_rate to the subtotal instead of applying it.
    def test_tax_scales_with_the_subtotal(self):
        self.assertEqual(invoice_total([(10, 100.0)], tax_rate=0.1), 1100.0)

    def test_zero_tax_keeps_the_subtotal(self):
        self.assertEqual(invoice_total([(3, 10.0)], tax_rate=0.0), 30.0)


if __name__ == "__main__":
    unittest.main()
"""

LEARNED_COMMAND_RE = re.compile(r"Run the tests with `([^`]+)`")
"""How the offline engine words a test-command procedure in MEMORY.md."""


def build_manifest() -> Manifest:
    return Manifest(
        entries={
            "README.md": File(content=b"# Acme Billing\n\nInvoice arithmetic. Tests: tests/.\n"),
            "acme_billing/__init__.py": File(content=b""),
            "acme_billing/invoice.py": File(content=BUGGY_INVOICE.encode()),
            "tests/test_invoice.py": File(content=INVOICE_TEST.encode()),
        }
    )


def build_memory(offline: bool) -> Memory:
    if offline:
        # The default engine "auto" would also pick the offline engine without an API key;
        # saying so explicitly keeps --offline offline even when a key is set.
        return Memory(generate=MemoryGenerateConfig(engine="offline"))
    # Reads and generates; live update on; engine "auto" uses the model engine with a key.
    return Memory()


def build_agent(*, model: str | Model, offline: bool) -> SandboxAgent:
    return SandboxAgent(
        name="Invoice maintainer",
        model=model,
        instructions=(
            "You maintain the Python package in this sandbox workspace. Inspect files before "
            "editing, make minimal changes with apply_patch, and run the test suite to verify. "
            "Use a non-login POSIX shell, keep searches inside the workspace, and finish with a "
            "short summary of what you changed and which command verified it."
        ),
        # Memory reads need Shell (grep MEMORY.md); live update also needs Filesystem.
        capabilities=[build_memory(offline), Filesystem(), Shell()],
    )


# ------------------------------------------------------------------ offline agent turns


def fix_script() -> list[Any]:
    """Run 1: run the tests (they must fail), patch the bug, rerun them (they must pass)."""

    return s.bug_fix_script(
        inspect="cat acme_billing/invoice.py tests/test_invoice.py",
        test_command=TEST_COMMAND,
        patch=FIX_PATCH,
        report=(
            "Fixed the invoice total bug in acme_billing/invoice.py: invoice_total added "
            "tax_rate to the subtotal (120.0 + 0.08 = 120.08) instead of applying it as a "
            "percentage; it now returns round(subtotal * (1 + tax_rate), 2). "
            f"`{TEST_COMMAND}` failed before the fix and passes now."
        ),
    )


def verify_script() -> list[Any]:
    """Run 2: look the test command up in memory, add a regression test, run it that way."""

    learned: dict[str, str] = {}

    def add_test(call: ModelCall) -> list[Any]:
        output = s.tool_output(call, "recall")
        match = LEARNED_COMMAND_RE.search(output)
        if match is None:
            raise s.ScriptError(f"memory does not say how to run the tests:\n{output}")
        learned["command"] = match.group(1)
        return [s.apply_patch(s.add_file_patch(REGRESSION_TEST_PATH, REGRESSION_TEST), "add")]

    def run_learned(call: ModelCall) -> list[Any]:
        _ = s.tool_output(call, "add")
        return [s.shell(learned["command"], "verify")]

    def report(call: ModelCall) -> list[Any]:
        output = s.tool_output(call, "verify")
        if s.exit_code(output) != 0:
            raise s.ScriptError(f"the regression test run failed:\n{output}")
        return s.say(
            f"Added {REGRESSION_TEST_PATH} (tax must scale with the subtotal). Ran "
            f"`{learned['command']}`, the test command memory recorded: all tests pass."
        )

    return [
        [s.shell("grep -n -i 'test' memories/MEMORY.md", "recall")],
        s.respond(add_test),
        s.respond(run_learned),
        s.respond(report),
    ]


# ---------------------------------------------------------------------------- the flow


@dataclass
class Outcome:
    """What the example did; the tests assert on it."""

    offline: bool
    first_output: str = ""
    second_output: str = ""
    memory_after_close: dict[str, str] = field(default_factory=dict)
    """Text of every file under memories/ right after the first sandbox closed."""
    rollout_summary: str = ""
    """Path of run 1's rollout summary, relative to the workspace."""
    run2_instructions: str = ""
    run2_memory_section: str = ""
    files_after_run2: list[str] = field(default_factory=list)
    regression_test: str = ""
    checks: dict[str, bool] = field(default_factory=dict)


async def main(
    *, model: str = s.DEFAULT_MODEL, offline: bool | None = None, keep: str | Path | None = None
) -> Outcome:
    offline = s.offline_mode() if offline is None else offline
    keep_dir = s.keep_target(keep)
    s.print_mode(offline, model)
    outcome = Outcome(offline=offline)
    manifest = build_manifest()
    client = UnixLocalSandboxClient()

    with tempfile.TemporaryDirectory(prefix="sandbox-memory-example-") as snapshot_dir:
        sandbox = await client.create(
            manifest=manifest, snapshot=LocalSnapshotSpec(base_path=Path(snapshot_dir))
        )
        current = sandbox
        root = Path(sandbox.state.manifest.root)
        try:
            s.banner("run 1: fix the bug")
            agent = build_agent(
                model=ScriptedModel(fix_script()) if offline else model, offline=offline
            )
            async with sandbox:
                first = await Runner.run(
                    agent,
                    FIRST_PROMPT,
                    run_config=s.run_config(
                        sandbox, "sandbox-memory example: fix", conversation=FIX_CONVERSATION
                    ),
                    max_turns=20,
                )
            # Leaving `async with` closed the session: memory was generated (phase 1 and
            # phase 2) in a pre-stop hook, before the snapshot was taken.
            outcome.first_output = str(first.final_output)
            print(outcome.first_output)

            s.banner("memory generated when the first sandbox closed")
            for rel in s.list_tree(root, "memories"):
                if not rel.endswith(".sqlite"):  # the search index is binary
                    outcome.memory_after_close[rel] = (root / rel).read_text("utf-8")
            print("files:", *s.list_tree(root, "sessions"), *outcome.memory_after_close, sep="\n  ")
            s.print_file(root, "memories/MEMORY.md")
            s.print_file(root, "memories/memory_summary.md")
            summaries = s.list_tree(root, "memories/rollout_summaries")
            outcome.rollout_summary = summaries[0] if summaries else ""
            if outcome.rollout_summary:
                s.print_file(root, outcome.rollout_summary)

            # Throw the first workspace away: run 2 only sees what the snapshot carried.
            await client.delete(sandbox)
            current = await client.resume(sandbox.state)

            s.banner("run 2: verifier in a new session resumed from the snapshot")
            agent = build_agent(
                model=ScriptedModel(verify_script()) if offline else model, offline=offline
            )
            recorder = s.PromptRecorder()
            async with current:
                second = await Runner.run(
                    agent,
                    SECOND_PROMPT,
                    run_config=s.run_config(
                        current, "sandbox-memory example: verify", conversation=VERIFY_CONVERSATION
                    ),
                    hooks=recorder,
                    max_turns=20,
                )
            outcome.second_output = str(second.final_output)
            print(outcome.second_output)
            outcome.run2_instructions = recorder.first
            outcome.run2_memory_section = s.memory_section(recorder.first)
            outcome.files_after_run2 = s.list_tree(root, ".")
            regression = root / REGRESSION_TEST_PATH
            outcome.regression_test = regression.read_text("utf-8") if regression.exists() else ""

            s.banner("memory part of the run-2 instructions")
            print(outcome.run2_memory_section or "(none: run 2 got no memory)")
            print("\nmemory files after run 2 closed:", *s.list_tree(root, "memories"), sep="\n  ")

            s.banner("checks")
            outcome.checks = _checks(outcome)
            s.keep_workspace(root, keep_dir)
        finally:
            await client.delete(current)
    return outcome


def _checks(outcome: Outcome) -> dict[str, bool]:
    memory_md = outcome.memory_after_close.get("memories/MEMORY.md", "")
    summary = outcome.memory_after_close.get("memories/memory_summary.md", "")
    entry_lines = [line for line in summary.splitlines() if line.startswith("- **")]
    new_tests = [
        f
        for f in outcome.files_after_run2
        if f.startswith("tests/") and f.endswith(".py") and f != "tests/test_invoice.py"
    ]
    return {
        "memory names the bug and the fix": s.check(
            "MEMORY.md names the bug (the failing tax test) and the fix (acme_billing/invoice.py)",
            "test_applies_tax_rate" in memory_md and "acme_billing/invoice.py" in memory_md,
        ),
        "memory records the test command": s.check(
            f"MEMORY.md records the test command `{TEST_COMMAND}`", TEST_COMMAND in memory_md
        ),
        "run 2 instructions carry the summary": s.check(
            "run-2 instructions carry every entry of memory_summary.md",
            bool(entry_lines) and all(line in outcome.run2_instructions for line in entry_lines),
        ),
        "run 2 instructions carry the test command": s.check(
            f"run-2 instructions carry the learned test command `{TEST_COMMAND}`",
            TEST_COMMAND in outcome.run2_memory_section,
        ),
        "run 2 added a regression test": s.check(
            "run 2 added a regression test under tests/", bool(new_tests)
        ),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=s.DEFAULT_MODEL, help="agent model (online mode)")
    parser.add_argument("--offline", action="store_true", help="scripted turns, offline engine")
    parser.add_argument("--keep", metavar="DIR", help="leave the finished workspace in DIR")
    args = parser.parse_args()
    result = asyncio.run(
        main(model=args.model, offline=s.offline_mode(args.offline), keep=args.keep)
    )
    if result.offline and not all(result.checks.values()):
        sys.exit(1)
