"""What a run's work taught, one entry per lesson: each fixed failure, the run's changes, its
conclusion, and the problem its first request reported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sandbox_memory.engines.base import Candidate, Subjects
from sandbox_memory.engines.conversation import split_speaker
from sandbox_memory.engines.text import shorten

from .files import FileRecord, changed_paths, files_phrase_by_op
from .fixes import Fix
from .keys import changes_key, findings_key, make_key
from .known import KeyResolver
from .limits import (
    CONTENT_CHARS,
    FAILURE_SUBJECT_WORDS,
    LESSON_CHARS,
    MAX_KEYWORDS,
    MAX_SOURCES,
    USER_SCAN_CHARS,
)
from .walk import Rollout
from .words import QUESTION_WORDS, beyond, informative, sentences, subject_words

REPORT_HEADLINE_CHARS = 160
"""Characters of a reported problem's headline (its title or first statement) kept in the
lesson of the work that answered it: one line; the whole report stays in its source item."""

REPORT_NAMES = 6
"""Identifiers, versions and numbers of a report named after its headline (``separability_matrix``,
``v5.3``, ``#5764``): what a later search for the same problem will type."""

MIN_CONCLUSION_WORDS = 3
"""Subject words a final answer needs to be kept as the run's conclusion ("Done." has none)."""

CONCLUSION_CHARS = 400
"""Characters of a run's conclusion kept as a fact (whole sentences)."""


_IDENTIFIER_RE = re.compile(
    r"`([^`\n]{1,60})`"
    r"|((?:[\w.-]+/)+[\w.-]+\.\w{1,5})\b"
    r"|\b((?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*(?:\(\))?)"
    r"|\b([A-Za-z_]\w*\(\))"
    r"|\b([a-z]+_[a-z0-9_]+)\b"
    r"|\b([A-Z][a-z0-9]+[A-Z]\w*)\b"
    r"|(#\d+)\b"
    r"|\b(v?\d+(?:\.\d+)+)\b"
)
"""Names a report is about: code spans, paths, dotted names, calls, snake_case and CamelCase
words, issue numbers and versions."""


_HEADING_RE = re.compile(r"^\s*(?:#+\s*|\*\*|<!--|-->|\||```)")


def _report_names(text: str, skip: str) -> list[str]:
    names: dict[str, None] = {}
    for match in _IDENTIFIER_RE.finditer(text):
        name = next(g for g in match.groups() if g)
        name = name.strip().rstrip(".")
        if name and len(name) > 1 and name not in skip and "`" not in name:
            names.setdefault(name, None)
        if len(names) >= REPORT_NAMES:
            break
    return list(names)


def report_summary(rollout: Rollout) -> tuple[str, str] | None:
    """``(summary, item id)`` of the problem the run's first request reports: its headline (a
    short first line, else its first statement, shortened at a word) and the identifiers,
    versions and issue numbers it names, exactly as written; not the report itself."""

    said = next((s for s in rollout.said if s.from_task), None)
    if rollout.task is None or rollout.task_text is None or said is None:
        return None  # a bare request ("Fix the parser") reports nothing beyond the task
    item_id, raw = rollout.task[0], rollout.task_text
    text = split_speaker(raw).text
    if len(" ".join(text.split())) <= REPORT_HEADLINE_CHARS:
        return None  # a one-line request is its own headline: the run's summary quotes it
    headline = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or _HEADING_RE.match(stripped) and len(stripped) < 4:
            continue
        stripped = _HEADING_RE.sub("", stripped).strip(" #*")
        if not stripped:
            continue
        first = next(iter(sentences(stripped)), stripped)
        headline = shorten(
            first.replace("`", "'") if first.count("`") % 2 else first, REPORT_HEADLINE_CHARS
        )
        if headline:
            break
    if not headline:
        return None
    names = _report_names(text[:USER_SCAN_CHARS], headline)
    quoted = ", ".join(f"`{n}`" for n in names)
    summary = f"Reported by {said.speaker or 'the user'}: {headline}" + (
        f" (names {quoted})" if quoted else ""
    )
    return summary, item_id


def _acted(rollout: Rollout) -> bool:
    """Whether the run did work (a command other than reading memory, or a change): only then
    is its final answer a result worth keeping; a reply to what someone said ("Noted: ...")
    repeats their words, which memory already holds."""

    return bool(rollout.patches or rollout.commands)


def _conclusion(rollout: Rollout, fixes: Sequence[Fix]) -> tuple[str, list[str], str] | None:
    """``(text, item ids, request text)`` of the conclusion the run reached (its last final
    answer that says something a later run can use and no fix already quotes), citing every
    segment's conclusion of the same kind: one result, confirmed by each run that reached it."""

    if not _acted(rollout):
        return None
    quoted = {fix.described_by for fix in fixes if fix.described_by is not None}
    found: tuple[str, list[str], str] | None = None
    ids: list[str] = []
    for seg_index, final in rollout.final_outputs.items():
        if seg_index in quoted:
            continue
        last = rollout.last_assistant.get(seg_index)
        if last is None or not informative(final, MIN_CONCLUSION_WORDS):
            continue
        if subject_words(final) and len(subject_words(final)) < MIN_CONCLUSION_WORDS:
            continue
        text = shorten(final, CONCLUSION_CHARS)
        if not text:
            continue
        request = rollout.requests.get(seg_index)
        ids.append(last[1])
        found = (text, ids, split_speaker(request[1]).text if request else "")
    return found


def _with_report(
    content: str, sources: list[str], report: tuple[str, str] | None
) -> tuple[str, list[str]]:
    """A lesson with the problem its work answered appended, when it fits whole."""

    if report is None:
        return content, sources
    headline = report[0].split(": ", 1)[-1]
    said = set(subject_words(content))
    if set(subject_words(headline)) <= said:
        return content, sources  # the lesson already says it (its result names the problem)
    text = f" {report[0].rstrip('.')}."
    if len(content) + len(text) > LESSON_CHARS:
        return content, sources
    return content + text, list(dict.fromkeys([*sources, report[1]]))[-MAX_SOURCES:]


def work_lessons(
    rollout: Rollout,
    fixes: Sequence[Fix],
    files: Mapping[str, FileRecord],
    resolver: KeyResolver,
) -> list[Candidate]:
    """What the run's work taught, one entry per lesson: each fixed failure (symptom, fix,
    verification, cause), the last one also carrying the run's other changes and its result;
    a run that fixed nothing but changed files, one entry of its changes and result; a run
    that only looked around, its conclusion."""

    conclusion = _conclusion(rollout, fixes)
    report = report_summary(rollout) if fixes or files or conclusion else None
    out: list[Candidate] = []
    main = max((i for i, f in enumerate(fixes) if f.files), default=len(fixes) - 1)
    for index, fix in enumerate(fixes):
        content = fix.content
        sources = list(fix.sources)
        keywords = list(fix.keywords)
        touched = {p: r for p, r in files.items() if p in fix.files}
        if index == main:
            rest = {p: r for p, r in files.items() if p not in fix.files}
            room = LESSON_CHARS - len(content) - 2
            if rest and room > 40:
                also = files_phrase_by_op(rest, room)
                if also:
                    content += f" {also}."
                    sources += [i for r in rest.values() for i in r.ids]
                    keywords += [p.rsplit("/", 1)[-1] for p in rest]
                    touched.update(rest)
            news = beyond(conclusion[0], content, clauses=False) if conclusion is not None else ""
            if conclusion is not None and news:
                result = f" Result: {news}"
                if len(content) + len(result) <= LESSON_CHARS:
                    content += result
                    sources += conclusion[1]
            content, sources = _with_report(content, sources, report)
        subjects = Subjects(
            files=changed_paths(touched),
            commands=list(fix.commands),
            tests=list(fix.tests),
            tools=list(fix.tools),
        )
        out.append(
            Candidate(
                key=resolver.resolve(
                    "fact",
                    resolver.about("fact", fix.key, subjects),
                    fix.subject,
                    files=subjects.files,
                ),
                content=shorten(content, LESSON_CHARS),
                kind="fact",
                sources=list(dict.fromkeys(sources))[:MAX_SOURCES],
                keywords=list(dict.fromkeys(keywords))[:MAX_KEYWORDS],
                subjects=subjects,
            )
        )
    if fixes:
        return out
    if files:
        changes = _files_candidate(rollout, files, resolver)
        if changes is None:
            return out
        news = (
            beyond(conclusion[0], changes.content, clauses=False) if conclusion is not None else ""
        )
        if conclusion is not None and news:
            result = f" Result: {news}"
            if len(changes.content) + len(result) <= LESSON_CHARS:
                changes = changes.model_copy(
                    update={
                        "content": changes.content + result,
                        "sources": list(dict.fromkeys([*changes.sources, *conclusion[1]]))[
                            -MAX_SOURCES:
                        ],
                    }
                )
        content, sources = _with_report(changes.content, changes.sources, report)
        return [changes.model_copy(update={"content": content, "sources": sources})]
    if conclusion is not None:
        text, item_ids, request_text = conclusion
        words = (
            subject_words(request_text, QUESTION_WORDS)[:FAILURE_SUBJECT_WORDS]
            or subject_words(text)[:2]
        )
        read = [p for p in rollout.reads if p not in rollout.written]
        key = findings_key(read, words)
        if resolver.holds_changes("fact", key):
            key = make_key(key, "findings")  # a later look at a fixed file: not the fix itself
        content, sources = _with_report(f"Result: {text}", item_ids[-MAX_SOURCES:], report)
        out.append(
            Candidate(
                key=key,
                content=content,
                kind="fact",
                sources=sources,
                keywords=subject_words(text)[:MAX_KEYWORDS],
            )
        )
    return out


def _files_candidate(
    rollout: Rollout, files: Mapping[str, FileRecord], resolver: KeyResolver
) -> Candidate | None:
    """Which files the run changed and how, read from its own patches and writes."""

    if not files:
        return None
    # Every path named (up to a lesson's length), details only within an entry's usual size:
    # what is left is for the run's result.
    names = sum(len(p) + 4 for p in files) + len("Changed: . Added: ")
    content = f"{files_phrase_by_op(files, max(CONTENT_CHARS, min(LESSON_CHARS, names)) - 1)}."
    changed_first = sorted(files, key=lambda p: files[p].op == "created")
    key = changes_key(changed_first)
    subjects = Subjects(files=changed_paths(files))
    ids = [i for record in files.values() for i in record.ids]
    sources = list(dict.fromkeys(ids))[-MAX_SOURCES:]
    keywords = list(dict.fromkeys(p.rsplit("/", 1)[-1] for p in files))[:MAX_KEYWORDS]
    return Candidate(
        key=resolver.resolve(
            "fact", resolver.about("fact", key, subjects), key.split("-"), files=subjects.files
        ),
        content=shorten(content, LESSON_CHARS),
        kind="fact",
        sources=sources,
        keywords=keywords,
        subjects=subjects,
    )
