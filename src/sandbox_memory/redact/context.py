"""Context rules: private key blocks, assignments and high-entropy strings after a secret-like word."""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import math
import re
import urllib.parse
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator

from .rules import (
    _ANNOTATION_RX,
    _ASCII_ESCAPE_RX,
    _ASSIGN_ANCHORS,
    _ASSIGN_TRIGGERS,
    _BARE_RX,
    _BASE64_GATES,
    _BASE64_PREFIX_GATES,
    _BASE64_PREFIXES,
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
    _ESCAPE_GATES,
    _HEX_GATES,
    _HEX_PREFIXES,
    _HEX_RUN_RX,
    _IDENT_NO_DIGIT_RX,
    _KEY_CHARS,
    _LINE_BREAK_RX,
    _OWN_NOUNS,
    _P_ASSIGNMENT,
    _P_ENCODED,
    _P_ENTROPY,
    _P_PRIVATE_KEY,
    _PASSWORD_NOUNS,
    _PERCENT_ESCAPE_RX,
    _PERCENT_RUN_CHARS,
    _PERCENT_RUN_RX,
    _PHRASE_CLAUSE_WORDS,
    _PHRASE_COLON_RX,
    _PHRASE_DIRECT_TAIL_RX,
    _PHRASE_GATES,
    _PHRASE_LEAD_BEFORE_RX,
    _PHRASE_LINK_AT_RX,
    _PHRASE_LINK_STARTS,
    _PHRASE_NOUN_AT_RX,
    _PHRASE_OPEN_QUOTES,
    _PHRASE_QUOTES,
    _PHRASE_SET_LEAD_RX,
    _PHRASE_STOP_SUFFIXES,
    _PHRASE_STOPWORDS,
    _PHRASE_WORD_RX,
    _PIN_NOUNS,
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
    _is_loose_key,
    _is_placeholder,
    _is_secret_key,
    _kind_for_key,
    _loose_value_ok,
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
    if pos >= n or text[pos] in "\r\n,}#\"'":
        return True  # a line end, a separator, or the quote that closes the enclosing string
    return text.startswith(("\\n", "\\r", '\\"', "\\'"), pos)


def _take_value(
    text: str,
    pos: int,
    op: str,
    key: str,
    *,
    quoted_only: bool = False,
    url: bool = False,
    digits: bool = False,
    words: bool = False,
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
        if quote == "`" and (value != value.strip() or "(" in value):
            return None  # a code span in Markdown (`passwd=` and `auth=`), not a value
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
    if _DOTTED_IDENT_RX.fullmatch(value) or _CMDLET_RX.fullmatch(value):
        return None  # attribute access such as settings.db_password, a PowerShell command
    if _SNAKE_IDENT_RX.fullmatch(value) and _is_secret_key(value):
        return None  # a variable holding the secret, not the secret
    if _IDENT_NO_DIGIT_RX.fullmatch(value) and (start > pos or "_" in value):
        if not (words and op == ":" and _stated_word(text, value, end)):
            return None  # `api_key = item_key`, `auth: CredentialParam`, `x=DEFAULT_TOKEN`
    if value.isdigit() and start > pos and not digits:
        return None  # `ERRORTOKEN = 60`: a numeric constant in code
    if key.lower().strip("-") in ("pwd", "oldpwd") and value.startswith(("/", "~")):
        return None  # the shell's working directory
    if op == ":":
        if "://" in value:
            return None
        if not _at_value_end(text, end) and not _secretish(value):
            return None  # prose such as "password: click the link below"
    return start, end


_YAML_BLOCK_RX = re.compile(
    r"[ \t]*[|>][-+]?[0-9]?[ \t]*(?:\r?\n|\\n)[ \t]+(?P<value>[^\s\\](?:[^\r\n\\]|\\(?![nr]))*)"
)
"""A YAML block scalar: ``password: |`` then the value, indented, on the next line."""
_CMDLET_RX = re.compile(r"[A-Z][a-z]+-[A-Z][A-Za-z]+")
"""A PowerShell command (``ConvertTo-SecureString``): code, not a value."""
_SET_VAR_RX = re.compile(
    r"set(?:(?<![\w-]set)|(?<=\\[ntr]set))(?:env)?[ \t]+(?:-[a-zA-Z]+[ \t]+)*(?P<key>[A-Za-z_][A-Za-z0-9_]{1,80})[ \t]+(?=[^\s=-])"
)
"""fish and csh: ``set -x DB_PASSWORD value``, ``setenv DB_PASSWORD value``."""
_STATED_KEY_RX = re.compile(r"password|passwd|passphrase|passcode|pwd|contrase|passwort")
"""Names under which a plain word is still the password (``password: bluebird``); a bare
``pass:`` in prose is not one of them."""


def _stated_word(text: str, value: str, end: int) -> bool:
    """``password: bluebird`` (YAML, prose): a lowercase word that ends its line and is no
    word about passwords nor a name in code (``password: value,``) is the password."""
    return (
        len(value) >= 4
        and value.isalpha()
        and value.islower()
        and _at_value_end(text, end)
        and value not in _PHRASE_STOPWORDS
        and not (len(value) > 5 and value.endswith(_PHRASE_STOP_SUFFIXES))
    )


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
    return all(
        _is_wordy(part) or _is_identifier(part) or _SNAKE_IDENT_RX.fullmatch(part) is not None
        for part in call.group("callee").split(".")
    )


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


_NAME_VALUE_RX = re.compile(
    r"name(?<![a-z0-9_]name)\\{0,3}[\"']?[ \t]*[:=][ \t]*\\{0,3}[\"']?(?P<key>[a-z0-9_.-]{2,64})"
    r"\\{0,3}[\"']?[ \t]*(?:,|\r?\n|\\n)[ \t-]*\\{0,3}[\"']?value\\{0,3}[\"']?[ \t]*(?P<op>[:=])"
)
"""A secret given as a name and a value (Kubernetes and Compose ``env``, ECS and CloudFormation
``{"name": "DB_PASSWORD", "value": "..."}``, ``- name: X`` then ``value: ...``): the name is
judged by the same key list as an assignment."""


def _scan_name_value_pairs(text: str, lowered: str, hits: list[_Hit]) -> None:
    for match in _NAME_VALUE_RX.finditer(lowered):
        key = text[match.start("key") : match.end("key")]
        if not _is_secret_key(key):
            continue
        kind = _kind_for_key(key)
        span = _take_value(text, match.end(), match.group("op"), key, digits=True)
        if span is not None and _value_fits(text[span[0] : span[1]], kind, False):
            hits.append((span[0], span[1], _P_ASSIGNMENT, kind))


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
            if text.startswith("-D", key_start):
                key_start += 2  # java -Dapp.pin=...: a system property
            key = text[key_start : match.end("tail")]
            loose = False
            if not _is_secret_key(key):
                if not _is_loose_key(key):
                    continue
                loose = True
            kind = _kind_for_key(key)
            op = match.group("op")
            value_at = match.end()
            span: tuple[int, int] | None
            if op == "," or op[0] in "vcd":
                # a quoted name, then its quoted value: `define('DB_PASSWORD', '...')`,
                # `<add key="ClearTextPassword" value="..."/>`
                kq = match.group("kq")
                if not kq or key_start == 0 or text[key_start - 1] != kq[-1]:
                    continue
                head = key_start - len(kq)
                pair = _PAIR_HEAD_RX.search(lowered, max(0, head - 16), head)
                if pair is None or (pair.group("call") is not None) != (op == ","):
                    continue
                span = _take_value(text, value_at, "=", key, quoted_only=True)
                if span is not None and op == "," and not _CALL_END_RX.match(text, span[1] + 1):
                    continue  # `("password", "secret", "token")`: words, not a name and value
                if span is not None and text[span[0] : span[1]].lower() in key.lower():
                    continue  # `_vendor("heroku-api-key", "heroku")`: a part of the name
            elif op == ">":  # <password>value</password>
                if key_start == 0 or text[key_start - 1] != "<" or match.group("kq"):
                    continue
                span = _xml_value(text, value_at, key)
                if span is None:
                    continue
            elif op == ":" and not match.group("kq") and _TYPE_WORD_RX.match(text, value_at):
                # `password: str = "..."`: skip the annotation, look at the default value
                annotated = _ANNOTATION_RX.match(text, value_at)
                span = (
                    _take_value(text, annotated.end(), "=", key, quoted_only=True)
                    if annotated
                    else None
                )
            elif op == ":" and (block := _YAML_BLOCK_RX.match(text, value_at)) is not None:
                # `password: |` or `>-`, the value on the next, indented line
                span = block.span("value")
                if _is_placeholder(block.group("value")):
                    span = None
            else:
                url = key_start > 0 and text[key_start - 1] in "?&"
                span = _take_value(
                    text, value_at, op, key, url=url,
                    digits=kind in _NUMERIC_KINDS or match.group("kq") is not None,
                    words=kind == "pin" or _STATED_KEY_RX.search(_normalize_key(key)) is not None,
                )  # fmt: skip
            if span is not None and _value_fits(text[span[0] : span[1]], kind, loose):
                hits.append((span[0], span[1], _P_ASSIGNMENT, kind))
    if "value" in lowered and "name" in lowered:
        _scan_name_value_pairs(text, lowered, hits)
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


_PAIR_HEAD_RX = re.compile(r"(?P<call>[a-z0-9_\]>]\()[ \t]*\Z|(?<![a-z0-9_-])(?:key|name|id|"
                           r"property|setting|param|field|var)[ \t]*=[ \t]*\\?\Z")  # fmt: skip
"""Before a quoted name that a value follows: a call (``define(``, ``setenv(``) or an
attribute (``<add key=``, ``name=``); a list of words (``("token", "secret", ...)``) is none."""
_CALL_END_RX = re.compile(r"[ \t]*(?:\)|,[ \t]*(?![\s\"']|[rbfu]{1,2}[\"']))")
"""After the value of a call pair: the call ends, or an argument that is no string follows."""
_CONFIG_SET_RX = re.compile(
    r"config(?:(?::set|(?:[ \t]+(?:set|--global|--local|--system|--user|--project|-g|"
    r"--location[ \t=]+\S+))+)[ \t]+(?P<key>[A-Za-z0-9_.:/@-]{2,160})"
    r"|[ \t]+(?P<dotted>[A-Za-z0-9_-]{0,80}[.:/][A-Za-z0-9_.:/@-]{1,160}))[ \t]+(?=[^\s-])"
)
"""``npm config set //registry/:_authToken X``, ``yarn config set npmAuthToken X``,
``git config --global user.password X``: the name is the last part of a dotted or ``:`` path."""


@functools.lru_cache(maxsize=4096)
def _config_key_may_hold_secret(key: str) -> bool:
    names = (key, re.split(r"[:/.]", key)[-1])
    return any(name and _is_secret_key(name) for name in names) or _is_loose_key(key)


def _pair_key_ok(key: str, value: str) -> str | None:
    """The kind of a value stored under ``key``, or None when it is no secret there."""
    for name in dict.fromkeys((key, re.split(r"[:/.]", key)[-1])):
        if name and _is_secret_key(name):
            kind = _kind_for_key(name)
            return kind if _value_fits(value, kind, False) else None
    if _is_loose_key(key) and _loose_value_ok(value):
        return _kind_for_key(key)
    return None


_CONFIG_GATES = (
    "config set", "config:set", "config --", "config -g", "git config", "pip config",
    "npm config", "yarn config", "pnpm config", "poetry config", "conda config",
)  # fmt: skip
"""Literals one of which a ``config`` command holds (the prefilter looks for them)."""
_SET_GATES = ("set -", "setenv ")


def _scan_config_sets(
    text: str, lowered: str, hits: list[_Hit], present: Container[str] | None = None
) -> None:
    """``config set <name> <value>`` commands (npm, yarn, git, pip, poetry); shell ``set``."""
    if present is None or any(g in present for g in _SET_GATES):
        _scan_shell_sets(text, lowered, hits)
    if present is None or any(g in present for g in _CONFIG_GATES):
        _scan_config_commands(text, lowered, hits)


def _scan_shell_sets(text: str, lowered: str, hits: list[_Hit]) -> None:
    for match in _SET_VAR_RX.finditer(lowered):
        key = text[match.start("key") : match.end("key")]
        if not _is_secret_key(key):
            continue
        span = _take_value(text, match.end(), "=", key)
        if span is not None and _phrase_value_ok(text[span[0] : span[1]], False, False, True):
            hits.append((span[0], span[1], _P_ASSIGNMENT, _kind_for_key(key)))


def _scan_config_commands(text: str, lowered: str, hits: list[_Hit]) -> None:
    for match in _CONFIG_SET_RX.finditer(lowered):
        group = "key" if match.start("key") >= 0 else "dotted"
        key = text[match.start(group) : match.end(group)]
        if not _config_key_may_hold_secret(key):
            continue
        span = _take_value(text, match.end(), "=", key)
        if span is None:
            continue
        kind = _pair_key_ok(key, text[span[0] : span[1]])
        if kind is not None:
            hits.append((span[0], span[1], _P_ASSIGNMENT, kind))


_COOKIE_HEAD_RX = re.compile(
    r"(?:set-)?cookie2?[ \t]*:[ \t]*|(?:--cookie|-b)(?:[ \t]*=|[ \t]+)[\"']?"
)
_COOKIE_PAIR_RX = re.compile(
    r"[ \t]*(?P<name>[^=;,\s\"'\\]{1,128})=(?P<value>[^;\s\"'\\,]{0,4096})"
)
_COOKIE_NAME_RX = re.compile(
    r"sess|sid|auth|token|jwt|remember|login|ident|secret|csrf|xsrf|key|pass|cred|sso|saml"
)
_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "samesite", "priority", "version", "comment"}
)


def _scan_cookies(text: str, lowered: str, hits: list[_Hit]) -> None:
    """``Cookie:`` and ``Set-Cookie:`` headers, ``curl -b``: a value whose name speaks of a
    session or a credential, or that looks like one, is redacted; attributes are kept."""
    for head in _COOKIE_HEAD_RX.finditer(lowered):
        if head.group()[0] == "-" and head.start() > 0 and text[head.start() - 1] not in " \t":
            continue
        at = head.end()
        for _ in range(64):
            pair = _COOKIE_PAIR_RX.match(text, at)
            if pair is None:
                break
            name, value = pair.group("name").lower(), pair.group("value")
            start, end = pair.span("value")
            if (
                value
                and name not in _COOKIE_ATTRIBUTES
                and not _is_placeholder(value)
                and (_COOKIE_NAME_RX.search(name) or (len(value) >= 16 and _has_digit(value)))
            ):
                hits.append((start, end, _P_ASSIGNMENT, "session-cookie"))
            at = pair.end()
            if at >= len(text) or text[at] != ";":
                break
            at += 1


_NUMERIC_KINDS = frozenset({"pin", "password"})
"""Kinds whose value may be a bare number in code (``DB_PASSWORD = 98127634551``); under any
secret name written as a JSON key (``{"db_password": 98127634551}``) a number is a value too."""

_NUMERIC_MIN_DIGITS = 4
"""Fewest digits of a number taken as a secret (``"pin": 12`` is a count or a GPIO pin)."""


def _value_fits(value: str, kind: str, loose: bool) -> bool:
    """A PIN, and any number, has 4+ characters (``LED_PIN = 13`` is a GPIO pin); a loose
    key's value must look like a credential."""
    if (kind == "pin" or value.isdigit()) and len(value) < _NUMERIC_MIN_DIGITS:
        return False
    return not loose or _loose_value_ok(value)


def _xml_value(text: str, pos: int, key: str) -> tuple[int, int] | None:
    """``<password>value</password>``: up to the closing tag of the key, so a ``<`` inside
    the value is part of it."""
    line_end = text.find("\n", pos, pos + 1024)
    limit = line_end if line_end >= 0 else min(len(text), pos + 1024)
    close = text.find("</" + key, pos, limit)
    if close < 0:
        xml = _XML_VALUE_RX.match(text, pos)
        if xml is None:
            return None
        start, end = xml.span("secret")
    else:
        start, end = pos, close
    if end <= start or _is_placeholder(text[start:end]):
        return None
    return start, end


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


def _phrase_value_ok(value: str, password: bool, pin: bool, clause_end: bool) -> bool:
    """A word stated as a credential ("the password is ...") that is one, not prose.

    After a password or PIN noun any shape counts ("my password is sunshine", "the PIN is
    4821") unless the word says something about the password ("is required", "is too
    short"); after other nouns ("token", "secret") the value must have a digit or a symbol."""
    if len(value) < (4 if password else 6) or _is_placeholder(value) or "://" in value:
        return False
    if value.startswith(("/", "~", "./", "[")) or "@" in value and "." in value.split("@")[-1]:
        return False  # a path, a marker, an e-mail address
    if _is_code_call(value) or _DOTTED_IDENT_RX.fullmatch(value):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    if not has_alpha:
        if has_symbol:
            return False
        return len(value) >= 4 if (pin or password) else len(value) >= 8
    if has_digit or has_symbol and not value.replace("-", "").replace("_", "").isalpha():
        return True
    if not password or not clause_end or not value.isascii():
        return False  # a plain word in another script is prose ("heslo je špatné")
    word = value.lower().strip("-_")
    if word in _PHRASE_STOPWORDS or "-" in word or "_" in word:
        return False
    return not (len(word) > 5 and word.endswith(_PHRASE_STOP_SUFFIXES))


_CLAUSE_SPLIT_RX = re.compile(r"\s|\\[nrt]")


def _clause_ends(text: str, pos: int) -> bool:
    """Nothing but a sentence's end, a separator or a small word follows ``pos``."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n or text[pos] in "\r\n.,;:!?)]}\"'»”」』(" or not text[pos].isascii():
        return True
    if text.startswith(("\\n", "\\r", "- ", "– ", "— ", "-- "), pos):
        return True
    word = _CLAUSE_SPLIT_RX.split(text[pos : pos + 14], 1)[0].lower().rstrip(".,;:!?\\\"'}])")
    return word in _PHRASE_CLAUSE_WORDS


_PASSWORD_NOUN_SET = frozenset(" ".join(n.split()) for n in _PASSWORD_NOUNS)


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


def _is_cjk(char: str) -> bool:
    """Scripts written without spaces between words (Han, kana, Hangul)."""
    code = ord(char)
    return 0x3040 <= code <= 0x30FF or 0x3400 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF


def _phrase_at(text: str, lowered: str, pos: int, hits: list[_Hit], seen: set[int], n: int) -> None:
    if pos > 0 and (lowered[pos - 1].isalnum() or lowered[pos - 1] == "_"):
        escaped = pos > 1 and lowered[pos - 2] == "\\" and lowered[pos - 1] in "ntr"
        if not escaped and not _is_cjk(lowered[pos]):
            return  # inside a word: "bypass" is not a noun (but `\npassword` starts one)
    noun = _PHRASE_NOUN_AT_RX.match(lowered, pos)
    if noun is None:
        return
    spaced = not _is_cjk(lowered[pos])
    name = " ".join(noun.group("noun").split())
    password = name in _PASSWORD_NOUN_SET
    pin = name in _PIN_NOUNS
    end = noun.end()
    if not spaced:
        tail = _CJK_TAIL_RX.match(lowered, end)
        if tail is not None:
            _phrase_value(text, tail.end(), tail.group("q"), hits, seen, password, pin, True)
        return
    if end >= n or lowered[end] not in " \t:：":
        return  # "tokenizer", "token_count", "password=": not told in words
    if lowered[end] in ":：":
        if noun.group().isascii() and " " not in name:
            return  # "password: x" is an assignment, found by the assignment rules
        colon = _PHRASE_COLON_RX.match(lowered, end)
        if colon is not None:
            _phrase_value(text, colon.end(), colon.group("q"), hits, seen, password, pin)
        return
    ahead = lowered[end : end + 160].split(None, 6)[:6]
    if not ahead:
        return
    if password and ahead[0].rstrip(".,:;") in _PHRASE_STOPWORDS:
        password = False  # "the password manager is Bitwarden": about another thing
    links = [word for word in ahead if word.rstrip(":") in _PHRASE_LINK_STARTS]
    if links and (
        links != ["to"]
        or name.startswith(("hasło", "haslo"))
        or _PHRASE_SET_LEAD_RX.search(lowered, max(0, pos - 40), pos) is not None
    ):
        _phrase_linked(text, lowered, pos, end, name, password, pin, hits, seen)
    first = ahead[0].strip(_PHRASE_QUOTES).rstrip(".,:;")
    if len(first) < (4 if password else 6) or not (password or not first.isalpha()):
        return  # what follows the noun is no credential: "token handler", "password."
    if name in _OWN_NOUNS or _PHRASE_LEAD_BEFORE_RX.search(lowered, max(0, pos - 60), pos):
        # "use the password <value>", "мой пароль <value>", "şifrem <value>"
        direct = _PHRASE_DIRECT_TAIL_RX.match(lowered, end)
        if direct is not None:
            _phrase_value(text, direct.end(), direct.group("q"), hits, seen, password, pin)


def _phrase_linked(
    text: str,
    lowered: str,
    pos: int,
    end: int,
    name: str,
    password: bool,
    pin: bool,
    hits: list[_Hit],
    seen: set[int],
) -> None:
    """``<noun> [up to five words] <link> <value>``: each link word is tried in turn."""
    n = len(text)
    set_lead: bool | None = None
    at = end
    for _ in range(6):
        link = _PHRASE_LINK_AT_RX.match(lowered, at + 1) if at < n else None
        if link is not None and lowered[at] in " \t":
            word = link.group("link")
            usable = True
            if word == "to" and not name.startswith(("hasło", "haslo")):
                if set_lead is None:
                    set_lead = (
                        _PHRASE_SET_LEAD_RX.search(lowered, max(0, pos - 40), pos) is not None
                    )
                usable = set_lead
            if usable:
                # the first usable link decides: "is strong) is kept" tells no password
                _phrase_value(text, link.end(), link.group("q"), hits, seen, password, pin)
                return
        step = _PHRASE_WORD_RX.match(lowered, at)
        if step is None or lowered[step.end() - 1] in ".!?;":
            break  # the sentence ends: no value told after it
        at = step.end()


def _phrase_value(
    text: str,
    start: int,
    quote: str,
    hits: list[_Hit],
    seen: set[int],
    password: bool,
    pin: bool,
    ascii_only: bool = False,
) -> bool:
    n = len(text)
    if start in seen or start >= n:
        return False
    seen.add(start)
    closer = _PHRASE_OPEN_QUOTES.get(quote[-1:]) if quote else None
    if closer is not None and quote[0] == "\\":
        closer = "\\" + closer  # a JSON-escaped quote closes with one too
    if closer is not None:
        # a quoted value: everything to the closing quote, blanks included
        line_end = text.find("\n", start, start + 130)
        end = text.find(closer, start, line_end if line_end >= 0 else start + 130)
        if end > start:
            value = text[start:end]
            if (
                len(value) >= 4
                and not _is_placeholder(value)
                and (password or _phrase_value_ok(value, password, pin, True))
            ):
                hits.append(_phrase_hit(start, end, password))
                return True
            return False
    end = _bare_value_end(text, start)
    if ascii_only:
        cut = next((i for i in range(start, end) if not text[i].isascii()), end)
        end = cut
        while end > start and text[end - 1] in _VALUE_TRAILERS:
            end -= 1
    if end > start and _phrase_value_ok(
        text[start:end], password, pin, ascii_only or _clause_ends(text, end)
    ):
        hits.append(_phrase_hit(start, end, password))
        return True
    return False


def _phrase_hit(start: int, end: int, password: bool) -> _Hit:
    """A value told after a password noun is a password; after another noun ("the signing
    key is ...") a secret, whose kind a format or the entropy rule may name better."""
    return (start, end, _P_ASSIGNMENT, "password") if password else (start, end, 42, "secret")


def _scan_encoded(
    text: str,
    hits: list[_Hit],
    present: Container[str],
    rescan: Callable[[str], list[_Hit]],
) -> None:
    """Secrets inside encoded text, decoded and scanned with ``rescan`` (raw hits):

    * percent-encoded runs (``password%3DXk9...``) and base64 runs (``echo ... | base64 -d``,
      or a run that starts like an encoded secret: ``Z2hwX`` is ``ghp_``) and hex runs
      (``xxd -r -p``, or ``6768705f...``): a run hiding a secret is redacted whole;
    * ASCII written as ``\\uXXXX`` or ``\\xXX`` escapes: the line is read with the escapes
      decoded, and each secret found is redacted where its escapes are."""
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
        runs: Iterable[re.Match[str]] = _BASE64_RUN_RX.finditer(text)
    else:
        runs = _runs_at_prefixes(
            text, _BASE64_RUN_RX, _BASE64_PREFIXES, _BASE64_PREFIX_GATES, present
        )
    for match in runs:
        decoded_b64 = _decode_base64(match.group())
        if decoded_b64 is not None and rescan(decoded_b64):
            hits.append((match.start(), match.end(), _P_ENCODED, "base64-secret"))
    if any(g in present for g in _HEX_GATES):
        hex_runs: Iterable[re.Match[str]] = _HEX_RUN_RX.finditer(text)
    else:
        hex_runs = _runs_at_prefixes(text, _HEX_RUN_RX, _HEX_PREFIXES, _HEX_PREFIXES, present)
    for match in hex_runs:
        try:
            decoded_hex = bytes.fromhex(match.group()).decode("utf-8")
        except ValueError:
            continue
        if _printable(decoded_hex) and rescan(decoded_hex):
            hits.append((match.start(), match.end(), _P_ENCODED, "hex-secret"))
    if any(g in present for g in _ESCAPE_GATES):
        _scan_escapes(text, hits, rescan)


def _printable(text: str) -> bool:
    return text.isprintable() or all(c.isprintable() or c in "\n\r\t" for c in text)


def _decode_base64(run: str) -> str | None:
    try:
        raw = base64.b64decode(
            run.replace("-", "+").replace("_", "/") + "=" * (-len(run) % 4), validate=True
        )
        decoded = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    return decoded if _printable(decoded) else None


def _runs_at_prefixes(
    text: str,
    run_rx: re.Pattern[str],
    prefixes: tuple[str, ...],
    gates: tuple[str, ...],
    present: Container[str],
) -> Iterator[re.Match[str]]:
    """The runs of ``run_rx`` that start with one of ``prefixes`` (whose lowercase forms, the
    ``gates``, the prefilter saw), in text order."""
    starts: set[int] = set()
    for prefix, gate in zip(prefixes, gates, strict=True):
        if gate not in present:
            continue
        pos = text.find(prefix)
        while pos >= 0:
            starts.add(pos)
            pos = text.find(prefix, pos + 1)
    for start in sorted(starts):
        match = run_rx.match(text, start)
        if match is not None:
            yield match


def _scan_escapes(text: str, hits: list[_Hit], rescan: Callable[[str], list[_Hit]]) -> None:
    """Lines holding ASCII escapes, decoded; the hits in them mapped back to the escapes."""
    done = -1
    for first in _ASCII_ESCAPE_RX.finditer(text):
        if first.start() < done:
            continue
        line_start = max(_line_start(text, first.start()), first.start() - 65536)
        line_end = _line_end(text, first.start())
        done = line_end
        decoded: list[str] = []
        origin: list[int] = []  # where each decoded character starts in `text`
        pos = line_start
        for escape in _ASCII_ESCAPE_RX.finditer(text, line_start, line_end):
            decoded.append(text[pos : escape.start()])
            origin.extend(range(pos, escape.start()))
            decoded.append(chr(int(escape.group(1) or escape.group(2), 16)))
            origin.append(escape.start())
            pos = escape.end()
        decoded.append(text[pos:line_end])
        origin.extend(range(pos, line_end))
        origin.append(line_end)
        for start, end, priority, kind in rescan("".join(decoded)):
            last = origin[end - 1]
            stop = _escape_end(text, last)
            hits.append((origin[start], stop, min(priority, _P_ENCODED), kind))


def _escape_end(text: str, pos: int) -> int:
    escape = _ASCII_ESCAPE_RX.match(text, pos)
    return escape.end() if escape is not None else pos + 1


def _line_start(text: str, pos: int) -> int:
    found = max(text.rfind("\n", 0, pos), text.rfind("\x00", 0, pos))
    return found + 1


def _line_end(text: str, pos: int) -> int:
    ends = [i for i in (text.find("\n", pos), text.find("\x00", pos)) if i >= 0]
    return min(ends) if ends else len(text)
