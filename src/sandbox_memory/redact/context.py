"""Context rules: private key blocks, assignments and high-entropy strings after a secret-like word."""

from __future__ import annotations

import base64
import binascii
import bisect
import math
import re
import urllib.parse
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator

from .rules import (
    _ANNOTATION_RX,
    _ASSIGN_ANCHORS,
    _ASSIGN_TRIGGERS,
    _BARE_RX,
    _BASE64_GATES,
    _BASE64_RUN_RX,
    _BLOCK_BODY_RX,
    _BLOCK_LINE_RX,
    _BLOCK_MAX,
    _BLOCK_PAIRS,
    _BLOCK_TAIL_RX,
    _BT_BODY_RX,
    _CALL_RX,
    _CJK_TAIL_RX,
    _CLI_TRIGGER,
    _CLOSERS,
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
    _LINE_BREAK_RX,
    _P_ASSIGNMENT,
    _P_ENCODED,
    _P_ENTROPY,
    _P_PRIVATE_KEY,
    _PERCENT_ESCAPE_RX,
    _PERCENT_RUN_CHARS,
    _PERCENT_RUN_RX,
    _PHRASE_DIRECT_TAIL_RX,
    _PHRASE_GATES,
    _PHRASE_LEAD_BEFORE_RX,
    _PHRASE_LINK_STARTS,
    _PHRASE_LINKED_TAIL_RX,
    _PHRASE_NOUN_AT_RX,
    _PHRASE_QUOTES,
    _QUOTES,
    _SNAKE_IDENT_RX,
    _SQ_BODY_RX,
    _TYPE_STRING_RX,
    _TYPE_WORD_RX,
    _VALUE_OPEN_RX,
    _VALUE_TRAILERS,
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
    """Whole private key blocks, BEGIN to END. A block cut in two (by a truncated output, or
    split over two tool outputs) is redacted in both parts: a BEGIN without its END up to the
    end of the body, an END without its BEGIN back to the start of the body."""
    if "PRIVATE KEY" not in text and "PuTTY-User-Key-File" not in text:
        return
    for begin_rx, end_rx in _BLOCK_PAIRS:
        begins = list(begin_rx.finditer(text))
        ends = list(end_rx.finditer(text))
        if not begins and not ends:
            continue
        end_starts = [m.start() for m in ends]
        paired: set[int] = set()
        for begin in begins:
            i = bisect.bisect_left(end_starts, begin.end())
            if (
                i < len(ends)
                and end_starts[i] - begin.end() <= _BLOCK_MAX
                and "\x00" not in text[begin.end() : end_starts[i]]  # not in another string
            ):
                stop = ends[i].end()
                paired.add(i)
            else:
                body = _BLOCK_BODY_RX.match(text, begin.end())
                stop = body.end() if body else begin.end()
            hits.append((begin.start(), stop, _P_PRIVATE_KEY, "private-key"))
        for i, end in enumerate(ends):
            if i not in paired:
                hits.append((_body_start_before(text, end.start()), end.end(), _P_PRIVATE_KEY,
                             "private-key"))  # fmt: skip


def _body_start_before(text: str, pos: int) -> int:
    """Where the key body that ends at ``pos`` (a footer without its header) starts: the
    base64 and ``Header: value`` lines right before it, line breaks escaped or not."""
    floor = max(0, pos - _BLOCK_MAX)
    breaks = [(m.start(), m.end()) for m in _LINE_BREAK_RX.finditer(text, floor, pos)]
    start = pos
    line_end = pos
    for brk_start, brk_end in reversed(breaks):
        line = text[brk_end:line_end].strip()
        if line:
            if not _BLOCK_LINE_RX.fullmatch(line):
                tail = _BLOCK_TAIL_RX.search(text, brk_end, line_end)  # `{"cmd": "MIIE...`
                return tail.start() if tail else start
            start = brk_end
        if text[brk_start] == "\x00":
            return start  # the start of this string in a batch
        line_end = brk_start
    line = text[floor:line_end].strip()
    if line and _BLOCK_LINE_RX.fullmatch(line):
        return floor
    tail = _BLOCK_TAIL_RX.search(text, floor, line_end) if line else None
    return tail.start() if tail else start


def _at_value_end(text: str, pos: int) -> bool:
    """Only blanks, then a line end or a separator, follow `pos` (a whole YAML-ish value)."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    return pos >= n or text[pos] in "\r\n,}#" or text.startswith(("\\n", "\\r"), pos)


def _take_value(
    text: str, pos: int, op: str, key: str, *, quoted_only: bool = False, url: bool = False
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
    end = _bare_value_end(text, start, url=url)
    value = text[start:end]
    if not value or value[0] in "{[" or _is_code_call(value):
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


def _bare_value_end(text: str, start: int, *, url: bool = False) -> int:
    """Where an unquoted value that starts at ``start`` really ends.

    Whitespace (also JSON-escaped: ``\\n``) ends it, and so does a quote that closes an
    enclosing string (one followed by a blank, a closing bracket, a comma or the end). Other
    characters, ``& ; ) < > \\ ] }``, quotes inside and backticks included, are part of it:
    ``DB_PASSWORD=Xk9vLm2p&Qz7tRw4nB`` is one value. In a URL query ``&`` and ``#`` end it.
    A sentence's full stop and a closing bracket without its opener are not part of it.
    """
    n = len(text)
    limit = min(n, start + 4096)
    pos = start
    while pos < limit:
        bare = _BARE_RX.match(text, pos, limit)
        if bare is not None:
            chunk_end = bare.end()
            if url:
                cut = min(
                    (i for i in (text.find("&", pos, chunk_end), text.find("#", pos, chunk_end))
                     if i >= 0),
                    default=-1,
                )  # fmt: skip
                if cut >= 0:
                    pos = cut
                    break
            if "</" in text[pos:chunk_end]:
                pos = text.index("</", pos, chunk_end)
                break
            pos = chunk_end
            continue
        c = text[pos]
        if c.isspace():
            break
        width = 1
        if c == "\\":
            nxt = text[pos + 1] if pos + 1 < n else ""
            if nxt in "nrt" or not nxt:
                break  # an escaped line break or tab: the end of a JSON-encoded line
            if nxt in _QUOTES:
                width = 2  # an escaped quote: treated like the quote
            elif nxt == "\\":
                width = 2
        if c in _QUOTES or width == 2 and text[pos + 1] in _QUOTES:
            after = text[pos + width] if pos + width < n else ""
            if not after or after.isspace() or after in ",;)]}>\\" or after in _QUOTES:
                break  # the quote closes the string the value is in
        pos += width
    end = pos
    while end > start:
        last = text[end - 1]
        if last in _VALUE_TRAILERS:
            end -= 1
            continue
        opener = _CLOSERS.get(last)
        if opener is not None and text.count(opener, start, end) < text.count(last, start, end):
            end -= 1
            continue
        break
    return end


def _is_code_call(value: str) -> bool:
    """``get_password()``, ``os.environ['X']``, ``getpass.getpass("Password:``: a call or a
    subscript in code, not a literal (``Hy6tGb4n(Vc3xZa8q`` is a literal)."""
    call = _CALL_RX.match(value)
    if call is None:
        return False
    if value[-1] in ")]" and value.count(value[-1]) <= value.count(
        "(" if value[-1] == ")" else "["
    ):
        return True
    return all(_is_wordy(part) or _is_identifier(part) for part in call.group("callee").split("."))


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
                url = key_start > 0 and text[key_start - 1] in "?&"
                span = _take_value(text, value_at, op, key, url=url)
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


def _phrase_value_ok(value: str) -> bool:
    """A word after "the password is" that is a credential, not prose ("is required")."""
    if len(value) < 6 or _is_placeholder(value) or "://" in value:
        return False
    if value.startswith(("/", "~", "./", "[")) or "@" in value and "." in value.split("@")[-1]:
        return False  # a path, a marker, an e-mail address
    if _is_code_call(value) or _DOTTED_IDENT_RX.fullmatch(value):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    if not has_alpha:
        return has_digit and len(value) >= 8 and not has_symbol  # a long PIN
    return has_digit or has_symbol and not value.replace("-", "").replace("_", "").isalpha()


def _scan_phrases(text: str, lowered: str, hits: list[_Hit], present: Container[str]) -> None:
    """Credentials told in words: "the staging password is hunter2xyz!Q9", "use the password
    Tr0ub4dor&3x", "das Passwort lautet ...", "le mot de passe est ...", "数据库密码是...".

    Only where a noun of :data:`_PHRASE_NOUNS` occurs (found with ``str.find`` for the gates
    the prefilter saw), so the cost follows the nouns, not the text."""
    seen: set[int] = set()
    n = len(text)
    for gate in _PHRASE_GATES:
        if gate not in present:
            continue
        pos = lowered.find(gate)
        while pos >= 0:
            _phrase_at(text, lowered, pos, hits, seen, n)
            pos = lowered.find(gate, pos + 1)


def _phrase_at(text: str, lowered: str, pos: int, hits: list[_Hit], seen: set[int], n: int) -> None:
    ascii_noun = lowered[pos].isascii()
    if ascii_noun and pos > 0 and (lowered[pos - 1].isalnum() or lowered[pos - 1] == "_"):
        return  # inside a word: "bypass" is not a noun
    noun = _PHRASE_NOUN_AT_RX.match(lowered, pos)
    if noun is None:
        return
    if ascii_noun:
        if noun.end() >= n or lowered[noun.end()] not in " \t":
            return  # "tokenizer", "token_count", "password=": not told in words
        ahead = lowered[noun.end() : noun.end() + 160].split(None, 6)[:6]
        if any(word.rstrip(":") in _PHRASE_LINK_STARTS for word in ahead):
            linked = _PHRASE_LINKED_TAIL_RX.match(lowered, noun.end())
            _phrase_value(text, linked, hits, seen, n)
        word = ahead[0].strip(_PHRASE_QUOTES).rstrip(".,:;") if ahead else ""
        if len(word) < 6 or word.isalpha():
            return  # what follows the noun is no credential: "token handler", "password."
        direct = _PHRASE_DIRECT_TAIL_RX.match(lowered, noun.end())
        if direct is not None and direct.end() not in seen:
            # "use the password <value>": the lead words before the noun are looked at last
            end = _bare_value_end(text, direct.end())
            if _phrase_value_ok(text[direct.end() : end]) and (
                _PHRASE_LEAD_BEFORE_RX.search(lowered, max(0, pos - 60), pos) is not None
            ):
                _phrase_value(text, direct, hits, seen, n)
    else:
        _phrase_value(text, _CJK_TAIL_RX.match(lowered, noun.end()), hits, seen, n)


def _phrase_value(
    text: str, tail: re.Match[str] | None, hits: list[_Hit], seen: set[int], n: int
) -> None:
    if tail is None:
        return
    start = tail.end()
    if start in seen or start >= n:
        return
    seen.add(start)
    end = _bare_value_end(text, start)
    if end > start and _phrase_value_ok(text[start:end]):
        hits.append((start, end, _P_ASSIGNMENT, "password"))


def _scan_encoded(
    text: str, hits: list[_Hit], present: Container[str], rescan: Callable[[str], bool]
) -> None:
    """Secrets inside percent-encoded text (``password%3DXk9...``) and base64 (``echo ... |
    base64 -d``): each encoded run is decoded and scanned; a run hiding a secret is redacted
    whole. ``rescan`` tells whether decoded text holds a secret."""
    done = 0
    for escape in _PERCENT_ESCAPE_RX.finditer(text):
        if escape.start() < done:
            continue  # inside the run just looked at
        left = escape.start()
        floor = max(done, left - 8192)
        while left > floor and text[left - 1] in _PERCENT_RUN_CHARS:
            left -= 1
        match = _PERCENT_RUN_RX.match(text, left)
        if match is None or match.end() <= escape.start():
            match = _PERCENT_RUN_RX.match(text, escape.start())
        if match is None:
            continue
        done = match.end()
        run = match.group()
        decoded = urllib.parse.unquote_plus(run)
        if decoded != run and rescan(decoded):
            hits.append((match.start(), match.end(), _P_ENCODED, "url-encoded-secret"))
    if any(g in present for g in _BASE64_GATES):
        for match in _BASE64_RUN_RX.finditer(text):
            run = match.group()
            try:
                raw = base64.b64decode(
                    run.replace("-", "+").replace("_", "/") + "=" * (-len(run) % 4), validate=True
                )
                decoded = raw.decode("utf-8")
            except (binascii.Error, ValueError):
                continue
            if decoded.isprintable() or all(c.isprintable() or c in "\n\r\t" for c in decoded):
                if rescan(decoded):
                    hits.append((match.start(), match.end(), _P_ENCODED, "base64-secret"))
