"""How the offline engine reads text: words, subject words and stems, sentences and clauses,
and the word lists that carry no subject (stopwords, the words of a preference or a decision).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from sandbox_memory.engines.conversation import content_words
from sandbox_memory.engines.text import shorten

from .limits import CONTENT_CHARS

MIN_WORD_CHARS = 2
"""Shortest word kept in keys and slugs: single letters carry no subject."""

STEM_MIN_CHARS = 4
"""Shortest word whose trailing ``s`` is dropped when comparing keys (``tests`` ~ ``test``, but
not ``bus`` or ``is``)."""

MIN_NEW_CLAUSE_WORDS = 2
"""Words a clause of the agent's account of a fix must add to what the lesson already says
(symptom, fix, check) to be quoted: "invoice_total added tax_rate instead of applying it as a
percentage" adds why; "Fixed the bug in invoice.py" and "the tests pass now" add nothing."""


_STOPWORDS = frozenset(
    """a an the and or but if then so of to in on at by for with from into onto about as is are
    was were be been being it its this that these those there here i me my we our us you your he
    she they them their can could would should will shall may might must do does did done have has
    had just also very really please kindly hey hi hello thanks thank ok okay some any all not no
    yes than too via per let lets s t d ll ve re m over instead rather actually nope wait""".split()
)
"""Words that carry no subject: dropped from keys and slugs."""

QUESTION_WORDS = frozenset("what why how when where which who whom whose".split())
"""Words that ask rather than name: a question's subject is what follows them."""


PREF_TRIGGER_WORDS = frozenset(
    """prefer prefers preferred preference like likes love loves hate hates dislike dislikes
    always never use using used rather stick keep avoid don doesn dont instead from now going
    forward future strongly generally usually much want""".split()
)
"""Words of a preference sentence that say *how* the user feels, not *what about*: left out of
the key so "always use X" and "never use X" share one key (the later one wins)."""


DECISION_TRIGGER_WORDS = frozenset(
    """use uses using used decided decide decision agreed agree go going with stick switch move
    now always still currently rely standardized standardised standardize standardise""".split()
)
"""Words of a decision sentence that are not its subject."""


_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])\s+|\n+")


_LEAD_RE = re.compile(r"^(?:[-*•>]+\s*|\d+[.)]\s+)+")


CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


_WORD_RE = re.compile(r"[a-z0-9]+")


def words_of(text: str) -> list[str]:
    return _WORD_RE.findall(_ascii(text).lower())


def subject_words(text: str, drop: frozenset[str] = frozenset()) -> list[str]:
    seen: dict[str, None] = {}
    for word in words_of(text):
        if word in _STOPWORDS or word in drop or len(word) < MIN_WORD_CHARS:
            continue
        seen.setdefault(word, None)
    return list(seen)


def stem_of(word: str) -> str:
    if len(word) >= STEM_MIN_CHARS and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def stems_of(words: Iterable[str]) -> frozenset[str]:
    return frozenset(stem_of(w) for w in words)


def clip_content(text: str) -> str:
    return shorten(text, CONTENT_CHARS)


_WE_RE = re.compile(r"\b(?:we|we're|we've|we'll|our|ours|us)\b", re.IGNORECASE)


def is_we(sentence: str) -> bool:
    return bool(_WE_RE.search(sentence.replace("\u2019", "'")))


def informative(text: str, minimum: int) -> bool:
    return len(content_words(text)) >= minimum


def sentences(text: str) -> Iterable[str]:
    for raw in _SENTENCE_SPLIT_RE.split(text):
        sentence = _LEAD_RE.sub("", raw.strip()).strip()
        if sentence:
            yield sentence


_RETELLING_WORDS = frozenset(
    """fix fixed fixe fixing bug issue problem error now pass passe passed passing fail failed
    failing before after test suite run ran changed change updated update made make cause
    caused root reason because which what where works working work correctly correct properly
    wrong rerun rerunning verified verify confirm confirmed green all every one""".split()
)
"""Words that retell a fix rather than explain it (compared stemmed, see :func:`stem_of`)."""


_CLAUSE_END_RE = re.compile(r"(?<=[.!?;:])\s+")


_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+")


def _clauses(text: str, *, within: bool = True) -> list[str]:
    """``text`` cut after each ``.``, ``!``, ``?`` and, ``within`` sentences, ``;`` and ``:``
    followed by a space, never inside a code span."""

    end = _CLAUSE_END_RE if within else _SENTENCE_END_RE
    out = [""]
    for part in re.split(r"(`[^`]*`)", text):
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out[-1] += part
            continue
        pieces = end.split(part)
        out[-1] += pieces[0]
        out += pieces[1:]
    return [c.strip() for c in out if c.strip()]


def beyond(account: str, said: str, *, clauses: bool = True) -> str:
    """The clauses of ``account`` (the agent's own account of its work: why a fix works, what
    a run found) that say something ``said`` (the lesson as the run's actions tell it) does
    not, at least :data:`MIN_NEW_CLAUSE_WORDS` words of their own, each ending as a
    sentence. ``clauses=False`` weighs whole sentences (a run's result: "..., all tests pass"
    is how it was checked when nothing else says so)."""

    known = stems_of(words_of(said)) | _RETELLING_WORDS
    kept: list[str] = []
    for clause in _clauses(account, within=clauses):
        new = stems_of(subject_words(clause)) - known
        if len(new) >= MIN_NEW_CLAUSE_WORDS:
            kept.append(clause)
            known |= new
    text = " ".join(kept)
    return text if not text or text[-1] in ".!?" else text.rstrip(";:, ") + "."
