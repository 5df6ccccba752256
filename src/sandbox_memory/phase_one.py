"""Phase 1: extraction of one rollout's new segments into notes and conversation memory."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .engines.base import Extraction, ExtractionRequest, KnownEntry
from .phase_two import ItemIndex, apply_to_conversation, check_candidates
from .rollouts import ParsedSegments, read_new_segments, rollout_path
from .store import LogRecord, RolloutProgress, now_ms

if TYPE_CHECKING:
    from .manager import LayoutRuntime

logger = logging.getLogger("sandbox_memory")

SLUG_MAX = 60
"""Longest slug kept in a file name."""

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


@dataclass
class Budget:
    """What one close may still spend on memory models."""

    calls: int
    tokens: int
    deadline: float
    spent_calls: int = 0
    spent_tokens: int = 0
    deferred: list[str] = field(default_factory=list)

    def remaining_seconds(self) -> float:
        return self.deadline - time.monotonic()

    def reserve(self, tokens: int) -> bool:
        if self.spent_calls + 1 > self.calls or self.spent_tokens + tokens > self.tokens:
            return False
        if self.remaining_seconds() <= 0:
            return False
        self.spent_calls += 1
        self.spent_tokens += tokens
        return True


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


async def extract_rollout(
    rt: LayoutRuntime,
    rollout_id: str,
    *,
    budget: Budget | None,
) -> bool:
    """Extract the unprocessed segments of ``rollout_id``; return True when memory changed.

    The engine works without the layout lock; its changes are then applied under the lock to
    the latest memory, so edits made meanwhile are kept. If another process extracted the same
    segments first, this extraction is dropped (logged). Failures are recorded in the progress
    file with a backoff and logged at WARNING; they never propagate.
    """

    async with rt.rollout_lock(rollout_id):
        return await _extract(rt, rollout_id, budget=budget)


async def _extract(rt: LayoutRuntime, rollout_id: str, *, budget: Budget | None) -> bool:
    store = rt.store
    prog = await store.get_progress(rollout_id) or RolloutProgress()
    if prog.status == "failed":
        return False
    if prog.next_attempt_at > time.time():
        return False
    path = rollout_path(rt.layout.sessions_dir, rollout_id)
    read = await read_new_segments(rt.ws, path, offset=prog.offset)
    if read is None:
        return False
    parsed: ParsedSegments = read
    if parsed.malformed:
        logger.warning(
            "%d malformed line(s) in %s were skipped (they are not valid JSON)",
            parsed.malformed,
            path,
        )
    segments = [s for s in parsed.segments if not _only_edits(s)]
    conversation = await store.load_conversation(rollout_id)
    if not rt.switch(conversation.overrides.generate, "generate"):
        return False  # left unprocessed: learning resumes if generate is switched back on
    if not segments:
        if parsed.end_offset != prog.offset:
            end = parsed.end_offset

            def skip(p: RolloutProgress) -> None:
                p.offset = end

            async with rt.write_lock():
                await rt.update_progress(rollout_id, skip)
        return False

    layout = await store.load_layout()
    known = [
        KnownEntry(key=e.key, kind=e.kind, content=e.content)
        for e in sorted(
            [*conversation.entries.values(), *layout.entries.values()],
            key=lambda e: e.updated_at,
            reverse=True,
        )
        if e.status == "active"
    ]
    previous = None
    if prog.offset > 0 and rt.engine.name != "offline":
        notes = await rt.ws.read_text(f"{rt.layout.memories_dir}/raw_memories/{rollout_id}.md")
        if notes and "\n\n" in notes:
            previous = notes.split("\n\n", 1)[1][:PREVIOUS_NOTES_CHARS] or None
    request = ExtractionRequest(
        rollout_id=rollout_id,
        segments=segments,
        previous_summary=previous,
        known_entries=known,
        extra_prompt=rt.generate.extra_prompt,
        max_input_chars=rt.generate.max_rollout_chars,
    )
    new_bytes = parsed.end_offset - prog.offset
    estimated = min(new_bytes, rt.generate.max_rollout_chars) // CHARS_PER_TOKEN
    if rt.engine.name != "offline" and budget is not None and not budget.reserve(estimated):
        budget.deferred.append(rollout_id)
        logger.warning(
            "memory budget for this close is spent; rollout %s waits for the next close",
            rollout_id,
        )
        return False
    timeout = budget.remaining_seconds() if budget is not None else None
    if timeout is not None and timeout <= 0:
        budget_left = budget
        assert budget_left is not None
        budget_left.deferred.append(rollout_id)
        logger.warning(
            "memory time budget for this close is spent; rollout %s waits for the next close",
            rollout_id,
        )
        return False
    try:
        extraction: Extraction = await asyncio.wait_for(rt.engine.extract(request), timeout)
    except BaseException as exc:  # noqa: BLE001 - any engine failure is recorded and retried
        if not isinstance(exc, Exception) and not stray_cancel(exc):
            raise  # this task is being cancelled, or the process is stopping
        if (
            isinstance(exc, asyncio.TimeoutError)
            and budget is not None
            and budget.remaining_seconds() <= 0
        ):
            # Cut off by this close's time budget, not a failure of the rollout: no attempt
            # is counted, the work waits for the next close like any other that did not fit.
            budget.deferred.append(rollout_id)
            logger.warning(
                "memory time budget for this close ran out while rollout %s was being "
                "extracted; it waits for the next close",
                rollout_id,
            )
            return False
        error = rt.redactor.redact_text(f"{type(exc).__name__}: {exc}")[:500]
        max_attempts = rt.generate.max_attempts

        def fail(p: RolloutProgress) -> None:
            p.attempts += 1
            p.last_error = error
            if p.attempts >= max_attempts:
                p.status = "failed"
            else:
                p.status = "retrying"
                delay = min(BACKOFF_BASE_SECONDS * 2 ** (p.attempts - 1), 3600.0)
                p.next_attempt_at = time.time() + delay

        async with rt.write_lock():
            prog = await rt.update_progress(rollout_id, fail)
        if prog.status == "failed":
            what_next = "parked as failed (see store/progress/; Refresh retries it)"
        else:
            what_next = "retried with backoff at the next run or close"
        logger.warning(
            "memory extraction of rollout %s failed (attempt %d of %d): %s; %s",
            rollout_id,
            prog.attempts,
            rt.generate.max_attempts,
            prog.last_error,
            what_next,
        )
        return False

    async with rt.write_lock():
        current = await store.get_progress(rollout_id)
        if current is not None and current.offset != prog.offset:
            logger.info(
                "rollout %s was extracted by another process meanwhile; this result is dropped",
                rollout_id,
            )
            return False
        return await _apply(rt, rollout_id, extraction, segments, parsed.end_offset, path)


async def _apply(
    rt: LayoutRuntime,
    rollout_id: str,
    extraction: Extraction,
    segments: list[dict[str, Any]],
    end_offset: int,
    path: str,
) -> bool:
    store = rt.store
    prog = await store.get_progress(rollout_id) or RolloutProgress()
    # Apply to the latest memory: edits made while the engine worked are kept.
    conversation = await store.load_conversation(rollout_id)
    index = ItemIndex.from_segments(segments, external_tools=rt.generate.external_tools)
    accepted, rejected = check_candidates(
        extraction.candidates,
        index=index,
        existing=conversation.entries,
        redactor=rt.redactor,
    )
    person = next((s.get("person") for s in reversed(segments) if s.get("person")), None)
    changed = apply_to_conversation(conversation, accepted, person=person)
    last_item = _last_item_id(segments)
    if last_item:
        conversation.head = last_item
    await store.save_conversation(conversation)
    if changed or rejected:
        await store.append_log(
            LogRecord(
                version=conversation.version,
                at=now_ms(),
                cause="consolidation",
                scope=f"conversation:{rollout_id}",
                keys=changed,
                detail=(
                    f"{len(rejected)} change(s) rejected: "
                    + "; ".join(f"{r.key}: {r.reason}" for r in rejected)
                )[:1000]
                if rejected
                else None,
            )
        )

    slug = prog.slug or normalize_slug(extraction.rollout_slug)
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
    old_raw = await rt.ws.read_text(raw_rel)
    old_raw_body = old_raw.split("\n\n", 1)[1] if old_raw and "\n\n" in old_raw else ""
    raw_text = header + rt.redactor.redact_text(extraction.raw_memory.strip()) + "\n"
    if old_raw_body.strip():
        raw_text += "\n" + old_raw_body
    old_summary = await rt.ws.read_text(summary_rel)
    section = (
        f"## Segment(s) up to {updated_at}\n\n"
        + rt.redactor.redact_text(extraction.rollout_summary.strip())
        + "\n"
    )
    if old_summary:
        summary_text = bounded_summary(old_summary.rstrip() + "\n\n" + section)
    else:
        summary_text = f"# {slug}\n\nconversation: {rollout_id}\nrollout_path: {path}\n\n" + section
    await rt.ws.write_text(raw_rel, raw_text)
    await rt.ws.write_text(summary_rel, summary_text)

    def done(p: RolloutProgress) -> None:
        p.offset = end_offset
        p.updated_at = updated_at or p.updated_at
        p.slug = slug
        p.attempts = 0
        p.last_error = None
        p.next_attempt_at = 0.0
        p.status = "ok"
        p.consolidated = False

    await rt.update_progress(rollout_id, done)
    rt.bump()
    return True


def bounded_summary(text: str, max_chars: int = SUMMARY_FILE_MAX_CHARS) -> str:
    """A rollout summary file cut to its header and newest sections when it grows too long."""

    if len(text) <= max_chars:
        return text
    first = text.find(SECTION_MARK)
    if first < 0:
        return text
    header, rest = text[: first + 1], text[first + 1 :]
    parts = rest.split(SECTION_MARK)
    sections = [parts[0], *(SECTION_MARK.lstrip("\n") + p for p in parts[1:])]
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


def _last_item_id(segments: list[dict[str, object]]) -> str | None:
    for seg in reversed(segments):
        for key in ("generated_items", "input"):
            items = seg.get(key)
            if isinstance(items, list):
                for item in reversed(items):
                    if isinstance(item, dict) and isinstance(item.get("memory_item_id"), str):
                        return str(item["memory_item_id"])
    return None
