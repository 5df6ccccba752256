"""Context rules: private key blocks, assignments and high-entropy strings after a secret-like word."""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Container, Iterable, Iterator

from .rules import (
    _ANNOTATION_RX,
    _ASSIGN_ANCHORS,
    _ASSIGN_TRIGGERS,
    _BLOCK_BODY_RX,
    _BLOCK_MAX,
    _BLOCK_PAIRS,
    _BT_BODY_RX,
    _CLI_TRIGGER,
    _DOTTED_IDENT_RX,
    _DQ_BODY_RX,
    _ENTROPY_CANDIDATE_RX,
    _ENTROPY_CONTEXT_RX,
    _ENTROPY_CONTEXT_WORD_RX,
    _ENTROPY_MAX_LEN,
    _ENTROPY_MIN_LEN,
    _ENTROPY_RUN_START_RX,
    _ENTROPY_WINDOW,
    _IDENT_NO_DIGIT_RX,
    _KEY_CHARS,
    _P_ASSIGNMENT,
    _P_ENTROPY,
    _P_PRIVATE_KEY,
    _SNAKE_IDENT_RX,
    _SQ_BODY_RX,
    _TYPE_STRING_RX,
    _TYPE_WORD_RX,
    _UNQUOTED_RX,
    _VALUE_OPEN_RX,
    _XML_VALUE_RX,
    _has_digit,
    _Hit,
    _is_placeholder,
    _is_secret_key,
    _kind_for_key,
    _normalize_key,
    _secretish,
)


def _scan_private_keys(text: str, hits: list[_Hit]) -> None:
    if "PRIVATE KEY" not in text and "PuTTY-User-Key-File" not in text:
        return
    for begin_rx, end_rx in _BLOCK_PAIRS:
        begins = list(begin_rx.finditer(text))
        if not begins:
            continue
        ends = list(end_rx.finditer(text))
        end_starts = [m.start() for m in ends]
        for begin in begins:
            i = bisect.bisect_left(end_starts, begin.end())
            if i < len(ends) and end_starts[i] - begin.end() <= _BLOCK_MAX:
                stop = ends[i].end()
            else:
                body = _BLOCK_BODY_RX.match(text, begin.end())
                stop = body.end() if body else begin.end()
            hits.append((begin.start(), stop, _P_PRIVATE_KEY, "private-key"))


def _at_value_end(text: str, pos: int) -> bool:
    """Only blanks, then a line end or a separator, follow `pos` (a whole YAML-ish value)."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    return pos >= n or text[pos] in "\r\n,}#" or text.startswith(("\\n", "\\r"), pos)


def _take_value(
    text: str, pos: int, op: str, key: str, *, quoted_only: bool = False
) -> tuple[int, int] | None:
    """Span of the literal assigned at `pos`, or None when it is not a secret literal.

    Quoted values are literals.  Bare values are literals in shell, env, YAML and INI files,
    but names and expressions in code, so calls, attribute access, variables and (when written
    code-style, ``key = value``) identifiers without digits are left alone.
    """
    opener = _VALUE_OPEN_RX.match(text, pos)
    if opener is None:  # pragma: no cover - the pattern always matches
        return None
    start = opener.end()
    quote = opener.group("q")
    if quote:
        if len(quote) > 1:  # escaped quote inside a JSON string: \"value\"
            end = text.find(quote, start, start + 16384)
            if end < 0 or "\n" in text[start:end]:
                return None
        else:
            body_rx = {'"': _DQ_BODY_RX, "'": _SQ_BODY_RX}.get(quote, _BT_BODY_RX)
            body = body_rx.match(text, start)
            end = body.end() if body else start
            if end >= len(text) or text[end] != quote:
                return None
        value = text[start:end]
        if _is_placeholder(value) or value.lower() == key.lower():
            return None
        if _TYPE_STRING_RX.fullmatch(value):
            return None  # a quoted annotation such as "contextvars.Token[Span | None]"
        return start, end
    if quoted_only or op in ("==", "!="):
        return None  # `token == expected`: comparisons of names, not literals
    bare = _UNQUOTED_RX.match(text, start)
    if bare is None:
        return None
    value = bare.group().rstrip(".,:")
    end = start + len(value)
    if not value or "(" in value or "[" in value or value[0] == "{":
        return None  # calls, subscripts, structures
    if _is_placeholder(value) or value.lower() in (key.lower(), _normalize_key(key)):
        return None
    if _DOTTED_IDENT_RX.fullmatch(value):
        return None  # attribute access such as settings.db_password
    if _SNAKE_IDENT_RX.fullmatch(value) and _is_secret_key(value):
        return None  # a variable holding the secret, not the secret
    if _IDENT_NO_DIGIT_RX.fullmatch(value) and (start > pos or "_" in value):
        return None  # `api_key = item_key`, `auth: CredentialParam`, `x=DEFAULT_TOKEN`
    if value.isdigit() and start > pos:
        return None  # `ERRORTOKEN = 60`: a numeric constant in code
    if key.lower().strip("-") in ("pwd", "oldpwd") and value.startswith(("/", "~")):
        return None  # the shell's working directory
    if op == ":":
        if "://" in value:
            return None
        if not _at_value_end(text, end) and not _secretish(value):
            return None  # prose such as "password: click the link below"
    return start, end


def _key_start(text: str, pos: int) -> int:
    low = max(0, pos - 64)
    while pos > low and text[pos - 1] in _KEY_CHARS:
        if pos >= 2 and text[pos - 2] == "\\" and text[pos - 1] in "ntr":
            break  # `\nAPI_TOKEN=`: the key starts after the escaped line break
        pos -= 1
    return pos


def _escape_safe(text: str, start: int, end: int) -> tuple[int, int]:
    """Move span edges off escape sequences, so that `\\n` is never split into `\\` + marker.

    Splitting one would leave a dangling backslash before the marker and turn a valid
    JSON-encoded string (tool-call arguments) into an invalid one.
    """
    if start > 0 and text[start - 1] == "\\":
        slashes = 1
        while start - slashes > 0 and text[start - slashes - 1] == "\\":
            slashes += 1
        if slashes % 2:  # text[start] is the escaped character
            step = 5 if text[start] == "u" else 1
            if start + step < end:
                start += step
    if end > start and text[end - 1] == "\\":
        slashes = 1
        while end - slashes > start and text[end - slashes - 1] == "\\":
            slashes += 1
        if slashes % 2:
            end -= 1
    return start, end


def _scan_assignments(
    text: str, lowered: str, hits: list[_Hit], present: Container[str] | None = None
) -> None:
    """``key = value`` assignments; ``present`` (the prefilter's answer) skips absent anchors."""
    seen: set[int] = set()
    for anchor, trigger in zip(_ASSIGN_ANCHORS, _ASSIGN_TRIGGERS, strict=True):
        if present is not None and anchor not in present:
            continue
        for match in trigger.finditer(lowered):
            key_start = _key_start(text, match.start())
            if key_start in seen:
                continue
            seen.add(key_start)
            if key_start > 0 and text[key_start - 1] in "/@":
                continue  # inside a URL; the URL rules handle it
            key = text[key_start : match.end("tail")]
            if not _is_secret_key(key):
                continue
            op = match.group("op")
            value_at = match.end()
            span: tuple[int, int] | None
            if op == ">":  # <password>value</password>
                if key_start == 0 or text[key_start - 1] != "<" or match.group("kq"):
                    continue
                xml = _XML_VALUE_RX.match(text, value_at)
                if xml is None or _is_placeholder(xml.group("secret")):
                    continue
                span = xml.span("secret")
            elif op == ":" and not match.group("kq") and _TYPE_WORD_RX.match(text, value_at):
                # `password: str = "..."`: skip the annotation, look at the default value
                annotated = _ANNOTATION_RX.match(text, value_at)
                span = (
                    _take_value(text, annotated.end(), "=", key, quoted_only=True)
                    if annotated
                    else None
                )
            else:
                span = _take_value(text, value_at, op, key)
            if span is not None:
                hits.append((span[0], span[1], _P_ASSIGNMENT, _kind_for_key(key)))
    if present is not None and "--" not in present:
        return
    for match in _CLI_TRIGGER.finditer(lowered):  # --password value
        key = match.group("key")
        value_at = match.end()
        if not _is_secret_key(key) or value_at >= len(text) or text[value_at] in "-\r\n":
            continue
        span = _take_value(text, value_at, "=", key)
        if span is not None:
            hits.append((span[0], span[1], _P_ASSIGNMENT, _kind_for_key(key)))


def _shannon_entropy(value: str) -> float:
    total = len(value)
    return -sum(c / total * math.log2(c / total) for c in Counter(value).values())


_HEX_RX = re.compile(r"[0-9a-fA-F]+")
# Named ids such as run-75fbbf7e265b47afbefe3966d4cba80e (a word, then a uuid or digest).
_PREFIXED_ID_RX = re.compile(
    r"[a-z]{2,16}[-_](?:[0-9a-f]{32}|[0-9a-f]{40}|[0-9a-f]{64}"
    r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
)
_UUID_RX = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_WORD_TOKEN_RX = re.compile(r"([A-Z]*)([a-z]*)|\d+|[^A-Za-z0-9]")


def _is_wordy(value: str) -> bool:
    """Made only of words (``cache``, ``Redactor``, ``HTTP``), numbers and separators.

    Random strings contain stray one- or two-letter runs (``aB3xQ``); identifiers, versions and
    dotted paths do not.  A linear tokenizer, since ``(?:\\d+|[a-z]{3,})+`` would backtrack
    exponentially.
    """
    for token in _WORD_TOKEN_RX.finditer(value):
        upper, lower = token.group(1), token.group(2)
        if upper is None or (not upper and not lower):
            continue  # digits or a separator
        if (
            len(lower) >= 3
            or (len(upper) >= 2 and not lower)
            or (len(upper) == 1 and len(lower) >= 2)
        ):
            continue
        return False
    return True


_SEPARATOR_RX = re.compile(r"[._-]+")
_SEGMENT_RX = re.compile(
    r"[a-z0-9]{1,3}|[a-z]{0,3}\d{1,5}"  # s3, v2, id, 2024, x509
    r"|[a-z]*[aeiouy][a-z]*\d{0,4}"  # lowercase words: mount, paths, bucket2
    r"|[A-Z][A-Z0-9]*"  # UPPER_SNAKE parts
    r"|[a-z]*(?:[A-Z][a-z]{2,}\d{0,4}[A-Z]{0,2})+"  # camelCase / PascalCase: Point2D
)


def _is_identifier(value: str) -> bool:
    """snake_case, kebab-case, dotted or camelCase names: ``self._s3_mount_paths``."""
    segments = [seg for seg in _SEPARATOR_RX.split(value) if seg]
    if len(segments) < 2 and not re.fullmatch(r"[a-z]+(?:[A-Z][a-z]{2,})+", value):
        return False
    return all(_SEGMENT_RX.fullmatch(seg) for seg in segments)


def _is_path(value: str) -> bool:
    """``/usr/lib/python3.11/site-packages``, ``./src/app.py`` (not base64 that starts with /)."""
    if not value.startswith(("/", "~", "./", "../")):
        return False
    parts = [part for part in value.split("/") if part not in ("", "~", ".", "..")]
    if not parts:
        return True
    wordy = sum(1 for p in parts if len(p) <= 3 or _is_wordy(p) or _is_identifier(p))
    return wordy == len(parts) or (len(parts) >= 2 and wordy >= 0.6 * len(parts))


def _looks_random(value: str) -> bool:
    """Opaque-credential heuristic: long, mixed, high Shannon entropy, not an identifier."""
    value = value.strip(".=-_~")
    if len(value) < 20 or value.startswith(("sha1-", "sha256-", "sha512-")) or _is_path(value):
        return False
    if _UUID_RX.fullmatch(value) or _PREFIXED_ID_RX.fullmatch(value):
        return False
    sample = value[:512]
    if _HEX_RX.fullmatch(value):
        if len(value) in (40, 64):  # git and sha256 digests
            return False
        return _has_digit(value) and _shannon_entropy(sample) >= 3.0
    if not _has_digit(value) or not any(c.isalpha() for c in value):
        return False
    if len(value) <= 256 and (_is_wordy(value) or _is_identifier(value)):
        return False  # identifiers, versions, dotted module paths
    return _shannon_entropy(sample) >= 3.5


def _entropy_candidates(
    text: str, lowered: str, context_starts: Iterable[int] | None = None
) -> Iterator[re.Match[str]]:
    """The matches of ``_ENTROPY_CANDIDATE_RX.finditer(text)`` that start within
    ``_ENTROPY_WINDOW`` characters after a secret-like word, the only ones that can pass the
    context check, without scanning the rest of the text.

    Candidates are maximal runs of the candidate characters (``=`` is not one of them), so a
    run that starts in a window is found by looking for a run start there."""
    if context_starts is None:
        # A context word that overlaps a found one (``secretoken``) starts before its end.
        spans = ((m.start(), m.end() - 1) for m in _ENTROPY_CONTEXT_WORD_RX.finditer(lowered))
    else:
        spans = ((start, start) for start in context_starts)
    windows: list[tuple[int, int]] = []
    for lo, last in spans:
        hi = last + _ENTROPY_WINDOW
        if windows and lo <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], hi))
        else:
            windows.append((lo, hi))
    n = len(text)
    pos = 0
    for lo, hi in windows:
        pos = max(pos, lo)
        while pos <= hi:
            run = _ENTROPY_RUN_START_RX.search(text, pos, min(n, hi + _ENTROPY_MIN_LEN))
            if run is None or run.start() > hi:
                break
            match = _ENTROPY_CANDIDATE_RX.match(text, run.start())
            if match is None:  # pragma: no cover - a run start always begins a candidate
                break
            yield match
            pos = match.end()


def _scan_entropy(
    text: str, lowered: str, hits: list[_Hit], context_starts: Iterable[int] | None = None
) -> None:
    """High-entropy strings shortly after a secret-like word; ``context_starts`` (sorted) are
    where such words start, when the prefilter knows."""
    for match in _entropy_candidates(text, lowered, context_starts):
        start, end = match.span()
        if end - start > _ENTROPY_MAX_LEN:
            continue  # data blobs, not credentials
        window = max(0, start - _ENTROPY_WINDOW)
        newline = lowered.rfind("\n", window, start)
        if newline >= 0:
            window = newline + 1
        if _ENTROPY_CONTEXT_RX.search(lowered, window, start) is None:
            continue
        while end > start and text[end - 1] == ".":
            end -= 1  # sentence full stop
        if end < len(text) and text[end] == "(":
            continue  # a function being called
        if _looks_random(text[start:end]):
            hits.append((start, end, _P_ENTROPY, "high-entropy-secret"))
