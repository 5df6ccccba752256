"""Text as the index reads it: normal form, tokens, query expressions, word comparison.

Every text indexed and every query is normalised (:data:`UNICODE_FORM`) and cut into the
tokens FTS5 sees (:func:`_segment_cjk`: each CJK character its own token); a free-text query
becomes an FTS5 expression (:func:`search_expression`: the paths and symbols it names as
phrases, then any of its words); a transcript's words are counted for the lookup of known
entries (:func:`known_terms`); and two texts are compared by their words
(:func:`says_the_same`), for the hits that say the same thing.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Final

UNICODE_FORM: Final = "NFKC"
"""Normal form of every text indexed and every query: a decomposed "résumé" (``e`` + a combining
accent, as macOS file names and some keyboards give it) is the same word as the composed one,
and compatibility forms ("ﬁ", full-width letters) are their plain letters."""


QUERY_STOPWORDS = frozenset(
    """a an and are as at be been but by can could did do does for from had has have how i if
    in into is it its me my of on or our she he her his they them their this that the these those
    to was we were what when where which who whom why will with would you your""".split()
)
"""English function words dropped from a query (unless nothing else is left): they match most
documents and only add noise to a ranking by any of the query's words."""


_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"


_CJK_CHAR_RE = re.compile(f"([{_CJK}])")


_QUERY_TOKEN_RE = re.compile(f"[{_CJK}]+|[^\\W_]+")


_CJK_RUN_RE = re.compile(f"^[{_CJK}]+$")


_DURATION_RE = re.compile(r"\b\d+\.\d+ ?(?:s|ms|sec|secs|seconds)\b")
"""A measured duration (``1 passed in 0.93s``, ``Ran 3 tests in 0.001s``): it differs each time
the same command runs, so it is shown but not indexed."""


def _segment_cjk(text: str) -> str:
    """The body given to FTS5 for ``text`` (at insert and at delete alike): normalised (see
    :data:`UNICODE_FORM`), measured durations left out (:data:`_DURATION_RE`), each CJK
    character its own token."""

    text = _DURATION_RE.sub(" ", unicodedata.normalize(UNICODE_FORM, text))
    return _CJK_CHAR_RE.sub(r" \1 ", text)


def _fts_body(text: str, terms: str) -> str:
    """What FTS5 indexes for a document (at insert and at delete alike): its text and its
    subject terms (see :func:`subject_terms`)."""

    return _segment_cjk(f"{text}\n{terms}" if terms else text)


def fts_query(query: str) -> str:
    """The FTS5 expression for a free-text query: any of its words (BM25 ranks them)."""

    terms: list[str] = []
    tokens = _QUERY_TOKEN_RE.findall(unicodedata.normalize(UNICODE_FORM, query))
    content = [t for t in tokens if t.lower() not in QUERY_STOPWORDS]
    for token in content or tokens:
        if _CJK_RUN_RE.match(token):
            if len(token) == 1:
                terms.append(f'"{token}"')
            else:
                terms.extend(f'"{token[i]} {token[i + 1]}"' for i in range(len(token) - 1))
        else:
            terms.append(f'"{token.lower()}"')
    return " OR ".join(dict.fromkeys(terms))


PATH_RE: Final = re.compile(r"[\w.-]*\w/[\w./-]*\w|\b\w[\w-]+\.[a-z]{1,4}\b")
"""A file path: a run with a slash (``src/_pytest/capture.py``, ``lib/``), or a name with a
short extension (``setup.cfg``)."""


SYMBOL_RE: Final = re.compile(r"\b[A-Za-z_]\w+(?:\.[A-Za-z_]\w+)+\b|\b\w*[A-Za-z0-9]_\w+\b")
"""A code symbol of two words or more: dotted (``Card._split``) or snake_case
(``cached_param``). A CamelCase name is one word to the index, so it is a word of the query."""


PATH_TAIL_PARTS = 2
"""Parts of a path searched as a phrase: the file and the folder holding it. A task names a
file by a path from the project's root, from a package, or inside a link to the repository
(``github.com/o/r/blob/<sha>/src/_pytest/pastebin.py``), and memory may name it by another;
the last two parts are what they share (``_pytest/pastebin.py``), and rarely name another
file."""


MAX_QUERY_PHRASES = 16
"""Most paths and symbols of a query searched as phrases (the first named)."""


def _words_phrase(text: str) -> str | None:
    words = [w.lower() for w in _QUERY_TOKEN_RE.findall(unicodedata.normalize(UNICODE_FORM, text))]
    if len(words) < 2 or any(_CJK_RUN_RE.match(w) for w in words):
        return None
    return '"' + " ".join(words) + '"'


def named_phrases(text: str, limit: int = MAX_QUERY_PHRASES) -> list[str]:
    """FTS5 phrases for the file paths and code symbols ``text`` names, first named first, each
    once, at most ``limit``: a path as its last :data:`PATH_TAIL_PARTS` parts, a symbol whole.
    A document naming the same file or symbol then holds the phrase as well as its words, and
    BM25 weighs the phrase by its own rarity: the fix history of ``sympy/core/numbers.py``
    ranks above documents that only share the words ``core`` and ``numbers``."""

    found: list[tuple[int, str]] = []
    spans: list[tuple[int, int]] = []
    for match in PATH_RE.finditer(text):
        spans.append(match.span())
        parts = [p for p in match.group(0).split("/") if p]
        phrase = _words_phrase("/".join(parts[-PATH_TAIL_PARTS:]))
        if phrase is not None:
            found.append((match.start(), phrase))
    for match in SYMBOL_RE.finditer(text):
        if any(start <= match.start() < end for start, end in spans):
            continue  # a part of a path (``numbers.py`` of ``sympy/core/numbers.py``)
        phrase = _words_phrase(match.group(0))
        if phrase is not None:
            found.append((match.start(), phrase))
    found.sort(key=lambda f: f[0])
    return list(dict.fromkeys(phrase for _, phrase in found))[:limit]


CODE_FILE_EXTENSIONS: Final = frozenset(
    "py pyi pyx js jsx mjs ts tsx rs go java kt rb php c h cc cpp hpp cs swift scala sh sql "
    "html css md rst txt toml cfg ini yml yaml json xml ipynb".split()
)
"""What ends the name of a file a task's text names: a source, config or doc file."""


def named_files(text: str, limit: int = MAX_QUERY_PHRASES) -> list[str]:
    """The phrases of the files ``text`` names (see :func:`file_phrases`), first named first,
    each once, at most ``limit``, however many other paths and symbols come before them (a
    traceback names a dozen symbols before the file it fails in)."""

    found: list[str] = []
    for match in PATH_RE.finditer(text):
        parts = [p for p in match.group(0).split("/") if p]
        phrase = _words_phrase("/".join(parts[-PATH_TAIL_PARTS:]))
        if phrase is not None:
            found.append(phrase)
    return file_phrases(dict.fromkeys(found))[:limit]


def file_phrases(phrases: Iterable[str]) -> list[str]:
    """The phrases of :func:`named_phrases` that name a file: a path's last parts ending in a
    file name with one of :data:`CODE_FILE_EXTENSIONS` (``"axes axes py"`` for
    ``site-packages/matplotlib/axes/_axes.py`` in a traceback, ``"basic py"`` for
    ``basic.py``). A document holding one is about a file the query names: search and the
    section "relevant to this task" rank such documents first among their kind."""

    found: list[str] = []
    for phrase in phrases:
        words = phrase.strip('"').split()
        if len(words) >= 2 and words[-1] in CODE_FILE_EXTENSIONS:
            found.append(phrase)
    return found


def search_expression(query: str) -> str:
    """The FTS5 expression :meth:`SearchIndex.search` runs for ``query``: the paths and symbols
    it names as phrases (:func:`named_phrases`, and every file it names: :func:`named_files`),
    or any of its words (:func:`fts_query`)."""

    words = fts_query(query)
    if not words:
        return ""
    named = [*named_phrases(query), *named_files(query)]
    return " OR ".join(dict.fromkeys([*named, *words.split(" OR ")]))


def known_terms(text: str) -> dict[str, int]:
    """The FTS5 terms of a transcript with how often each occurs, most repeated first (first
    seen first on ties): content words of three letters or more (function words and bare
    numbers left out), and each two-character phrase of a CJK run."""

    counts: dict[str, int] = {}
    for token in _QUERY_TOKEN_RE.findall(unicodedata.normalize(UNICODE_FORM, text)):
        if _CJK_RUN_RE.match(token):
            phrases = (
                [token] if len(token) == 1 else [token[i : i + 2] for i in range(len(token) - 1)]
            )
            terms = ['"' + " ".join(p) + '"' for p in phrases]
        else:
            token = token.lower()
            if len(token) < 3 or token.isdigit() or token in QUERY_STOPWORDS:
                continue
            terms = [f'"{token}"']
        for term in terms:
            counts[term] = counts.get(term, 0) + 1
    return {t: counts[t] for t in sorted(counts, key=lambda t: -counts[t])}


_PLAIN_RE = re.compile(r"[^\w]+")


def _plain(text: str) -> str:
    """Lowercase words joined by single spaces (no punctuation, markdown or quotes)."""

    return _PLAIN_RE.sub(" ", text.lower()).strip()


SAME_WORDS = 0.8
"""Share of a text's words another must hold for the two to count as saying the same: a
summary line or an entry restates a message with a label (``Result:``, ``The user (date):``)
and ids around the same words, so the texts are never equal."""


_ALL_WORDS_RE = re.compile(r"[^\W_]+")


def all_words(text: str) -> set[str]:
    """The distinct lowercase words of ``text``."""

    return {w.lower() for w in _ALL_WORDS_RE.findall(text)}


def says_the_same(text: str, said: Iterable[set[str]]) -> bool:
    """Whether one of the word sets ``said`` holds nearly every word of ``text`` (at least
    :data:`SAME_WORDS` of them)."""

    return words_said(all_words(text), said)


def words_said(words: set[str], said: Iterable[set[str]]) -> bool:
    """:func:`says_the_same` for a text whose words (:func:`all_words`) are read already."""

    if not words:
        return True
    need = SAME_WORDS * len(words)
    # A set smaller than ``need`` cannot hold enough of them: not intersected.
    return any(len(other) >= need and len(words & other) >= need for other in said)
