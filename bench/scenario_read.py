"""read: characters injected per turn, and the time to build them, with 2,000 entries of memory.

Ours: 2,000 entries (mixed kinds, one source each) are written through the store API
(``MemoryClient(...).store``): 1,500 in layout memory and 500 in the memory of the conversation
the measured runs continue (so both sections of the prompt are filled), then rendered once by a
layout consolidation, as a close would.
Built-in: ``memory_summary.md`` holds the same 2,000 entries, one line each, in the format ours
renders (what a phase-2 model that kept everything would write), and ``MEMORY.md`` the same.

Each system's capability is bound to its own real ``UnixLocalSandboxClient`` session, and
``capability.instructions(manifest)`` is timed as the SDK calls it: the first turn of a run (a
freshly cloned and bound capability, as every ``Runner.run`` does) and the later turns of the
same run. "Memory characters" is the memory text inside the injected fragment (the fragment
minus the fixed instructions around it): the summary (its budget ``max_summary_chars``, seed
000's 8,000) and the section "relevant to this task" (its own budget, ``max_relevant_chars``);
measured once as configured by default and once with the section off (the summary alone).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agents.sandbox.memory.prompts import render_memory_read_prompt
from common import Progress, Row, make_memory, median, sandbox, temp_root
from workload import entry_text

from sandbox_memory import MemoryClient, MemoryReadConfig, Refresh
from sandbox_memory.config import DEFAULT_RELEVANT_BUDGET_CHARS, DEFAULT_SUMMARY_BUDGET_CHARS
from sandbox_memory.render.files import entry_line, render_read_prompt
from sandbox_memory.stores.records import ConversationMemory, Entry, LayoutMemory, Source
from sandbox_memory.stores.segments import history_fingerprint

CONVERSATION = "conv-read"
RUN_INPUT = [
    {"role": "user", "content": "Fix the invoice total."},
    {"role": "assistant", "content": "Fixed the discount in invoice.py."},
    {"role": "user", "content": "Continue the invoice work."},
]
KINDS = ("fact", "decision", "procedure", "fact", "hypothesis")
COLD_SAMPLES = 15
TURN_SAMPLES = 40


def _entries(count: int) -> list[Entry]:
    return [
        Entry(
            key=f"entry-{i:05d}",
            content=entry_text(i),
            kind=KINDS[i % len(KINDS)],  # type: ignore[arg-type]
            sources=[Source(conversation=f"conv-{i % 97:05d}", item=f"{i:08x}:1")],
            updated_at=1_700_000_000_000 + i * 1000,
        )
        for i in range(count)
    ]


async def _populate_ours(root: Path, entries: list[Entry], memories: Any) -> None:
    """Layout entries plus, for the conversation of the measured run, its own entries too."""

    client = MemoryClient(root, generate=memories.capability.generate)
    split = len(entries) * 3 // 4
    await client.store.save_layout(
        LayoutMemory(version=1, entries={e.key: e for e in entries[:split]})
    )
    await client.store.save_conversation(
        ConversationMemory(rollout_id=CONVERSATION, entries={e.key: e for e in entries[split:]})
    )
    fingerprint = history_fingerprint(RUN_INPUT)
    assert fingerprint is not None
    await client.store.index_thread(fingerprint, CONVERSATION)
    await client.apply(Refresh(), expected=0)  # renders MEMORY.md and memory_summary.md


def _populate_builtin(root: Path, entries: list[Entry]) -> None:
    lines = [entry_line(e, with_sources=False) for e in reversed(entries)]
    memories = root / "memories"
    memories.mkdir(parents=True, exist_ok=True)
    (memories / "memory_summary.md").write_text("# Memory summary\n\n" + "\n".join(lines) + "\n")
    (memories / "MEMORY.md").write_text("# MEMORY\n\n" + "\n".join(lines) + "\n")


def _frame_chars(system: str, capability: Any) -> int:
    """Length of the fixed instructions around the memory text."""

    live = bool(capability.read and capability.read.live_update)
    if system == "ours":
        # An empty summary renders no prompt at all: measure around a one-character one.
        return len(render_read_prompt(memory_dir="memories", summary="x", live_update=live)) - 1
    return len(
        render_memory_read_prompt(memory_dir="memories", memory_summary="", live_update=live)
    )


async def measure(
    system: str, count: int, read: MemoryReadConfig | None = None
) -> dict[str, float]:
    entries = _entries(count)
    memories = make_memory(system, read=read)
    with temp_root(f"read-{system}") as root:
        if system == "ours":
            await _populate_ours(root, entries, memories)
        else:
            _populate_builtin(root, entries)
        async with sandbox(root) as session:
            manifest = session.state.manifest
            cold: list[float] = []
            turns: list[float] = []
            lengths: list[int] = []
            base = memories.capability
            for _ in range(COLD_SAMPLES):
                capability = base.clone()  # what each Runner.run does
                capability.bind(session)
                capability.process_context(list(RUN_INPUT))  # type: ignore[arg-type]
                start = time.perf_counter()
                text = await capability.instructions(manifest)
                cold.append(time.perf_counter() - start)
                lengths.append(len(text or ""))
                for _ in range(TURN_SAMPLES // COLD_SAMPLES + 1):
                    start = time.perf_counter()
                    text = await capability.instructions(manifest)
                    turns.append(time.perf_counter() - start)
                    lengths.append(len(text or ""))
            frame = _frame_chars(system, base)
    return {
        "cold_ms": median(cold) * 1e3,
        "turn_ms": median(turns) * 1e3,
        "injected_chars": float(max(lengths)),
        "memory_chars": float(max(lengths) - frame),
    }


async def run(count: int, progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    res = {system: await measure(system, count) for system in ("ours", "builtin")}
    summary_only = await measure("ours", count, MemoryReadConfig(relevant=False))
    progress(
        "read: "
        + ", ".join(
            f"{k} {v['memory_chars']:.0f} chars {v['cold_ms']:.2f} ms" for k, v in res.items()
        )
    )
    o, b = res["ours"], res["builtin"]
    summary, relevant = DEFAULT_SUMMARY_BUDGET_CHARS, DEFAULT_RELEVANT_BUDGET_CHARS
    rows = [
        Row(
            name="read.summary_chars",
            metric=f"memory text injected per turn, {count:,} entries, the relevant section off",
            unit="chars",
            ours=summary_only["memory_chars"],
            builtin=b["memory_chars"],
            target=f"ours <= {summary:,}",
            met=summary_only["memory_chars"] <= summary,
        ),
        Row(
            name="read.memory_chars",
            metric=(
                f"memory text injected per turn, {count:,} entries: the summary and the "
                "section relevant to the run's input"
            ),
            unit="chars",
            ours=o["memory_chars"],
            builtin=b["memory_chars"],
            target=f"ours <= {summary + relevant:,} ({summary:,} + {relevant:,})",
            met=o["memory_chars"] <= summary + relevant,
        ),
        Row(
            name="read.injected_chars",
            metric="memory prompt injected per turn, with its instructions",
            unit="chars",
            ours=o["injected_chars"],
            builtin=b["injected_chars"],
            target="ours <= built-in",
            met=o["injected_chars"] <= b["injected_chars"],
        ),
        Row(
            name="read.first_turn_ms",
            metric="time to build the memory prompt, first turn of a run",
            unit="ms",
            ours=o["cold_ms"],
            builtin=b["cold_ms"],
            target="ours <= built-in",
            met=o["cold_ms"] <= b["cold_ms"],
        ),
        Row(
            name="read.later_turn_ms",
            metric="time to build the memory prompt, later turns of a run",
            unit="ms",
            ours=o["turn_ms"],
            builtin=b["turn_ms"],
            target="ours <= built-in",
            met=o["turn_ms"] <= b["turn_ms"],
        ),
    ]
    return rows, {"read": res}
