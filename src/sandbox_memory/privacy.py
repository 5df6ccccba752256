"""Privacy between people sharing one agent: what a person says about themselves stays theirs.

A run for a person (``for_person``, ``Memory(person=...)``) may carry their self-statements:
"I prefer short answers", "I'm allergic to nuts", "my daughter starts school on Monday". Any
engine may repeat them where everyone reads: a shared fact quoting the whole message, the
rollout summary, the raw notes. Whatever an engine proposes, phase 1 applies these rules in
code before anything is stored:

- a shared entry (no person) has the person's self-statements cut out of its content; one that
  is nothing but self-statements becomes that person's private entry;
- the rollout summary and the raw notes (files every run can open) lose them too: a line
  that said nothing else is dropped;
- a shared key or the rollout's slug (file names, ``MEMORY.md``) loses the words that only
  the self-statements had ("...-invoice-py-prefer").

A self-statement is a sentence of the person's own message in the first person that is neither
a request to the agent ("Fix my test", "Tell me why") nor a question. A run without a person
has no one to keep things private for; nothing is changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .engines.base import Candidate
from .engines.conversation import content_words, is_first_person, is_request
from .engines.transcript import item_text

_SENTENCE_RE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)")
_LEFTOVER_RE = re.compile(r"""(?:""|''|``|\(\s*\)|\[\s*\]|\s+(?=[.,;:!?]))""")
_CITATION_RE = re.compile(r"\[[^\]\n]{1,80}\]")
_LINE_LABEL_RE = re.compile(r"^\s*(?:[-*]\s+)?(?:[\w .'-]{1,40}:)?\s*")


def run_person(segments: Iterable[Mapping[str, Any]]) -> str | None:
    """The person the newest segment that names one was for."""

    person: str | None = None
    for seg in segments:
        if isinstance(seg.get("person"), str) and seg["person"]:
            person = seg["person"]
    return person


def self_statements(segments: Iterable[Mapping[str, Any]]) -> list[str]:
    """What the person of each segment said about themselves, longest first."""

    found: dict[str, None] = {}
    for seg in segments:
        if not seg.get("person"):
            continue
        for item in seg.get("input") or []:
            if not isinstance(item, dict) or item.get("role") != "user":
                continue
            if item.get("type") not in (None, "message"):
                continue
            for match in _SENTENCE_RE.finditer(item_text(item)):
                sentence = " ".join(match.group(0).split())
                if (
                    sentence
                    and not sentence.endswith("?")
                    and is_first_person(sentence)
                    and not is_request(sentence)
                ):
                    found.setdefault(sentence, None)
    return sorted(found, key=len, reverse=True)


def without_statements(text: str, statements: list[str]) -> str:
    """``text`` with every statement cut out (whitespace and case may differ)."""

    out = text
    for statement in statements:
        words = statement.split()
        if not words:
            continue
        pattern = r"\s+".join(re.escape(w) for w in words)
        out = re.sub(pattern, " ", out, flags=re.IGNORECASE)
    if out == text:
        return text
    out = _LEFTOVER_RE.sub("", out)
    return re.sub(r"[ \t]{2,}", " ", out).strip()


def says_something(text: str) -> bool:
    """Whether ``text`` still names something once labels and citations are set aside."""

    body = _LINE_LABEL_RE.sub("", _CITATION_RE.sub(" ", text), count=1)
    return len(content_words(body)) >= 2


def shared_slug(slug: str, statements: list[str], shared: str) -> str:
    """``slug`` without the words only the statements had (not in ``shared``, the text kept)."""

    if not statements:
        return slug
    private = {w.lower().strip(".,;:!?'\"") for s in statements for w in s.split()}
    kept = {w.lower() for w in re.findall(r"[A-Za-z0-9]+", shared)}
    parts = [p for p in slug.split("-") if p not in private or p in kept]
    return "-".join(parts) if parts else slug


def keep_private(candidates: list[Candidate], statements: list[str]) -> list[Candidate]:
    """Shared candidates without the person's self-statements; those made only of them become
    the person's own (``personal``). Preferences are the person's already."""

    if not statements:
        return candidates
    kept: list[Candidate] = []
    for cand in candidates:
        if cand.action == "forget" or cand.kind == "preference" or cand.personal:
            kept.append(cand)
            continue
        content = without_statements(cand.content, statements)
        if content != cand.content and not says_something(content):
            kept.append(cand.model_copy(update={"personal": True}))
            continue
        key = shared_slug(cand.key, statements, content)
        kept.append(cand.model_copy(update={"content": content, "key": key}))
    return kept


def shared_text(text: str, statements: list[str]) -> str:
    """A rollout summary or raw notes without the self-statements; emptied lines dropped."""

    if not statements:
        return text
    lines: list[str] = []
    for line in text.splitlines():
        cleaned = without_statements(line, statements)
        if cleaned != line and not says_something(cleaned):
            continue
        lines.append(cleaned)
    return "\n".join(lines)
