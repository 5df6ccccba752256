"""Step 2 of the flow, extract (phase 1): what each conversation's new segments teach.

After a run, its conversation is extracted in the background within the budget the coming close
leaves (:meth:`Extractor.consolidate_conversation`); at the close, every pending rollout is
extracted within the close's budget, then phase 2 runs (:mod:`.consolidate`). The extraction
itself is in :mod:`.rollout`; this step schedules it and keeps the budgets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from .. import spans
from ..layout_state import LayoutState
from ..search.index import SearchIndex
from ..search.step import embed_index, save_index, sync_index
from .rollout import Budget, extract_rollout

if TYPE_CHECKING:
    from ..consolidate.step import Consolidator

logger = logging.getLogger("sandbox_memory")


class Extractor:
    """Schedules phase 1 of one layout and runs its close (see :meth:`close`)."""

    def __init__(
        self, state: LayoutState, *, index: SearchIndex, consolidator: Consolidator
    ) -> None:
        self.state = state
        self.index = index
        self.consolidator = consolidator
        self._run_budget: Budget | None = None
        self._redactions_reported = 0
        """Redactions already counted in an earlier close's report."""
        self._calls_reported = 0
        """Model requests already counted in an earlier close's report."""

    def between_closes(self) -> Budget:
        """The budget runs spend before the close: the close gets what they leave."""

        if self._run_budget is None:
            g = self.state.generate
            self._run_budget = Budget(
                calls=g.max_model_calls_per_close,
                tokens=g.max_input_tokens_per_close,
                deadline=float("inf"),
                per_extraction_seconds=g.max_seconds_per_close,
            )
        return self._run_budget

    def begin_close(self, deadline: float) -> None:
        """A close starts: extractions still running after runs stop at its ``deadline``."""

        if self._run_budget is not None:
            self._run_budget.shorten(deadline)

    async def consolidate_conversation(self, rollout_id: str) -> bool:
        """Phase 1 for one conversation after a run (changes applied under the layout lock).

        Model calls made here count against the budget of the coming close.
        """

        budget = self.between_closes()
        changed = await extract_rollout(self.state, rollout_id, budget=budget, search=self.index)
        if changed:
            self.index.mark(rollout_id)
        # This run's rollout only (and entry changes): no listing of every rollout per run.
        await sync_index(self.index, rollouts=[rollout_id])
        if rollout_id in budget.deferred:
            budget.deferred.remove(rollout_id)
            logger.info(
                "memory budget until the next close is spent; conversation %s is extracted at "
                "close if the budget allows, else at a later close",
                rollout_id,
            )
        return changed

    @spans.traced(spans.CLOSE, result=spans.close_figures)
    async def close(
        self,
        *,
        only: list[str] | None = None,
        skip: Collection[str] = (),
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """Phase 1 for every pending rollout (of ``only``, but ``skip``: another sandbox's close
        extracts those), then phase 2; returns a report.

        In this process: with a shared store, the runtime runs it under the store's lease
        (``LayoutRuntime.close``).
        """

        g = self.state.generate
        spent = self._run_budget
        self._run_budget = None
        calls_before = self._calls_reported
        budget = Budget(
            calls=g.max_model_calls_per_close - (spent.spent_calls if spent else 0),
            tokens=g.max_input_tokens_per_close - (spent.spent_tokens if spent else 0),
            deadline=deadline
            if deadline is not None
            else time.monotonic() + g.max_seconds_per_close,
        )
        report: dict[str, Any] = {
            "extracted": list(dict.fromkeys(spent.extracted)) if spent else [],
            "deferred": [],
            "redactions": 0,
        }
        pending = await self.state.pending_rollouts()
        if only is not None:
            pending = [r for r in pending if r in only]
        pending = [r for r in pending if r not in skip]
        sem = asyncio.Semaphore(g.phase_one_concurrency)

        async def one(rid: str) -> None:
            async with sem:
                await extract_rollout(self.state, rid, budget=budget, search=self.index)

        await asyncio.gather(*(one(r) for r in pending))
        report["extracted"] = list(dict.fromkeys([*report["extracted"], *budget.extracted]))
        report["deferred"] = list(dict.fromkeys(budget.deferred))
        # Requests really sent (every attempt), since the previous close of this runtime.
        calls = getattr(self.state.built_engine, "calls", None)
        if isinstance(calls, int):
            self._calls_reported = calls
        report["model_calls"] = self._calls_reported - calls_before
        for rid in report["extracted"]:
            self.index.mark(rid)
        async with self.state.write_lock():
            await self.consolidator.consolidate_layout()
        # What the close indexed is embedded now, within its time, not by the first search.
        await embed_index(self.index, deadline=budget.deadline)
        await save_index(self.index)
        # Secrets redacted since the previous close of this runtime (records, notes, errors).
        total = self.state.redactor.total
        report["redactions"] = total - self._redactions_reported
        self._redactions_reported = total
        logger.info(
            "memory close: %d rollout(s) extracted, %d model call(s), %d secret(s) redacted, "
            "%d deferred",
            len(report["extracted"]),
            report["model_calls"],
            report["redactions"],
            len(report["deferred"]),
        )
        if report["deferred"]:
            logger.warning(
                "memory close left %d rollout(s) for the next close (its model-call, token or "
                "time budget ran out): %s",
                len(report["deferred"]),
                ", ".join(report["deferred"]),
            )
        return report
