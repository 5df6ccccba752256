"""How a procedure becomes an entry: the broadest passing run of each kind of command, or a
procedure a person stated; a narrow run (one test id) is told apart from the suite.
"""

from __future__ import annotations

import re
import shlex

from sandbox_memory.engines.base import Candidate, Subjects
from sandbox_memory.engines.commands import (
    COMMAND_SCAN_CHARS,
    SEGMENT_SPLIT_RE,
    command_segments,
    strip_heredocs,
)

from .keys import make_key
from .known import KeyResolver
from .limits import COMMAND_CHARS, KEY_SUBJECT_WORDS, MAX_KEYWORDS, SIGNATURE_WORDS
from .records import Command, Statement, speaker_name
from .shell import CATEGORIES, command_category
from .walk import Rollout
from .words import PREF_TRIGGER_WORDS, clip_content, subject_words

_NARROW_RE = re.compile(
    r"::|\s-k\s|\s--?(?:filter|grep|run|testNamePattern|only)[\s=]"
    r"|\s[\w./-]+\.(?:py|ts|tsx|js|jsx|go|rs|rb|java|php)\b|\s(?:\w+\.)+test\w*(?:\.\w+)*\b"
)


def _is_narrow(cmd: str) -> bool:
    """Whether a test command runs a chosen few tests (a test id, a file, ``-k``), not the
    suite a later run should use by default."""

    return bool(_NARROW_RE.search(" " + cmd))


def procedure_candidates(rollout: Rollout, resolver: KeyResolver) -> list[Candidate]:
    """One procedure per kind of command that passed: the broadest, most recent such run.

    A run that passed only a narrow selection (one test id, one file) does not replace a known
    general command: what later runs need is how to run the checks, not the last test picked
    (the fix fact names the test that covered a fix)."""

    stated = {stated_procedure_key(s.text) for s in rollout.statements if s.kind == "procedure"}
    best: dict[str, Command] = {}
    for command in rollout.finished:
        if not command.passed or command.category is None:
            continue
        current = best.get(command.category)
        if current is None or _is_narrow(current.cmd) or not _is_narrow(command.cmd):
            best[command.category] = command
    out: list[Candidate] = []
    for key, _pattern, prefix, same_content, key_word in CATEGORIES:
        chosen = best.get(key)
        if chosen is None or (key in stated and _is_narrow(chosen.cmd)):
            continue  # a narrow run does not replace the command the user just stated
        command = chosen
        resolved = resolver.resolve(
            "procedure", key, [key_word, "command"], same_procedure=(same_content, key_word)
        )
        narrow = _is_narrow(command.cmd)
        if narrow and resolver.knows("procedure", resolved):
            continue
        runnable = _procedure_command(command.cmd, _pattern)
        if runnable is None:
            continue  # no whole command short enough to quote: no procedure to copy
        quoted = f"`{runnable}`"
        whole = _without_selection(runnable, _pattern) if narrow else None
        if whole is not None:
            content = f"{prefix} `{whole}` (add test ids to run a few)"
        elif narrow:
            content = f"{prefix} {quoted} (this runs only the selected tests)"
        else:
            content = f"{prefix} {quoted}"
        if command.workdir:
            content += f" (from `{' '.join(command.workdir.split())}`)"
        content += "."
        keywords = list(dict.fromkeys([key_word, *subject_words(command.signature)]))
        out.append(
            Candidate(
                key=resolved,
                content=clip_content(content),
                kind="procedure",
                sources=command.ids(),
                keywords=keywords[:MAX_KEYWORDS],
                subjects=Subjects(
                    commands=[whole or runnable], tools=[command.program] if command.program else []
                ),
            )
        )
    return out


_SELECTION_FLAGS = frozenset(
    {"-k", "-run", "--filter", "--grep", "--run", "--testNamePattern", "--only"}
)


def _without_selection(cmd: str, pattern: re.Pattern[str]) -> str | None:
    """The command that runs the whole suite, from one that ran a selection: the same runner
    and options without the test ids, test files and ``-k``-style filters (``python -m pytest
    -q tests/a.py::test_x`` -> ``python -m pytest -q``); None when nothing general is left."""

    try:
        tokens = shlex.split(cmd)
    except ValueError:
        return None
    kept: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        if token in _SELECTION_FLAGS:
            skip = True
            continue
        if token.split("=", 1)[0] in _SELECTION_FLAGS or _is_narrow(f" {token}"):
            continue
        kept.append(token)
    while kept and kept[-1] == "--":
        kept.pop()
    whole = shlex.join(kept)
    if whole == cmd or not any(pattern.search(seg) for seg in command_segments(whole)):
        return None
    return whole


def _procedure_command(cmd: str, pattern: re.Pattern[str]) -> str | None:
    """The command line to quote in a procedure, whole: the full line when it fits, else the
    one simple command of it that runs the tool (``cd x && long-setup && pytest -q`` ->
    ``pytest -q``), else None."""

    flat = " ".join(cmd.replace("`", "'").split())
    if len(flat) <= COMMAND_CHARS:
        return flat
    for raw in SEGMENT_SPLIT_RE.split(strip_heredocs(cmd[:COMMAND_SCAN_CHARS])):
        part = " ".join(raw.replace("`", "'").split())
        if (
            part
            and len(part) <= COMMAND_CHARS
            and any(pattern.search(segment) for segment in command_segments(part))
        ):
            return part
    return None


_SPAN_RE = re.compile(r"`([^`]+)`")


def stated_procedure_key(text: str) -> str:
    """The key of a procedure a person stated: the kind of command it names (``test-command``
    when it names a test runner, so what the user said and what the agent ran are one entry),
    else the command's first words, else the sentence's subject."""

    spans = [" ".join(span.split()) for span in _SPAN_RE.findall(text)]
    for span in spans:
        category = command_category(span)
        if category is not None:
            return category
    after_verb = re.search(r"\b(?:run|running|execute|invoke|with|using|via)\s+(.*)$", text, re.I)
    if after_verb and not spans:
        category = command_category(after_verb.group(1))
        if category is not None:
            return category
    if spans:
        return make_key(*spans[0].split()[:SIGNATURE_WORDS])
    return make_key(*subject_words(text, PREF_TRIGGER_WORDS)[:KEY_SUBJECT_WORDS])


def stated_procedure(statement: Statement, resolver: KeyResolver) -> Candidate:
    """How a piece of work is done, as a person said it (the command whole, in its quotes)."""

    key = stated_procedure_key(statement.text)
    subject = subject_words(key.replace("-", " "))
    spans = [" ".join(span.split()) for span in _SPAN_RE.findall(statement.text)]
    return Candidate(
        key=resolver.resolve("procedure", key, subject),
        content=clip_content(
            f"Procedure stated by {speaker_name(statement.speaker)}: {statement.text}"
        ),
        kind="procedure",
        sources=[statement.item_id],
        keywords=list(dict.fromkeys([*subject, *(s.split()[0] for s in spans if s.split())]))[
            :MAX_KEYWORDS
        ],
        subjects=Subjects(commands=spans, people=[statement.speaker] if statement.speaker else []),
    )
