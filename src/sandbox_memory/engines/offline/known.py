"""How a candidate is matched against known entries (a known entry's key is reused when it is the
same fact or about the same subject) and merged with a repeat of its key in one extraction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from sandbox_memory.engines.base import Candidate, KnownEntry, Subjects

from .keys import make_key, parent_words
from .limits import CONTENT_CHARS, KEY_MAX_CHARS, MAX_KEYWORDS, MAX_SOURCES
from .words import stems_of, subject_words, words_of

KEY_MATCH_THRESHOLD = 0.6
"""Similarity (Jaccard over stemmed key words) above which a known entry of the same kind is
taken to be the same fact and its key is reused: more than half of the words must agree."""

CONTAINED_SCORE = 0.75
"""Similarity given when every subject word of a candidate appears in a known entry's content
(``tabs``, ``spaces`` in "User prefers tabs over spaces"): above the threshold, so reused."""

MIN_CONTAINED_WORDS = 2
"""Fewest subject words for the containment rule: one shared word (``pnpm``) is not enough to
call two entries the same fact."""

MAX_CANDIDATES = 160
"""Most candidates from one extraction: bounded so a rollout of 10,000 segments cannot flood
phase 2, large enough for a long chat whose every message states something."""


@dataclass(frozen=True)
class _Known:
    entry: KnownEntry
    key_words: frozenset[str]
    content_words: frozenset[str]


class KeyResolver:
    """Reuses a known entry's key when a candidate is clearly the same fact."""

    def __init__(self, known: Sequence[KnownEntry]) -> None:
        self._exact = {(e.kind, e.key) for e in known}
        self._known = [
            _Known(
                entry=e,
                key_words=stems_of(words_of(e.key)),
                content_words=stems_of(subject_words(e.content[:CONTENT_CHARS])),
            )
            for e in known
        ]

    def knows(self, kind: str, key: str) -> bool:
        """Whether memory already holds an entry of ``kind`` under ``key``."""

        return (kind, key) in self._exact

    def holds_changes(self, kind: str, key: str) -> bool:
        """Whether a known entry of ``kind`` under ``key`` is the lesson of changed files (a
        fix or a run's changes): a run that only looked is not its update."""

        return any(
            k.entry.kind == kind
            and k.entry.key == key
            and k.entry.subjects is not None
            and bool(k.entry.subjects.files)
            for k in self._known
        )

    def about(self, kind: str, key: str, subjects: Subjects) -> str:
        """The key of the lesson about ``subjects``: a known entry of ``kind`` about the same
        subject keeps its key (the same failing test in a file it changed, for a fix; the
        same files and no failing test, for a run's changes), whatever words the new run uses;
        a known key held by a lesson about other files is not taken over (the new one is
        named with its folder too, ``billing-invoice`` beside ``invoice``); else ``key``."""

        files, tests = set(subjects.files), set(subjects.tests)
        if files or tests:
            for known in self._known:
                entry = known.entry
                theirs = entry.subjects
                if entry.kind != kind or theirs is None:
                    continue
                if tests:
                    if tests & set(theirs.tests) and (not files or files & set(theirs.files)):
                        return entry.key
                elif not theirs.tests and files == set(theirs.files):
                    return entry.key
        held = next((k.entry for k in self._known if k.entry.key == key), None)
        theirs = held.subjects if held is not None else None
        if (
            held is not None
            and files
            and theirs is not None
            and theirs.files
            and not files & set(theirs.files)
        ):
            parent = parent_words(sorted(files))
            if parent:
                return make_key(*parent, key)
        return key

    def resolve(
        self,
        kind: str,
        key: str,
        subject: Sequence[str],
        *,
        same_procedure: tuple[re.Pattern[str], str] | None = None,
        files: Sequence[str] = (),
    ) -> str:
        """``key``, or a known entry's key of ``kind`` whose key or text holds ``subject``'s
        words; a known entry about other ``files`` than these is another subject."""

        if (kind, key) in self._exact:
            return key
        wanted = stems_of(subject) or stems_of(words_of(key))
        best: KnownEntry | None = None
        best_score = 0.0
        for known in self._known:
            if known.entry.kind != kind:
                continue
            theirs = known.entry.subjects
            if files and theirs is not None and theirs.files and not set(files) & set(theirs.files):
                continue
            score = 0.0
            if same_procedure is not None:
                pattern, key_word = same_procedure
                if key_word in known.key_words and pattern.search(known.entry.content.lower()):
                    score = 1.0
            if wanted and known.key_words:
                union = len(wanted | known.key_words)
                score = max(score, len(wanted & known.key_words) / union)
            if len(wanted) >= MIN_CONTAINED_WORDS and wanted <= known.content_words:
                score = max(score, CONTAINED_SCORE)
            if score > best_score:
                best, best_score = known.entry, score
        if best is not None and best_score >= KEY_MATCH_THRESHOLD:
            return best.key
        return key


class CandidateSet:
    """Candidates by key, in the order first proposed; a repeat of a key merges into it."""

    def __init__(self) -> None:
        self.by_key: dict[str, Candidate] = {}

    def add(self, candidate: Candidate) -> None:
        existing = self.by_key.get(candidate.key)
        if existing is not None and existing.kind == candidate.kind:
            sources = list(dict.fromkeys([*existing.sources, *candidate.sources]))
            keywords = list(dict.fromkeys([*existing.keywords, *candidate.keywords]))
            self.by_key[candidate.key] = existing.model_copy(
                update={
                    "content": candidate.content,
                    "sources": sources[-MAX_SOURCES:],
                    "keywords": keywords[:MAX_KEYWORDS],
                }
            )
            return
        if existing is not None:
            base = make_key(
                candidate.key[: KEY_MAX_CHARS - len(candidate.kind) - 1], candidate.kind
            )
            candidate = candidate.model_copy(update={"key": base})
            if base in self.by_key:
                return
        if len(self.by_key) < MAX_CANDIDATES:
            self.by_key[candidate.key] = candidate

    def values(self) -> list[Candidate]:
        return list(self.by_key.values())
