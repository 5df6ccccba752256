"""An engine says what it can do; the close budgets, continues and retries by that, not by
the engine's name."""

from __future__ import annotations

from pathlib import Path

from helpers import layout_runtime, run_payload
from sandbox_memory.engines.base import (
    Candidate,
    EngineTraits,
    Extraction,
    ExtractionRequest,
    traits,
)
from sandbox_memory.engines.offline import OfflineEngine


class CountingEngine:
    """Proposes one fact per rollout; counts its calls."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    async def extract(self, request: ExtractionRequest) -> Extraction:
        self.calls += 1
        item = request.segments[-1]["input"][0]
        return Extraction(
            rollout_summary=f"Talked in {request.rollout_id}.",
            rollout_slug="talk",
            raw_memory="- talk",
            candidates=[
                Candidate(
                    key=f"fact-{request.rollout_id}",
                    content=f"The user wrote in {request.rollout_id}.",
                    kind="fact",
                    sources=[item["memory_item_id"]],
                )
            ],
        )


class LocalCountingEngine(CountingEngine):
    name = "local-counting"
    spends_model_calls = False


def test_an_engine_that_says_nothing_is_taken_for_a_model_engine() -> None:
    assert traits(CountingEngine()) == EngineTraits()


def test_the_offline_engine_spends_no_model_calls_and_takes_no_feedback() -> None:
    assert traits(OfflineEngine()) == EngineTraits(
        spends_model_calls=False, continues_from_notes=False, takes_feedback=False
    )


async def _close_three(tmp_path: Path, engine: CountingEngine) -> int:
    rt = layout_runtime(tmp_path, engine=engine, max_model_calls_per_close=1)
    for n in range(3):
        run = run_payload(f"Note number {n}.", reply=None, when=None)
        await rt.record(run, rollout_id=f"c{n}")
    await rt.close()
    return len(await rt.store.pending_rollouts())


async def test_the_model_call_budget_applies_to_an_engine_that_spends_model_calls(
    tmp_path: Path,
) -> None:
    engine = CountingEngine()
    assert await _close_three(tmp_path, engine) == 2  # one call allowed: two wait
    assert engine.calls == 1


async def test_the_model_call_budget_does_not_hold_back_an_engine_that_spends_none(
    tmp_path: Path,
) -> None:
    engine = LocalCountingEngine()
    assert await _close_three(tmp_path, engine) == 0
    assert engine.calls == 3
