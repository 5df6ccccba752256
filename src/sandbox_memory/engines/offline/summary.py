"""How the rollout summary, its slug and the raw notes are written (task or conversation, what
happened, commands, files changed, outcome).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sandbox_memory.engines.conversation import top_words
from sandbox_memory.engines.text import shorten
from sandbox_memory.engines.transcript import WHITESPACE_SLACK, one_line

from .failures import quote_error
from .files import FileRecord, describe_files
from .fixes import Fix
from .limits import (
    COMMAND_CHARS,
    CONTENT_CHARS,
    MAX_SOURCES,
    SAID_SUMMARY_CHARS,
    SLUG_MAX_WORDS,
    TASK_CHARS,
)
from .records import speaker_name
from .shell import quote_cmd
from .walk import Rollout, is_conversation
from .words import subject_words, words_of

SLUG_MIN_WORDS = 2
"""Fewest words in a rollout slug (the slug rule is 2-6 words)."""

SLUG_MAX_CHARS = 60
"""Longest rollout slug, so ``<slug>.md`` file names stay short."""

MAX_SAID_IN_SUMMARY = 24
"""Stated facts listed in a conversation's rollout summary (head and tail)."""

MAX_LISTED = 20
"""Most bullets in one summary or raw-memory list (commands, notes); the rest are counted."""


def rollout_slug(text: str) -> str:
    """2-6 lowercase words of ``text`` joined by ``-`` (at most 60 chars, ``[a-z0-9-]``)."""

    head = text[: TASK_CHARS * WHITESPACE_SLACK]
    words = (subject_words(head) or list(dict.fromkeys(words_of(head))))[:SLUG_MAX_WORDS]
    if not words:
        return "untitled-rollout"
    if len(words) < SLUG_MIN_WORDS:
        words.append("task")
    while len(words) > SLUG_MIN_WORDS and len("-".join(words)) > SLUG_MAX_CHARS:
        words.pop()
    slug = "-".join(words)
    if len(slug) > SLUG_MAX_CHARS:
        slug = slug[:SLUG_MAX_CHARS].rstrip("-")
    return slug


@dataclass
class _CommandStat:
    cmd: str
    runs: int = 0
    last_exit: int | None = None
    failed_runs: int = 0
    ids: list[str] = field(default_factory=list)
    fail_ids: list[str] = field(default_factory=list)
    error: str | None = None
    category: str | None = None
    first: int = 0


def command_stats(rollout: Rollout) -> list[_CommandStat]:
    stats: dict[str, _CommandStat] = {}
    for command in rollout.finished:
        text = one_line(command.cmd, COMMAND_CHARS)
        stat = stats.get(text)
        if stat is None:
            stat = stats[text] = _CommandStat(
                cmd=command.cmd, category=command.category, first=len(stats)
            )
        stat.runs += 1
        stat.last_exit = command.exit_code
        stat.ids = command.ids()
        if command.failed:
            stat.failed_runs += 1
            if not stat.fail_ids:
                stat.fail_ids = command.ids()
                stat.error = command.error_line
    return sorted(stats.values(), key=lambda s: (s.category is None, s.first))


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_LISTED:
        return lines
    return [*lines[:MAX_LISTED], f"- … and {len(lines) - MAX_LISTED} more {what}"]


def _said_lines(rollout: Rollout) -> list[str]:
    lines = [
        f"- {speaker_name(s.speaker)}: {shorten(s.text, SAID_SUMMARY_CHARS)} [{s.item_id}]"
        for s in rollout.said
    ]
    if len(lines) <= MAX_SAID_IN_SUMMARY:
        return lines
    head = MAX_SAID_IN_SUMMARY // 3
    tail = MAX_SAID_IN_SUMMARY - head
    dropped = len(lines) - head - tail
    return [*lines[:head], f"- … {dropped} more statements …", *lines[-tail:]]


def _conversation_summary(rollout: Rollout) -> list[str]:
    people = list(rollout.speakers) or list(rollout.people) or ["the user"]
    when = ", ".join(list(rollout.dates)[:3])
    head = f"{' and '.join(people[:MAX_LISTED])}" + (f", {when}" if when else "")
    ids = [rollout.task[0]] if rollout.task else []
    topics = top_words((s.text for s in rollout.said), SLUG_MAX_WORDS)
    out = ["## Conversation", f"{head}: {rollout.user_messages} messages [{', '.join(ids)}]"]
    if topics:
        out.append("Topics: " + ", ".join(topics))
    out += ["", "## What was said"]
    out += _said_lines(rollout) or ["- nothing worth keeping (small talk)"]
    prefs = [
        f"- {speaker_name(s.speaker)} {s.kind}: {s.text} [{s.item_id}]" for s in rollout.statements
    ]
    if prefs:
        out += ["", "## Preferences and decisions"] + _capped(prefs, "statements")
    return out


def write_summary(
    rollout: Rollout,
    stats: Sequence[_CommandStat],
    files: Mapping[str, FileRecord],
    fixes: Sequence[Fix],
    previous_summary: bool,
) -> str:
    if is_conversation(rollout):
        out = _conversation_summary(rollout)
        if previous_summary:
            out.append("(continues the earlier part summarised before)")
    else:
        out = ["## Task"]
        if rollout.task:
            out.append(f"{rollout.task[1]} [{rollout.task[0]}]")
        else:
            out.append("(no user request in the new segments)")
        if previous_summary:
            out.append("(continues the earlier part summarised before)")
        out += ["", "## What happened"]
        events = rollout.events.lines()
        out += events or ["- nothing recorded"]
        out += [fix.summary for fix in fixes]
        out += ["", "## Commands"]
        command_lines = []
        for stat in stats:
            runs = f", {stat.runs} runs" if stat.runs > 1 else ""
            command_lines.append(
                f"- {quote_cmd(stat.cmd)}: last exit {stat.last_exit}{runs} [{', '.join(stat.ids)}]"
            )
        out += _capped(command_lines, "commands") or ["- none"]
        out += ["", "## Files changed"]
        file_lines = [
            f"- {record.describe(path)} [{record.first_id}]" for path, record in files.items()
        ]
        out += _capped(file_lines, "files") or ["- none"]
    out += ["", "## Outcome"]
    if rollout.outcomes:
        seg_id, state, final = rollout.outcomes[-1]
        out.append(f"{state} [{seg_id}]" + (f": {final}" if final else ""))
        earlier = [o for o in rollout.outcomes[:-1] if not o[1].startswith("completed")]
        for seg, st, _ in earlier[-MAX_LISTED:]:
            out.append(f"- earlier run {st} [{seg}]")
    return "\n".join(out).rstrip() + "\n"


def write_raw_memory(
    rollout_id: str,
    rollout: Rollout,
    stats: Sequence[_CommandStat],
    files: Mapping[str, FileRecord],
    fixes: Sequence[Fix],
    previous_summary: bool,
) -> str:
    count = len(rollout.segment_ids)
    plural = "segment" if count == 1 else "segments"
    out: list[str] = [f"- rollout: {rollout_id} ({count} new {plural})"]
    if rollout.people:
        out.append("- person: " + ", ".join(list(rollout.people)[:MAX_LISTED]))
    if rollout.speakers:
        out.append("- speakers: " + ", ".join(list(rollout.speakers)[:MAX_LISTED]))
    if rollout.task and not is_conversation(rollout):
        out.append(f"- task: {rollout.task[1]} [{rollout.task[0]}]")
    if previous_summary:
        out.append("- continues earlier work (see the previous summary)")
    for kind in ("preference", "decision", "correction"):
        lines = [
            f"- user {kind}: {s.text} [{s.item_id}]" for s in rollout.statements if s.kind == kind
        ]
        out += _capped(lines, f"{kind}s")
    said = [
        f"- said: {speaker_name(s.speaker)}: {shorten(s.text, SAID_SUMMARY_CHARS)} [{s.item_id}]"
        for s in rollout.said
    ]
    out += _capped(said, "statements")
    worked = [
        f"- worked: {quote_cmd(s.cmd)} (exit 0) [{', '.join(s.ids)}]"
        for s in stats
        if s.last_exit == 0
    ]
    out += _capped(worked, "commands that worked")
    failed = []
    for s in stats:
        if s.failed_runs == 0:
            continue
        later = " (later passed)" if s.last_exit == 0 else ""
        error = f": {quote_error(s.error)}" if s.error else ""
        failed.append(f"- failed: {quote_cmd(s.cmd)}{error}{later} [{', '.join(s.fail_ids)}]")
    out += _capped(failed, "commands that failed")
    out += [f"- fixed: {fix.content} [{', '.join(fix.sources)}]" for fix in fixes]
    if files:
        first_ids = list(dict.fromkeys(r.first_id for r in files.values()))[:MAX_SOURCES]
        described = describe_files(files, CONTENT_CHARS)
        out.append(f"- files changed: {described} [{', '.join(first_ids)}]")
    if rollout.outcomes:
        seg_id, state, final = rollout.outcomes[-1]
        out.append(f"- outcome: {state}" + (f": {final}" if final else "") + f" [{seg_id}]")
    return "\n".join(out) + "\n"
