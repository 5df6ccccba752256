"""Shortening text for memory entries without cutting a word, a command or a code span.

An entry that ends in ``python3 -m unittest dis…`` is worse than a shorter one: a later run
copies the command and it fails. :func:`shorten` keeps whole sentences when it can, else whole
words, and never stops inside a ```code span```: a span that does not fit is dropped whole.
"""

from __future__ import annotations

import re

from sandbox_memory.engines.transcript import WHITESPACE_SLACK

ELLIPSIS = "…"

MIN_SENTENCE_SHARE = 0.4
"""A cut at a sentence end is preferred when it keeps at least this share of the budget;
otherwise the text is cut at the last whole word (marked with an ellipsis)."""

_SENTENCE_END_RE = re.compile(r"[.!?;](?=\s|$)")


def _code_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each backtick-delimited span (end exclusive), in order."""

    spans: list[tuple[int, int]] = []
    start: int | None = None
    for at, char in enumerate(text):
        if char != "`":
            continue
        if start is None:
            start = at
        else:
            spans.append((start, at + 1))
            start = None
    return spans


def _outside(position: int, spans: list[tuple[int, int]]) -> int:
    """``position``, moved back to the start of the code span it falls inside, if any."""

    for start, end in spans:
        if start < position < end:
            return start
        if start >= position:
            break
    return position


def shorten(text: str, max_chars: int) -> str:
    """``text`` on one line in at most ``max_chars`` characters, cut only between words.

    Whitespace is collapsed. When the text is too long it ends at the last sentence that fits
    (if that keeps a fair share), else at the last whole word followed by ``…``; a code span
    (between backticks) is never cut: the cut moves to before it. Returns ``""`` when not even
    one word fits.
    """

    flat = " ".join(text[: max(max_chars, 1) * WHITESPACE_SLACK].split())
    if len(flat) <= max_chars:
        return flat
    spans = _code_spans(flat)
    limit = max_chars
    best_sentence = -1
    for match in _SENTENCE_END_RE.finditer(flat, 0, limit):
        end = match.end()
        if _outside(end, spans) == end and not any(s < end <= e - 1 for s, e in spans):
            best_sentence = end
    if best_sentence >= int(max_chars * MIN_SENTENCE_SHARE):
        return flat[:best_sentence].rstrip()
    room = limit - len(ELLIPSIS) - 1
    if room <= 0:
        return ""
    cut = flat.rfind(" ", 0, room + 1)
    while cut > 0:
        moved = _outside(cut, spans)
        if moved == cut:
            break
        cut = flat.rfind(" ", 0, moved)
    if cut <= 0:
        return ""
    head = flat[:cut].rstrip(" ,;:-–—(")
    return f"{head} {ELLIPSIS}" if head else ""


__all__ = ["shorten"]
