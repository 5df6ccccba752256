"""The redactor: walks text and JSON-like structures, resolves hits into typed markers."""

from __future__ import annotations

import bisect
import functools
import itertools
import re
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .context import (
    _escape_safe,
)
from .matcher import Matcher
from .rules import (
    _BATCH_SEPARATOR,
    _BUILTIN_RULES,
    _MARKER_PREFIX,
    _MARKER_RX,
    _MIN_SECRET_TEXT,
    _P_EXTRA,
    _SECRET_FILE_READ_RX,
    _Hit,
    _is_loose_key,
    _is_placeholder,
    _is_secret_key,
    _kind_for_key,
    _loose_value_ok,
    _normalize_key,
    _Rule,
    _rule,
)

REDACTION_MARKER = "[REDACTED:{kind}]"


class Redactor:
    """Finds secrets in text and replaces each with a typed marker.

    Built-in rules are compiled once per process; counters are guarded by a lock, so a single
    redactor can serve several threads or tasks.
    """

    def __init__(
        self,
        *,
        extra_patterns: Mapping[str, str] | None = None,
        allowlist: Iterable[str] = (),
        matcher: str | None = None,
    ) -> None:
        extras: list[_Rule] = []
        for kind, pattern in (extra_patterns or {}).items():
            if not isinstance(kind, str) or not kind.strip():
                raise ValueError(f"extra pattern kind must be a non-empty string, got {kind!r}")
            try:
                compiled = re.compile(pattern)
            except (re.error, TypeError) as exc:
                raise ValueError(
                    f"invalid extra pattern for kind {kind!r}: {pattern!r} ({exc})"
                ) from exc
            extras.append(_rule(kind, compiled, priority=_P_EXTRA, source="extra"))
        self._matcher = Matcher((*extras, *_BUILTIN_RULES), matcher=matcher)
        self._allowlist: tuple[str, ...] = tuple(sorted({s for s in allowlist if s}, key=len))
        self._allowset = frozenset(self._allowlist)
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    # ---- public API ----------------------------------------------------------------------

    def redact_text(self, text: str) -> str:
        """Return `text` with every detected secret replaced by ``[REDACTED:<kind>]``."""
        spans = self._spans(text)
        if not spans:
            return text
        performed: Counter[str] = Counter()
        out = _replace(text, spans, performed)
        self._count(performed)
        return out

    def redact_json(self, value: Any) -> Any:
        """Return a redacted copy of a JSON-like structure (dicts, lists, tuples, strings), or
        ``value`` itself when it holds nothing to redact (the caller owns what it passes).

        Every string is redacted, dict keys included.  A string stored under a secret-like key
        (``password``, ``api_key``, ``Authorization``, or the ``value`` of a
        ``{"name": "API_TOKEN", "value": ...}`` pair) is replaced as a whole even if it matches
        no known format, since the key is the only context it has.  Other values are returned
        as they are.
        """
        strings: list[str] = []
        keyed: dict[int, str] = {}
        outputs: list[int] = []
        self._collect(value, None, strings, keyed, outputs)
        self._secret_file_outputs(strings, outputs, keyed)
        replaced = self._redact_many([("" if i in keyed else t) for i, t in enumerate(strings)])
        self._redact_junctions(strings, [i for i in outputs if i not in keyed], replaced)
        replaced.update(keyed)
        if not replaced:
            return value  # nothing to redact: no copy (rebuilding costs a third of the call)
        final = [replaced.get(i, t) for i, t in enumerate(strings)]
        return self._rebuild(value, iter(final))

    def find(self, text: str) -> list[tuple[str, str]]:
        """The ``(kind, secret)`` pairs `redact_text` would replace, in text order."""
        return [(kind, text[start:end]) for start, end, kind in self._spans(text)]

    @property
    def counts(self) -> dict[str, int]:
        """Redactions performed so far, by kind."""
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        """Redactions performed so far."""
        with self._lock:
            return sum(self._counts.values())

    def add_counts(self, counts: Mapping[str, int]) -> None:
        """Count redactions made elsewhere (by an identical redactor in a child process)."""
        self._count(Counter(counts))

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    # ---- structures ------------------------------------------------------------------------
    #
    # A structure is redacted in one scan: its plain strings are joined with a separator that
    # no rule matches across (:data:`_BATCH_SEPARATOR`), scanned once, and the hits mapped back.
    # Scanning each string on its own costs ~100 rule calls per string, which dominated the
    # cost of recording a run segment.

    def _collect(
        self,
        value: Any,
        key: str | None,
        out: list[str],
        keyed: dict[int, str],
        outputs: list[int] | None = None,
    ) -> None:
        """Strings of ``value`` in walk order; those replaced whole for their key go in ``keyed``
        (by position) and are not scanned, so each secret is counted once. The positions of
        texts a secret may be split over (tool outputs, message texts: `_JUNCTION_KEYS`) go in
        ``outputs``."""
        if isinstance(value, str):
            if key in _JUNCTION_KEYS and outputs is not None:
                outputs.append(len(out))
            if key is not None:
                whole = self._redact_keyed(key, value)
                if whole is not None:
                    keyed[len(out)] = whole
            out.append(value)
        elif isinstance(value, Mapping):
            value_key = _name_value_key(value)
            for k, v in value.items():
                if isinstance(k, str):
                    out.append(k)
                sub_key = k if isinstance(k, str) else None
                if value_key is not None and k == "value":
                    sub_key = value_key
                self._collect(v, sub_key, out, keyed, outputs)
        elif isinstance(value, list | tuple):  # {"api_keys": ["...", "..."]}: items inherit it
            for v in value:
                self._collect(v, key, out, keyed, outputs)

    def _rebuild(self, value: Any, redacted: Iterator[str]) -> Any:
        """``value`` with its strings, in walk order, taken from ``redacted``."""
        if isinstance(value, str):
            return next(redacted)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for k, v in value.items():
                new_k = next(redacted) if isinstance(k, str) else k
                out[new_k] = self._rebuild(v, redacted)
            return out
        if isinstance(value, list):
            return [self._rebuild(v, redacted) for v in value]
        if isinstance(value, tuple):
            return tuple(self._rebuild(v, redacted) for v in value)
        return value

    def _redact_many(self, strings: list[str]) -> dict[int, str]:
        """Redact many strings with one scan; returns only the strings that changed."""
        if not strings:
            return {}
        joined = _BATCH_SEPARATOR.join(strings)
        spans = self._spans(joined)
        if not spans:
            return {}
        starts: list[int] = []
        pos = 0
        for text in strings:
            starts.append(pos)
            pos += len(text) + len(_BATCH_SEPARATOR)
        edits: dict[int, list[tuple[int, int, str]]] = {}
        for start, end, kind in spans:
            i = bisect.bisect_right(starts, start) - 1
            lo = starts[i]
            hi = lo + len(strings[i])
            if start >= hi:  # a hit inside the separator (cannot happen; be safe)
                continue
            edits.setdefault(i, []).append((start - lo, min(end, hi) - lo, kind))
        changed: dict[int, str] = {}
        performed: Counter[str] = Counter()
        for i, pieces_at in edits.items():
            changed[i] = _replace(strings[i], pieces_at, performed)
        self._count(performed)
        return changed

    def _secret_file_outputs(
        self, strings: list[str], outputs: list[int], keyed: dict[int, str]
    ) -> None:
        """The output after a call that prints a secret file (``cat config/master.key``) is
        that file's secret, whatever its shape: it is replaced whole (``keyed``)."""
        if not any("cat" in t for t in strings):
            return
        for i, text in enumerate(strings):
            if i in outputs or not _SECRET_FILE_READ_RX.search(text):
                continue
            after = [j for j in outputs if j > i and j not in keyed]
            if after and strings[after[0]].strip():
                self._count(Counter({"secret-file-content": 1}))
                keyed[after[0]] = REDACTION_MARKER.format(kind="secret-file-content")

    def _redact_junctions(
        self, strings: list[str], outputs: list[int], changed: dict[int, str]
    ) -> None:
        """A secret split over two texts in a row (``head -c 20 key`` then ``tail -c
        +21 key``) matches no rule in either half: the end of one output and the start of the
        next are scanned joined, and a hit across the join is redacted in both halves."""
        joins: list[tuple[int, int, str, int]] = []  # (first, second, joined text, cut)
        for i, j in zip(outputs, outputs[1:], strict=False):
            tail = strings[i].rstrip("\r\n")[-_JUNCTION_CHARS:]
            head = strings[j][:_JUNCTION_CHARS]
            if _junction_run(tail, head) < 12:
                continue  # a secret across the join: a run of 12+ characters over both sides
            joins.append((i, j, tail + head, len(tail)))
        if not joins:
            return
        # All joins in one scan, like the strings of a structure.
        joined = _BATCH_SEPARATOR.join(text for _, _, text, _ in joins)
        starts = list(itertools.accumulate((len(t) + len(_BATCH_SEPARATOR) for *_, t, _ in joins),
                                           initial=0))  # fmt: skip
        extra: dict[int, list[tuple[int, int, str]]] = {}
        for start, end, kind in self._spans(joined):
            n = bisect.bisect_right(starts, start) - 1
            i, j, _, cut = joins[n]
            lo = starts[n]
            start, end = start - lo, end - lo
            if start < cut < end:
                first = strings[i].rstrip("\r\n")
                extra.setdefault(i, []).append((len(first) - cut + start, len(first), kind))
                extra.setdefault(j, []).append((0, end - cut, kind))
        for i, spans in extra.items():
            text = strings[i]
            counted = self._spans(text)  # what `_redact_many` replaced and counted
            merged = _merge_spans([*counted, *spans])
            changed[i] = _replace(text, merged, Counter())
            with self._lock:  # one count per marker written, as everywhere
                self._counts.update(kind for _, _, kind in merged)
                self._counts.subtract(kind for _, _, kind in counted)
                for kind in [k for k, n in self._counts.items() if n <= 0]:
                    del self._counts[kind]

    def _redact_keyed(self, key: str, value: str) -> str | None:
        """Whole-value redaction of a string stored under a secret-like key (else None)."""
        role = _key_role(key)
        if not role:
            return None
        stripped = value.strip()
        if not stripped or stripped in self._allowset or _MARKER_RX.fullmatch(stripped):
            return None
        if role == "authorization":
            scheme, _, credential = stripped.partition(" ")
            credential = credential.strip()
            if not credential:  # a bare token, no scheme
                if _is_placeholder(scheme):
                    return None
                self._count(Counter({"authorization": 1}))
                return REDACTION_MARKER.format(kind="authorization")
            if " " in credential or _is_placeholder(credential):
                return None
            kind = {"bearer": "bearer-token", "basic": "basic-auth"}.get(
                scheme.lower(), "authorization"
            )
            self._count(Counter({kind: 1}))
            return f"{scheme} {REDACTION_MARKER.format(kind=kind)}"
        if role == "pin" and len(stripped) < 4:
            return None
        if role == "loose" and not _loose_value_ok(stripped):
            return None
        if len(stripped) < 3 or _is_placeholder(stripped):
            return None
        if any(c.isspace() for c in stripped):
            return None  # prose under a secret-ish key: redact what it contains instead
        found = self._spans(stripped)
        if len(found) == 1 and found[0][:2] == (0, len(stripped)):
            kind = found[0][2]  # a recognised format keeps its own kind
        else:
            kind = _kind_for_key(key)
        self._count(Counter({kind: 1}))
        return REDACTION_MARKER.format(kind=kind)

    # ---- scanning ---------------------------------------------------------------------------

    def _count(self, performed: Counter[str]) -> None:
        if performed:
            with self._lock:
                self._counts.update(performed)

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        if len(text) < _MIN_SECRET_TEXT:
            return []
        hits = self._matcher.scan(text)
        return self._resolve(text, hits) if hits else []

    def _resolve(self, text: str, hits: list[_Hit]) -> list[tuple[int, int, str]]:
        """Drop protected hits, merge overlapping ones; the best-priority hit names the kind."""
        protected = self._protected(text)
        if protected:
            starts = [s for s, _ in protected]

            def shielded(hit: _Hit) -> bool:
                i = bisect.bisect_right(starts, hit[0]) - 1
                return i >= 0 and protected[i][1] >= hit[1]

            hits = [h for h in hits if not shielded(h)]
        if self._allowset:
            hits = [h for h in hits if text[h[0] : h[1]] not in self._allowset]
        if not hits:
            return []
        hits.sort(key=lambda h: (h[0], -h[1]))
        spans: list[tuple[int, int, str]] = []
        cur_start, cur_end, best = hits[0][0], hits[0][1], hits[0]
        for hit in hits[1:]:
            if hit[0] < cur_end:
                cur_end = max(cur_end, hit[1])
                if (hit[2], hit[0] - hit[1]) < (best[2], best[0] - best[1]):
                    best = hit
                continue
            spans.append((*_escape_safe(text, cur_start, cur_end), best[3]))
            cur_start, cur_end, best = hit[0], hit[1], hit
        spans.append((*_escape_safe(text, cur_start, cur_end), best[3]))
        return spans

    def _protected(self, text: str) -> list[tuple[int, int]]:
        """Merged spans never redacted: allowlisted strings and markers already present."""
        spans: list[tuple[int, int]] = []
        for allowed in self._allowlist:
            pos = text.find(allowed)
            while pos >= 0:
                spans.append((pos, pos + len(allowed)))
                pos = text.find(allowed, pos + 1)
        if _MARKER_PREFIX in text:
            spans.extend(m.span() for m in _MARKER_RX.finditer(text))
        if not spans:
            return []
        spans.sort()
        merged = [spans[0]]
        for start, end in spans[1:]:
            if start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged


_JUNCTION_KEYS = frozenset({"output", "content", "text"})
"""Strings a run's texts are under: tool outputs, and the user's and the assistant's messages
(a token typed half in a message, half printed by a tool, is scanned joined)."""
_RUN_ENDS = frozenset(".,;:!?)]}\"'`")
_RUN_STARTS = frozenset("([{\"'`")


def _junction_run(tail: str, head: str) -> int:
    """How long the run of non-blank characters across the join of two texts is (0 when
    the first ends a sentence or a bracket, or the second opens one: no secret spans that)."""
    if not tail or not head or tail[-1].isspace() or head[0].isspace():
        return 0
    if tail[-1] in _RUN_ENDS or head[0] in _RUN_STARTS:
        return 0
    left = len(tail) - max(tail.rfind(" "), tail.rfind("\n"), tail.rfind("\t")) - 1
    cut = [i for i in (head.find(" "), head.find("\n"), head.find("\t")) if i >= 0]
    return left + (min(cut) if cut else len(head))


_JUNCTION_CHARS = 256
"""How much of two tool outputs in a row is scanned joined (a split secret is shorter)."""


@functools.lru_cache(maxsize=8192)
@functools.lru_cache(maxsize=4096)  # a run's JSON repeats a few keys; any key may come
def _key_role(key: str) -> str:
    """What a JSON key says of the string under it: ``authorization`` (a header), ``secret``,
    ``pin``, ``loose`` (a ``*_key`` name: a secret if it looks like one) or ``""``."""
    if _normalize_key(key) in ("authorization", "proxy_authorization"):
        return "authorization"
    if _is_secret_key(key):
        return "pin" if _kind_for_key(key) == "pin" else "secret"
    return "loose" if _is_loose_key(key) else ""


def _merge_spans(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Sorted, overlapping spans merged; a merged span keeps the kind of its first part."""
    merged: list[tuple[int, int, str]] = []
    for start, end, kind in sorted(spans):
        if merged and start <= merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(last[1], end), last[2])
        else:
            merged.append((start, end, kind))
    return merged


def _replace(text: str, spans: list[tuple[int, int, str]], performed: Counter[str]) -> str:
    """``text`` with each span (in order, not overlapping) replaced by its kind's marker."""
    pieces: list[str] = []
    last = 0
    for start, end, kind in spans:
        pieces.append(text[last:start])
        pieces.append(REDACTION_MARKER.format(kind=kind))
        performed[kind] += 1
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _name_value_key(mapping: Mapping[Any, Any]) -> str | None:
    """``{"name": "API_TOKEN", "value": "..."}`` (env lists, headers): the key naming `value`."""
    if "value" not in mapping:
        return None
    for field in ("name", "key", "header"):
        candidate = mapping.get(field)
        if isinstance(candidate, str) and (
            _is_secret_key(candidate) or _normalize_key(candidate) == "authorization"
        ):
            return candidate
    return None


def redact_bytes(raw: bytes, redactor: Redactor | None = None) -> bytes:
    """``raw`` with its secrets redacted; bytes that are not UTF-8 pass through unchanged."""
    text = raw.decode("utf-8", "surrogateescape")
    redacted = (redactor or default_redactor()).redact_text(text)
    return raw if redacted == text else redacted.encode("utf-8", "surrogateescape")


_DEFAULT: Redactor | None = None
_DEFAULT_LOCK = threading.Lock()


def default_redactor() -> Redactor:
    """The process-wide redactor with built-in rules only."""
    global _DEFAULT
    if _DEFAULT is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = Redactor()
    return _DEFAULT
