"""How a statement becomes an entry: preferences, decisions, corrections and procedures a person
stated, one entry per kind and message.
"""

from __future__ import annotations

from sandbox_memory.engines.base import Candidate, EntryKind
from sandbox_memory.engines.conversation import MIN_FACT_WORDS, content_words

from .keys import make_key
from .known import KeyResolver
from .limits import FAILURE_SUBJECT_WORDS, KEY_SUBJECT_WORDS, LESSON_CHARS, MAX_KEYWORDS
from .procedures import stated_procedure
from .records import speaker_subjects
from .walk import Rollout
from .words import DECISION_TRIGGER_WORDS, PREF_TRIGGER_WORDS, clip_content, subject_words


def statement_candidates(rollout: Rollout, resolver: KeyResolver) -> list[Candidate]:
    """Preferences, decisions and corrections the user stated; one that names nothing a later
    run could act on ("I love it!", "Never give up!", "No, that's wrong.") is left out."""

    out: list[Candidate] = []
    for statement in rollout.statements:
        if statement.kind == "preference":
            kind: EntryKind = "preference"
            drop = PREF_TRIGGER_WORDS
            lead = f"{statement.speaker}'s preference" if statement.speaker else "User preference"
            minimum = 1
        elif statement.kind == "decision":
            kind = "decision"
            drop = DECISION_TRIGGER_WORDS
            lead = f"Decision stated by {statement.speaker or 'the user'}"
            minimum = 1
        elif statement.kind == "procedure":
            out.append(stated_procedure(statement, resolver))
            continue
        else:
            kind = "decision"
            drop = PREF_TRIGGER_WORDS
            lead = f"Correction by {statement.speaker or 'the user'}"
            minimum = MIN_FACT_WORDS
        named = set(content_words(statement.text))
        subject = [w for w in subject_words(statement.text, drop) if w in named][:KEY_SUBJECT_WORDS]
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
                content=clip_content(content),
                kind=kind,
                sources=[statement.item_id],
                keywords=subject[:MAX_KEYWORDS],
                personal=statement.personal and statement.kind == "preference",
                subjects=speaker_subjects(statement.speaker),
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
