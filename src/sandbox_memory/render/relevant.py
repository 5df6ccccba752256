"""The read prompt's section "relevant to this task": memory looked up from the run's input.

The summary (seed 000's fact list) is the newest memory within its budget, whatever the task.
After a few dozen runs, the lesson a task needs (the file an earlier fix changed, the command
that works) is often older than everything the summary has room for. So at run start memory
also looks itself up with the run's own input, and hands the agent what it finds, in a section
of its own with its own budget (:attr:`MemoryReadConfig.max_relevant_chars
<sandbox_memory.MemoryReadConfig.max_relevant_chars>`):

- the query is the run's input: the text of its messages (the user's message; for a run that
  continues a conversation, the conversation so far, newest last, its last
  :data:`QUERY_TAIL_CHARS` characters), plus every file path and code symbol named in it as a
  phrase, as a search does (``_pytest/capture.py`` for ``src/_pytest/capture.py``,
  ``cached_param``, ``Card._split``: see :func:`~sandbox_memory.search.index.named_phrases`), so
  an entry naming the same file ranks above one sharing only common words;
- it is ranked by the search index (BM25 over entries and over rollout summaries, each kind
  among its own documents; recorded items
  are not shown here: the curated text is, with its sources), after the same sync a search
  does, so a retracted or forgotten entry is never shown, and with the same person filter, so
  a person's private entries only reach that person's runs; each layout has its own index;
- entries come whole, with their sources, best first, skipping those the summary already
  shows; a rollout summary contributes its lines that share at least
  :data:`MIN_LINE_TERMS` of the query's words (at most :data:`SUMMARY_LINES_PER_HIT`), with
  the file they come from, unless an entry shown here says the same;
- a block that does not fit the budget is skipped (never cut), and the next one is tried.

No model is called: the lookup is one FTS5 query on the index the search tool uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..search.index import (
    MAX_QUERY_PHRASES,
    QUERY_STOPWORDS,
    SearchHit,
    all_words,
    fts_query,
    known_terms,
    named_files,
    named_phrases,
    words_said,
)

QUERY_TAIL_CHARS = 6_000
"""Characters of the run's message text the query is made of (the newest: the message that
starts the run comes last). A pasted log or a long issue is cut at its start, not at the
question that ends it, and the query stays a few hundred words."""

QUERY_TERMS = 64
"""Most terms (phrases, then the rarest words) in the query. Each costs a read of its posting
list, and every document holding any of them is scored: at 20,000 entries, a long message
searched by all its words cost the first turn 0.3 s."""

QUERY_PHRASES = MAX_QUERY_PHRASES
"""Most paths and symbols searched as phrases (the first named)."""

CANDIDATES = 40
"""Documents ranked per lookup: enough to fill the budget after the summary's entries are
skipped, few enough to cost a few milliseconds."""

SUMMARY_LINES_PER_HIT = 3
"""Lines of one rollout summary shown: its best, not the whole file (which the agent can
open: its path is named)."""

MIN_LINE_TERMS = 2
"""Distinct query words a summary line must share to be shown: one shared word is chance."""

PHRASE_WEIGHT = 3
"""A path or symbol of the query in a summary line counts as this many shared words: it names
the one thing a task is about, where a word may be chance."""

SOURCES_SHOWN = 4
"""Sources named per entry (``conversation#item``); more are in ``MEMORY.md``."""

HEADER = "### Relevant to this task (looked up with this run's input, best first)"

_WORD_RE = re.compile(r"[^\W_]+")
_FIELD_RE = re.compile(r"^[\w ]+: \S+$")
"""A label and one token (``conversation: fix-invoice-bug``): a summary's metadata, not a
statement."""
_LINE_KEY_RE = re.compile(r"^- \*\*(?P<key>[^*]+)\*\* \(")


def input_text(run_input: str | Iterable[Any] | None) -> str:
    """The text of a run's input: a string as it is; of items, each message's text (user,
    assistant, system), in order. Tool calls and their output are left out: they are what the
    agent did, not what the task asks."""

    if run_input is None:
        return ""
    if isinstance(run_input, str):
        return run_input
    parts: list[str] = []
    for item in run_input:
        if not isinstance(item, Mapping):
            continue
        if item.get("type") not in (None, "message") or item.get("role") is None:
            continue
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for piece in content:
                if isinstance(piece, Mapping) and isinstance(piece.get("text"), str):
                    parts.append(str(piece["text"]))
    return "\n".join(parts)


def task_terms(text: str) -> tuple[list[str], list[str]]:
    """The query for a run's input text, as FTS5 terms: the paths and symbols it names as
    phrases (the first :data:`QUERY_PHRASES`, and every file it names: see
    :func:`~sandbox_memory.search.index.named_files`), and its words, most repeated first (which of
    them are searched is decided by their rarity in the index: see
    :meth:`SearchIndex.curated <sandbox_memory.search.index.SearchIndex.curated>`)."""

    tail = text[-QUERY_TAIL_CHARS:]
    words = list(known_terms(tail))
    if not words:  # only short words or numbers: search those
        found = fts_query(tail)
        words = found.split(" OR ") if found else []
    named = named_phrases(tail, QUERY_PHRASES)
    return [*named, *(f for f in named_files(tail) if f not in named)], words


def _words(text: str) -> set[str]:
    return {
        w.lower() for w in _WORD_RE.findall(text) if w.lower() not in QUERY_STOPWORDS and len(w) > 2
    }


def _plain(text: str) -> str:
    return " ".join(_WORD_RE.findall(text.lower()))


def shown_keys(summary: str) -> set[str]:
    """The entry keys the summary text shows (its ``- **key** (kind): ...`` lines)."""

    return {m["key"] for line in summary.splitlines() if (m := _LINE_KEY_RE.match(line))}


def _entry_block(hit: SearchHit) -> str:
    refs = ", ".join(f"{s.conversation}#{s.item}" for s in hit.sources[:SOURCES_SHOWN])
    more = len(hit.sources) - SOURCES_SHOWN
    if more > 0:
        refs += f" and {more} more"
    content = " ".join(hit.text.split())
    line = f"- **{hit.key}** ({hit.detail}): {content}"
    return line + (f" (sources: {refs})" if refs else "")


def _phrases(text: str) -> set[str]:
    """The paths and symbols of ``text`` as plain word runs (``src pytest capture py``)."""

    return {phrase.strip('"') for phrase in named_phrases(text)}


def _summary_lines(
    hit: SearchHit, query_words: set[str], query_phrases: set[str], said: list[set[str]]
) -> list[str]:
    """A summary's best lines for the query: those sharing the most of its words, a path or
    symbol it names counting as :data:`PHRASE_WEIGHT` words."""

    scored: list[tuple[int, int, str, set[str]]] = []
    for n, raw in enumerate(hit.text.splitlines()):
        line = " ".join(raw.split()).lstrip("-* ").strip()
        if not line or line.startswith("#") or _FIELD_RE.match(line):
            continue
        # The line's words read once: all of them (as says_the_same reads them), and those
        # long enough to be query words (the query's words hold no stopword).
        tokens = _WORD_RE.findall(line)
        lowered = [w.lower() for w in tokens]
        words = {w for w, t in zip(lowered, tokens, strict=True) if len(t) > 2}
        shared = len(words & query_words)
        if shared < MIN_LINE_TERMS:
            continue
        if query_phrases:
            plain_line = f" {_plain(line)} "
            shared += PHRASE_WEIGHT * sum(f" {p} " in plain_line for p in query_phrases)
        every = set(lowered)
        if words_said(every, said):
            continue  # an entry shown (in the summary or here), or a line here, says it
        scored.append((shared, n, line, every))
    best: list[tuple[int, int, str, set[str]]] = []
    picked: list[set[str]] = []
    for item in sorted(scored, key=lambda t: (-t[0], t[1])):
        if words_said(item[3], picked):
            continue  # a better line of this summary says it (``user: ...`` after the request)
        best.append(item)
        picked.append(item[3])
        if len(best) == SUMMARY_LINES_PER_HIT:
            break
    return [line for _, _, line, _ in sorted(best, key=lambda t: t[1])]


def interleaved(hits: Iterable[SearchHit]) -> list[SearchHit]:
    """Entries and rollout summaries each in their own rank order, taken in turn (an entry
    first). BM25 favours long documents on a long query (a summary shares more of an issue's
    words than any one entry does), so one ranking of both would give the section to
    summaries; in turn, the best of each kind comes first."""

    entries = [h for h in hits if h.kind == "entry"]
    summaries = [h for h in hits if h.kind == "rollout_summary"]
    out: list[SearchHit] = []
    for n in range(max(len(entries), len(summaries))):
        out += entries[n : n + 1] + summaries[n : n + 1]
    return out


def render_relevant(
    hits: Iterable[SearchHit],
    *,
    summary: str,
    query: str,
    budget: int,
    phrases: Iterable[str] | None = None,
) -> str:
    """The section's text (without the header): whole blocks, best first (see
    :func:`interleaved`), within ``budget`` characters; empty when nothing relevant is left
    once the summary's entries are skipped. ``phrases``: the query's phrases as
    :func:`task_terms` gives them, if read already (else read from ``query``)."""

    skip = shown_keys(summary)
    tail = query[-QUERY_TAIL_CHARS:]
    query_words = _words(tail)
    query_phrases = _phrases(tail) if phrases is None else {phrase.strip('"') for phrase in phrases}
    blocks: list[str] = []
    said = [all_words(line) for line in summary.splitlines() if _LINE_KEY_RE.match(line)]
    used = 0
    for hit in interleaved(hits):
        if hit.kind == "entry":
            if hit.key is None or hit.key in skip:
                continue
            block = _entry_block(hit)
            plain = [all_words(hit.text)]
        elif hit.kind == "rollout_summary":
            lines = _summary_lines(hit, query_words, query_phrases, said)
            if not lines:
                continue
            block = f"- from `{hit.path}`:\n" + "\n".join(f"  - {line}" for line in lines)
            plain = [all_words(line) for line in lines]
        else:
            continue
        cost = len(block) + 1
        if used + cost > budget:
            continue
        blocks.append(block)
        said += [p for p in plain if p]
        used += cost
        if hit.kind == "entry" and hit.key is not None:
            skip.add(hit.key)
    return "\n".join(blocks)
