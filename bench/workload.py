"""The workload both systems are fed: deterministic run segments and model notes.

A segment has the shape the SDK hands a memory manager after every ``Runner.run``
(``build_rollout_payload``): ``updated_at``, ``input``, ``generated_items`` (function calls of the
sandbox ``exec_command`` tool with their outputs, in the SDK's own output format, and a final
assistant message), ``terminal_metadata`` and ``final_output``. The text is varied (seeded), so
nothing compresses or caches unrealistically, and it contains no secrets, so redaction finds
nothing to change (the common case).

Model notes (rollout summary, raw memory, slug) are what a phase-1 model "writes"; both systems
receive notes of the same size for the same rollout.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from typing import Any

WORDS = (
    "invoice parser config module handler request retry cache index query schema migration "
    "fixture test build lint deploy branch commit review endpoint client server token budget "
    "report export import format encode decode buffer stream worker queue timeout latency "
    "metric trace span log error warning failure success rollback release version package "
    "dependency resolver lockfile install runtime session sandbox workspace folder path file "
    "line column value field record entry table column row filter sort merge split join"
).split()

TASKS = (
    "Fix the failing invoice tests",
    "Add a retry to the export worker",
    "Speed up the report query",
    "Migrate the config loader to TOML",
    "Review the cache eviction change",
    "Update the lockfile and rerun the build",
    "Investigate the flaky session test",
    "Document the deploy checklist",
)

BASE_TIME = datetime(2025, 1, 1, tzinfo=timezone.utc)


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def _text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        s = _sentence(rng, rng.randint(6, 14))
        out.append(s)
        size += len(s) + 1
    return " ".join(out)[:chars]


def _exec_output(rng: random.Random, body_chars: int, exit_code: int) -> str:
    lines: list[str] = []
    size = 0
    while size < body_chars:
        line = f"{rng.choice(WORDS)}/{rng.choice(WORDS)}.py:{rng.randint(1, 400)}: " + _sentence(
            rng, rng.randint(4, 10)
        )
        lines.append(line)
        size += len(line) + 1
    body = "\n".join(lines)[:body_chars]
    return (
        f"Chunk ID: {rng.getrandbits(24):06x}\nWall time: {rng.random():.4f} seconds\n"
        f"Process exited with code {exit_code}\nOutput:\n{body}"
    )


def segment_payload(
    conversation: int,
    index: int,
    *,
    tool_calls: int = 4,
    output_chars: int = 1_400,
    big_output_chars: int = 0,
) -> dict[str, Any]:
    """The ``index``-th run segment of conversation ``conversation`` (about 8 KB by default).

    ``big_output_chars`` adds one tool output of that size (the big-rollout scenario).
    """

    rng = random.Random(conversation * 1_000_003 + index)
    task = TASKS[conversation % len(TASKS)]
    items: list[dict[str, Any]] = []
    for k in range(tool_calls):
        call_id = f"call_{conversation}_{index}_{k}"
        cmd = (
            f"python3 -m pytest -q tests/test_{rng.choice(WORDS)}.py"
            if k % 2 == 0
            else f"rg -n {rng.choice(WORDS)} src/{rng.choice(WORDS)}"
        )
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "exec_command",
                "arguments": json.dumps({"cmd": cmd}),
                "id": f"fc_{call_id}",
                "status": "completed",
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": _exec_output(rng, output_chars, 1 if k == 0 else 0),
            }
        )
    if big_output_chars:
        call_id = f"call_{conversation}_{index}_big"
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "exec_command",
                "arguments": json.dumps({"cmd": "cat build/full.log"}),
                "id": f"fc_{call_id}",
                "status": "completed",
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": _exec_output(rng, big_output_chars, 0),
            }
        )
    final = f"{task}: done. " + _text(rng, 500)
    items.append(
        {
            "id": f"msg_{conversation}_{index}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": final, "annotations": []}],
        }
    )
    when = BASE_TIME + timedelta(minutes=conversation * 10 + index)
    return {
        "updated_at": when.isoformat(),
        "input": [{"role": "user", "content": f"{task} (run {index}). " + _text(rng, 300)}],
        "generated_items": items,
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
        "final_output": final,
    }


def conversation_id(conversation: int) -> str:
    return f"conv-{conversation:05d}"


# ------------------------------------------------------------------- model notes


SUMMARY_CHARS = 1_200
RAW_MEMORY_CHARS = 800
FACT_CHARS = 140


def notes_for(key: str) -> dict[str, str]:
    """What a phase-1 model writes for one rollout: same sizes for both systems."""

    rng = random.Random(key)
    slug_words = [rng.choice(WORDS) for _ in range(3)]
    return {
        "rollout_slug": "-".join(slug_words),
        "rollout_summary": "## Task\n" + _text(rng, SUMMARY_CHARS - 8),
        "raw_memory": "- " + _text(rng, RAW_MEMORY_CHARS - 2),
    }


def fact_text(key: str, chars: int = FACT_CHARS) -> str:
    return _text(random.Random("fact:" + key), chars)


def entry_text(i: int, chars: int = 90) -> str:
    """Content of the i-th entry of a populated memory (the read scenario)."""

    return _text(random.Random(i), chars)
