"""The offline engine: deterministic phase-1 extraction without a model or a network.

It reads the new segments of one rollout item by item and pulls out what a later run should
know, each candidate citing the items it rests on:

- the task (first user message), user corrections, and user-stated preferences and decisions
  (only from user messages: tool output and assistant text never become a preference);
- what people state about themselves, each other and the work (events, plans, possessions,
  relationships, results), one fact per message with who said it and relative dates resolved
  against the run's date; small talk, generic sentiment and requests to the agent are left out
  (see ``conversation.py`` and ``dates.py``);
- the commands run through ``exec_command`` / ``write_stdin`` / hosted shell tools with their exit
  codes; a test, lint, type-check, build or install command that passed becomes a procedure;
- files changed through ``apply_patch`` (custom tool, function tool or hosted ``apply_patch_call``),
  through patches applied in the shell (``git apply``, ``patch -p1``, heredoc diffs) or through
  shell writes (``sed -i``, ``tee``, ``cat >`` ...), with what changed in each (see ``changes.py``);
- errors and their fixes: a failing command followed later by the same kind of command passing,
  with a change in between, becomes a fact naming the error, the files and the fix;
- the outcome (terminal state and final output), for the summary and raw notes, and the
  conclusion the run reached (its final answer) as a fact when it says something.

Entries are never cut inside a word, a command or a code span (see ``text.py``): what does not
fit is said shorter or left out.

Same input, same output: no clocks, no randomness, no set iteration order leaks into results.
Work is linear in the input; long texts are clipped (head + tail) before they are scanned.

Its rooms, in the order extraction uses them: ``walk.py`` reads the items once into the
records of ``records.py``, with ``words.py`` (text), ``shell.py`` (commands), ``patches.py``
(patches) and ``failures.py`` (error output); ``statements.py``, ``procedures.py``,
``said.py``, ``fixes.py``, ``files.py`` and ``lessons.py`` each make one kind of entry; keys
are chosen in ``keys.py`` and matched against known entries in ``known.py``; ``summary.py``
writes the rollout summary, its slug and the raw notes. Limits more than one room uses are
in ``limits.py``; a room's own limits are at its top. This module is the entry point.
"""

from __future__ import annotations

from collections.abc import Mapping

from sandbox_memory.engines.base import Extraction, ExtractionRequest
from sandbox_memory.engines.conversation import split_speaker, top_words

from .files import changed_files
from .fixes import find_fixes
from .known import CandidateSet, KeyResolver
from .lessons import report_summary, work_lessons
from .limits import SLUG_MAX_WORDS
from .procedures import procedure_candidates
from .said import said_candidates
from .statements import statement_candidates
from .summary import command_stats, rollout_slug, write_raw_memory, write_summary
from .walk import Rollout, is_conversation

MAX_STATEMENTS = 20
"""Most preference and decision candidates from one extraction (after merging repeats)."""


def _empty_extraction(rollout_id: str) -> Extraction:
    return Extraction(
        rollout_summary=(
            "## Task\n(no new segments)\n\n## What happened\n- nothing recorded\n\n"
            "## Commands\n- none\n\n## Files changed\n- none\n\n## Outcome\nnone\n"
        ),
        rollout_slug="empty-rollout",
        raw_memory=f"- rollout: {rollout_id}: no new segments\n",
        candidates=[],
    )


def extract_offline(request: ExtractionRequest) -> Extraction:
    """Deterministic extraction of one rollout's new segments (see the module docstring)."""

    segments = [s for s in request.segments if isinstance(s, Mapping)]
    if not segments:
        return _empty_extraction(request.rollout_id)
    rollout = Rollout(segments, continues=request.continues_rollout)
    if rollout.item_count == 0 and not rollout.final_outputs:
        return _empty_extraction(request.rollout_id)

    if is_conversation(rollout) and rollout.said:
        topics = top_words((s.text for s in rollout.said), SLUG_MAX_WORDS)
        slug = rollout_slug(" ".join(topics))
    elif rollout.task:
        slug = rollout_slug(split_speaker(rollout.task[1]).text)
    elif rollout.final_outputs:
        slug = rollout_slug(next(iter(rollout.final_outputs.values())))
    else:
        slug = "untitled-rollout"

    resolver = KeyResolver(request.known_entries)
    fixes = find_fixes(rollout)
    files = changed_files(rollout)
    stats = command_stats(rollout)

    chosen = CandidateSet()
    statements = statement_candidates(rollout, resolver)
    for candidate in statements:
        if len(chosen.by_key) >= MAX_STATEMENTS:
            break
        chosen.add(candidate)
    for candidate in procedure_candidates(rollout, resolver):
        chosen.add(candidate)
    lessons = work_lessons(rollout, fixes, files, resolver)
    for candidate in lessons:
        chosen.add(candidate)
    summarised = bool(lessons) and report_summary(rollout) is not None
    for candidate in said_candidates(rollout, resolver, task_summarised=summarised):
        chosen.add(candidate)

    has_previous = bool(request.previous_summary and request.previous_summary.strip())
    return Extraction(
        rollout_summary=write_summary(rollout, stats, files, fixes, has_previous),
        rollout_slug=slug,
        raw_memory=write_raw_memory(request.rollout_id, rollout, stats, files, fixes, has_previous),
        candidates=chosen.values(),
    )


class OfflineEngine:
    """Phase-1 extraction without a model: deterministic, local, fast (see module docstring)."""

    name = "offline"
    spends_model_calls = False
    """Deterministic and local: the close's model budgets do not apply."""
    continues_from_notes = False
    """Each extraction stands alone; earlier notes are not read back."""
    takes_feedback = False
    """The same request gives the same result: a second one with feedback changes nothing."""

    async def extract(self, request: ExtractionRequest) -> Extraction:
        return extract_offline(request)


__all__ = [
    "OfflineEngine",
    "extract_offline",
]
