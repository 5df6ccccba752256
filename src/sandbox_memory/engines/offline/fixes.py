"""How a fix is recognised: a failing streak of a kind of command, a change (or a command that
changes state) in between, then that kind passing (or failing differently); and how it is
written as a lesson (symptom, fix, how it was verified, the cause as the agent told it).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sandbox_memory.engines.text import shorten
from sandbox_memory.engines.transcript import one_line

from .failures import failing_tests, quote_error
from .files import FileRecord, describe_files, files_phrase, note_patch
from .keys import fix_key
from .limits import COMMAND_CHARS, FAILURE_SUBJECT_WORDS, LESSON_CHARS, MAX_KEYWORDS
from .records import Command, Patch
from .shell import quote_cmd
from .walk import Rollout
from .words import beyond, informative, subject_words

MIN_DESCRIPTION_WORDS = 3
"""Subject words the agent's own account of a fix needs to be quoted in the fix fact."""

MAX_FIX_FACTS = 10
"""Most error-and-fix facts from one extraction."""

MAX_FIX_PATCH_SOURCES = 3
"""Patch items cited by one fix fact (the last ones before the passing run)."""

MAX_FIX_PATCHES_SCANNED = 50
"""Patches between a failure and its fix whose file names are collected: bounds the work when
an agent patches hundreds of times before a test passes."""

MAX_FIXER_LOOKBACK = 20
"""Commands looked at backwards for the one that fixed a failure when no patch was made."""

FIX_FILES_CHARS = 260
"""Characters of a fix fact spent on what changed (files and their first changed lines)."""


@dataclass(frozen=True)
class Fix:
    content: str
    key: str
    subject: list[str]
    sources: list[str]
    keywords: list[str]
    summary: str
    described_by: int | None
    """Segment whose final answer the fix quotes (not repeated as a conclusion)."""
    files: tuple[str, ...] = ()
    """Paths the fix changed."""
    commands: tuple[str, ...] = ()
    """The failing command and the one that then passed (or fixed it)."""
    tests: tuple[str, ...] = ()
    """The failing test's id, when the output names it."""
    tools: tuple[str, ...] = ()
    """The program that failed."""


def find_fixes(rollout: Rollout) -> list[Fix]:
    """Pair each failing streak of a kind of command with the next passing run of that kind.

    When a later run of the same kind fails with a different error, the first error was dealt
    with by what happened in between (``make generate``, a patch): that is a fix of its own,
    so a gotcha met on the way to the final fix is not lost."""

    patches = [p for p in rollout.patches if p.ok is not False and p.files]
    patch_positions = [p.position for p in patches]
    finished = rollout.finished
    finished_positions = [c.output_position for c in finished]
    open_failures: dict[str, Command] = {}
    fixes: list[Fix] = []
    for passed_index, command in enumerate(finished):
        if command.failed:
            earlier = open_failures.get(command.kind)
            if earlier is None:
                open_failures[command.kind] = command
            elif _error_of(earlier) != _error_of(command):
                open_failures[command.kind] = command
                fix = _fix_between(
                    rollout,
                    earlier,
                    command,
                    passed_index,
                    patches,
                    patch_positions,
                    finished_positions,
                )
                if fix is not None:
                    fixes.append(fix)
            if len(fixes) >= MAX_FIX_FACTS:
                break
            continue
        if not command.passed or command.kind not in open_failures:
            continue
        failure = open_failures.pop(command.kind)
        fix = _fix_between(
            rollout, failure, command, passed_index, patches, patch_positions, finished_positions
        )
        if fix is not None:
            fixes.append(fix)
        if len(fixes) >= MAX_FIX_FACTS:
            break
    return fixes


def _error_of(command: Command) -> str:
    return command.error_line or f"exit {command.exit_code}"


def _fix_between(
    rollout: Rollout,
    failure: Command,
    command: Command,
    index: int,
    patches: Sequence[Patch],
    patch_positions: Sequence[int],
    finished_positions: Sequence[int],
) -> Fix | None:
    """The fix of ``failure`` by what happened before ``command`` (the ``index``-th finished
    command, which passed or failed differently), or None when nothing changed in between."""

    lo = bisect.bisect_right(patch_positions, failure.output_position)
    hi = bisect.bisect_left(patch_positions, command.position)
    between = patches[max(lo, hi - MAX_FIX_PATCH_SOURCES) : hi]
    files: dict[str, FileRecord] = {}
    for patch in patches[lo:hi][:MAX_FIX_PATCHES_SCANNED]:
        note_patch(files, patch)
    fixer: Command | None = None
    if not between:
        start = bisect.bisect_right(finished_positions, failure.output_position)
        for idx in range(index - 1, max(start, index - MAX_FIXER_LOOKBACK) - 1, -1):
            other = rollout.finished[idx]
            if other.passed and other.kind != command.kind and other.may_change_state:
                fixer = other
                break
        if fixer is None:
            return None  # ran again without a recorded change: a flake, not a fix
    return _fix_fact(rollout, failure, command, between, files, fixer)


def _fix_fact(
    rollout: Rollout,
    failure: Command,
    passing: Command,
    patches: Sequence[Patch],
    files: Mapping[str, FileRecord],
    fixer: Command | None,
) -> Fix:
    error = quote_error(failure.error_line or f"exit code {failure.exit_code}")
    if passing.failed:
        after = "that error was gone in the next run"
    elif failure.cmd.strip() == passing.cmd.strip():
        after = "the same command then passed"
    else:
        after = f"{quote_cmd(passing.cmd)} then passed"
    content = ""
    how = ""
    for budget in (FIX_FILES_CHARS, FIX_FILES_CHARS // 2, 0):
        if fixer is not None:
            how = f"ran {quote_cmd(fixer.cmd)}"
        elif budget:
            how = describe_files(files, budget)
        else:
            how = f"changed {files_phrase(list(files))}"
        content = (
            f"Symptom: `{error}` from {quote_cmd(failure.cmd)}. Fix: {how}. Verified: {after}."
        )
        if len(content) <= LESSON_CHARS:
            break
    described_by: int | None = None
    description = "" if passing.failed else _fix_description(rollout, failure, passing)
    if description and informative(description, MIN_DESCRIPTION_WORDS):
        # The agent's account is quoted for what it adds (why it failed); its clauses that
        # retell the symptom, the fix or the check are already said above. Quoted or not, the
        # run's answer is this lesson's, not a conclusion of its own.
        described_by = passing.segment_index
        news = beyond(description, content)
        room = LESSON_CHARS - len(content) - len(" Cause (the agent's account): ")
        said = shorten(news, room) if news and room > 40 else ""
        if said and not said.endswith("…"):
            content += f" Cause (the agent's account): {said}"
    subject = failure.failure_words or subject_words(
        " ".join(f.rsplit("/", 1)[-1] for f in list(files)[:FAILURE_SUBJECT_WORDS])
    )
    if not subject:
        subject = subject_words(failure.signature)[:FAILURE_SUBJECT_WORDS]
    changed_first = sorted(files, key=lambda p: files[p].op == "created")
    key = fix_key(
        changed_first,
        failure.failure_words,
        subject_words((fixer or failure).signature),
    )
    sources = [
        i
        for i in (
            failure.output_item_id,
            *(p.call_item_id for p in patches),
            fixer.call_item_id if fixer is not None else None,
            passing.output_item_id,
        )
        if i
    ]
    tool_words = [failure.category.split("-")[0]] if failure.category else []
    keywords = list(dict.fromkeys([*subject, *(f.rsplit("/", 1)[-1] for f in files), *tool_words]))[
        :MAX_KEYWORDS
    ]
    summary = f"- fixed: {error} ({how}) [{', '.join(dict.fromkeys(sources))}]"
    return Fix(
        content=shorten(content, LESSON_CHARS),
        key=key,
        subject=list(subject),
        sources=list(dict.fromkeys(sources)),
        keywords=keywords,
        summary=summary,
        described_by=described_by,
        files=tuple(files),
        commands=tuple(
            dict.fromkeys(
                one_line(c.cmd, COMMAND_CHARS)
                for c in (failure, fixer or passing)
                if len(one_line(c.cmd, COMMAND_CHARS)) < COMMAND_CHARS
            )
        ),
        tests=tuple(failing_tests(failure.error_line or "")),
        tools=(failure.program,) if failure.program else (),
    )


def _fix_description(rollout: Rollout, failure: Command, passing: Command) -> str:
    last = rollout.last_assistant.get(passing.segment_index)
    if last is not None and last[0] > failure.output_position:
        return " ".join(last[2].split())
    final = rollout.final_outputs.get(passing.segment_index)
    return " ".join(final.split()) if final else ""
