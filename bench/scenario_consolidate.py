"""consolidate: model input spent by the close that adds one rollout to a memory of N rollouts.

History is built by actually running closes, each adding one new conversation (one ~8 KB run
segment), through each system's real path on one ``UnixLocalSandboxClient`` session: the manager
the SDK runtime would find receives the run (``enqueue_rollout_payload``) and its pre-stop hook
(``flush``) does the close. Every close uses the same counting models with zero latency, so the
history is exactly what the systems themselves built (ours: the model engine throughout, never
the offline engine). Each close gets a fresh manager, as a new sandbox session would.

What is counted for one close: every memory-model call made from the run's arrival to the end
of the close (ours extracts right after the run, in the background, and the close renders;
the built-in runs phase 1 and the phase-2 agent loop at the close). Since every close is
measured, the whole curve (cost against history size) is kept for the plot.
"""

from __future__ import annotations

from typing import Any

from common import Memories, Progress, Row, make_memory, manager_for, sandbox, temp_root
from models import MEMORY_BLOCK_CHARS, SMALL_BLOCK_CHARS
from workload import conversation_id, segment_payload

FLAT_BASE = 10
"""The history size flatness is measured against (the brief: N=200 within 1.3x of N=10)."""

FLAT_TOP = 200
"""The history size flatness is measured at; a run that does not reach it has no flat row."""


async def _one_close(session: Any, memories: Memories, k: int) -> tuple[int, int]:
    memories.reset()
    manager = manager_for(session, memories)
    await manager.enqueue_rollout_payload(segment_payload(k, 0), rollout_id=conversation_id(k))
    await manager.flush()
    return memories.tokens, memories.calls


async def build_curve(
    system: str, top: int, progress: Progress, *, block_chars: int | None = None
) -> tuple[list[int], list[int]]:
    """Tokens and calls of close k (k = 0..top), where close k adds to a memory of k rollouts."""

    tokens: list[int] = []
    calls: list[int] = []
    memories = make_memory(system, block_chars=block_chars)
    with temp_root(f"consolidate-{system}") as root:
        async with sandbox(root) as session:
            for k in range(top + 1):
                t, c = await _one_close(session, memories, k)
                tokens.append(t)
                calls.append(c)
                if k and k % 50 == 0:
                    progress(f"consolidate: {system} {k}/{top} closes")
    return tokens, calls


async def run(config: dict[str, Any], progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    sizes: list[int] = config["sizes"]
    top = max(sizes)
    curves: dict[str, dict[str, list[int]]] = {}
    for system in ("ours", "builtin"):
        tokens, calls = await build_curve(system, top, progress)
        curves[system] = {"tokens": tokens, "calls": calls}
    if config.get("small_block"):
        tokens, calls = await build_curve("builtin", top, progress, block_chars=SMALL_BLOCK_CHARS)
        curves["builtin_small_block"] = {"tokens": tokens, "calls": calls}

    rows: list[Row] = []
    for n in sizes:
        o_t, b_t = curves["ours"]["tokens"][n], curves["builtin"]["tokens"][n]
        o_c, b_c = curves["ours"]["calls"][n], curves["builtin"]["calls"][n]
        rows.append(
            Row(
                name=f"consolidate.n{n}.tokens",
                metric=f"model input of the close adding 1 rollout to {n}",
                unit="tokens (chars/4)",
                ours=o_t,
                builtin=b_t,
                target="ours <= 0.2x built-in",
                met=o_t <= 0.2 * b_t,
            )
        )
        rows.append(
            Row(
                name=f"consolidate.n{n}.calls",
                metric=f"model calls of the close adding 1 rollout to {n}",
                unit="calls",
                ours=o_c,
                builtin=b_c,
                target="ours <= built-in",
                met=o_c <= b_c,
            )
        )
    if "builtin_small_block" in curves:
        o_t = curves["ours"]["tokens"][top]
        b_t = curves["builtin_small_block"]["tokens"][top]
        rows.append(
            Row(
                name=f"consolidate.n{top}.tokens_small_block",
                metric=(
                    f"model input of the close adding 1 rollout to {top}, the built-in's simulated "
                    f"phase 2 writing {SMALL_BLOCK_CHARS}-character blocks instead of "
                    f"{MEMORY_BLOCK_CHARS}"
                ),
                unit="tokens (chars/4)",
                ours=o_t,
                builtin=b_t,
                target="ours <= 0.2x built-in",
                met=o_t <= 0.2 * b_t,
            )
        )
    if FLAT_TOP in sizes and FLAT_BASE in sizes:
        # Only where the history is long enough to say anything: quick mode leaves it out.
        flat_o = curves["ours"]["tokens"][FLAT_TOP] / curves["ours"]["tokens"][FLAT_BASE]
        flat_b = curves["builtin"]["tokens"][FLAT_TOP] / curves["builtin"]["tokens"][FLAT_BASE]
        rows.append(
            Row(
                name="consolidate.flat.tokens",
                metric=f"close input tokens at N={FLAT_TOP} / at N={FLAT_BASE}",
                unit="x",
                ours=flat_o,
                builtin=flat_b,
                target="ours <= 1.3",
                met=flat_o <= 1.3,
            )
        )
    return rows, {"curves": curves}
