"""How what people said becomes entries: each person's informative sentences of a day, whole, a
short answer kept with its question.
"""

from __future__ import annotations

import re
from datetime import date

from sandbox_memory.engines.base import Candidate
from sandbox_memory.engines.conversation import content_words, top_words
from sandbox_memory.engines.dates import format_day
from sandbox_memory.engines.text import shorten

from .keys import make_key
from .known import KeyResolver
from .limits import MAX_KEYWORDS
from .records import Said, speaker_name, speaker_subjects
from .walk import Rollout, is_conversation
from .words import words_of

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

SHORT_ANSWER_WORDS = 4
"""Content words (resolved dates aside) of an answer short enough to be kept with the question
it answers ("Last Saturday.", "Running, mostly."): alone it says nothing; a longer answer says
what it is about itself."""


_ASIDE_RE = re.compile(r"\([^)]*\)|\[[^\]]*\]")


def _short_answer(said: Said) -> bool:
    return said.asked is not None and (
        len(content_words(_ASIDE_RE.sub(" ", said.text))) <= SHORT_ANSWER_WORDS
    )


def _said_text(said: Said) -> str:
    body = shorten(said.text, SAID_CHARS)
    if said.asked is None or not body or not _short_answer(said):
        return body
    return f'{body} (answering {said.asked[0]}\'s "{said.asked[1]}")'


def said_candidates(
    rollout: Rollout, resolver: KeyResolver, *, task_summarised: bool
) -> list[Candidate]:
    """What each person said on a day, as one entry: who, when, and the informative sentences
    of their messages, whole (a long day is split into parts). In a task run, the first request
    is left out when the lesson of its work summarises it, and otherwise kept only when the
    speaker says something of their own (``I``, ``we``)."""

    task_run = not is_conversation(rollout)
    groups: dict[tuple[str | None, date | None, bool], list[Said]] = {}
    for said in rollout.said[-MAX_SAID_FACTS:]:
        if task_run and said.from_task and (task_summarised or not said.owned):
            continue  # the problem the task reports: summarised in the lesson of its work
        # Apart only when the run has a person: what they say of themselves stays theirs.
        private = said.personal and bool(rollout.people)
        groups.setdefault((said.speaker, said.said_on, private), []).append(said)
    out: list[Candidate] = []
    taken: set[str] = set()
    for (speaker, day, personal), saids in groups.items():
        who = speaker_name(speaker)
        lead = f"{who} ({format_day(day)}): " if day else f"{who}: "
        speaker_words = words_of(speaker or "user")[:2]
        day_words = words_of(format_day(day)) if day else []
        base = make_key(*speaker_words, *day_words, *(["personal"] if personal else []))
        parts: list[list[Said]] = [[]]
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
                    subjects=speaker_subjects(speaker),
                )
            )
    return out
