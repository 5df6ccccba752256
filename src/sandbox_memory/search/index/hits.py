"""What a search returns: the hit, its text and excerpt, one hit per fact, the text form.

:class:`SearchHit` is one ranked result; :func:`_hit_of` makes it from a row of the index,
its text whole or cut to the window around the query's words (:func:`excerpt_of`).
:func:`one_per_key` joins the copies of one statement (an entry promoted to layout memory, the
same text learned twice) into one hit, :func:`distinct` keeps curated text above the raw items
it stands for, and :func:`format_hits` writes the hits for the agent tool and the CLI. Both
the SQLite index and a shared store's (``search/postgres.py``) shape their hits here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from ...engines.dates import MONTHS
from ...stores.records import Source
from .schema import HitKind, _sources_of, _unpack
from .text import _CJK_RUN_RE, _QUERY_TOKEN_RE, QUERY_STOPWORDS, _plain, all_words, says_the_same

HIT_ORDER = (
    "score (best first: the rank in its kind, see SearchIndex._lexical), then kind (entry, "
    "rollout_summary, item), then BM25 within the kind (best first), then updated_at (newest "
    "first), then the document's id (scope, then key or item id, in text order)"
)
"""The order of search hits. Hits with the same BM25 score (the same words, as often as each
other, in texts as long) come in this order too, so two indexes holding the same documents,
filled in any order (one rebuilt, one kept up to date run by run), give the same hits; and
since what is indexed leaves out what differs from one run to the next (see
:func:`settled_text`), the same work recorded twice gives the same hits too."""


HIT_TEXT_CHARS = 700
"""Longest ``text`` of a summary or item hit; longer documents are cut to the window holding
most of the query's content words (see :func:`excerpt_of`)."""


ENTRY_TEXT_CHARS = 1_200
"""Longest ``text`` of an entry hit. An entry is already what memory kept of a run, so it is cut
only when it is long (a day of someone's statements), and less tightly than a transcript: a cut
entry hides a fact of the same subject, where a cut item hides more of the same output."""


def hit_text_chars(kind: str) -> int:
    """Longest ``text`` of a hit of ``kind`` (see :data:`HIT_TEXT_CHARS`)."""

    return ENTRY_TEXT_CHARS if kind == "entry" else HIT_TEXT_CHARS


EXCERPT_CHARS = 300
"""Longest ``excerpt`` of an entry hit: about two sentences of the recorded item it cites, cut
around the query's words. An entry is the fact in a few words; the excerpt is the evidence as
it was said (the date, the name, the number the entry left out), small enough that ten hits
stay a short tool result."""


class SearchHit(BaseModel):
    """One ranked result of :meth:`MemoryClient.search <sandbox_memory.MemoryClient.search>`.

    .. versionadded:: 0.1
    """

    kind: HitKind
    """``entry``, ``rollout_summary`` or ``item`` (a recorded item of a run)."""
    text: str
    """The entry's content, or the summary's or item's text (a window around the match when
    it is longer than :data:`HIT_TEXT_CHARS`)."""
    score: float
    """Relevance (higher is better): ``RRF_K / (RRF_K + rank)`` for the hit's BM25 rank among
    the documents of its kind (see :meth:`SearchIndex._lexical`); comparable within one result
    list only, and never rising down the list. An entry or summary standing in for recorded
    items that say the same carries the best of their scores and its own (see
    :func:`distinct`). 0 when every query word it holds is in more than half the documents of
    its kind (always, when memory holds a single document): FTS5 floors such a word's IDF; the
    text form then omits it."""
    updated_at: int
    """Milliseconds since the epoch: when the entry changed or the run was recorded."""
    conversation: str | None
    """The rollout id it comes from; ``None`` for a layout entry."""
    sources: list[Source] = Field(default_factory=list)
    """The items it rests on: an entry's sources; an item is its own source; a summary cites
    the first and last item it covers."""
    key: str | None = None
    """The entry's key (entries only)."""
    detail: str | None = None
    """The entry's kind, or the item's role or tool (``user``, ``tool exec_command`` ...)."""
    path: str
    """The workspace file to open for more."""
    uses: int = 0
    """How often later runs used it (entries) or its conversation (summaries, items)."""
    excerpt: str | None = None
    """Entries only: the part of a recorded item the entry cites that best matches the query
    (the item holding most of the query's words, by BM25; at most :data:`EXCERPT_CHARS`
    characters, cut around those words), so the evidence is seen beside the fact learned
    from it. ``None`` when no cited item this search may see holds a query word, or the
    entry's text shown holds every word of the excerpt. Redacted (items are recorded redacted);
    an item hidden by Forget, or of another person's run, is never excerpted.
"""
    excerpt_source: Source | None = None
    """The item :attr:`excerpt` comes from."""
    ranking: str = "bm25"
    """How the list was ranked: ``bm25`` (lexical only: no embedder configured, or the embedder
    failed and the search fell back), or ``bm25+<embedder name>`` (BM25 and cosine similarity
    fused, :data:`RRF_K`); the ``score`` is then the fused score."""


def _window(text: str, query: str, size: int = HIT_TEXT_CHARS) -> str:
    """``text`` whole when it fits in ``size`` characters, otherwise the window around the
    part holding most of ``query``'s content words (see :func:`excerpt_of`)."""

    return text if len(text) <= size else excerpt_of(text, query, size)


_ASKS_WHEN_RE = re.compile(
    r"\W*(?:\w+\W+){0,2}?(?:when|since when|how long|what (?:date|day|year|month|week)"
    r"|which (?:date|day|year|month|week|weekend))\b",
    re.IGNORECASE,
)
"""A question that asks for a time ("When did …", "How long has …", "And which year …"): its
answer is a date, whatever words it shares with the text."""


_DATE_RE = re.compile(
    rf"\b(?:\d{{1,2}} )?(?:{'|'.join(MONTHS)})(?: \d{{1,2}},?)?(?: \d{{4}})?\b"
    r"|\b(?:1[6-9]|20)\d\d\b"
)
"""A date as memory writes it (``7 May 2023``, ``May 2023``, ``2016``) or as people do
(``May 7, 2023``)."""


BRACKET_SLACK_CHARS = 40
"""How far a window's end may move to close a bracket it opened: a resolved date in brackets
("next month (June 2023)") is shown whole, not cut at "(June…"."""


def excerpt_of(text: str, query: str, size: int = EXCERPT_CHARS) -> str:
    """``text`` whole when it fits in ``size`` characters, otherwise the ``size``-character
    window holding most of ``query``'s distinct words, of those the one holding the most
    matches (the first such window), widened to word boundaries inside it, marked ``…`` where
    cut. A query word matches where a word of the text starts with its first five letters
    ("ferry" in "ferries", not "art" in "started"); a CJK word by its first two characters
    anywhere, as CJK text has no spaces. A question asking when (:data:`_ASKS_WHEN_RE`) counts
    the text's dates as one more word of it: the window it wants holds a date. A bracket
    opened in the window is closed in it (:data:`BRACKET_SLACK_CHARS`)."""

    text = " ".join(text.split())
    if len(text) <= size:
        return text
    lowered = text.lower()
    places: list[tuple[int, int, str]] = []
    """(where, how long, which query word) of each match."""
    for token in dict.fromkeys(t.lower() for t in _QUERY_TOKEN_RE.findall(query)):
        if token in QUERY_STOPWORDS:
            continue
        cjk = _CJK_RUN_RE.match(token) is not None
        probe = token[:2] if cjk else token[:5]
        at = lowered.find(probe)
        while at >= 0:
            if cjk or at == 0 or not lowered[at - 1].isalnum():
                places.append((at, len(probe), probe))
            at = lowered.find(probe, at + 1)
    if _ASKS_WHEN_RE.match(query):
        places += [(m.start(), len(m.group(0)), "") for m in _DATE_RE.finditer(text)]
    places.sort()
    # A window sliding over the matches: the one starting at a match that holds the most
    # distinct words, then the most matches (linear in the matches).
    start, best = 0, (0, 0)
    inside: dict[str, int] = {}
    last = 0
    for first, (at, _, _) in enumerate(places):
        while last < len(places) and places[last][0] + places[last][1] <= at + size:
            inside[places[last][2]] = inside.get(places[last][2], 0) + 1
            last += 1
        if (len(inside), last - first) > best:
            start, best = at, (len(inside), last - first)
        if last > first:
            word = places[first][2]
            inside[word] -= 1
            if not inside[word]:
                del inside[word]
    # The matched words a little in from the window's left edge, the window inside the text.
    start = max(0, min(start - size // 6, len(text) - size))
    end = start + size
    if start:
        space = text.find(" ", start, start + size // 6)
        start = space + 1 if space >= 0 else start
    if end < len(text):
        opened = text.rfind("(", start, end)
        closed = text.find(")", end, end + BRACKET_SLACK_CHARS)
        if opened > text.rfind(")", start, end) and closed >= 0:
            end = closed + 1  # a bracket (a resolved date) is never cut in half
        else:
            space = text.rfind(" ", end - size // 6, end)
            end = space if space > start else end
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _hit_of(row: Any, query: str, *, whole: bool) -> SearchHit:
    """A hit from a row ``(kind, text, score, updated_at, conversation, sources, key, detail,
    path, uses)``; its text whole, or a window around ``query``'s words."""

    kind, text, score, updated, conv, sources, key, detail, path, uses = row
    plain = _unpack(text)
    if whole and kind == "entry" and key is not None:
        # An entry's text is ``<key with spaces>: <content>`` (see ``_sync_scope``).
        plain = plain[len(key) + 2 :]
    return SearchHit(
        kind=kind,
        text=plain if whole else _window(plain, query, hit_text_chars(kind)),
        score=round(float(score), 4),
        updated_at=int(updated),
        conversation=conv,
        sources=[Source(**s) for s in _sources_of(sources)],
        key=key,
        detail=detail,
        path=path,
        uses=int(uses),
    )


class EntryCopy(NamedTuple):
    """One copy of an entry key, as :func:`one_per_key` compares and shows it."""

    sources: list[Source]
    plain: str
    """Its text as :func:`_plain` words, to compare."""
    text: str
    """Its text as a hit shows it."""
    updated_at: int


def one_per_key(
    ranked: list[SearchHit], copies_of: Callable[[str], Iterable[EntryCopy]]
) -> list[SearchHit]:
    """Ranked hits with each statement once. A hit is one fact, named by its scope and key:
    the same key in two conversations is two facts (three ``budget``s are three hits). The
    exception is a copy of one statement: an entry promoted to layout memory from the same
    items (it shares a source), or the same text learned in several conversations; the
    copies are one hit, kept in its best place and citing the sources of every copy this
    search may see. Copies join through each other (a conversation's entry, the layout entry
    it was promoted to and later updated from another conversation, and that conversation's
    own entry are one fact), and the hit says what the newest of them says: an older
    conversation's wording is never shown beside, or instead of, the newer one.

    ``copies_of(key)``: the entries under ``key`` this search may see, newest first; each
    index (SQLite, PostgreSQL) reads them its own way."""

    out: list[SearchHit] = []
    shown: dict[str, list[tuple[set[tuple[str, str]], set[str]]]] = {}
    for hit in ranked:
        key = hit.key
        if hit.kind == "entry" and key is not None:
            refs = {(s.conversation, s.item) for s in hit.sources}
            said = _plain(hit.text)
            if any(refs & seen or said in texts for seen, texts in shown.get(key, [])):
                continue
            cited = {(s.conversation, s.item): s for s in hit.sources}
            texts = {said}
            joined: list[EntryCopy] = []
            rest = list(copies_of(key))
            grew = True
            while grew:  # copies join through each other: until none more joins
                grew = False
                for copy in list(rest):
                    mine = {(c.conversation, c.item) for c in copy.sources}
                    if not (mine & set(cited) or copy.plain in texts):
                        continue  # another fact under the same key (so far)
                    rest.remove(copy)
                    joined.append(copy)
                    texts.add(copy.plain)
                    for source in copy.sources:
                        cited.setdefault((source.conversation, source.item), source)
                    grew = True
            newest = max(joined, key=lambda c: c.updated_at, default=None)
            if newest is not None and newest.plain != said and newest.updated_at > hit.updated_at:
                hit = hit.model_copy(update={"text": newest.text, "updated_at": newest.updated_at})
            hit.sources = list(cited.values())
            shown.setdefault(key, []).append((set(cited), texts))
        out.append(hit)
    return out


def distinct(ranked: list[SearchHit], limit: int) -> list[SearchHit]:
    """The best ``limit`` hits, one per fact, curated text above the raw items it stands for,
    scores never rising down the list.

    - An entry and the items it cites, or a rollout summary or entry and a recorded item of
      the same conversation whose words it holds (:func:`says_the_same`), say the same thing:
      the curated hit is kept (it carries what the item lacks: a resolved date, who said it,
      the key, the outcome) in the best of their places, and with the best of their scores
      (it stands for their match too). An entry citing items another entry shown covers is
      left out, and so is an entry whose words an entry shown holds.
    - The hits are then in score order (ties as ranked), so the order shown is the order of
      the scores.
    """

    kept: list[SearchHit | None] = []
    covering: dict[tuple[str, str], int] = {}
    """Item (conversation, id) -> the place of the hit standing for it."""
    words: dict[int, set[str]] = {}
    """Place -> words of the curated hit there."""

    for hit in ranked:
        refs = [(s.conversation, s.item) for s in hit.sources]
        if hit.kind == "item":
            if refs and refs[0] in covering:
                continue
            same = next(
                (
                    p
                    for p, held in enumerate(kept)
                    if held is not None
                    and held.kind != "item"
                    and held.conversation == hit.conversation
                    and says_the_same(hit.text, [words[p]])
                ),
                None,
            )
            if same is not None:
                if refs:
                    covering[refs[0]] = same
                continue
            if refs:
                covering[refs[0]] = len(kept)
            kept.append(hit)
        else:
            hit_words = all_words(hit.text)
            cited = refs if hit.kind == "entry" else []
            holders = sorted(
                {covering[r] for r in cited if r in covering}
                | {
                    p
                    for p, held in enumerate(kept)
                    if held is not None
                    and held.kind == "item"
                    and held.conversation == hit.conversation
                    and says_the_same(held.text, [hit_words])
                }
            )
            items = [p for p in holders if (held := kept[p]) is not None and held.kind == "item"]
            if items:
                best = items[0]
                score = max([hit.score, *(h.score for p in items if (h := kept[p]) is not None)])
                for p in items:
                    replaced = kept[p]
                    if replaced is not None:
                        for s in replaced.sources:
                            covering[(s.conversation, s.item)] = best
                    kept[p] = None
                kept[best] = hit.model_copy(update={"score": score})
                words[best] = hit_words
                for r in cited:
                    covering[r] = best
            elif cited and all(r in covering for r in cited):
                continue  # an entry already shown covers the same items
            elif hit.kind == "entry" and says_the_same(
                hit.text,
                [words[p] for p, h in enumerate(kept) if h is not None and h.kind == "entry"],
            ):
                continue  # an entry shown says the same
            else:
                for r in cited:
                    covering.setdefault(r, len(kept))
                words[len(kept)] = hit_words
                kept.append(hit)
    # Every candidate is looked at (a curated hit ranked below the limit may stand for an
    # item within it); the hits beyond the limit are then the lowest scored.
    out = [h for h in kept if h is not None]
    out.sort(key=lambda h: -h.score)  # stable: ties keep their ranked order
    return _without_restated_summaries(out, limit)[:limit]


def _without_restated_summaries(hits: list[SearchHit], limit: int) -> list[SearchHit]:
    """``hits`` (best first) without the rollout summaries whose text shown the entries
    shown with them already say: a summary's lines quote the messages its conversation's
    entries were learned from, so once the entries citing that conversation among the first
    ``limit`` hits hold nearly every word of the summary's text (:func:`says_the_same`,
    over their words together), the summary repeats them and its place goes to the next hit.
    Each summary dropped moves another hit into the first ``limit``, so the entries' words
    only grow: looked at again until no summary is dropped."""

    out = list(hits)
    while True:
        shown = out[:limit]
        said: dict[str, set[str]] = {}
        for hit in shown:
            if hit.kind == "entry":
                for conv in {s.conversation for s in hit.sources} | {hit.conversation}:
                    if conv is not None:
                        said.setdefault(conv, set()).update(all_words(hit.text))
        restated = [
            hit
            for hit in shown
            if hit.kind == "rollout_summary"
            and hit.conversation in said
            and says_the_same(hit.text, [said[hit.conversation]])
        ]
        if not restated:
            return out
        out = [hit for hit in out if all(hit is not r for r in restated)]


SCORE_SHOWN_MIN = 0.005
"""The smallest score :func:`format_hits` prints. FTS5's BM25 floors the IDF of a word found in
more than half the indexed documents at 1e-6, so when memory holds one or two documents, or
the query has only such words, every hit scores about 0: printed as ``score 0.00`` it reads as
"irrelevant" when it only means "no word is rarer than another". The order still holds."""


def format_hits(hits: Iterable[SearchHit]) -> str:
    """Hits as plain text for the agent tool and the CLI: one block per hit."""

    blocks: list[str] = []
    for n, hit in enumerate(hits, 1):
        what = hit.kind.replace("_", " ")
        if hit.key:
            what += f" {hit.key}"
        if hit.detail and hit.kind != "rollout_summary":
            what += f" ({hit.detail})"
        refs = ", ".join(f"{s.conversation}#{s.item}" for s in hit.sources[:4]) or "-"
        when = datetime.fromtimestamp(hit.updated_at / 1000).strftime("%Y-%m-%d %H:%M")
        used = f"; used {hit.uses}x" if hit.uses else ""
        if hit.ranking != "bm25":  # BM25 alone is the default and says nothing more
            used += f"; ranked {hit.ranking}"
        # A score that prints as 0.00 says nothing (see SCORE_SHOWN_MIN): left out.
        score = f"score {hit.score:.2f}; " if hit.score >= SCORE_SHOWN_MIN else ""
        head = f"[{n}] {what}; {score}{when}; sources {refs}; in {hit.path}{used}"
        block = head + "\n" + " ".join(hit.text.split())
        if hit.excerpt is not None and hit.excerpt_source is not None:
            cited = f"{hit.excerpt_source.conversation}#{hit.excerpt_source.item}"
            block += f"\n  from {cited}: {hit.excerpt}"
        blocks.append(block)
    return "\n\n".join(blocks) if blocks else "no memory matches"
