"""What leaving sentences out of what people said saves, and what answers it loses.

A script, not a test. On the LoCoMo dev conversations, each turn's sentences are kept as the
offline engine keeps them (a preference, decision or procedure; else a fact that is not small
talk, a request or a remark to the listener), then cut by one rule more. For every question
whose answer the kept sentences of its evidence turns hold, it checks whether they still hold
it after the cut. Rules measured:

- ``only-reacts``: :func:`sandbox_memory.engines.conversation.only_reacts` (what the engine does);
- ``only-reacts-broad``: its first conditions alone (no first person, no one named, no number,
  no past event or plan), so "They're doing great" and "It's about loss" are left out too;
- ``repeats``: a sentence whose content words one earlier sentence of the same speaker holds;
- ``unnamed``: a sentence that names no one (the people talking aside), holds no number and no
  note in brackets (a shared photo's caption): what is left when only names, numbers and dates
  are kept exactly and the rest is summarised away.

    .venv/bin/python bench/condense_cut.py
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from quality import DEFAULT_DATA, contains, load_locomo, normalize  # noqa: E402

from sandbox_memory.engines import conversation as cv  # noqa: E402
from sandbox_memory.engines.kinds import statement_kind  # noqa: E402
from sandbox_memory.engines.offline.words import sentences  # noqa: E402

CATEGORY = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}

Cut = Callable[[str, str, frozenset[str], dict[str, list[set[str]]]], bool]


def _broad(sentence: str, names: frozenset[str]) -> bool:
    """The first conditions of ``only_reacts`` alone: tied to no one and no occasion."""

    body = cv._OPENER_RE.sub("", sentence.strip())
    if any(w in cv.FIRST_PERSON for w in cv._plain_words(body)) or re.search(r"\d|\[", body):
        return False
    named = [
        m.group(0)
        for m in re.finditer(r"(?<=\s)[A-Z][a-z]+", " " + body[1:])
        if m.group(0).lower() not in names
    ]
    return not named and not cv._PAST_RE.search(body)


def _unnamed(sentence: str, names: frozenset[str]) -> bool:
    body = cv._OPENER_RE.sub("", sentence.strip())
    if re.search(r"\d|\[", body):
        return False
    return not any(
        m.group(0).lower() not in names and m.group(0) != "I"
        for m in re.finditer(r"(?<=\s)[A-Z][a-z]*", " " + body[1:])
    )


def _repeats(text: str, speaker: str, seen: dict[str, list[set[str]]]) -> bool:
    words = set(cv.content_words(text))
    earlier = seen.setdefault(speaker, [])
    if words and any(words <= other for other in earlier):
        return True
    earlier.append(words)
    return False


RULES: dict[str, Cut] = {
    "only-reacts": lambda s, t, n, seen: cv.only_reacts(s, names=n),
    "only-reacts-broad": lambda s, t, n, seen: _broad(s, n),
    "repeats": lambda s, t, n, seen: False,  # decided on the kept text, below
    "unnamed": lambda s, t, n, seen: _unnamed(s, n),
}


def measure(data: Path, rule: str) -> None:
    kept_chars = cut_chars = 0
    held: dict[int, int] = {}
    lost: dict[int, int] = {}
    for conv in load_locomo(data):
        names = frozenset(w.lower() for n in conv.speakers for w in n.split())
        before: dict[str, str] = {}
        after: dict[str, str] = {}
        seen: dict[str, list[set[str]]] = {}
        for session in conv.sessions:
            for turn in session.turns:
                kept: list[str] = []
                left: list[str] = []
                for sentence in sentences(turn.text):
                    if sentence.endswith("?"):
                        continue
                    if statement_kind(sentence) is not None:
                        kept.append(sentence)
                        left.append(sentence)
                        continue
                    if not cv.states_a_fact(sentence, names=names) or cv.addresses_listener(
                        sentence
                    ):
                        continue
                    text = cv.tighten(cv.condense(sentence))
                    kept.append(text)
                    if rule == "repeats":
                        dropped = _repeats(text, turn.speaker, seen)
                    else:
                        dropped = RULES[rule](sentence, text, names, seen)
                    if not dropped:
                        left.append(text)
                before[turn.dia_id] = " ".join(kept)
                after[turn.dia_id] = " ".join(left)
                kept_chars += len(before[turn.dia_id])
                cut_chars += len(after[turn.dia_id])
        for question in conv.questions:
            category = int(question.get("category", 0))
            evidence = question.get("evidence", [])
            if contains(
                normalize(" ".join(before.get(e, "") for e in evidence)), question["answer"]
            ):
                held[category] = held.get(category, 0) + 1
                if not contains(
                    normalize(" ".join(after.get(e, "") for e in evidence)), question["answer"]
                ):
                    lost[category] = lost.get(category, 0) + 1
    saved = 1 - cut_chars / kept_chars if kept_chars else 0.0
    print(f"{rule}: leaves out {saved:.1%} of the kept sentences' characters ({kept_chars:,})")
    for category, name in CATEGORY.items():
        if held.get(category):
            share = lost.get(category, 0) / held[category]
            print(
                f"  {name}: {lost.get(category, 0)} of {held[category]} answers lost ({share:.0%})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="locomo-dev.zip")
    parser.add_argument("--rule", choices=sorted(RULES), action="append")
    args = parser.parse_args()
    for rule in args.rule or list(RULES):
        measure(args.data, rule)


if __name__ == "__main__":
    main()
