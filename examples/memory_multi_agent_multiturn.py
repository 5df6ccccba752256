"""Two agents, two memory layouts, one sandbox; a two-turn conversation through an SDK Session.

A GTM reviewer and an engineering reviewer work in the same sandbox workspace. Each has its own
``MemoryLayoutConfig`` (``memories/gtm`` + ``sessions/gtm``, ``memories/engineering`` +
``sessions/engineering``), so neither agent's runs are consolidated into the other's memory.
The GTM reviewer takes two turns that share one ``SQLiteSession``: both runs land in one
rollout file named by the session id, and phase 1 sees the whole interaction.

    python examples/memory_multi_agent_multiturn.py            # real models with OPENAI_API_KEY
    python examples/memory_multi_agent_multiturn.py --offline  # scripted turns, offline engine
    python examples/memory_multi_agent_multiturn.py --keep ws  # leave the workspace in ./ws
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import Runner, SQLiteSession
from agents.models.interface import Model
from agents.sandbox import Manifest, SandboxAgent
from agents.sandbox.capabilities import Filesystem, Shell
from agents.sandbox.entries import File
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.testing import ScriptedModel
from agents.testing.model import ModelCall

from sandbox_memory import Memory, MemoryGenerateConfig, MemoryLayoutConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _scripted as s  # noqa: E402

GTM_SESSION_ID = "gtm-q2-pipeline-review"
ENGINEERING_SESSION_ID = "eng-invoice-test-fix"
GTM_LAYOUT = MemoryLayoutConfig(memories_dir="memories/gtm", sessions_dir="sessions/gtm")
ENGINEERING_LAYOUT = MemoryLayoutConfig(
    memories_dir="memories/engineering", sessions_dir="sessions/engineering"
)

GTM_TURN_1 = (
    "Analyze data/leads.csv and find one promising GTM segment. "
    "I prefer short answers that quote the numbers behind them."
)
GTM_TURN_2 = "Using that analysis, write a short outreach hypothesis to gtm_hypothesis.md."
ENGINEERING_TURN = "Fix the invoice total bug in acme_billing/invoice.py, then run the tests."
TEST_COMMAND = "python3 -m unittest discover -s tests -v"

LEADS_CSV = b"""account,segment,seats,trial_events,monthly_spend
Northstar Health,healthcare,240,98,18000
Beacon Retail,retail,75,18,4200
Apex Fintech,financial-services,180,76,13500
Summit Labs,healthcare,52,22,3900
Harbor Bank,financial-services,60,12,3100
"""

BUGGY_INVOICE = b'''def invoice_total(lines, tax_rate):
    """Sum of quantity * unit price, plus tax at tax_rate (0.08 means 8 %)."""
    subtotal = sum(quantity * price for quantity, price in lines)
    return round(subtotal + tax_rate, 2)
'''

INVOICE_TEST = b"""import unittest

from acme_billing.invoice import invoice_total


class InvoiceTotalTest(unittest.TestCase):
    def test_applies_tax_rate(self):
        self.assertEqual(invoice_total([(2, 50.0), (1, 20.0)], 0.08), 129.6)
"""

FIX_PATCH = """*** Begin Patch
*** Update File: acme_billing/invoice.py
@@
     subtotal = sum(quantity * price for quantity, price in lines)
-    return round(subtotal + tax_rate, 2)
+    return round(subtotal * (1 + tax_rate), 2)
*** End Patch
"""

SEGMENT_TOTALS = (
    "awk -F, 'NR > 1 { seats[$2] += $3; trials[$2] += $4; spend[$2] += $5 } "
    "END { for (s in spend) print s, seats[s], trials[s], spend[s] }' data/leads.csv | sort -k4 -nr"
)
"""Seats, trial events and monthly spend per segment, highest spend first."""


def build_manifest() -> Manifest:
    return Manifest(
        entries={
            "data/leads.csv": File(content=LEADS_CSV),
            "acme_billing/__init__.py": File(content=b""),
            "acme_billing/invoice.py": File(content=BUGGY_INVOICE),
            "tests/test_invoice.py": File(content=INVOICE_TEST),
        }
    )


def build_memory(layout: MemoryLayoutConfig, offline: bool) -> Memory:
    # The layout, not the agent's name, isolates memory: different directories, separate memory.
    generate = MemoryGenerateConfig(engine="offline") if offline else MemoryGenerateConfig()
    return Memory(layout=layout, generate=generate)


def build_gtm_agent(model: str | Model, offline: bool) -> SandboxAgent:
    return SandboxAgent(
        name="GTM reviewer",
        model=model,
        instructions=(
            "You are a GTM reviewer. Analyze the workspace data before answering, cite the "
            "files you used, and keep recommendations concise."
        ),
        capabilities=[build_memory(GTM_LAYOUT, offline), Filesystem(), Shell()],
    )


def build_engineering_agent(model: str | Model, offline: bool) -> SandboxAgent:
    return SandboxAgent(
        name="Engineering reviewer",
        model=model,
        instructions=(
            "You are an engineering reviewer. Inspect files before editing, make minimal "
            "changes with apply_patch, verify with the tests, and summarize fixes and risks."
        ),
        capabilities=[build_memory(ENGINEERING_LAYOUT, offline), Filesystem(), Shell()],
    )


# ------------------------------------------------------------------ offline agent turns


def gtm_script() -> list[Any]:
    """Two turns. Turn 2 reads turn 1's answer from the SQLiteSession history it was sent."""

    def recommend(call: ModelCall) -> list[Any]:
        rows = [line.split() for line in _output_body(s.tool_output(call, "by-segment"))]
        rows = [row for row in rows if len(row) == 4 and row[3].isdigit()]
        if not rows:
            raise s.ScriptError("the per-segment totals came back empty")
        segment, seats, trials, spend = rows[0]
        return s.say(
            f"Promising segment: {segment}. It leads on monthly spend ({spend}) with {seats} "
            f"seats and {trials} trial events (data/leads.csv). Follow-up data needed: "
            "win rates and sales-cycle length per segment."
        )

    def write_hypothesis(call: ModelCall) -> list[Any]:
        earlier = _assistant_texts(call.input)
        found = next((m for t in earlier if (m := re.search(r"segment: ([\w-]+)", t))), None)
        if found is None:
            raise s.ScriptError("turn 2 did not receive turn 1's answer from the session")
        segment = found.group(1)
        text = (
            f"# Outreach hypothesis: {segment}\n\n"
            f"{segment.capitalize()} accounts with many trial events convert on a pilot offer "
            "that proves value in 30 days. Test: pilot offer to the top trial accounts; "
            "measure reply and pilot-start rates.\n"
        )
        return [s.apply_patch(s.add_file_patch("gtm_hypothesis.md", text), "hypothesis")]

    def done(call: ModelCall) -> list[Any]:
        _ = s.tool_output(call, "hypothesis")
        return s.say("Saved gtm_hypothesis.md: a 30-day pilot offer to top trial accounts.")

    return [
        # turn 1
        [s.shell("head -n 3 data/leads.csv", "peek")],
        [s.shell(SEGMENT_TOTALS, "by-segment")],
        s.respond(recommend),
        # turn 2
        s.respond(write_hypothesis),
        s.respond(done),
    ]


def engineering_script() -> list[Any]:
    return s.bug_fix_script(
        inspect="cat acme_billing/invoice.py",
        test_command=TEST_COMMAND,
        patch=FIX_PATCH,
        report=(
            "Fixed invoice_total in acme_billing/invoice.py: it added tax_rate to the subtotal "
            "instead of multiplying by (1 + tax_rate). The tests pass. Risk: other callers may "
            "have compensated for the old behaviour."
        ),
    )


def _output_body(output: str) -> list[str]:
    """Lines after the ``Output:`` header of an ``exec_command`` result."""

    _, _, body = output.partition("Output:\n")
    return [line for line in body.splitlines() if line.strip()]


def _assistant_texts(items: Any) -> list[str]:
    texts: list[str] = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("role") == "assistant":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return texts


# ---------------------------------------------------------------------------- the flow


@dataclass
class Outcome:
    """What the example did; the tests assert on it."""

    offline: bool
    outputs: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Text of every file under memories/ and sessions/ after the sandbox closed."""
    gtm_turn2_memory: str = ""
    """The memory section of GTM turn 2's instructions (turn 1 was learned from by then)."""
    checks: dict[str, bool] = field(default_factory=dict)

    def under(self, prefix: str) -> list[str]:
        return sorted(path for path in self.files if path.startswith(prefix.rstrip("/") + "/"))


async def main(
    *, model: str = s.DEFAULT_MODEL, offline: bool | None = None, keep: str | Path | None = None
) -> Outcome:
    offline = s.offline_mode() if offline is None else offline
    keep_dir = s.keep_target(keep)
    s.print_mode(offline, model)
    outcome = Outcome(offline=offline)
    gtm_agent = build_gtm_agent(ScriptedModel(gtm_script()) if offline else model, offline)
    engineering_agent = build_engineering_agent(
        ScriptedModel(engineering_script()) if offline else model, offline
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=build_manifest())
    root = Path(sandbox.state.manifest.root)
    try:
        async with sandbox:
            # One SDK Session for both GTM turns: the model sees turn 1 in turn 2, and memory
            # records both runs in sessions/gtm/<session id>.jsonl as one conversation.
            gtm_session = SQLiteSession(GTM_SESSION_ID)
            gtm_config = s.run_config(sandbox, "GTM memory layout example")
            for label, prompt in (("gtm turn 1", GTM_TURN_1), ("gtm turn 2", GTM_TURN_2)):
                s.banner(label)
                recorder = s.PromptRecorder()
                result = await Runner.run(
                    gtm_agent,
                    prompt,
                    session=gtm_session,
                    run_config=gtm_config,
                    hooks=recorder,
                    max_turns=20,
                )
                outcome.outputs[label] = str(result.final_output)
                print(outcome.outputs[label])
            # Phase 1 ran for the conversation after turn 1, so turn 2 already sees its memory.
            outcome.gtm_turn2_memory = s.memory_section(recorder.first)
            summary = outcome.gtm_turn2_memory.partition("MEMORY_SUMMARY BEGINS =========\n")[2]
            print("\n[memory summary in the instructions of gtm turn 2]")
            print(
                summary.replace("========= MEMORY_SUMMARY ENDS =========", "").strip() or "(none)"
            )

            s.banner("engineering")
            result = await Runner.run(
                engineering_agent,
                ENGINEERING_TURN,
                session=SQLiteSession(ENGINEERING_SESSION_ID),
                run_config=s.run_config(sandbox, "Engineering memory layout example"),
                max_turns=20,
            )
            outcome.outputs["engineering"] = str(result.final_output)
            print(outcome.outputs["engineering"])
        # Closing the sandbox ran each layout's memory generation separately.

        for top in ("memories", "sessions"):
            for rel in s.list_tree(root, top):
                if not rel.endswith(".sqlite"):  # the search index is binary
                    outcome.files[rel] = (root / rel).read_text("utf-8")
        for layout_name, layout in (("gtm", GTM_LAYOUT), ("engineering", ENGINEERING_LAYOUT)):
            s.banner(f"{layout_name} layout: {layout.memories_dir} + {layout.sessions_dir}")
            for rel in outcome.under(layout.sessions_dir):
                lines = outcome.files[rel].splitlines()
                print(f"{rel}: {len(lines)} line(s), one per run")
            print("files:", *outcome.under(layout.memories_dir), sep="\n  ")
            s.print_file(root, f"{layout.memories_dir}/MEMORY.md")

        s.banner("checks")
        outcome.checks = _checks(outcome)
        s.keep_workspace(
            root,
            keep_dir,
            layouts=[(c.memories_dir, c.sessions_dir) for c in (GTM_LAYOUT, ENGINEERING_LAYOUT)],
        )
    finally:
        await client.delete(sandbox)
    return outcome


def _checks(outcome: Outcome) -> dict[str, bool]:
    gtm_rollout = f"{GTM_LAYOUT.sessions_dir}/{GTM_SESSION_ID}.jsonl"
    eng_rollout = f"{ENGINEERING_LAYOUT.sessions_dir}/{ENGINEERING_SESSION_ID}.jsonl"
    gtm_memory = outcome.files.get(f"{GTM_LAYOUT.memories_dir}/MEMORY.md", "")
    eng_memory = outcome.files.get(f"{ENGINEERING_LAYOUT.memories_dir}/MEMORY.md", "")
    return {
        "gtm turns share one rollout": s.check(
            f"both GTM turns are in {gtm_rollout} (2 lines) and it is the only GTM rollout",
            len(outcome.files.get(gtm_rollout, "").splitlines()) == 2
            and outcome.under(GTM_LAYOUT.sessions_dir) == [gtm_rollout],
        ),
        "engineering rollout is separate": s.check(
            f"the engineering run is in {eng_rollout} (1 line)",
            len(outcome.files.get(eng_rollout, "").splitlines()) == 1
            and outcome.under(ENGINEERING_LAYOUT.sessions_dir) == [eng_rollout],
        ),
        "gtm turn 2 sees turn 1": s.check(
            "GTM turn 2's instructions carry turn 1's memory under 'This conversation'",
            "### This conversation" in outcome.gtm_turn2_memory
            and "short answers" in outcome.gtm_turn2_memory,
        ),
        "both layouts have memory": s.check(
            "each layout has its own MEMORY.md with entries",
            "- **" in gtm_memory and "- **" in eng_memory,
        ),
        "gtm memory has no engineering": s.check(
            "GTM memory does not mention the invoice fix",
            bool(gtm_memory) and "invoice" not in gtm_memory.lower(),
        ),
        "engineering memory has no gtm": s.check(
            "engineering memory does not mention the leads analysis",
            bool(eng_memory) and "leads" not in eng_memory.lower(),
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
