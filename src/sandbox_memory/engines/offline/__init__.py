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
"""

from __future__ import annotations

import bisect
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date

from sandbox_memory.engines.base import (
    Candidate,
    EntryKind,
    Extraction,
    ExtractionRequest,
    Subjects,
)
from sandbox_memory.engines.changes import FileChange
from sandbox_memory.engines.commands import (
    COMMAND_SCAN_CHARS,
    SEGMENT_SPLIT_RE,
    command_segments,
    strip_heredocs,
)
from sandbox_memory.engines.conversation import (
    MIN_FACT_WORDS,
    content_words,
    split_speaker,
    top_words,
)
from sandbox_memory.engines.dates import format_day
from sandbox_memory.engines.text import shorten
from sandbox_memory.engines.transcript import WHITESPACE_SLACK, one_line

from .failures import _failing_tests, _quote_error
from .keys import changes_key, fix_key, make_key
from .known import _CandidateSet, _KeyResolver
from .limits import (
    COMMAND_CHARS,
    CONTENT_CHARS,
    FAILURE_SUBJECT_WORDS,
    KEY_SUBJECT_WORDS,
    MAX_FILES_NAMED,
    MAX_KEYWORDS,
    MAX_SOURCES,
    SAID_SUMMARY_CHARS,
    SIGNATURE_WORDS,
    TASK_CHARS,
    USER_SCAN_CHARS,
)
from .records import _Command, _Patch, _people, _Said, _Statement, _who
from .shell import _CATEGORIES, _quote_cmd, command_category
from .walk import _is_conversation, _Rollout
from .words import (
    _DECISION_TRIGGER_WORDS,
    _PREF_TRIGGER_WORDS,
    _beyond,
    _clip_content,
    _informative,
    _sentences,
    _subject_words,
    _words,
)

FIX_DESCRIPTION_CHARS = 300
"""Characters of the assistant's own description of a fix added to a fix fact."""

LESSON_CHARS = 800
"""Longest content of a fixed failure: four short parts (symptom, fix, how it was verified,
the cause as the agent told it), each whole; the cause is the part a later run needs most and
the first to be left out when the others are long."""

TASK_IN_FACT_CHARS = 120
"""Characters of the task quoted in the files-changed fact, leaving room for the file names."""

SLUG_MIN_WORDS = 2
"""Fewest words in a rollout slug (the slug rule is 2-6 words)."""

SLUG_MAX_WORDS = 6
"""Most words in a rollout slug (the slug rule is 2-6 words)."""

SLUG_MAX_CHARS = 60
"""Longest rollout slug, so ``<slug>.md`` file names stay short."""

MAX_SAID_FACTS = 120
"""Most stated-fact candidates (one per informative message) from one extraction; the newest
are kept when a rollout says more."""

SAID_CHARS = 480
"""Characters of one stated fact: the speaker, the date and the message's informative
sentences, whole (a sentence that does not fit is left out, never cut)."""

SAID_GROUP_CHARS = 1_200
"""Characters of one entry of what a person said on a day: the messages of a long day are kept
in several entries rather than one that no search hit or summary line could show whole."""

SAID_GROUP_MESSAGES = 12
"""Messages in one such entry: each is one of its sources."""

MAX_SAID_IN_SUMMARY = 24
"""Stated facts listed in a conversation's rollout summary (head and tail)."""

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

MIN_DESCRIPTION_WORDS = 3
"""Subject words the agent's own account of a fix needs to be quoted in the fix fact."""

MAX_STATEMENTS = 20
"""Most preference and decision candidates from one extraction (after merging repeats)."""

MAX_FIX_FACTS = 10
"""Most error-and-fix facts from one extraction."""

MAX_FIX_PATCH_SOURCES = 3
"""Patch items cited by one fix fact (the last ones before the passing run)."""

MAX_FIX_PATCHES_SCANNED = 50
"""Patches between a failure and its fix whose file names are collected: bounds the work when
an agent patches hundreds of times before a test passes."""

MAX_FIXER_LOOKBACK = 20
"""Commands looked at backwards for the one that fixed a failure when no patch was made."""

MAX_LISTED = 20
"""Most bullets in one summary or raw-memory list (commands, notes); the rest are counted."""

QUESTION_WORDS = 4
"""Content words of the question an answer replies to kept with it ("asked about plans
summer"): what the answer is about, without quoting the question."""

FIX_FILES_CHARS = 260
"""Characters of a fix fact spent on what changed (files and their first changed lines)."""

SHORT_ANSWER_WORDS = 4
"""Content words (resolved dates aside) of an answer short enough to be kept with the question
it answers ("Last Saturday.", "Running, mostly."): alone it says nothing; a longer answer says
what it is about itself."""


def rollout_slug(text: str) -> str:
    """2-6 lowercase words of ``text`` joined by ``-`` (at most 60 chars, ``[a-z0-9-]``)."""

    head = text[: TASK_CHARS * WHITESPACE_SLACK]
    words = (_subject_words(head) or list(dict.fromkeys(_words(head))))[:SLUG_MAX_WORDS]
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


@dataclass(frozen=True)
class _Fix:
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


@dataclass
class _FileRecord:
    """One changed file: its first operation, the items that changed it, the last detail."""

    op: str
    first_id: str
    ids: list[str] = field(default_factory=list)
    change: FileChange | None = None

    def describe(self, path: str, *, detailed: bool = True) -> str:
        if detailed and self.change is not None:
            text = self.change.describe()
            if self.op == "created" and self.change.op != "created":
                text = text.replace("updated ", "created ", 1)
            return text
        return f"{self.op} `{path}`"


def _files_phrase(paths: Sequence[str]) -> str:
    shown = list(paths[:MAX_FILES_NAMED])
    more = len(paths) - len(shown)
    text = ", ".join(shown)
    return text + (f" and {more} more" if more > 0 else "")


def _describe_files(files: Mapping[str, _FileRecord], budget: int) -> str:
    """What changed in ``files``, within ``budget`` characters: every file named by its path
    first (a file's history is found by its path), then what changed in each while it fits;
    only names that do not fit at all are counted; never a cut part."""

    items = list(files.items())
    parts = [record.describe(path, detailed=False) for path, record in items]
    kept = 0
    used = 0
    for part in parts:
        if used + len(part) + 2 > budget:
            break
        used += len(part) + 2
        kept += 1
    for index in range(kept):
        path, record = items[index]
        detailed = record.describe(path)
        extra = len(detailed) - len(parts[index])
        if extra > 0 and used + extra <= budget:
            parts[index] = detailed
            used += extra
    shown = parts[:kept]
    rest = len(items) - kept
    if rest:
        shown.append(f"and {rest} more file{'s' if rest != 1 else ''}")
    return "; ".join(shown)


def _find_fixes(rollout: _Rollout) -> list[_Fix]:
    """Pair each failing streak of a kind of command with the next passing run of that kind.

    When a later run of the same kind fails with a different error, the first error was dealt
    with by what happened in between (``make generate``, a patch): that is a fix of its own,
    so a gotcha met on the way to the final fix is not lost."""

    patches = [p for p in rollout.patches if p.ok is not False and p.files]
    patch_positions = [p.position for p in patches]
    finished = rollout.finished
    finished_positions = [c.output_position for c in finished]
    open_failures: dict[str, _Command] = {}
    fixes: list[_Fix] = []
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


def _error_of(command: _Command) -> str:
    return command.error_line or f"exit {command.exit_code}"


def _fix_between(
    rollout: _Rollout,
    failure: _Command,
    command: _Command,
    index: int,
    patches: Sequence[_Patch],
    patch_positions: Sequence[int],
    finished_positions: Sequence[int],
) -> _Fix | None:
    """The fix of ``failure`` by what happened before ``command`` (the ``index``-th finished
    command, which passed or failed differently), or None when nothing changed in between."""

    lo = bisect.bisect_right(patch_positions, failure.output_position)
    hi = bisect.bisect_left(patch_positions, command.position)
    between = patches[max(lo, hi - MAX_FIX_PATCH_SOURCES) : hi]
    files: dict[str, _FileRecord] = {}
    for patch in patches[lo:hi][:MAX_FIX_PATCHES_SCANNED]:
        _note_patch(files, patch)
    fixer: _Command | None = None
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
    rollout: _Rollout,
    failure: _Command,
    passing: _Command,
    patches: Sequence[_Patch],
    files: Mapping[str, _FileRecord],
    fixer: _Command | None,
) -> _Fix:
    error = _quote_error(failure.error_line or f"exit code {failure.exit_code}")
    if passing.failed:
        after = "that error was gone in the next run"
    elif failure.cmd.strip() == passing.cmd.strip():
        after = "the same command then passed"
    else:
        after = f"{_quote_cmd(passing.cmd)} then passed"
    content = ""
    how = ""
    for budget in (FIX_FILES_CHARS, FIX_FILES_CHARS // 2, 0):
        if fixer is not None:
            how = f"ran {_quote_cmd(fixer.cmd)}"
        elif budget:
            how = _describe_files(files, budget)
        else:
            how = f"changed {_files_phrase(list(files))}"
        content = (
            f"Symptom: `{error}` from {_quote_cmd(failure.cmd)}. Fix: {how}. Verified: {after}."
        )
        if len(content) <= LESSON_CHARS:
            break
    described_by: int | None = None
    description = "" if passing.failed else _fix_description(rollout, failure, passing)
    if description and _informative(description, MIN_DESCRIPTION_WORDS):
        # The agent's account is quoted for what it adds (why it failed); its clauses that
        # retell the symptom, the fix or the check are already said above. Quoted or not, the
        # run's answer is this lesson's, not a conclusion of its own.
        described_by = passing.segment_index
        news = _beyond(description, content)
        room = LESSON_CHARS - len(content) - len(" Cause (the agent's account): ")
        said = shorten(news, room) if news and room > 40 else ""
        if said and not said.endswith("…"):
            content += f" Cause (the agent's account): {said}"
    subject = failure.failure_words or _subject_words(
        " ".join(f.rsplit("/", 1)[-1] for f in list(files)[:FAILURE_SUBJECT_WORDS])
    )
    if not subject:
        subject = _subject_words(failure.signature)[:FAILURE_SUBJECT_WORDS]
    changed_first = sorted(files, key=lambda p: files[p].op == "created")
    key = fix_key(
        changed_first,
        failure.failure_words,
        _subject_words((fixer or failure).signature),
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
    return _Fix(
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
        tests=tuple(_failing_tests(failure.error_line or "")),
        tools=(failure.program,) if failure.program else (),
    )


def _fix_description(rollout: _Rollout, failure: _Command, passing: _Command) -> str:
    last = rollout.last_assistant.get(passing.segment_index)
    if last is not None and last[0] > failure.output_position:
        return " ".join(last[2].split())
    final = rollout.final_outputs.get(passing.segment_index)
    return " ".join(final.split()) if final else ""


_NARROW_RE = re.compile(
    r"::|\s-k\s|\s--?(?:filter|grep|run|testNamePattern|only)[\s=]"
    r"|\s[\w./-]+\.(?:py|ts|tsx|js|jsx|go|rs|rb|java|php)\b|\s(?:\w+\.)+test\w*(?:\.\w+)*\b"
)


def _is_narrow(cmd: str) -> bool:
    """Whether a test command runs a chosen few tests (a test id, a file, ``-k``), not the
    suite a later run should use by default."""

    return bool(_NARROW_RE.search(" " + cmd))


def _procedures(rollout: _Rollout, resolver: _KeyResolver) -> list[Candidate]:
    """One procedure per kind of command that passed: the broadest, most recent such run.

    A run that passed only a narrow selection (one test id, one file) does not replace a known
    general command: what later runs need is how to run the checks, not the last test picked
    (the fix fact names the test that covered a fix)."""

    stated = {stated_procedure_key(s.text) for s in rollout.statements if s.kind == "procedure"}
    best: dict[str, _Command] = {}
    for command in rollout.finished:
        if not command.passed or command.category is None:
            continue
        current = best.get(command.category)
        if current is None or _is_narrow(current.cmd) or not _is_narrow(command.cmd):
            best[command.category] = command
    out: list[Candidate] = []
    for key, _pattern, prefix, same_content, key_word in _CATEGORIES:
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
        keywords = list(dict.fromkeys([key_word, *_subject_words(command.signature)]))
        out.append(
            Candidate(
                key=resolved,
                content=_clip_content(content),
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


def _statement_candidates(rollout: _Rollout, resolver: _KeyResolver) -> list[Candidate]:
    """Preferences, decisions and corrections the user stated; one that names nothing a later
    run could act on ("I love it!", "Never give up!", "No, that's wrong.") is left out."""

    out: list[Candidate] = []
    for statement in rollout.statements:
        if statement.kind == "preference":
            kind: EntryKind = "preference"
            drop = _PREF_TRIGGER_WORDS
            lead = f"{statement.speaker}'s preference" if statement.speaker else "User preference"
            minimum = 1
        elif statement.kind == "decision":
            kind = "decision"
            drop = _DECISION_TRIGGER_WORDS
            lead = f"Decision stated by {statement.speaker or 'the user'}"
            minimum = 1
        elif statement.kind == "procedure":
            out.append(_stated_procedure(statement, resolver))
            continue
        else:
            kind = "decision"
            drop = _PREF_TRIGGER_WORDS
            lead = f"Correction by {statement.speaker or 'the user'}"
            minimum = MIN_FACT_WORDS
        named = set(content_words(statement.text))
        subject = [w for w in _subject_words(statement.text, drop) if w in named][
            :KEY_SUBJECT_WORDS
        ]
        if len(subject) < minimum:
            continue  # generic: says how someone feels, not about what
        if statement.kind == "correction":
            key = make_key("correction", *subject[:FAILURE_SUBJECT_WORDS])
        elif len(subject) == 1:
            key = make_key(subject[0], kind)
        else:
            key = make_key(*subject)
        content = f"{lead}: {statement.text}"
        out.append(
            Candidate(
                key=resolver.resolve(kind, key, subject),
                content=_clip_content(content),
                kind=kind,
                sources=[statement.item_id],
                keywords=subject[:MAX_KEYWORDS],
                personal=statement.personal and statement.kind == "preference",
                subjects=_people(statement.speaker),
            )
        )
    return _one_per_message(out)


def _one_per_message(candidates: list[Candidate]) -> list[Candidate]:
    """Statements of one kind from one message as one entry ("I love cooking! My favourite
    recipe is Chicken Pot Pie."): one lesson, not one entry per sentence citing the same item."""

    out: list[Candidate] = []
    at: dict[tuple[str, tuple[str, ...]], int] = {}
    for cand in candidates:
        mark = (cand.kind, tuple(cand.sources))
        index = at.get(mark)
        if index is not None:
            held = out[index]
            said = cand.content.split(": ", 1)[-1]
            if len(held.content) + len(said) + 1 <= LESSON_CHARS:
                out[index] = held.model_copy(
                    update={
                        "content": f"{held.content} {said}",
                        "keywords": list(dict.fromkeys([*held.keywords, *cand.keywords]))[
                            :MAX_KEYWORDS
                        ],
                        "personal": held.personal or cand.personal,
                    }
                )
                continue
        at.setdefault(mark, len(out))
        out.append(cand)
    return out


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
    return make_key(*_subject_words(text, _PREF_TRIGGER_WORDS)[:KEY_SUBJECT_WORDS])


def _stated_procedure(statement: _Statement, resolver: _KeyResolver) -> Candidate:
    """How a piece of work is done, as a person said it (the command whole, in its quotes)."""

    key = stated_procedure_key(statement.text)
    subject = _subject_words(key.replace("-", " "))
    spans = [" ".join(span.split()) for span in _SPAN_RE.findall(statement.text)]
    return Candidate(
        key=resolver.resolve("procedure", key, subject),
        content=_clip_content(f"Procedure stated by {_who(statement.speaker)}: {statement.text}"),
        kind="procedure",
        sources=[statement.item_id],
        keywords=list(dict.fromkeys([*subject, *(s.split()[0] for s in spans if s.split())]))[
            :MAX_KEYWORDS
        ],
        subjects=Subjects(commands=spans, people=[statement.speaker] if statement.speaker else []),
    )


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


def _report_summary(rollout: _Rollout) -> tuple[str, str] | None:
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
        first = next(iter(_sentences(stripped)), stripped)
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


_ASIDE_RE = re.compile(r"\([^)]*\)|\[[^\]]*\]")


def _short_answer(said: _Said) -> bool:
    return said.asked is not None and (
        len(content_words(_ASIDE_RE.sub(" ", said.text))) <= SHORT_ANSWER_WORDS
    )


def _said_text(said: _Said) -> str:
    body = shorten(said.text, SAID_CHARS)
    if said.asked is None or not body or not _short_answer(said):
        return body
    return f'{body} (answering {said.asked[0]}\'s "{said.asked[1]}")'


def _said_candidates(
    rollout: _Rollout, resolver: _KeyResolver, *, task_summarised: bool
) -> list[Candidate]:
    """What each person said on a day, as one entry: who, when, and the informative sentences
    of their messages, whole (a long day is split into parts). In a task run, the first request
    is left out when the lesson of its work summarises it, and otherwise kept only when the
    speaker says something of their own (``I``, ``we``)."""

    task_run = not _is_conversation(rollout)
    groups: dict[tuple[str | None, date | None, bool], list[_Said]] = {}
    for said in rollout.said[-MAX_SAID_FACTS:]:
        if task_run and said.from_task and (task_summarised or not said.owned):
            continue  # the problem the task reports: summarised in the lesson of its work
        # Apart only when the run has a person: what they say of themselves stays theirs.
        private = said.personal and bool(rollout.people)
        groups.setdefault((said.speaker, said.said_on, private), []).append(said)
    out: list[Candidate] = []
    taken: set[str] = set()
    for (speaker, day, personal), saids in groups.items():
        who = _who(speaker)
        lead = f"{who} ({format_day(day)}): " if day else f"{who}: "
        speaker_words = _words(speaker or "user")[:2]
        day_words = _words(format_day(day)) if day else []
        base = make_key(*speaker_words, *day_words, *(["personal"] if personal else []))
        parts: list[list[_Said]] = [[]]
        size = len(lead)
        for said in saids:
            body = _said_text(said)
            if not body:
                continue
            if parts[-1] and (
                size + len(body) + 1 > SAID_GROUP_CHARS or len(parts[-1]) >= SAID_GROUP_MESSAGES
            ):
                parts.append([])
                size = len(lead)
            parts[-1].append(said)
            size += len(_said_text(said)) + 1
        for part in parts:
            if not part:
                continue
            key = base
            number = 1
            while key in taken or resolver.knows("fact", key):
                number += 1
                key = f"{base}-{number}"
            taken.add(key)
            text = " ".join(_said_text(s) for s in part)
            words = top_words((s.text for s in part), MAX_KEYWORDS)
            out.append(
                Candidate(
                    key=key,
                    content=lead + text,
                    kind="fact",
                    sources=list(
                        dict.fromkeys(
                            i
                            for s in part
                            for i in (
                                s.item_id,
                                s.asked[2] if s.asked and _short_answer(s) else None,
                            )
                            if i
                        )
                    ),
                    keywords=list(dict.fromkeys([*speaker_words, *words]))[:MAX_KEYWORDS],
                    personal=personal,
                    subjects=_people(speaker),
                )
            )
    return out


def _acted(rollout: _Rollout) -> bool:
    """Whether the run did work (a command other than reading memory, or a change): only then
    is its final answer a result worth keeping; a reply to what someone said ("Noted: ...")
    repeats their words, which memory already holds."""

    return bool(rollout.patches or rollout.commands)


def _conclusion(rollout: _Rollout, fixes: Sequence[_Fix]) -> tuple[str, list[str], str] | None:
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
        if last is None or not _informative(final, MIN_CONCLUSION_WORDS):
            continue
        if _subject_words(final) and len(_subject_words(final)) < MIN_CONCLUSION_WORDS:
            continue
        text = shorten(final, CONCLUSION_CHARS)
        if not text:
            continue
        request = rollout.requests.get(seg_index)
        ids.append(last[1])
        found = (text, ids, split_speaker(request[1]).text if request else "")
    return found


def _files_phrase_by_op(files: Mapping[str, _FileRecord], budget: int) -> str:
    """``Changed: ...; added: ...``: files the run changed apart from those it created."""

    changed = {p: r for p, r in files.items() if r.op != "created"}
    added = {p: r for p, r in files.items() if r.op == "created"}
    parts: list[str] = []
    for label, group in (("Changed", changed), ("Added", added)):
        if group:
            room = budget - sum(len(x) + 2 for x in parts) - len(label) - 3
            if room <= 0:
                break
            # The label says it: "Changed: `a` in `f`: ..." rather than "updated `a` ...".
            described = _describe_files(group, room + 8 * len(group))
            described = described.replace("created `" if label == "Added" else "updated `", "`")
            if len(described) > room:
                described = _describe_files(group, room)
            parts.append(f"{label}: {described}")
    return ". ".join(parts)


def _with_report(
    content: str, sources: list[str], report: tuple[str, str] | None
) -> tuple[str, list[str]]:
    """A lesson with the problem its work answered appended, when it fits whole."""

    if report is None:
        return content, sources
    headline = report[0].split(": ", 1)[-1]
    said = set(_subject_words(content))
    if set(_subject_words(headline)) <= said:
        return content, sources  # the lesson already says it (its result names the problem)
    text = f" {report[0].rstrip('.')}."
    if len(content) + len(text) > LESSON_CHARS:
        return content, sources
    return content + text, list(dict.fromkeys([*sources, report[1]]))[-MAX_SOURCES:]


def _work_lessons(
    rollout: _Rollout,
    fixes: Sequence[_Fix],
    files: Mapping[str, _FileRecord],
    resolver: _KeyResolver,
) -> list[Candidate]:
    """What the run's work taught, one entry per lesson: each fixed failure (symptom, fix,
    verification, cause), the last one also carrying the run's other changes and its result;
    a run that fixed nothing but changed files, one entry of its changes and result; a run
    that only looked around, its conclusion."""

    conclusion = _conclusion(rollout, fixes)
    report = _report_summary(rollout) if fixes or files or conclusion else None
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
                also = _files_phrase_by_op(rest, room)
                if also:
                    content += f" {also}."
                    sources += [i for r in rest.values() for i in r.ids]
                    keywords += [p.rsplit("/", 1)[-1] for p in rest]
                    touched.update(rest)
            news = _beyond(conclusion[0], content, clauses=False) if conclusion is not None else ""
            if conclusion is not None and news:
                result = f" Result: {news}"
                if len(content) + len(result) <= LESSON_CHARS:
                    content += result
                    sources += conclusion[1]
            content, sources = _with_report(content, sources, report)
        subjects = Subjects(
            files=_changed_paths(touched),
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
            _beyond(conclusion[0], changes.content, clauses=False) if conclusion is not None else ""
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
        words = _subject_words(request_text)[:FAILURE_SUBJECT_WORDS] or _subject_words(text)[:2]
        content, sources = _with_report(f"Result: {text}", item_ids[-MAX_SOURCES:], report)
        out.append(
            Candidate(
                key=make_key("result", *words),
                content=content,
                kind="fact",
                sources=sources,
                keywords=_subject_words(text)[:MAX_KEYWORDS],
            )
        )
    return out


def _note_patch(files: dict[str, _FileRecord], patch: _Patch) -> None:
    for op, path in patch.files:
        record = files.get(path)
        if record is None:
            record = files[path] = _FileRecord(op=op, first_id=patch.call_item_id)
        if patch.call_item_id not in record.ids:
            record.ids.append(patch.call_item_id)
        change = patch.changes.get(path)
        if change is not None:
            record.change = change


def _changed_files(rollout: _Rollout) -> dict[str, _FileRecord]:
    """Path -> what changed it, for changes that did not fail."""

    files: dict[str, _FileRecord] = {}
    for patch in rollout.patches:
        if patch.ok is False:
            continue
        _note_patch(files, patch)
    return files


def _files_candidate(
    rollout: _Rollout, files: Mapping[str, _FileRecord], resolver: _KeyResolver
) -> Candidate | None:
    """Which files the run changed and how, read from its own patches and writes."""

    if not files:
        return None
    # Every path named (up to a lesson's length), details only within an entry's usual size:
    # what is left is for the run's result.
    names = sum(len(p) + 4 for p in files) + len("Changed: . Added: ")
    content = f"{_files_phrase_by_op(files, max(CONTENT_CHARS, min(LESSON_CHARS, names)) - 1)}."
    changed_first = sorted(files, key=lambda p: files[p].op == "created")
    key = changes_key(changed_first)
    subjects = Subjects(files=_changed_paths(files))
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


def _changed_paths(files: Mapping[str, _FileRecord]) -> list[str]:
    """Paths the run changed (a file it only created, a scratch script or a new test, is not a
    file whose history this lesson is part of)."""

    return [path for path, record in files.items() if record.op != "created"]


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


def _command_stats(rollout: _Rollout) -> list[_CommandStat]:
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


def _said_lines(rollout: _Rollout) -> list[str]:
    lines = [
        f"- {_who(s.speaker)}: {shorten(s.text, SAID_SUMMARY_CHARS)} [{s.item_id}]"
        for s in rollout.said
    ]
    if len(lines) <= MAX_SAID_IN_SUMMARY:
        return lines
    head = MAX_SAID_IN_SUMMARY // 3
    tail = MAX_SAID_IN_SUMMARY - head
    dropped = len(lines) - head - tail
    return [*lines[:head], f"- … {dropped} more statements …", *lines[-tail:]]


def _conversation_summary(rollout: _Rollout) -> list[str]:
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
    prefs = [f"- {_who(s.speaker)} {s.kind}: {s.text} [{s.item_id}]" for s in rollout.statements]
    if prefs:
        out += ["", "## Preferences and decisions"] + _capped(prefs, "statements")
    return out


def _summary(
    rollout: _Rollout,
    stats: Sequence[_CommandStat],
    files: Mapping[str, _FileRecord],
    fixes: Sequence[_Fix],
    previous_summary: bool,
) -> str:
    if _is_conversation(rollout):
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
                f"- {_quote_cmd(stat.cmd)}: last exit {stat.last_exit}{runs} "
                f"[{', '.join(stat.ids)}]"
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


def _raw_memory(
    rollout_id: str,
    rollout: _Rollout,
    stats: Sequence[_CommandStat],
    files: Mapping[str, _FileRecord],
    fixes: Sequence[_Fix],
    previous_summary: bool,
) -> str:
    count = len(rollout.segment_ids)
    plural = "segment" if count == 1 else "segments"
    out: list[str] = [f"- rollout: {rollout_id} ({count} new {plural})"]
    if rollout.people:
        out.append("- person: " + ", ".join(list(rollout.people)[:MAX_LISTED]))
    if rollout.speakers:
        out.append("- speakers: " + ", ".join(list(rollout.speakers)[:MAX_LISTED]))
    if rollout.task and not _is_conversation(rollout):
        out.append(f"- task: {rollout.task[1]} [{rollout.task[0]}]")
    if previous_summary:
        out.append("- continues earlier work (see the previous summary)")
    for kind in ("preference", "decision", "correction"):
        lines = [
            f"- user {kind}: {s.text} [{s.item_id}]" for s in rollout.statements if s.kind == kind
        ]
        out += _capped(lines, f"{kind}s")
    said = [
        f"- said: {_who(s.speaker)}: {shorten(s.text, SAID_SUMMARY_CHARS)} [{s.item_id}]"
        for s in rollout.said
    ]
    out += _capped(said, "statements")
    worked = [
        f"- worked: {_quote_cmd(s.cmd)} (exit 0) [{', '.join(s.ids)}]"
        for s in stats
        if s.last_exit == 0
    ]
    out += _capped(worked, "commands that worked")
    failed = []
    for s in stats:
        if s.failed_runs == 0:
            continue
        later = " (later passed)" if s.last_exit == 0 else ""
        error = f": {_quote_error(s.error)}" if s.error else ""
        failed.append(f"- failed: {_quote_cmd(s.cmd)}{error}{later} [{', '.join(s.fail_ids)}]")
    out += _capped(failed, "commands that failed")
    out += [f"- fixed: {fix.content} [{', '.join(fix.sources)}]" for fix in fixes]
    if files:
        first_ids = list(dict.fromkeys(r.first_id for r in files.values()))[:MAX_SOURCES]
        described = _describe_files(files, CONTENT_CHARS)
        out.append(f"- files changed: {described} [{', '.join(first_ids)}]")
    if rollout.outcomes:
        seg_id, state, final = rollout.outcomes[-1]
        out.append(f"- outcome: {state}" + (f": {final}" if final else "") + f" [{seg_id}]")
    return "\n".join(out) + "\n"


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
    rollout = _Rollout(segments, continues=request.continues_rollout)
    if rollout.item_count == 0 and not rollout.final_outputs:
        return _empty_extraction(request.rollout_id)

    if _is_conversation(rollout) and rollout.said:
        topics = top_words((s.text for s in rollout.said), SLUG_MAX_WORDS)
        slug = rollout_slug(" ".join(topics))
    elif rollout.task:
        slug = rollout_slug(split_speaker(rollout.task[1]).text)
    elif rollout.final_outputs:
        slug = rollout_slug(next(iter(rollout.final_outputs.values())))
    else:
        slug = "untitled-rollout"

    resolver = _KeyResolver(request.known_entries)
    fixes = _find_fixes(rollout)
    files = _changed_files(rollout)
    stats = _command_stats(rollout)

    chosen = _CandidateSet()
    statements = _statement_candidates(rollout, resolver)
    for candidate in statements:
        if len(chosen.by_key) >= MAX_STATEMENTS:
            break
        chosen.add(candidate)
    for candidate in _procedures(rollout, resolver):
        chosen.add(candidate)
    lessons = _work_lessons(rollout, fixes, files, resolver)
    for candidate in lessons:
        chosen.add(candidate)
    summarised = bool(lessons) and _report_summary(rollout) is not None
    for candidate in _said_candidates(rollout, resolver, task_summarised=summarised):
        chosen.add(candidate)

    has_previous = bool(request.previous_summary and request.previous_summary.strip())
    return Extraction(
        rollout_summary=_summary(rollout, stats, files, fixes, has_previous),
        rollout_slug=slug,
        raw_memory=_raw_memory(request.rollout_id, rollout, stats, files, fixes, has_previous),
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
    "rollout_slug",
]
