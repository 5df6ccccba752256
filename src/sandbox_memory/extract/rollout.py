"""Phase 1: extraction of one rollout's new segments into notes and conversation memory."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .. import spans
from ..datapolicy import data_text, exc_text
from ..engines.base import Candidate, Extraction, ExtractionRequest, KnownEntry, traits
from ..engines.transcript import item_text, one_line, segment_id_of, segment_items
from ..privacy import keep_private, run_person, self_statements, shared_slug, shared_text
from ..record.item_notes import note_items
from ..rules import (
    ItemIndex,
    Rejection,
    apply_to_conversation,
    check_candidates,
    one_entry_per_subject,
    plausible_ms,
    says_nothing_new,
)
from ..search.index import MAX_ITEM_CHARS, timestamp_ms
from ..stores.records import (
    ConversationMemory,
    Entry,
    LogRecord,
    RolloutProgress,
    now_ms,
    tail_hash,
)
from ..stores.segments import ParsedSegments, last_item_id, read_new_segments, rollout_path

if TYPE_CHECKING:
    from ..layout_state import LayoutState
    from ..search.index import SearchIndex

logger = logging.getLogger("sandbox_memory")

T = TypeVar("T")

SLUG_MAX = 60
"""Longest slug kept in a file name."""

MAX_BACKOFF_SECONDS = 3600.0
"""Longest delay between two attempts; a later ``next_attempt_at`` read from disk is absurd."""

BACKOFF_BASE_SECONDS = 2.0
"""First retry delay after a failed extraction; doubles per attempt (capped by the hour)."""

PREVIOUS_NOTES_CHARS = 2_000
"""Newest notes of the conversation's earlier segments given to a phase-1 model as context:
enough to connect this run to the last ones, small enough to keep each call's cost flat."""

SUMMARY_FILE_MAX_CHARS = 24_000
"""Longest rollout summary file: a conversation of many runs keeps its newest parts (each run
adds one) and says how many older parts were dropped, so "open one or two summaries" stays a
cheap step. The entries learned from the dropped parts stay in memory."""

SECTION_MARK = "\n## Segment(s) up to "

CHARS_PER_TOKEN = 4
"""Rough size of a token, for the input-token budget (no tokenizer dependency)."""


CANCEL_GRACE_SECONDS = 1.0
"""How long an extraction cut off by the time budget may take to wind down (its HTTP request
is cancelled) before it is abandoned: part of the close's documented grace."""


class BudgetExpired(Exception):
    """The work was cut off by the time budget; ``by_close`` when the close's deadline did it."""

    def __init__(self, *, by_close: bool) -> None:
        super().__init__("the close's time budget ran out" if by_close else "time limit")
        self.by_close = by_close


@dataclass
class Budget:
    """What one close (or the runs before it) may still spend on memory models."""

    calls: int
    tokens: int
    deadline: float
    """``time.monotonic()`` by which model work stops; :meth:`shorten` can bring it forward."""
    spent_calls: int = 0
    spent_tokens: int = 0
    deferred: list[str] = field(default_factory=list)
    extracted: list[str] = field(default_factory=list)
    """Rollouts extracted under this budget (after runs: reported by the next close)."""
    per_extraction_seconds: float | None = None
    """Bound of each extraction on its own (after a run, where no close deadline runs yet)."""
    _waiters: set[asyncio.Future[None]] = field(default_factory=set)

    def remaining_seconds(self) -> float:
        return self.deadline - time.monotonic()

    def admits(self, tokens: int) -> bool:
        """Whether one more call of ``tokens`` fits (what is spent only grows: a call refused
        now is refused later in the same close)."""

        if self.spent_calls + 1 > self.calls or self.spent_tokens + tokens > self.tokens:
            return False
        return self.remaining_seconds() > 0

    def reserve(self, tokens: int) -> bool:
        if not self.admits(tokens):
            return False
        self.spent_calls += 1
        self.spent_tokens += tokens
        return True

    def shorten(self, deadline: float) -> None:
        """Bring the deadline forward; work in :meth:`bounded` stops at it."""

        self.deadline = min(self.deadline, deadline)
        for waiter in list(self._waiters):
            if not waiter.done():
                waiter.set_result(None)

    def end_for(self, started: float) -> float:
        own = started + self.per_extraction_seconds if self.per_extraction_seconds else math.inf
        return min(self.deadline, own)

    async def bounded(self, work: Coroutine[Any, Any, T], *, started: float) -> T:
        """``await work`` until the deadline; past it the work is cancelled and
        :class:`BudgetExpired` raised (after at most :data:`CANCEL_GRACE_SECONDS`)."""

        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(work)
        try:
            while True:
                remaining = self.end_for(started) - time.monotonic()
                if remaining <= 0:
                    break
                wake: asyncio.Future[None] = loop.create_future()
                self._waiters.add(wake)
                try:
                    pending: set[asyncio.Future[Any]] = {task, wake}
                    await asyncio.wait(
                        pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    self._waiters.discard(wake)
                if task.done():
                    return task.result()
        except BaseException:
            task.cancel()
            raise
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_GRACE_SECONDS)
        if not task.done():
            task.add_done_callback(_consume)
        elif not task.cancelled():
            _consume(task)
        raise BudgetExpired(by_close=self.remaining_seconds() <= 0)


def _consume(task: asyncio.Future[Any]) -> None:
    """Retrieve an abandoned task's outcome so asyncio does not log it as never retrieved."""

    if not task.cancelled():
        task.exception()


def stray_cancel(exc: BaseException) -> bool:
    """A ``CancelledError`` raised by a callee (a model client) while this task is not being
    cancelled: a failure like any other, not a request to stop. Python 3.10 cannot tell."""

    if not isinstance(exc, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() == 0


def normalize_slug(raw: str) -> str:
    import re

    slug = re.sub(r"[^a-z0-9]+", "-", raw.lower()).strip("-")[:SLUG_MAX].strip("-")
    return slug or "rollout"


@spans.traced(spans.EXTRACT, result=spans.extract_figures, **spans.EXTRACT_START)
async def extract_rollout(
    rt: LayoutState,
    rollout_id: str,
    *,
    budget: Budget | None,
    search: SearchIndex | None = None,
) -> bool:
    """Extract the unprocessed segments of ``rollout_id``; return True when memory changed.

    The engine works without the layout lock; its changes are then applied under the lock to
    the latest memory, so edits made meanwhile are kept. If another process moved the
    rollout's progress meanwhile, this extraction is not applied (it rests on bytes read from
    an offset that is no longer the rollout's): the range is worked out again from the new
    offset and what is left of it is extracted, up to :data:`MAX_RACE_ROUNDS` times (each
    round lost means another process extracted a part). Failures are recorded in the
    progress file with a backoff and logged at WARNING; they never propagate.
    """

    async with rt.rollout_lock(rollout_id):
        for _ in range(MAX_RACE_ROUNDS):
            outcome = await _extract(rt, rollout_id, budget=budget, search=search)
            if not isinstance(outcome, _Raced):
                return outcome
    logger.warning(
        "rollout %s was extracted by other processes in each of %d rounds while this one "
        "worked; what they left stays pending for the next run or close",
        rollout_id,
        MAX_RACE_ROUNDS,
    )
    return False


MAX_RACE_ROUNDS = 16
"""Rounds of extraction of one rollout when other processes keep moving its progress first.
Each lost round means another process applied an extraction of it meanwhile, so rounds run out
only with more processes than this extracting one conversation at once; what is still left
then stays pending for the next close (logged)."""


class _Raced:
    """The rollout's progress moved while this extraction worked: do it again from there."""


_RACED = _Raced()


def _defer(budget: Budget, rollout_id: str) -> bool:
    budget.deferred.append(rollout_id)
    logger.info(
        "memory budget for this close is spent; rollout %s waits for the next close", rollout_id
    )
    return False


async def _extract(
    rt: LayoutState, rollout_id: str, *, budget: Budget | None, search: SearchIndex | None
) -> bool | _Raced:
    """One round of :func:`extract_rollout`: the new runs read, the engine asked, the result
    applied under the layout lock unless another process moved the progress meanwhile."""

    store = rt.store
    prog = await store.get_progress(rollout_id) or RolloutProgress()
    if not _due(prog, rollout_id):
        return False
    path = rollout_path(rt.layout.sessions_dir, rollout_id)
    replaced = await _replaced(rt, path, prog)
    conversation = await store.load_conversation(rollout_id)
    start, learned_until = _start_of(rt, rollout_id, prog, path, replaced)
    read = await read_new_segments(
        rt.ws, path, offset=start, check=rt.line_check(rollout_id), digests=True
    )
    if read is None:
        return False
    parsed: ParsedSegments = read
    skipped = parsed.skipped()
    if skipped:
        # Once: the offset moves past these lines, which are never read for learning again.
        logger.warning(
            "line(s) of %s skipped, never taken as anyone's statement: %s", path, skipped
        )
    segments = [s for s in parsed.segments if not _only_edits(s)]
    if learned_until is not None:
        segments = [s for s in segments if timestamp_ms(s.get("updated_at")) > learned_until]
    if not rt.switch(conversation.overrides.generate, "generate"):
        return False  # left unprocessed: learning resumes if generate is switched back on
    if not segments:
        return await _nothing_to_learn(rt, rollout_id, prog, parsed, path)

    new_bytes = parsed.end_offset - prog.offset
    spans.note(engine=rt.engine.name, segments=len(segments), new_bytes=new_bytes)
    estimated = min(new_bytes, rt.generate.max_rollout_chars) // CHARS_PER_TOKEN
    can = traits(rt.engine)
    if can.spends_model_calls and budget is not None and not budget.admits(estimated):
        # Before the known entries are looked up: a close with a long backlog defers most of
        # it, and each deferral would otherwise cost a search over every entry.
        return _defer(budget, rollout_id)
    known = await known_entries(rt, search, conversation, segments)
    request = ExtractionRequest(
        rollout_id=rollout_id,
        segments=segments,
        previous_summary=await _previous_notes(rt, rollout_id, prog),
        known_entries=known,
        extra_prompt=rt.generate.extra_prompt,
        max_input_chars=rt.generate.max_rollout_chars,
        external_tools=rt.generate.external_tools,
        continues_rollout=prog.offset > 0,
    )
    extraction = await _ask(rt, request, conversation, budget, estimated)
    if not isinstance(extraction, Extraction):
        return extraction

    async with rt.write_lock():
        current = await store.get_progress(rollout_id)
        if _moved(current, prog):
            assert current is not None
            logger.info(
                "rollout %s was extracted up to byte %d by another process while this one "
                "read it up to byte %d; this result is not applied and what is left is "
                "extracted again",
                rollout_id,
                current.offset,
                parsed.end_offset,
            )
            return _RACED
        changed = await _apply(
            rt,
            rollout_id,
            extraction,
            segments,
            (start, parsed.end_offset),
            path,
            replaced=replaced is not None,
            known=known,
        )
    await note_items(rt, rollout_id, parsed.item_digests)
    if budget is not None:
        budget.extracted.append(rollout_id)
    return changed


def _due(prog: RolloutProgress, rollout_id: str) -> bool:
    """Whether the rollout is to be extracted now: not failed for good, and past the backoff
    of its last failure (a next attempt set beyond the longest backoff is retried now)."""

    if prog.status == "failed":
        return False
    wait = prog.next_attempt_at - time.time()
    if wait > MAX_BACKOFF_SECONDS + 60 or math.isnan(wait):
        # Not a delay this code sets (a clock far off, a hand edit): retried now, not never.
        logger.warning(
            "rollout %s has its next attempt %s s from now, beyond the longest backoff "
            "(%.0f s); it is retried now",
            rollout_id,
            f"{wait:.0f}" if math.isfinite(wait) else wait,
            MAX_BACKOFF_SECONDS,
        )
    elif wait > 0:
        return False
    return True


def _start_of(
    rt: LayoutState, rollout_id: str, prog: RolloutProgress, path: str, replaced: str | None
) -> tuple[int, int | None]:
    """Where reading starts (the progress' offset, or 0), and the time stamp up to which the
    runs read again count as learned (``None``: every run read is new)."""

    if rt.store.conversation_refused(rollout_id) and prog.offset > 0:
        # Its record was not memory's (kept aside): what it learned from the runs is learned
        # again from their sealed lines. A person's Remember and Forget come back from the
        # sealed log with the record (``Store.load_conversation``), and an entry retracted
        # there stays retracted.
        logger.warning(
            "conversation record of %s was refused; its recorded runs are learned again",
            rollout_id,
        )
        return 0, None
    if replaced is not None:
        # Read again from the start; runs stamped up to the newest one learned are taken as
        # learned (an older copy restored holds only those), newer ones are new.
        logger.warning(
            "rollout %s is %s than what memory read of it (%d bytes); it is read again from "
            "its start, and only runs after %s are learned",
            path,
            replaced,
            prog.offset,
            prog.updated_at or "the start",
        )
        return 0, plausible_ms(timestamp_ms(prog.updated_at))
    return prog.offset, None


async def _nothing_to_learn(
    rt: LayoutState,
    rollout_id: str,
    prog: RolloutProgress,
    parsed: ParsedSegments,
    path: str,
) -> bool | _Raced:
    """No run to learn from in what was read (only edits, or runs learned before): the
    progress moves past it, unless another process moved it meanwhile."""

    if parsed.end_offset != prog.offset:
        end = parsed.end_offset
        tail = await _tail(rt, path, end)

        def skip(p: RolloutProgress) -> None:
            p.read_to(end, tail)

        async with rt.write_lock():
            current = await rt.store.get_progress(rollout_id)
            if _moved(current, prog):
                return _RACED  # never move another process's progress back
            await rt.update_progress(rollout_id, skip)
    return False


async def _previous_notes(rt: LayoutState, rollout_id: str, prog: RolloutProgress) -> str | None:
    """The rollout's raw notes so far, for an engine that continues from them (a rollout
    extracted before only)."""

    if prog.offset <= 0 or not traits(rt.engine).continues_from_notes:
        return None
    notes = await rt.ws.read_text(f"{rt.layout.memories_dir}/raw_memories/{rollout_id}.md")
    if not notes or "\n\n" not in notes:
        return None
    body = _BLOCK_MARK_RE.sub("", notes.split("\n\n", 1)[1]).lstrip("\n")
    return body[:PREVIOUS_NOTES_CHARS] or None


async def _ask(
    rt: LayoutState,
    request: ExtractionRequest,
    conversation: ConversationMemory,
    budget: Budget | None,
    estimated: int,
) -> Extraction | bool:
    """The engine's extraction of ``request``, its citations resolved; asked once more with
    the reasons when every candidate of the first answer was rejected (an engine that takes
    feedback). ``False`` when there is none: the budget deferred the rollout, or the engine
    failed (recorded with a backoff and logged)."""

    rollout_id = request.rollout_id
    can = traits(rt.engine)
    index = ItemIndex.from_segments(request.segments, external_tools=rt.generate.external_tools)
    started = time.monotonic()
    extraction: Extraction | None = None
    feedback: str | None = None
    for _ in (1, 2):  # a second request only when every candidate of the first was rejected
        if can.spends_model_calls and budget is not None and not budget.reserve(estimated):
            return _defer(budget, rollout_id)
        try:
            extraction = await _run_engine(rt, request, feedback, budget, started)
        except BudgetExpired as cut:
            if budget is not None and cut.by_close:
                # Cut off by the close's time budget, not a failure of the rollout: no
                # attempt is counted; the bytes stay unextracted and the next close takes them.
                budget.deferred.append(rollout_id)
                logger.info(
                    "memory time budget ran out while rollout %s was being extracted; it "
                    "waits for the next close",
                    rollout_id,
                )
                return False
            limit = budget.per_extraction_seconds if budget is not None else None
            timeout = f"no result within the extraction's time limit ({limit:g}s)"
            await _record_failure(rt, rollout_id, timeout, logged=timeout)
            return False
        except BaseException as exc:  # noqa: BLE001 - any engine failure is recorded and retried
            if not isinstance(exc, Exception) and not stray_cancel(exc):
                raise  # this task is being cancelled, or the process is stopping
            from ..engines.model import ModelExtractionError

            what = (
                str(exc)
                if isinstance(exc, ModelExtractionError)
                else f"{type(exc).__name__}: {exc}"
            )
            retry_at = exc.retry_at if isinstance(exc, ModelExtractionError) else None
            await _record_failure(rt, rollout_id, what, retry_at=retry_at, logged=exc_text(exc))
            return False
        extraction.candidates = resolve_citations(extraction.candidates, index)
        if feedback is not None or not extraction.candidates or not can.takes_feedback:
            break
        existing = await memory_keys(rt, conversation, extraction.candidates)
        accepted, rejected = check_candidates(
            extraction.candidates,
            index=index,
            existing=existing,
            redactor=rt.redactor,
            person=run_person(request.segments),
            log=False,
        )
        if accepted:
            break
        feedback = "\n".join(f"- {r.key}: {r.reason}" for r in rejected)[:FEEDBACK_CHARS]
        spans.note(asked_again_with_reasons=len(rejected))
        logger.info(
            "every candidate of rollout %s was rejected; asking the model once more with the "
            "reasons",
            rollout_id,
        )
    assert extraction is not None
    return extraction


def _moved(current: RolloutProgress | None, read: RolloutProgress) -> bool:
    """Whether another process moved the rollout's progress since ``read`` was read."""

    return current is not None and current.offset != read.offset


_SUMMARY_HEADER_RE = re.compile(r"\Asession_id: [^\n]*\n(?:[a-z_]+: [^\n]*\n)*\n")
"""The SDK-shaped header of a rollout summary (``session_id:`` ... up to the blank line):
written afresh with each extraction, for the newest segment."""


FEEDBACK_CHARS = 2_000
"""Characters of rejection reasons sent back to the model with its one retry."""


async def _run_engine(
    rt: LayoutState,
    request: ExtractionRequest,
    feedback: str | None,
    budget: Budget | None,
    started: float,
) -> Extraction:
    if budget is None:
        return await rt.engine.extract(request.model_copy(update={"feedback": feedback}))
    end = budget.end_for(started)
    if end - time.monotonic() <= 0:
        raise BudgetExpired(by_close=budget.remaining_seconds() <= 0)
    update = {"feedback": feedback, "deadline": end if math.isfinite(end) else None}
    return await budget.bounded(
        rt.engine.extract(request.model_copy(update=update)), started=started
    )


async def _record_failure(
    rt: LayoutState,
    rollout_id: str,
    message: str,
    *,
    retry_at: float | None = None,
    logged: str | None = None,
) -> None:
    """Count a failed attempt: parked as failed after ``max_attempts``, else retried after a
    doubling backoff, and never before ``retry_at`` (the provider's ``retry-after``, as a
    ``time.time()``; at most :data:`MAX_BACKOFF_SECONDS` away)."""

    error = rt.redactor.redact_text(message)[:500]
    spans.note(failed=True)
    max_attempts = rt.generate.max_attempts

    def fail(p: RolloutProgress) -> None:
        p.attempts += 1
        p.last_error = error
        if p.attempts >= max_attempts:
            p.status = "failed"
        else:
            p.status = "retrying"
            now = time.time()
            delay = min(BACKOFF_BASE_SECONDS * 2 ** (p.attempts - 1), MAX_BACKOFF_SECONDS)
            asked = min(retry_at - now, MAX_BACKOFF_SECONDS) if retry_at is not None else 0.0
            p.next_attempt_at = now + max(delay, asked)

    async with rt.write_lock():
        prog = await rt.update_progress(rollout_id, fail)
    if prog.status == "failed":
        what_next = "parked as failed (see store/progress/; Refresh retries it)"
    elif retry_at is not None and prog.next_attempt_at > time.time() + BACKOFF_BASE_SECONDS:
        what_next = (
            f"retried at the first run or close after {prog.next_attempt_at - time.time():.0f}s "
            "(the provider's retry-after)"
        )
    else:
        what_next = "retried with backoff at the next run or close"
    logger.warning(
        "memory extraction of rollout %s failed (attempt %d of %d): %s; %s",
        rollout_id,
        prog.attempts,
        max_attempts,
        logged if logged is not None else data_text(prog.last_error or ""),
        what_next,
    )


class MemoryKeys(Mapping[str, Entry]):
    """What a candidate may change: the conversation's entries and the shared layout entries
    (so a forget can retract a layout-level fact); the conversation's own entry wins."""

    def __init__(self, shared: Mapping[str, Entry], conversation: ConversationMemory) -> None:
        self._layout = shared
        self._own = conversation.entries

    def __getitem__(self, key: str) -> Entry:
        own = self._own.get(key)
        if own is not None:
            return own
        shared = self._layout.get(key)
        if shared is None or shared.person is not None:
            raise KeyError(key)
        return shared

    def __iter__(self) -> Iterator[str]:
        yield from self._own
        yield from (k for k, e in self._layout.items() if e.person is None and k not in self._own)

    def __len__(self) -> int:
        return sum(1 for _ in self)


async def memory_keys(
    rt: LayoutState, conversation: ConversationMemory, candidates: list[Candidate]
) -> MemoryKeys:
    """:class:`MemoryKeys` for ``candidates``: only their keys' layout entries are read (from
    their shards), not all of layout memory."""

    keys = {c.key for c in candidates if isinstance(c.key, str)}
    return MemoryKeys(await rt.store.layout_entries(keys), conversation)


KNOWN_TEXT_CHARS = 200_000
"""Characters of a rollout's new items searched for the entries it may update."""


async def known_entries(
    rt: LayoutState,
    search: SearchIndex | None,
    conversation: ConversationMemory,
    segments: list[dict[str, Any]],
) -> list[KnownEntry]:
    """The entries shown to the engine as known, newest first, one per key (a private entry
    only in its person's runs): the conversation's own active entries, and the layout and registry entries that share the
    most words with the new items, found through the search index
    (:meth:`SearchIndex.known_entries`: at most ``KNOWN_CANDIDATES``, whatever the size of
    memory). When the index cannot answer, every entry is taken (the cost of memory's size,
    logged once)."""

    own = [e for e in conversation.entries.values() if e.status == "active"]
    found: list[Entry] | None = None
    if search is not None:
        try:
            scopes = {"layout", *(f"conversation:{r}" for r in await rt.store.registered_ids())}
            scopes.discard(f"conversation:{conversation.rollout_id}")  # its own: from the file
            found = await search.known_entries(_new_text(segments), scopes=scopes)
        except Exception as exc:  # noqa: BLE001 - the index is derived; every entry is read
            if not search.known_fallback_logged:
                search.known_fallback_logged = True
                logger.warning(
                    "memory search index %s could not list the entries known to an "
                    "extraction (%s); every entry is read instead until it can",
                    search.rel_path,
                    exc_text(exc),
                )
    if found is None:
        layout = await rt.store.layout_for_reading()
        registry = await rt.store.load_registry()
        found = [e for e in [*layout.entries.values(), *registry.entries()] if e.status == "active"]
    # A person's private entries are shown to the model only in that person's runs.
    person = run_person(segments)
    newest: dict[str, Entry] = {}
    for e in [*own, *found]:
        if e.person is not None and e.person != person:
            continue
        if e.key not in newest or e.updated_at > newest[e.key].updated_at:
            newest[e.key] = e
    ordered = sorted(newest.values(), key=lambda e: e.updated_at, reverse=True)
    return [
        KnownEntry(key=e.key, kind=e.kind, content=e.content, subjects=e.subjects) for e in ordered
    ]


def _new_text(segments: list[dict[str, Any]]) -> str:
    """The text of the segments' items (the transcript's words), at most
    :data:`KNOWN_TEXT_CHARS` characters."""

    parts: list[str] = []
    used = 0
    for position, seg in enumerate(segments):
        for _, item in segment_items(seg, segment_id_of(seg, position)):
            text = item_text(item, max_chars=MAX_ITEM_CHARS)
            parts.append(text)
            used += len(text)
            if used >= KNOWN_TEXT_CHARS:
                return "\n".join(parts)[:KNOWN_TEXT_CHARS]
    return "\n".join(parts)


_CITATION_RE = re.compile(r"([A-Za-z0-9][A-Za-z0-9_-]*)\s*:\s*(\d+)(?:\s*-\s*(\d+))?")
_TOKEN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
CITATION_RANGE_MAX = 50
"""Most items one range citation (``a1b2c3d4:3-7``) may stand for."""


def resolve_citations(candidates: list[Candidate], index: ItemIndex) -> list[Candidate]:
    """Candidates with their sources as item ids of the transcript, in whatever form the model
    wrote them: ``[a1b2c3d4:3]``, ``a1b2c3d4:3``, ``item a1b2c3d4:3``, ``A1B2C3D4: 3``, several
    in one string, a range ``a1b2c3d4:3-5``, or a segment id alone (it stands for that segment's
    items that are neither external nor, for a preference, the user's: a preference must cite
    the user's message itself). A source that names no item is kept as written, so the
    rejection says what was cited."""

    by_lower = {item_id.lower(): item_id for item_id in index.items}
    by_segment: dict[str, list[str]] = {}
    for item_id in index.items:
        by_segment.setdefault(item_id.rsplit(":", 1)[0].lower(), []).append(item_id)
    out: list[Candidate] = []
    for cand in candidates:
        sources: list[str] = []
        for raw in cand.sources:
            text = str(raw)
            found: list[str] = []
            for match in _CITATION_RE.finditer(text):
                first = int(match.group(2))
                last = int(match.group(3)) if match.group(3) else first
                if last < first or last - first >= CITATION_RANGE_MAX:
                    last = first
                for n in range(first, last + 1):
                    hit = by_lower.get(f"{match.group(1)}:{n}".lower())
                    if hit is not None:
                        found.append(hit)
            if not found:
                for token in _TOKEN_RE.findall(text):
                    for item_id in by_segment.get(token.lower(), []):
                        info = index.items[item_id]
                        if info.external or (cand.kind == "preference" and index.is_user(item_id)):
                            continue
                        found.append(item_id)
            sources.extend(found or [text])
        out.append(cand.model_copy(update={"sources": list(dict.fromkeys(sources))}))
    return out


SUPERSEDED_CHARS = 160
"""Characters of a replaced entry's old content quoted in the log line of its new version."""


async def _apply(
    rt: LayoutState,
    rollout_id: str,
    extraction: Extraction,
    segments: list[dict[str, Any]],
    span: tuple[int, int],
    path: str,
    *,
    replaced: bool = False,
    known: Sequence[KnownEntry] = (),
) -> bool:
    """An extraction applied (the caller holds the layout lock): the conversation's entries,
    then the rollout's notes and summary, then its progress past ``span``, in that order, so a
    close killed in between redoes the same change."""

    start_offset, end_offset = span
    prog = await rt.store.get_progress(rollout_id) or RolloutProgress()
    # What the run's person said about themselves stays theirs (see privacy.py).
    person = run_person(segments)
    private = self_statements(segments) if person else []
    accepted, rejected = await _apply_to_conversation(
        rt, rollout_id, extraction, segments, person=person, private=private, known=known
    )
    slug, updated_at = await _write_notes(
        rt,
        rollout_id,
        extraction,
        segments,
        start_offset,
        path,
        prog=prog,
        person=person,
        private=private,
        replaced=replaced,
    )
    tail = await _tail(rt, path, end_offset)

    def done(p: RolloutProgress) -> None:
        p.read_to(end_offset, tail)
        p.updated_at = updated_at or p.updated_at
        p.slug = slug
        p.attempts = 0
        p.last_error = None
        p.next_attempt_at = 0.0
        p.status = "ok"
        p.consolidated = False
        if rejected and not accepted:
            p.last_error = (
                f"all {len(rejected)} candidate(s) rejected: "
                + "; ".join(f"{r.key}: {r.reason}" for r in rejected)
            )[:500]

    await rt.update_progress(rollout_id, done)
    if rejected and not accepted:
        # Each rejection was logged at WARNING by check_candidates; this says what follows.
        logger.info(
            "memory kept nothing from rollout %s: all %d candidate(s) were rejected; its "
            "summary and notes are written, the reasons are in store/progress/",
            rollout_id,
            len(rejected),
        )
    rt.bump()
    return True


async def _apply_to_conversation(
    rt: LayoutState,
    rollout_id: str,
    extraction: Extraction,
    segments: list[dict[str, Any]],
    *,
    person: str | None,
    private: list[str],
    known: Sequence[KnownEntry],
) -> tuple[list[Candidate], list[Rejection]]:
    """The extraction's candidates through the rules, folded one per subject, applied to the
    latest conversation memory (edits made while the engine worked are kept), logged (a
    superseded statement visibly) and saved; returns what was accepted and rejected."""

    store = rt.store
    conversation = await store.load_conversation(rollout_id)
    index = ItemIndex.from_segments(segments, external_tools=rt.generate.external_tools)
    candidates = keep_private(extraction.candidates, private)
    # Read only (a shared entry is copied): the layout entries of these keys, not all of them.
    existing = await memory_keys(rt, conversation, candidates)
    accepted, rejected = check_candidates(
        candidates,
        index=index,
        existing=existing,
        redactor=rt.redactor,
        person=person,
    )
    spans.changes(len(accepted), rejected, rt.redactor)
    # One entry per subject, whichever engine proposed them: duplicates among the changes the
    # rules let through are folded, and one repeating a known entry updates it.
    folds: list[str] = []
    accepted = one_entry_per_subject(accepted, known, folds=folds)
    if any(cand.key not in existing for cand in accepted):
        existing = await memory_keys(rt, conversation, accepted)
    # A shared lesson met again word for word is not copied into this conversation (its own
    # entries take the new evidence as a new version with the sources merged).
    accepted = [
        c
        for c in accepted
        if c.key in conversation.entries
        or not says_nothing_new(existing.get(c.key), c, person=person)
    ]
    for cand in accepted:
        if cand.action == "forget" and cand.key not in conversation.entries:
            # Retracting a shared entry: the conversation records the retraction, and phase 2
            # carries it to layout memory (see ``promote``).
            conversation.entries[cand.key] = existing[cand.key].model_copy(deep=True)
    # What a new version says instead of the old one is kept in the log: a contradiction
    # supersedes visibly (shared entries only: a person's entry stays out of the shared log).
    superseded = {
        c.key: old.content
        for c in accepted
        if c.action == "remember"
        and (old := conversation.entries.get(c.key)) is not None
        and old.status == "active"
        and old.person is None
        and old.content != c.content.strip()
    }
    changed = apply_to_conversation(conversation, accepted, person=person)
    notes = (
        [
            f"{len(rejected)} change(s) rejected: "
            + "; ".join(f"{r.key}: {r.reason}" for r in rejected)
        ]
        if rejected
        else []
    )
    notes += folds
    notes += [
        f"{key} superseded (was: {one_line(superseded[key], SUPERSEDED_CHARS)})"
        for key in changed
        if key in superseded
    ]
    last_item = last_item_id(segments)
    if last_item:
        conversation.head = last_item
    # The log first: a close killed before the conversation is saved redoes this same change
    # (same version), which the log reads as one; killed after, nothing would log it again.
    if changed or rejected:
        await store.append_log(
            LogRecord(
                version=conversation.version,
                at=now_ms(),
                cause="consolidation",
                scope=f"conversation:{rollout_id}",
                keys=changed,
                detail="; ".join(notes)[:1000] if notes else None,
            )
        )
    await store.save_conversation(conversation)
    return accepted, rejected


async def _write_notes(
    rt: LayoutState,
    rollout_id: str,
    extraction: Extraction,
    segments: list[dict[str, Any]],
    start_offset: int,
    path: str,
    *,
    prog: RolloutProgress,
    person: str | None,
    private: list[str],
    replaced: bool,
) -> tuple[str, str]:
    """The rollout's raw notes and summary files, with the block of this extraction (marked
    by its first byte, so a redone extraction replaces its block); returns the summary's
    slug and the newest segment's time stamp."""

    summary_notes = shared_text(extraction.rollout_summary.strip(), private)
    # In a run for a person the summary's file name is made of the shared summary's words only.
    slug = prog.slug or normalize_slug(
        shared_slug(extraction.rollout_slug, private, summary_notes, strict=person is not None)
    )
    updated_at = str(segments[-1].get("updated_at") or "")
    terminal = segments[-1].get("terminal_metadata") or {}
    state = terminal.get("terminal_state", "unknown") if isinstance(terminal, dict) else "unknown"
    summary_rel = f"{rt.layout.memories_dir}/rollout_summaries/{rollout_id}_{slug}.md"
    raw_rel = f"{rt.layout.memories_dir}/raw_memories/{rollout_id}.md"
    header = (
        f"rollout_id: {rollout_id}\nupdated_at: {updated_at}\nrollout_path: {path}\n"
        f"rollout_summary_file: rollout_summaries/{rollout_id}_{slug}.md\n"
        f"terminal_state: {state}\n\n"
    )
    # Each block of notes and each summary section is marked with the first byte of the
    # rollout it covers: an extraction done again (a close killed before its progress was
    # written, progress set aside) replaces the blocks it redoes instead of adding copies.
    mark = BLOCK_MARK.format(start=start_offset)
    old_raw = await rt.ws.read_text(raw_rel)
    old_raw_body = old_raw.split("\n\n", 1)[1] if old_raw and "\n\n" in old_raw else ""
    if replaced:
        # The file's bytes were renumbered: earlier notes are kept, no longer by byte.
        old_raw_body = _BLOCK_MARK_RE.sub("", old_raw_body).lstrip("\n")
    else:
        old_raw_body = _without_redone(old_raw_body, start_offset)
    raw_notes = shared_text(extraction.raw_memory.strip(), private)
    raw_text = header + mark + "\n" + rt.redactor.redact_text(raw_notes) + "\n"
    if old_raw_body.strip():
        raw_text += "\n" + old_raw_body
    old_summary = await rt.ws.read_text(summary_rel)
    if old_summary:
        old_summary = _SUMMARY_HEADER_RE.sub("", old_summary, count=1)
    section = (
        f"## Segment(s) up to {updated_at}\n{mark}\n\n"
        + rt.redactor.redact_text(summary_notes)
        + "\n"
    )
    if replaced and old_summary:
        kept_summary: str | None = _BLOCK_MARK_RE.sub("", old_summary)
    else:
        kept_summary = _summary_without_redone(old_summary, start_offset) if old_summary else None
    if kept_summary:
        summary_text = bounded_summary(kept_summary.rstrip() + "\n\n" + section)
    else:
        summary_text = f"# {slug}\n\nconversation: {rollout_id}\nrollout_path: {path}\n\n" + section
    # The SDK's header lines first (its readers look for them), for the newest segment.
    summary_text = (
        f"session_id: {rt.session_id or '-'}\nupdated_at: {updated_at}\nrollout_path: {path}\n"
        f"terminal_state: {state}\n\n" + summary_text
    )
    # Together, in this order: one wait for the disk for both.
    await rt.ws.write_atomic_many(
        [(raw_rel, raw_text.encode("utf-8")), (summary_rel, summary_text.encode("utf-8"))]
    )
    return slug, updated_at


async def _tail(rt: LayoutState, path: str, offset: int) -> str | None:
    return await tail_hash(rt.ws, path, offset)


async def _replaced(rt: LayoutState, path: str, prog: RolloutProgress) -> str | None:
    """How the rollout file differs from the one progress read (``"shorter"``, ``"different"``),
    or ``None`` when it is that file, maybe grown."""

    if prog.offset <= 0:
        return None
    size = await rt.ws.size(path)
    if size is None:
        return None
    if size < prog.offset:
        return "shorter"
    if prog.tail is not None and await _tail(rt, path, prog.offset) != prog.tail:
        return "different"
    return None


BLOCK_MARK = "<!-- segments from byte {start} -->"
_BLOCK_MARK_RE = re.compile(r"^<!-- segments from byte (\d+) -->$", re.MULTILINE)


def _without_redone(body: str, start: int) -> str:
    """Raw notes (newest block first) without the blocks of bytes from ``start`` on.

    Unmarked notes (written before blocks were marked) are kept, unless everything is read
    again from the first byte.
    """

    marks = list(_BLOCK_MARK_RE.finditer(body))
    if not marks:
        return "" if start == 0 else body
    kept = [] if start == 0 else [body[: marks[0].start()]]
    for n, m in enumerate(marks):
        end = marks[n + 1].start() if n + 1 < len(marks) else len(body)
        if int(m.group(1)) < start:
            kept.append(body[m.start() : end])
    return "".join(kept)


def _sections(text: str) -> tuple[str, list[str]] | None:
    """A rollout summary file split into its header and its ``## Segment(s) up to`` sections
    (None when it has no section)."""

    first = text.find(SECTION_MARK)
    if first < 0:
        return None
    header, rest = text[: first + 1], text[first + 1 :]
    parts = rest.split(SECTION_MARK)
    return header, [parts[0], *(SECTION_MARK.lstrip("\n") + p for p in parts[1:])]


def _summary_without_redone(text: str, start: int) -> str | None:
    """A rollout summary file without its sections of bytes from ``start`` on (``None`` when
    no section is left: the file is started afresh)."""

    split = _sections(text)
    if split is None:
        return text
    header, sections = split
    kept: list[str] = []
    for section in sections:
        m = _BLOCK_MARK_RE.search(section)
        redone = int(m.group(1)) >= start if m else start == 0
        if not redone:
            kept.append(section)
    if not kept:
        return None
    return header + "".join(kept)


def bounded_summary(text: str, max_chars: int = SUMMARY_FILE_MAX_CHARS) -> str:
    """A rollout summary file cut to its header and newest sections when it grows too long."""

    split = _sections(text) if len(text) > max_chars else None
    if split is None:
        return text
    header, sections = split
    earlier = 0
    if header.rstrip().endswith("dropped to keep this file short)"):
        line = header.rstrip().rsplit("\n", 1)[-1]
        header = header.rstrip()[: -len(line)]
        earlier = int(line.split()[0].lstrip("(")) if line.split()[0].lstrip("(").isdigit() else 0
    kept: list[str] = []
    used = len(header) + 120
    for section in reversed(sections):
        if kept and used + len(section) > max_chars:
            break
        kept.append(section)
        used += len(section)
    dropped = earlier + len(sections) - len(kept)
    note = f"({dropped} earlier part(s) of this conversation dropped to keep this file short)\n\n"
    return header.rstrip() + "\n\n" + note + "".join(reversed(kept))


def _only_edits(segment: dict[str, object]) -> bool:
    items = [*(segment.get("input") or []), *(segment.get("generated_items") or [])]  # type: ignore[misc]
    return bool(items) and all(
        isinstance(i, dict) and i.get("type") == "memory_edit" for i in items
    )
