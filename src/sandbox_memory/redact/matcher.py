"""The matcher: runs the rules over a text and returns raw hits (code, not data).

Most rules can only match where a literal occurs (a vendor prefix such as ``ghp_``, an anchor
word such as ``pass``), and most text holds none of them. One pass of a multi-pattern literal
search (the *prefilter*) tells which of the rules' literals occur; only the rules whose literal
occurs run their regular expression. Three prefilters give the same answer:

* ``hyperscan``: Intel's Hyperscan (a dependency where it has wheels: Linux x86_64 and
  aarch64, macOS), one pass over the UTF-8 bytes, each literal reported once. The literals are
  ASCII and UTF-8 never uses an ASCII byte inside a multi-byte character, so a literal occurs
  in the bytes exactly when it occurs in the text, whatever the text holds;
* ``python``: one ``str.__contains__`` per distinct literal (always available).

The entropy rule needs a secret-like word at most 60 characters before a candidate, so it only
looks at the windows after such words instead of at the whole text. Whichever prefilter runs,
the hits are the same (``tests/test_redact_matcher.py`` holds them equal on random inputs).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence

from .context import (
    _CONFIG_GATES,
    _SET_GATES,
    _scan_assignments,
    _scan_config_sets,
    _scan_cookies,
    _scan_encoded,
    _scan_entropy,
    _scan_phrases,
    _scan_private_keys,
)
from .rules import (
    _ASCII_LOWER,
    _ASSIGN_ANCHORS,
    _BASE64_GATES,
    _BASE64_PREFIX_GATES,
    _DIGIT_CHARS,
    _ENTROPY_CONTEXT_WORDS,
    _ESCAPE_GATES,
    _HEX_GATES,
    _HEX_PREFIXES,
    _PHRASE_GATES,
    _TOKEN_CHARS,
    _Hit,
    _Rule,
)

__all__ = ["MATCHERS", "Matcher", "available_matchers"]

_LOG = logging.getLogger(__name__)

Prefilter = Callable[[str], tuple[set[str], "list[int] | None"]]
"""Given lowercased text: the subset of the prefilter's literals that occur in it, and the
start of every occurrence of an entropy context word (``None``: not known, find them)."""

MATCHERS = ("hyperscan", "python")
"""Prefilter names, fastest first; ``SANDBOX_MEMORY_REDACT_MATCHER`` picks one by name."""


def _python_prefilter(
    literals: Sequence[str], context_words: Sequence[str], patterns: Sequence[str]
) -> Prefilter:
    keys = {_pattern_key(i) for i in range(len(patterns))}  # such rules always run

    def present(lowered: str) -> tuple[set[str], list[int] | None]:
        return {literal for literal in literals if literal in lowered} | keys, None

    return present


_UNICODE_CLASS_RX = re.compile(r"\\[dDwWsSbB]|\[\^|(?<!\\)\.")
"""What matches a non-ASCII character in Python's ``re`` but its bytes one by one in
Hyperscan's byte mode: shorthand classes, negated classes, the dot."""


def _pattern_key(index: int) -> str:
    return f"\x00rx{index}"  # never a literal: literals hold no NUL


def _hyperscan_prefilter(
    literals: Sequence[str], context_words: Sequence[str], patterns: Sequence[str]
) -> Prefilter:
    import threading

    import hyperscan

    from . import database_cache

    def compiles(expression: bytes, flag: int) -> bool:
        try:
            hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK).compile(
                expressions=[expression], ids=[0], flags=[flag]
            )
        except Exception:  # noqa: BLE001 - Hyperscan lacks lookbehinds, named groups, ...
            return False
        return True

    words = list(context_words)
    expressions = [re.escape(w).encode() for w in (*literals, *words)]
    flags = [hyperscan.HS_FLAG_SINGLEMATCH] * len(literals) + [0] * len(words)
    # A rule without a literal runs only where Hyperscan finds its pattern, caseless (the text
    # scanned is lowercased) and on bytes: exact for patterns made of ASCII classes and
    # literals, since a non-ASCII character's bytes match none of them. Other patterns, and
    # those Hyperscan cannot compile, leave their rule running everywhere, as in Python.
    rx_flag = hyperscan.HS_FLAG_SINGLEMATCH | hyperscan.HS_FLAG_CASELESS
    candidates = [i for i, p in enumerate(patterns) if not _UNICODE_CLASS_RX.search(p)]
    key = database_cache.database_key(
        hyperscan, [expressions, flags, [patterns[i] for i in candidates], rx_flag]
    )
    cached = database_cache.load(hyperscan, key, hyperscan.HS_MODE_BLOCK)
    included = cached[1].get("patterns") if cached is not None else None
    if (
        cached is not None
        and isinstance(included, list)
        and all(isinstance(i, int) and i in candidates for i in included)
    ):
        database = cached[0]
    else:
        included = [i for i in candidates if compiles(patterns[i].encode(), rx_flag)]
        database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        database.compile(
            expressions=[*expressions, *(patterns[i].encode() for i in included)],
            ids=list(range(len(expressions) + len(included))),
            flags=[*flags, *([rx_flag] * len(included))],
        )
        database_cache.save(hyperscan, key, database, {"patterns": included})
    keys = [*literals, *([""] * len(words)), *(_pattern_key(i) for i in included)]
    always = {_pattern_key(i) for i in range(len(patterns)) if i not in included}
    first_word = len(literals)
    after_words = len(literals) + len(words)
    lengths = [len(w) for w in words]
    local = threading.local()  # a scratch space may not be shared by concurrent scans

    def present(lowered: str) -> tuple[set[str], list[int] | None]:
        scratch = getattr(local, "scratch", None)
        if scratch is None:
            scratch = local.scratch = hyperscan.Scratch(database)
        found = set(always)
        starts: list[int] = []

        def on_match(pattern_id: int, start: int, end: int, flags: int, context: object) -> None:
            if first_word <= pattern_id < after_words:
                starts.append(end - lengths[pattern_id - first_word])
            else:
                found.add(keys[pattern_id])

        database.scan(
            lowered.encode("utf-8", "surrogatepass"), match_event_handler=on_match, scratch=scratch
        )
        # Byte offsets are character offsets only in ASCII text.
        return found, (sorted(starts) if lowered.isascii() else None)

    return present


_FACTORIES: dict[str, Callable[[Sequence[str], Sequence[str], Sequence[str]], Prefilter]] = {
    "hyperscan": _hyperscan_prefilter,
    "python": _python_prefilter,
}


@functools.lru_cache(maxsize=16)
def _prefilter(
    name: str,
    literals: tuple[str, ...],
    context_words: tuple[str, ...],
    patterns: tuple[str, ...],
) -> Prefilter:
    """Compiled once per process and set of rules (a Hyperscan database takes ~10 ms)."""
    return _FACTORIES[name](literals, context_words, patterns)


def available_matchers() -> tuple[str, ...]:
    """The prefilters that can run here (their library imports), fastest first."""

    names = []
    for name in MATCHERS:
        try:
            if name == "hyperscan":
                import hyperscan

                hyperscan.Database  # noqa: B018 - a broken install lacks it
        except Exception:  # noqa: BLE001 - a missing or broken library means "not available"
            continue
        names.append(name)
    return tuple(names)


def _choose(name: str | None) -> str:
    wanted = name or os.environ.get("SANDBOX_MEMORY_REDACT_MATCHER") or None
    if wanted is not None:
        if wanted not in _FACTORIES:
            raise ValueError(
                f"matcher must be one of {', '.join(MATCHERS)}, got {wanted!r}"
                + ("" if name else " (from SANDBOX_MEMORY_REDACT_MATCHER)")
            )
        return wanted
    return available_matchers()[0]


class Matcher:
    """Finds raw hits of a fixed set of rules; one instance serves any number of threads."""

    def __init__(self, rules: Iterable[_Rule], *, matcher: str | None = None) -> None:
        self.rules: tuple[_Rule, ...] = tuple(rules)
        self.name = _choose(matcher)
        chosen_by_default = not (matcher or os.environ.get("SANDBOX_MEMORY_REDACT_MATCHER"))
        literals: dict[str, None] = {}
        by_literal: dict[str, list[int]] = {}
        for index, rule in enumerate(self.rules):
            for gate in rule.gate:
                literals.setdefault(gate, None)
                by_literal.setdefault(gate, []).append(index)
        ungated = [i for i, rule in enumerate(self.rules) if not rule.gate]
        for n, index in enumerate(ungated):
            by_literal[_pattern_key(n)] = [index]
        self._by_literal = {k: tuple(v) for k, v in by_literal.items()}
        patterns = tuple(self.rules[i].prefilter or self.rules[i].pattern for i in ungated)
        for word in (
            *_ASSIGN_ANCHORS,
            *_ENTROPY_CONTEXT_WORDS,
            *_PHRASE_GATES,
            *_BASE64_GATES,
            *_BASE64_PREFIX_GATES,
            *_HEX_GATES,
            *_HEX_PREFIXES,
            *_ESCAPE_GATES,
            "--",
            "cookie",
            " -b",
            *_CONFIG_GATES,
            *_SET_GATES,
        ):
            literals.setdefault(word, None)
        prefilter_args = (tuple(literals), _ENTROPY_CONTEXT_WORDS, patterns)
        try:
            self._present = _prefilter(self.name, *prefilter_args)
        except ImportError as exc:
            raise ValueError(f"matcher {self.name!r} is not installed ({exc})") from exc
        except Exception as exc:
            if not chosen_by_default:
                raise
            # Hyperscan imports but cannot build here: the fallback gives the same output.
            _LOG.warning(
                "redaction: Hyperscan cannot build the prefilter here (%s); using the "
                "pure-Python prefilter (same output, slower)",
                exc,
            )
            self.name = "python"
            self._present = _prefilter(self.name, *prefilter_args)

    def scan(self, text: str, *, decode: bool = True) -> list[_Hit]:
        """Raw hits in ``text``; with ``decode``, encoded runs are decoded and scanned too."""
        lowered = text.lower()
        if len(lowered) != len(text):  # e.g. "İ" lowercases to two code points
            lowered = text.translate(_ASCII_LOWER)
        present, context_starts = self._present(lowered)
        n = len(text)
        hits: list[_Hit] = []
        chosen: set[int] = set()
        for literal in present:
            chosen.update(self._by_literal.get(literal, ()))
        for index in sorted(chosen):  # in rule order, whatever the prefilter
            rule = self.rules[index]
            for match in rule.regex.finditer(lowered if rule.lowered else text):
                start, end = match.span(rule.group)
                if rule.has_head and match.start("head") >= 0:
                    start = match.start("head")
                if start < 0 or end <= start:
                    continue
                if rule.extend:
                    while end < n and text[end] in _TOKEN_CHARS:
                        end += 1
                if rule.extend_left_digits:
                    floor = max(0, start - 2)  # ids have 8 to 10 digits
                    while start > floor and text[start - 1] in _DIGIT_CHARS:
                        start -= 1
                if rule.validate is not None and not rule.validate(text[start:end]):
                    continue
                kind = rule.kind_of(match, text) if rule.kind_of is not None else rule.kind
                hits.append((start, end, rule.priority, kind))
        _scan_private_keys(text, hits)
        _scan_assignments(text, lowered, hits, present)
        if any(g in present for g in (*_CONFIG_GATES, *_SET_GATES)):
            _scan_config_sets(text, lowered, hits, present)
        if "cookie" in present or " -b" in present:
            _scan_cookies(text, lowered, hits)
        _scan_phrases(text, lowered, hits, present)
        if decode:
            _scan_encoded(text, hits, present, lambda inner: self.scan(inner, decode=False))
        if any(word in present for word in _ENTROPY_CONTEXT_WORDS):
            _scan_entropy(text, lowered, hits, context_starts)
        return hits
