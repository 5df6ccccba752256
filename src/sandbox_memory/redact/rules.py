"""The redactor's rules: secret formats, key names and the words that are never secrets (data)."""

from __future__ import annotations

import base64
import binascii
import functools
import re
import string
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import bounded
from .formats import FORMATS, FORMS, SECRET_FILE, Format

# Priorities pick the marker kind when detectors flag overlapping text (lower wins).
_P_EXTRA = 0
_P_PRIVATE_KEY = 5
_P_VENDOR = 10
_P_CONTEXT = 20
_P_HEADER = 25
_P_ASSIGNMENT = 30
_P_ENTROPY = 40
_P_ENCODED = 45

# A hit is (start, end, priority, kind); tuples keep pathological inputs cheap.
_Hit = tuple[int, int, int, str]

_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
_DIGIT_CHARS = frozenset(string.digits)
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_MARKER_RX = re.compile(r"\[REDACTED:[^\]\s]{1,64}\]")
_MARKER_PREFIX = "[REDACTED:"
_BATCH_SEPARATOR = "\n\x00\n"
"""Joins strings scanned together. Every rule that looks across characters stops at a line
break or at a NUL (which no secret, key or value contains), so no hit spans two strings."""

_MIN_SECRET_TEXT = 6  # nothing shorter than "pwd=ab" can carry a secret

# Values that are never secrets: references, placeholders and code literals.
_PLACEHOLDER_WORDS = frozenset(
    {
        "none", "null", "nil", "true", "false", "undefined", "yes", "no", "on", "off",
        "redacted", "hidden", "masked", "omitted", "required", "optional", "empty", "n/a",
        "str", "string", "bytes", "int", "bool", "any", "object", "secretstr", "secretbytes",
        "number", "unknown", "self", "cls", "this", "todo", "tbd",
        # code, not values
        "await", "async", "lambda", "not", "yield", "return", "new", "typeof", "function",
        # documentation examples
        "pass", "password", "passwd", "pwd", "pw", "secret", "token", "apikey", "api_key",
        "key", "test", "foo", "bar", "baz", "xxx", "user", "username",
        # an auth scheme without its credential
        "basic", "bearer", "digest", "negotiate",
    }
)  # fmt: skip
_EXAMPLE_VALUE_RX = re.compile(
    r"^(?:your|insert|enter|put)[-_ ]|example|placeholder|dummy|redacted|\*{3}|x{6}",
    re.IGNORECASE,
)
_MASK_CHARS = frozenset("*•·xX/-._ #")
# printf / str.format placeholders, and dotted numbers (versions, OIDs, IP addresses)
_TEMPLATE_RX = re.compile(
    r"%[-#0 +]?\d*[sdrfxi](?![A-Za-z0-9])|%\(\w+\)|\{\d*\}|\{[a-z_][\w.]*(?:\([^)]*\))?\}"
)
"""A value that is a format string (``user_%s``, ``{0}``); ``Xk9%dNT6`` is no template."""
_DOTTED_NUMBER_RX = re.compile(r"\d+(?:[.:]\d+)+")
_SHELL_REFERENCE_RX = re.compile(
    r"\$(?:\{[^}\s]{1,128}\}|\([^)\n]{1,256}\)|[A-Za-z_][A-Za-z0-9_]{0,127}|[0-9@*#?$!-])"
    r"(?:[/:.@,}\])\"'-]|\$|\Z)"
)
"""``$DB_PASS``, ``${X}``, ``$(cat f)``, ``$HOME/.pw``: a shell expansion, not a value; a
password that starts with ``$`` (``$Wlq4!7kl``) is a value."""
_REFERENCE_PREFIXES = (
    "%(" "{{", "#{", "@@", "<", _MARKER_PREFIX, "os.environ", "os.getenv", "process.env",
    "env.", "env:", "secrets.", "vault:", "ref+", "op://", "arn:aws:secretsmanager",
    "getenv(", "settings.", "config.",
)  # fmt: skip


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    """One regular expression that yields secret spans, compiled when first run (with the
    Hyperscan matcher most rules never run in a process: compiling all of them took about a
    third of a second of every process's first recorded run)."""

    kind: str
    pattern: str
    priority: int
    group: int | str  # the secret; a group named "head" (in a lookbehind) moves the start left
    has_head: bool
    extend: bool  # grow the end over token chars (fixed-length vendor formats)
    extend_left_digits: bool
    validate: Callable[[str], bool] | None
    kind_of: Callable[[re.Match[str], str], str] | None
    lowered: bool  # lowercase pattern, run on the lowercased text
    gate: tuple[str, ...]  # skip the rule unless one of these occurs (in the lowered text)
    source: str
    prefilter: str | None = None  # for a rule without a literal: a Hyperscan regex every match
    # contains (ASCII classes only, no lookaround); the matcher may skip the rule without it
    compiled: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    """The pattern as given compiled (with its flags), when it was."""

    @functools.cached_property
    def regex(self) -> re.Pattern[str]:
        return self.compiled if self.compiled is not None else re.compile(self.pattern)


_META = frozenset(".^$*+?{}[]\\|()")
_MAX_GATES = 32
_MIN_GATE = 3  # shorter literals occur everywhere: such rules run unconditionally


def _parse_group(pattern: str, i: int) -> tuple[list[str], bool, int] | None:
    """Literal prefixes of the alternatives of the group at ``pattern[i] == "("``: (prefixes,
    whether every alternative was literal to its end, index after the group)."""
    j = i + 1
    if pattern.startswith("?:", j):
        j += 2
    elif pattern.startswith("?P<", j):
        j = pattern.index(">", j) + 1
    elif pattern.startswith("?", j):
        return None  # lookaround, flags, backreference
    depth, k = 0, j
    alternatives: list[str] = []
    begin = j
    while k < len(pattern):
        c = pattern[k]
        if c == "\\":
            k += 2
            continue
        if c == "[":
            close = pattern.find("]", k + 2)
            if close < 0:
                return None
            k = close + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                alternatives.append(pattern[begin:k])
                break
            depth -= 1
        elif c == "|" and depth == 0:
            alternatives.append(pattern[begin:k])
            begin = k + 1
        k += 1
    else:
        return None
    prefixes: list[str] = []
    whole = True
    for alternative in alternatives:
        found = _literal_prefixes(alternative)
        if not found or found[1] != len(alternative):
            whole = False
        prefixes.extend(found[0] if found else [""])
    return prefixes, whole, k + 1


def _literal_prefixes(pattern: str) -> tuple[list[str], int] | None:
    """The literals one of which starts every match of ``pattern`` (lowercased), and how far
    into the pattern they reach; ``None`` when they would be too many."""
    out = [""]
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        options: list[str]
        nxt: int
        stop_after = False
        if c == "\\" and i + 1 < n and not pattern[i + 1].isalnum():
            options, nxt = [pattern[i + 1]], i + 2
        elif c == "[":
            close = pattern.find("]", i + 2)
            body = pattern[i + 1 : close] if close > 0 else ""
            if not body or body[0] == "^" or "-" in body[1:-1] or "\\" in body or len(body) > 6:
                break
            options, nxt = sorted(set(body)), close + 1
        elif c == "(":
            group = _parse_group(pattern, i)
            if group is None:
                break
            options, whole, nxt = group
            stop_after = not whole
        elif c in _META:
            break
        else:
            options, nxt = [c], i + 1
        quantifier = pattern[nxt] if nxt < n else ""
        if quantifier in ("?", "*") or pattern.startswith("{0", nxt):
            break
        if len(out) * len(options) > _MAX_GATES:
            break
        out = [head + option.lower() for head in out for option in options]
        i = nxt
        if stop_after or quantifier in ("+", "{"):
            break
    return out, i


def _gates(pattern: str) -> tuple[str, ...]:
    """Literals one of which every match contains; empty when the rule must always run."""
    found = _literal_prefixes(pattern)
    if not found or not found[0] or min(len(g) for g in found[0]) < _MIN_GATE:
        return ()
    return tuple(dict.fromkeys(found[0]))


def _rule(
    kind: str,
    pattern: str | re.Pattern[str],
    *,
    priority: int = _P_VENDOR,
    group: int | str | None = None,
    extend: bool = False,
    extend_left_digits: bool = False,
    validate: Callable[[str], bool] | None = None,
    kind_of: Callable[[re.Match[str], str], str] | None = None,
    lowered: bool = False,
    gate: tuple[str, ...] = (),
    source: str = "own",
    prefilter: str | None = None,
) -> _Rule:
    compiled = pattern if isinstance(pattern, re.Pattern) else None
    text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    if not gate:
        # A rule whose pattern starts with a literal is skipped, cheaply, when the literal does
        # not occur: most rules are vendor prefixes, and most text holds none of them.
        gate = _gates(text)
    # Named groups read from the pattern's text (``(?P<name>`` is the only way to name one),
    # so that the rule is compiled only when it first runs.
    if group is None:
        group = "secret" if "(?P<secret>" in text else 0
    if isinstance(group, int) and group > 0:
        compiled = compiled or re.compile(text)
        if group > compiled.groups:
            group = 0
    return _Rule(
        kind=kind,
        pattern=text,
        compiled=compiled,
        priority=priority,
        group=group,
        has_head="(?P<head>" in text,
        extend=extend,
        extend_left_digits=extend_left_digits,
        validate=validate,
        kind_of=kind_of,
        lowered=lowered,
        gate=tuple(g.lower() for g in gate),
        source=source,
        prefilter=prefilter,
    )


# Token start: not preceded by a word char, unless that char ends an escape such as the `\n` of
# a line break inside a JSON-encoded string (tool-call arguments).


def _rx_lit(prefix: str, word: str = "A-Za-z0-9_") -> str:
    """Fixed-width regex `prefix` at a token start, written first so `re` can use its fast
    literal-prefix search; the token start is checked afterwards by a lookbehind.  A word char
    before it is allowed when it ends an escape (the `\\n` of a JSON-encoded line break)."""
    return rf"{prefix}(?:(?<![{word}]{prefix})|(?<=\\[ntr]{prefix}))"


def _lit(prefix: str, word: str = "A-Za-z0-9_") -> str:
    """`_rx_lit` for a plain string prefix."""
    return _rx_lit(re.escape(prefix), word)


def _start(word: str = "A-Za-z0-9_") -> str:
    """Zero-width token start (for use inside lookbehinds)."""
    return rf"(?:(?<![{word}])|(?<=\\[ntr]))"


def _llit(prefix: str) -> str:
    """`_lit` for rules that run on lowercased text."""
    return _lit(prefix, "a-z0-9_")


# ---- validators ----------------------------------------------------------------------------


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


def _not_reference(value: str) -> bool:
    return not _is_placeholder(value)


def _is_basic_credential(value: str) -> bool:
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
        text = decoded.decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in text and text.isprintable()


def _mixed_credential(value: str) -> bool:
    """A password told beside its user: letters with digits or symbols, no path or word."""
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    return (
        any(c.isalpha() for c in value)
        and (has_digit or has_symbol)
        and not _is_placeholder(value)
        and re.fullmatch(r"[a-z]+(?:[._-][a-z]+)*", value) is None
    )


def _session_value(value: str) -> bool:
    """A session id: not a reference, and with a digit (``session=ProductionSession`` is a
    name)."""
    return any(c.isdigit() for c in value) and not _is_placeholder(value)


def _is_token_user(value: str) -> bool:
    """The user part of a URL that is a token: letters and digits mixed, no word."""
    return (
        any(c.isdigit() for c in value)
        and sum(c.isalpha() for c in value) >= 4
        and not _is_placeholder(value)
        and re.fullmatch(r"[a-z]+(?:[._-][a-z0-9]+)*\d{0,4}", value, re.IGNORECASE) is None
    )


def _is_jwe(token: str) -> bool:
    """An encrypted JWT (five parts): its payload is ciphertext, only the header is JSON."""
    if token.count(".") != 4:
        return False
    head = token.split(".", 1)[0]
    try:
        decoded = bounded.loads(
            base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode(),
            limit=bounded.MAX_FIELD_BYTES,
        )
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return False
    return isinstance(decoded, dict) and "enc" in decoded


def _is_base64_jwt(value: str) -> bool:
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode()
    except (binascii.Error, ValueError):
        return False
    token = decoded.split(None, 1)[0] if decoded.strip() else ""
    return token.startswith("eyJ") and token.count(".") >= 1 and _jwt_header_is_json(token)


def _jwt_header_is_json(token: str) -> bool:
    head = token.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
        return isinstance(
            bounded.loads(decoded.decode("utf-8"), limit=bounded.MAX_FIELD_BYTES), dict
        )
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return False


def _parts_are_json(token: str) -> bool:
    """Each dot-separated part decodes (base64url, padding restored) to JSON text."""
    for part in token.split("."):
        try:
            raw = part.encode("ascii")
        except UnicodeEncodeError:
            return False
        if len(raw) % 4 == 1:
            return False  # no base64 text has that length
        try:
            bounded.loads(
                base64.urlsafe_b64decode(raw + b"=" * (-len(raw) % 4)).decode("utf-8"),
                limit=bounded.MAX_FIELD_BYTES,
            )
        except bounded.UnsafeJSON:
            raise  # too deep or too long to decode: the caller judges by the header
        except ValueError:  # also bad base64 and bad UTF-8
            return False
    return True


def _is_formal_jwt(token: str) -> bool:
    """A JWT: its header and payload are base64url JSON (the signature is opaque bytes), or it
    is an encrypted one (five parts, a JSON header naming its encryption)."""
    try:
        if _parts_are_json(".".join(token.split(".")[:2])):
            return True
    except (RecursionError, bounded.UnsafeJSON):  # too deep to decode: judge by the header
        return _jwt_header_is_json(token)
    return _is_jwe(token)


_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_BASE58_INDEX = {c: i for i, c in enumerate(_BASE58)}
_WIF_VERSION = 0x80
"""The version byte of a Bitcoin mainnet private key in Wallet Import Format."""


def _is_wif(value: str) -> bool:
    """A Bitcoin private key in Wallet Import Format: base58 whose checksum (the first four
    bytes of a double SHA-256) holds, with the private-key version byte."""
    import hashlib

    number = 0
    for char in value:
        number = number * 58 + _BASE58_INDEX[char]
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    if len(raw) not in (37, 38) or raw[0] != _WIF_VERSION:
        return False
    body, checksum = raw[:-4], raw[-4:]
    return hashlib.sha256(hashlib.sha256(body).digest()).digest()[:4] == checksum


_DOTTED_TOKEN_MIN_ENTROPY = 4.5
"""Bits per character a three-part dotted token needs: random base64url of this length has
about 5.2, code names such as ``FactoryBean2Impl.method.ThingBuilder3x`` about 4."""


def _is_random_dotted(token: str) -> bool:
    """Three dot-separated base64url parts whose outer parts mix upper case, lower case and
    digits, random as a whole (a bot or session token), not a dotted name."""
    import math
    from collections import Counter

    parts = token.split(".")
    for part in (parts[0], parts[-1]):
        if not (
            any(c.isupper() for c in part)
            and any(c.islower() for c in part)
            and any(c.isdigit() for c in part)
        ):
            return False
    total = len(token)
    entropy = -sum(n / total * math.log2(n / total) for n in Counter(token).values())
    return entropy >= _DOTTED_TOKEN_MIN_ENTROPY


# ---- kind helpers --------------------------------------------------------------------------

_DB_SCHEMES = frozenset(
    {
        "postgres", "postgresql", "mysql", "mariadb", "mongodb", "redis", "rediss", "amqp",
        "amqps", "mssql", "sqlserver", "oracle", "cockroachdb", "clickhouse", "snowflake",
        "neo4j", "bolt", "couchdb", "cassandra", "memcached", "ldap", "ldaps", "sqlite", "nats",
        "kafka", "db2", "jdbc", "odbc", "influxdb", "elasticsearch", "opensearch",
    }
)  # fmt: skip
_SCHEME_RX = re.compile(r"([A-Za-z][A-Za-z0-9+.:-]{0,30})\Z")


def _url_credential_kind(match: re.Match[str], text: str) -> str:
    start = match.start()
    found = _SCHEME_RX.search(text, max(0, start - 31), start)
    if found:
        name = found.group(1).lower()
        for candidate in (name, name.rsplit(":", 1)[-1], name.split(":", 1)[0]):
            if candidate.split("+", 1)[0] in _DB_SCHEMES:
                return "connection-string"
    return "url-password"


def _authorization_kind(match: re.Match[str], text: str) -> str:
    scheme = (match.groupdict().get("scheme") or "").lower()
    return {"bearer": "bearer-token", "basic": "basic-auth"}.get(scheme, "authorization")


def _signed_url_kind(match: re.Match[str], text: str) -> str:
    name = text[match.start() : match.start("secret")].lower()
    return "gcp-signed-url" if "goog" in name else "aws-signed-url"


# ---- formats catalogued by detect-secrets ------------------------------------------------------

_URL_DELIMITERS = re.escape(":/?#[]@" + "!$&'()*+,;=")
"""RFC 3986's reserved characters (gen-delims and sub-delims): never in a URL's user info."""

# (kind, pattern, caseless, secret group, extend, gate): the token formats detect-secrets'
# plugins describe, written here as data so that the redactor needs neither that package nor
# what its plugins import (``requests``, ``urllib3``, ...). ``tests/test_redact_formats.py``
# holds each equal to the plugin's own pattern when detect-secrets is installed.
_DS_FORMATS: tuple[tuple[str, str, bool, int, bool, tuple[str, ...]], ...] = (
    ("aws-access-key", r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}", False, 0, False, ()),
    (
        "aws-secret-access-key",
        r"aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?[\'\"]([0-9a-zA-Z/+]{40})[\'\"]",
        True, 1, False, ("aws",),
    ),
    (
        "url-password",
        rf"://[^{_URL_DELIMITERS}\s]+:([^{_URL_DELIMITERS}\s]+)@",
        False, 1, False, (),
    ),
    ("github-token", r"(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}", False, 0, True, ()),
    ("gitlab-token", r"(glpat|gldt|glft|glsoat|glrt)-[A-Za-z0-9_\-]{20,50}(?!\w)", False, 0, True,
     ()),
    ("gitlab-token", r"GR1348941[A-Za-z0-9_\-]{20,50}(?!\w)", False, 0, True, ()),
    ("gitlab-token", r"glcbt-([0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,50}(?!\w)", False, 0, True, ()),
    ("gitlab-token", r"glimt-[A-Za-z0-9_\-]{25}(?!\w)", False, 0, True, ()),
    ("gitlab-token", r"glptt-[A-Za-z0-9_\-]{40}(?!\w)", False, 0, True, ()),
    ("gitlab-token", r"glagent-[A-Za-z0-9_\-]{50,1024}(?!\w)", False, 0, True, ()),
    ("gitlab-token", r"gloas-[A-Za-z0-9_\-]{64}(?!\w)", False, 0, True, ()),
    ("openai-api-key", r"sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}", False, 0, True,
     ()),
    ("pypi-token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9-_]{70,}", False, 0, True, ()),
    ("pypi-token", r"pypi-AgENdGVzdC5weXBpLm9yZw[A-Za-z0-9-_]{70,}", False, 0, True, ()),
    ("sendgrid-api-key", r"SG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43}", False, 0, True, ()),
    ("slack-token", r"xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+", True, 0, True, ("xox",)),
    (
        "slack-webhook",
        r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+",
        True, 0, True, ("hooks.slack.com",),
    ),
    ("square-oauth-secret", r"sq0csp-[0-9A-Za-z\\\-_]{43}", False, 0, True, ()),
    ("stripe-key", r"(?:r|s)k_live_[0-9a-zA-Z]{24}", False, 0, True, ("k_live_",)),
    ("twilio-account-sid", r"AC[a-z0-9]{32}", False, 0, True, ()),
    ("twilio-api-key", r"SK[a-z0-9]{32}", False, 0, True, ()),
)  # fmt: skip
# Not taken, on purpose: the private-key format (the header line only; we replace the whole
# block), the JWT pattern (its lazy tail drops the signature; `_is_formal_jwt` checks the
# parts instead), npm's (`.+` backtracks quadratically on long lines), Mailchimp's and
# Telegram's (leading character classes make them 10-30x slower; literal-first equivalents
# below), keyword and high-entropy scanning (line and file-type driven; reimplemented below),
# Artifactory, IBM, Cloudant and SoftLayer (noisy or slow, niche).


def _catalogued_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    for kind, pattern, caseless, group, extend, gate in _DS_FORMATS:
        url = kind == "url-password"
        rules.append(
            _rule(
                kind,
                re.compile(pattern, re.IGNORECASE if caseless else 0),
                group=group,
                extend=extend,
                priority=_P_CONTEXT if group else _P_VENDOR,
                kind_of=_url_credential_kind if url else None,
                validate=_not_reference if url else None,
                gate=gate,
                source="detect-secrets",
            )
        )
    return rules


# ---- own patterns ------------------------------------------------------------------------------

_Q = r"(?:\\{0,3}[\"'])?"  # optional, possibly JSON-escaped, quote
_SEP = r"[ \t]*(?:=>|:=|=|:)[ \t]*"
_URL_VALUE = r"[^&\s#\"'<>\\]{1,4096}"


def _vendor_context(kind: str, vendor: str, value: str) -> _Rule:
    """`<vendor>..._token = <value>` style assignments, typed by vendor."""
    return _rule(
        kind,
        vendor
        + r"[a-z0-9_.-]{0,30}?(?:token|key|secret|password|pat)[a-z0-9_]{0,12}"
        + _Q
        + _SEP
        + _Q
        + rf"(?P<secret>{value})(?![a-z0-9_=+/-])",
        lowered=True,
        priority=_P_CONTEXT,
        validate=_not_reference,
    )


def _command_gates(pattern: str) -> tuple[str, ...]:
    """Literals one of which starts every match of a command pattern (``[ \\t]+`` read as a
    space): ``az[ \\t]+(?:login|ad)`` is gated by ``az ``, ``(?:7z|7za)`` by ``7z``, ``7za``;
    empty (the rule always runs) when an alternative has no literal start."""
    heads = [""]
    rest = pattern
    if pattern.startswith("(?:"):
        depth, close = 0, -1
        for i, c in enumerate(pattern):
            depth += c == "("
            depth -= c == ")"
            if depth == 0:
                close = i
                break
        inner = pattern[3:close].replace("[ \\t]+", " ")
        if "(" in inner or "[" in inner:
            return ()
        heads, rest = inner.split("|"), pattern[close + 1 :]
    tail = _COMMAND_LITERAL_RX.match(rest)
    suffix = tail.group().replace("[ \\t]+", " ").replace("\\", "") if tail else ""
    gates = [head.replace("\\", "") + (suffix if head or not heads[0] else "") for head in heads]
    if any(len(gate.strip()) < 2 for gate in gates):
        return ()
    return tuple(dict.fromkeys(gates))


_COMMAND_LITERAL_RX = re.compile(r"(?:[a-z0-9:/_-]|\\[.-]|\[ \\t\]\+)*")


_ARG = (
    r"\\?[\"']?(?P<secret>(?<=')[^'\n]{1,256}(?=')|(?<=\")[^\"\n\\]{1,256}(?=\\?\")"
    r"|[^\s'\"`|;&\\]{1,256})"
)
"""A command argument: quoted (without its quotes, also JSON-escaped ones) or bare."""

_SECRET_FILE_READ_RX = re.compile(
    r"cat(?<![\w-]cat)[ \t]+(?:-[a-z]+[ \t]+)*[^\s|;&<>\"']{0,200}?"
    + SECRET_FILE
    + r"[ \t]*(?:\\?[\"'}\]]|\Z)"
)
"""A command (a tool call's arguments) that prints a secret file: the output that follows it
is the secret (``{"cmd": "cat config/master.key"}``, then the key in the next output)."""

_PRIORITIES = {
    "vendor-first": _P_VENDOR - 1,
    "vendor": _P_VENDOR,
    "vendor-last": _P_VENDOR + 1,
    "context": _P_CONTEXT,
    "header": _P_HEADER,
    "entropy": _P_ENTROPY,
}
_VALIDATORS: dict[str, Callable[[str], bool]] = {
    "has-digit": _has_digit,
    "not-reference": _not_reference,
    "basic-credential": _is_basic_credential,
    "mixed-credential": _mixed_credential,
    "session-value": _session_value,
    "token-user": _is_token_user,
    "formal-jwt": _is_formal_jwt,
    "base64-jwt": _is_base64_jwt,
    "wif": _is_wif,
    "random-dotted": _is_random_dotted,
}
_KINDS_OF: dict[str, Callable[[re.Match[str], str], str]] = {
    "url-credential": _url_credential_kind,
    "authorization": _authorization_kind,
    "signed-url": _signed_url_kind,
}


def _format_rule(row: Format) -> _Rule:
    """The rule of one row of `formats.FORMATS`."""
    if row.form == "vendor-assignment":
        return _vendor_context(
            row.kind, _llit(row.prefix) if row.prefix else row.vendor, row.pattern
        )
    if row.form == "command-flag":
        tools = f"(?:{row.tools})"
        return _rule(
            row.kind,
            rf"{tools}(?:[ \t]+[^\s|;&]{{1,200}}){{0,12}}?[ \t]+(?:{row.flags})"
            rf"(?:[ \t]*=[ \t]*|[ \t]+)(?!-){_ARG}",
            lowered=row.lowered,
            priority=_P_CONTEXT,
            validate=_not_reference,
            gate=_command_gates(tools),
        )
    if row.form == "command":
        return _rule(
            row.kind,
            row.pattern + _ARG,
            lowered=True,
            priority=_P_CONTEXT,
            validate=_not_reference,
            gate=_command_gates(row.pattern),
        )
    if row.form != "token":
        raise ValueError(
            f"secret format {row.kind!r}: form must be one of {FORMS}, got {row.form!r}"
        )
    pattern, prefilter = row.pattern, row.prefilter or None
    if row.prefix:
        pattern = (_llit(row.prefix) if row.lowered else _lit(row.prefix)) + pattern
        if len(row.prefix) < _MIN_GATE and prefilter is None:
            # a prefix too short to gate the rule (``s.``) is looked for with a few body chars
            prefilter = re.escape(row.prefix) + r"[A-Za-z0-9]{8}"
    elif row.prefix_rx:
        pattern = _rx_lit(row.prefix_rx) + pattern
    return _rule(
        row.kind,
        pattern,
        priority=_PRIORITIES[row.priority],
        extend=row.extend,
        extend_left_digits=row.extend_left_digits,
        validate=_VALIDATORS[row.validate] if row.validate else None,
        kind_of=_KINDS_OF[row.kind_of] if row.kind_of else None,
        lowered=row.lowered,
        gate=row.gate,
        prefilter=prefilter,
    )


def _own_rules() -> list[_Rule]:
    return [_format_rule(row) for row in FORMATS]


# ---- private key blocks --------------------------------------------------------------------

_BLOCK_PAIRS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = (
    (
        re.compile(r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
        re.compile(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"),
    ),
    (
        re.compile(r"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----"),
        re.compile(r"---- END SSH2 ENCRYPTED PRIVATE KEY ----"),
    ),
    (re.compile(r"PuTTY-User-Key-File-\d:"), re.compile(r"Private-MAC: ?[0-9a-fA-F]+")),
)
_BLOCK_MAX = 65536
_BLOCK_LINE_RX = re.compile(r"[A-Za-z0-9+/=]{16,}|[A-Za-z][A-Za-z-]{0,30}: ?[^\r\n\\]{0,200}")
"""One line of a key body: base64, or a header such as ``Proc-Type: 4,ENCRYPTED``."""
_BLOCK_TAIL_RX = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/=]{16,}[ \t]*\Z")
_LINE_BREAK_RX = re.compile(r"\\[nr]|[\r\n\x00]")
# Body of a block whose footer is missing (truncated output): header lines and base64 lines.
_BLOCK_BODY_RX = re.compile(
    r"(?:(?:\\[nr]|[\r\n\t ])+(?:[A-Za-z][A-Za-z-]{0,30}: ?[^\r\n\\]{0,200}|[A-Za-z0-9+/=]{16,})"
    r"){0,4096}"
)


# --------------------------------------------------------------------------------------------
# Context rules: assignments and high-entropy strings
# --------------------------------------------------------------------------------------------

# Literal anchors; `_is_secret_key` decides on the whole key around them.
_ASSIGN_ANCHORS = (
    "pass", "pw", "secret", "token", "key", "auth", "credential", "contrase", "pin", "pat", "psk",
    "salt", "pepper",
)  # fmt: skip
_ANCHOR_TAILS = {"pat": "", "psk": "", "pin": r"(?:_?code|_?number|s)?", "salt": "", "pepper": ""}
"""Anchors that end the names they are in (``GITHUB_PAT``, ``wifi_psk``, ``PIN_CODE``):
what follows them is an operator, so ``path = ...`` costs no more than a failed match."""
_ASSIGN_TRIGGERS = tuple(
    re.compile(
        re.escape(anchor)
        + r"(?P<tail>"
        + _ANCHOR_TAILS.get(anchor, r"[a-z0-9_.-]{0,48}")
        + r")(?P<kq>\\{0,3}[\"'])?\]?[ \t]*"
        + r"(?P<op>:=|=>|==|!=|=|:(?![:/])|>|,|(?:value|content|val|default)[ \t]*=)"
    )
    for anchor in _ASSIGN_ANCHORS
)
_CLI_TRIGGER = re.compile(_lit("--", "a-z0-9_.-") + r"(?P<key>[a-z0-9_.-]{1,60})[ \t]+")
_ENTROPY_CANDIDATE_RX = re.compile(r"[A-Za-z0-9+/_~.-]{20,}={0,3}")
_ENTROPY_CONTEXT_WORDS = (
    "key", "secret", "token", "passw", "pwd", "credential", "auth", "signature", "bearer",
    "private",
)  # fmt: skip
_ENTROPY_CONTEXT_RX = re.compile(
    "|".join(w + r"(?!or(?!i[sz]))" if w == "auth" else w for w in _ENTROPY_CONTEXT_WORDS)
)
_ENTROPY_CONTEXT_WORD_RX = re.compile("|".join(_ENTROPY_CONTEXT_WORDS))
"""The context words without the lookahead: its matches cover every context match."""
# ---- credentials in words ("the staging password is ...", "das Passwort lautet ...") --------

_PASSWORD_NOUNS = (
    # English
    "password", "passphrase", "passcode", "passwd", "pin", "pin code", "pin number",
    # German
    "passwort", "kennwort", "zugangscode", "geheimzahl",
    # French
    "mot de passe", "mdp", "code pin",
    # Spanish, Portuguese, Italian
    "contraseña", "contrasena", "clave", "senha", "parola d'ordine",
    # Dutch, Polish, Russian
    "wachtwoord", "hasło", "haslo", "пароль", "пин-код", "пин код",
    # Scandinavian, Finnish, Czech, Hungarian, Turkish, Greek, Hebrew, Arabic, Persian, Hindi,
    # Vietnamese, Indonesian
    "lösenord", "lösenordet", "passord", "passordet", "adgangskode", "adgangskoden",
    "salasana", "heslo", "jelszó", "jelszavam", "şifre", "şifrem", "şifremiz", "parolam",
    "κωδικός", "סיסמה", "הסיסמה", "كلمة المرور", "كلمة السر", "رمز عبور", "पासवर्ड",
    "mật khẩu", "kata sandi",
    # Chinese, Japanese, Korean
    "密码", "密碼", "口令", "パスワード", "暗証番号", "비밀번호", "암호",
)  # fmt: skip
"""Nouns that name a password or a PIN: what is stated as one is a secret whatever its shape
("my password is sunshine"), unless it is a word that says something about it ("is
required", `_PHRASE_STOPWORDS`)."""
_OWN_NOUNS = frozenset({"şifrem", "şifremiz", "parolam", "jelszavam"})
"""Nouns that say "my" themselves (Turkish, Hungarian): a value may follow them directly."""
_PIN_NOUNS = frozenset({"pin", "pin code", "pin number", "geheimzahl", "code pin", "пин-код",
                        "пин код", "暗証番号"})  # fmt: skip
"""Nouns after which 4 digits are enough."""
_PHRASE_NOUNS = (
    *_PASSWORD_NOUNS,
    # other credentials: their value must look like one (a digit or a symbol)
    "api key", "access key", "secret key", "access token", "auth token", "bearer token",
    "token", "secret", "credentials", "credential", "encryption key", "private key",
    "signing key", "master key", "decryption key", "license key",
    "zugangsdaten", "schlüssel", "clé d'api", "clé api", "clé secrète", "jeton",
    "密钥", "密鑰", "令牌",
)  # fmt: skip
_PHRASE_LINKS = (
    "is", "was", "are", "will be", "would be", "should be", "is set to", "set to", "equals",
    "is now", "is still", "changed to", "reset to",
    "ist", "lautet", "war", "heißt", "est", "était", "sera", "es", "era", "é", "è", "são",
    "is nu", "jest", "to", "wynosi", "это", "—", "–", "-", ":", "är", "er", "je",
    "là", "adalah", "saya", "είναι", "היא", "هي", "است", "है", "é a", "ist die",
)  # fmt: skip
"""Words between the noun and the value. ``to`` counts after ``set``/``change``... before the
noun (``set the root password to X``) and after a Polish noun (``hasło to X``); ``:`` after a
noun that the assignment rules do not see (``Пароль: X``)."""
_PHRASE_SET_LEAD_RX = re.compile(r"(?:set|sets|setting|change|changed|changing|reset|update|"
                                 r"updated|rotate|rotated)\b")  # fmt: skip
_PHRASE_LEADS = (
    "use", "using", "with", "try", "enter", "type", "set", "use the", "with the", "my", "our",
    "the new", "new", "verwende", "verwende das", "benutze", "benutze das", "mit dem", "mit",
    "mein", "meine", "unser", "unsere", "utilise", "utilise le", "utiliser", "avec le", "avec",
    "mon", "notre", "ton", "votre", "usa", "usa la", "con la", "mi", "tu", "su", "minha",
    "meu", "nossa", "com a", "mijn", "onze", "moje", "mój", "мой", "наш", "используй",
    "мій", "мой новый", "mitt", "minun", "my new", "मेरा",
    "введи", "with password", "la mia", "usa la password",
)  # fmt: skip
_PHRASE_LINK_STARTS = frozenset(link.split()[0] for link in _PHRASE_LINKS)
_CJK_LINKS = "是为為：:=「『はが는은이가"
_PHRASE_QUOTES = "\"'“”«»„「」『』"
_PHRASE_OPEN_QUOTES = {'"': '"', "'": "'", "“": "”", "«": "»", "„": "“", "「": "」", "『": "』"}
_PHRASE_CLAUSE_WORDS = frozenset(
    {
        "for", "and", "but", "so", "now", "today", "yesterday", "please", "then", "until",
        "from", "on", "at", "in", "to", "with", "if", "since", "und", "für", "pour", "et",
        "para", "y", "e", "per", "и", "для", "en", "voor", "oraz", "i", "dla", "o",
    }
)  # fmt: skip
"""Words that may follow a value stated in words (``is sunshine for the guests``)."""
_PHRASE_STOPWORDS = frozenset(
    {
        # English: what one says about a password, not a password
        "required", "wrong", "incorrect", "correct", "invalid", "valid", "expired", "weak",
        "strong", "long", "short", "too", "not", "case", "sensitive", "missing", "empty",
        "blank", "optional", "mandatory", "needed", "necessary", "reset", "changed", "set",
        "saved", "stored", "hashed", "encrypted", "hidden", "secret", "unknown", "different",
        "same", "new", "old", "temporary", "default", "ready", "fine", "okay", "good", "bad",
        "great", "simple", "easy", "hard", "complex", "secure", "insecure", "safe", "unsafe",
        "compromised", "leaked", "locked", "forgotten", "lost", "there", "here", "below",
        "above", "attached", "included", "provided", "available", "unavailable", "generated",
        "rotated", "updated", "sent", "shown", "displayed", "visible", "printed", "written",
        "listed", "known", "public", "private", "personal", "mine", "yours", "theirs", "ours",
        "stale", "obsolete", "deprecated", "disabled", "enabled", "active", "inactive",
        "working", "broken", "fixed", "identical", "also", "still", "then", "usually",
        "always", "never", "just", "only", "probably", "likely", "already", "being", "been",
        "very", "quite", "really", "actually", "something", "anything", "nothing", "what",
        "which", "that", "this", "these", "those", "it", "the", "a", "an", "your", "their",
        "his", "her", "its", "our", "my", "manager", "field", "prompt", "policy",
        "change", "protection", "login", "hash", "length", "strength", "rules", "rule",
        "expiry", "rotation", "input", "box", "form", "entry", "recovery", "vault", "store",
        "file", "files", "auth", "authentication", "access", "again", "instead", "less",
        "more", "enough", "ok", "accepted", "rejected", "denied", "allowed", "checked",
        "verified", "confirmed", "matched", "mismatch", "unique", "random",
        "generic", "standard", "minimum", "maximum", "characters", "letters",
        "digits", "numbers", "symbols", "words", "lowercase", "uppercase", "hint", "question",
        "reuse", "sharing", "shared", "one", "two", "three", "four", "five", "six",
        "seven", "eight", "nine", "ten", "twelve", "sixteen", "eleven", "compat", "systemd",
        "sss", "nis", "ldap", "db", "none", "unset", "cleared", "removed", "deleted",
        "redacted", "masked", "protected", "requested", "emailed",
        "texted", "unchanged", "expiring", "expires", "pending", "misspelled", "typed",
        "entered", "ignored", "supported", "unsupported", "complicated",
        "memorable", "guessable", "common", "popular", "obvious", "predictable", "fake",
        "real", "right", "true", "false", "terrible", "awful", "wrongly",
        # verbs after "set the password to ..."
        "expire", "rotate", "match", "include", "contain", "require", "be",
        "have", "use", "whatever", "prevent", "allow", "avoid",
        # code: names that hold a password (``password: value,``)
        "value", "data", "text", "args", "req", "request", "body", "params", "options",
        "config", "env", "payload", "user", "creds", "result", "response", "plain",
        "encoded", "decoded", "raw", "cleartext", "plaintext", "undefined", "null", "nil",
        "string", "str", "bytes", "password", "passwd", "pass", "pwd", "pin", "code", "key",
        # German, French, Spanish, Portuguese, Italian, Dutch, Polish, Russian
        "falsch", "richtig", "ungültig", "abgelaufen", "erforderlich", "zu", "nicht", "leer",
        "geändert", "neu", "alt", "sicher", "unsicher", "korrekt", "gesetzt", "vergessen",
        "kurz", "lang", "schwach", "stark", "gültig", "requis", "obligatoire",
        "expiré", "invalide", "faux", "trop", "pas", "vide", "oublié", "changé", "nouveau",
        "correcte", "faible", "fort", "sécurisé", "incorrecta", "correcta", "obligatoria",
        "requerida", "inválida", "demasiado", "muy", "nueva", "débil", "segura", "vacía",
        "obrigatória", "incorreta", "muito", "nova", "fraca", "errada",
        "sbagliata", "obbligatoria", "errata", "nuova", "onjuist", "verplicht", "fout",
        "nieuw", "niepoprawne", "wymagane", "błędne", "nowe", "неверный", "неправильный",
        "обязателен", "верный", "новый", "простой", "сложный", "не", "слишком", "пустой",
    }
)  # fmt: skip
_PHRASE_STOP_SUFFIXES = ("ing", "ed", "ly", "able", "ible", "ous", "ful", "less", "tion",
                         "ment", "ness", "ity")  # fmt: skip


def _alternation(words: tuple[str, ...]) -> str:
    return "|".join(
        re.escape(w).replace("\\ ", "[ \t]+") for w in sorted(words, key=len, reverse=True)
    )


_PHRASE_NOUN_AT_RX = re.compile(rf"(?P<noun>{_alternation(_PHRASE_NOUNS)})s?")
_PHRASE_LINK_AT_RX = re.compile(
    rf"(?P<link>{_alternation(_PHRASE_LINKS)})(?:[ \t]*:)?[ \t]+(?P<q>\\?[\"'“«„]|)"
)
"""A link word where a word starts, then blanks: ``is <value>``, ``lautet: <value>``."""
_PHRASE_COLON_RX = re.compile(r"[ \t]*[:：][ \t]*(?P<q>\\?[\"'“«„]|)")
_PHRASE_WORD_RX = re.compile(r"[ \t]+[^\s]{1,40}")
_PHRASE_LEAD_BEFORE_RX = re.compile(
    rf"(?:(?<![a-z0-9_])|(?<=\\[ntr]))(?:{_alternation(_PHRASE_LEADS)})[ \t]+"
    rf"(?:the[ \t]+|das[ \t]+|le[ \t]+|la[ \t]+|a[ \t]+)?(?:[\w-]{{2,20}}[ \t]+)?\Z"
)
"""Before the noun: ``use the [staging]`` (``use the staging password <value>``)."""
_PHRASE_DIRECT_TAIL_RX = re.compile(r"[ \t]+(?P<q>\\?[\"'“«„]|)(?=\S)")
_CJK_TAIL_RX = re.compile(
    rf"[ \t]*(?:[{_CJK_LINKS}]|(?:{_alternation(_PHRASE_LINKS)})[ \t])?[ \t]*(?P<q>[\"'“«„「『]?)"
)
"""After a CJK noun: ``数据库密码是Xk9...`` needs no spaces."""
_PHRASE_GATES = ("pass", "pin", "api", "access", "secret", "auth", "bearer", "token",
                 "credential", "kennwort", "zugang", "geheimzahl", "schlüssel", "mot de", "mdp",
                 "code pin", "clé", "jeton", "contrase", "clave", "senha", "parola",
                 "wachtwoord", "hasło", "haslo", "пароль", "пин", "lösenord", "passord",
                 "adgangskode", "salasana", "heslo", "jelsz", "şifre", "parolam", "κωδικός",
                 "סיסמה", "הסיסמה", "كلمة", "رمز", "पासवर्ड", "mật khẩu", "kata sandi",
                 "encryption", "private", "signing", "master", "decryption", "license",
                 "密码", "密碼", "口令", "密钥",
                 "密鑰", "令牌", "パスワード", "暗証番号", "비밀번호", "암호")  # fmt: skip
"""Where a phrase noun can start: every noun begins with one of these."""
assert all(any(n.startswith(g) for g in _PHRASE_GATES) for n in _PHRASE_NOUNS)

# ---- encoded text ---------------------------------------------------------------------------

_PERCENT_RUN_RX = re.compile(r"(?:[A-Za-z0-9._~+*!\-]|%[0-9A-Fa-f]{2}){6,8192}")
_PERCENT_ESCAPE_RX = re.compile(r"%[0-9A-Fa-f]{2}")
_PERCENT_RUN_CHARS = frozenset(string.ascii_letters + string.digits + "._~+*!-%")
_BASE64_RUN_RX = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{24,8192}={0,2}")
_BASE64_GATES = ("base64", "b64decode", "kind: secret")
"""Words that say base64 follows: every base64 run is then decoded and scanned."""
_ENCODED_PREFIXES = (
    "ghp_", "gho_", "ghs_", "ghu_", "ghr_", "github_pat_", "glpat-", "sk-", "sk_live_",
    "rk_live_", "xoxb-", "xoxp-", "AKIA", "ASIA", "-----BEGIN", "npm_", "AIza", "hf_",
    "pypi-", "password", "PASSWORD", "Password", "passwd", "secret", "SECRET", "token",
    "TOKEN", "api_key", "API_KEY", "apikey", "Bearer ", "Basic ", "postgres://",
    "postgresql://", "mysql://", "mongodb", "redis://", "amqp://", "https://", '{"',
    "AGE-SECRET-KEY-", "SG.", "dckr_pat_", "glsa_", "hvs.", "xapp-",
)  # fmt: skip
"""Starts of secrets and of text that holds them: their base64 and hex forms mark an encoded
secret without a word saying so (``echo Z2hwX... | base64 -d`` with the command elsewhere)."""


def _b64_head(prefix: str) -> str:
    """The base64 characters that encode only ``prefix`` (the rest depend on what follows)."""
    return base64.b64encode(prefix.encode()).decode()[: len(prefix) * 4 // 3]


_BASE64_PREFIXES = tuple(dict.fromkeys(_b64_head(p) for p in _ENCODED_PREFIXES))
_BASE64_PREFIX_GATES = tuple(dict.fromkeys(p.lower() for p in _BASE64_PREFIXES))
_HEX_PREFIXES = tuple(dict.fromkeys(p.encode().hex() for p in _ENCODED_PREFIXES))
_HEX_GATES = ("xxd", "unhexlify", "fromhex", "hex.decode", "hexdump", "from_hex")
_HEX_RUN_RX = re.compile(r"(?<![0-9A-Za-z])(?:[0-9a-fA-F]{2}){12,4096}(?![0-9A-Za-z])")
_ASCII_ESCAPE_RX = re.compile(r"\\{1,3}u([0-9a-fA-F]{4})|\\{1,3}x([2-7][0-9a-fA-F])")
"""``\\u0067``, ``\\x67``: characters written as escapes, to hide them (``\\u0067hp_``) or by a
JSON encoder (``contrase\\u00f1a``), also JSON-encoded once more (``\\\\u0067``)."""
_ESCAPE_GATES = ("\\u", "\\x")

_ENTROPY_MIN_LEN = 20
_ENTROPY_RUN_START_RX = re.compile(r"(?<![A-Za-z0-9+/_~.-])[A-Za-z0-9+/_~.-]{20}")
_ENTROPY_WINDOW = 60
_ENTROPY_MAX_LEN = 4096

_VALUE_OPEN_RX = re.compile(r"[ \t]*(?P<q>\\{0,3}[\"'`])?")
_DQ_BODY_RX = re.compile(r'(?:[^"\\\r\n]|\\.){0,16384}')
_SQ_BODY_RX = re.compile(r"(?:[^'\\\r\n]|\\.){0,16384}")
_BT_BODY_RX = re.compile(r"[^`\r\n]{0,16384}")
_BARE_RX = re.compile(r"[^\s\\\"'`]{1,4096}")
"""The plain part of an unquoted value; quotes and backslashes are looked at one by one."""
_QUOTES = "\"'`"
_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}
_VALUE_TRAILERS = ".,:;"
_CALL_RX = re.compile(r"(?P<callee>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)[(\[]")
_XML_VALUE_RX = re.compile(r"(?P<secret>[^<\r\n]{1,1024})</")
_DOTTED_IDENT_RX = re.compile(r"[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z_0-9]*)+")
_SNAKE_IDENT_RX = re.compile(r"[a-z_][a-z0-9_]*")
_IDENT_NO_DIGIT_RX = re.compile(r"[A-Za-z_]+")
_TYPE_STRING_RX = re.compile(r"[A-Za-z_][\w.]*\[[\w.\[\], |]*\]")
_CAMEL_SPLIT_RX = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_KEY_CHARS_RX = re.compile(r"[^a-z0-9ñ]+")
_TYPE_WORD_RX = re.compile(
    r"[ \t]*(?:str|bytes|int|bool|float|Any|SecretStr|SecretBytes|Optional|Union|Secret|"
    r"string|number|list|dict|typing\.\w+)\b"
)
_ANNOTATION_RX = re.compile(
    r"[ \t]*[A-Za-z_][\w.]*(?:\[[^\]\n]{0,80}\])?"
    r"(?:[ \t]*\|[ \t]*[A-Za-z_][\w.]*(?:\[[^\]\n]{0,80}\])?){0,4}[ \t]*=(?!=)"
)

_STRONG_KEY_RX = re.compile(
    "|".join(
        (
            r"pass(?:wor)?d|passwd|passphrase|pwd|secret|token|credential|contrase|apikey",
            r"(?:api|auth|access|private|priv|client|service|account|db|database|signing|master|"
            r"encryption|session|storage|shared|admin|license|subscription|webhook)_?key",
            r"(?:db|database|key)_?pass",
            r"(?:hmac|jwt|otp|totp|mfa|app|consumer|deploy|ssh|gpg|pgp|wallet|seed|recovery|"
            r"decryption|cipher|aes|crypto|cookie|csrf|xsrf|signature|sign|oauth|bot|root)_?key",
            r"sshpass|pgpass|passcode|(?:^|_)(?:pat|psk|pin(?:_?code|_?number)?)$",
            # a salt or pepper kept in configuration (``HASH_SALT``): a secret of the app
            r"(?:^|_)(?:salt|pepper)$",
        )
    )
)
_WEAK_KEY_RX = re.compile(r"(?:^|_)(?:auth|pass|pw)$")
_DENY_KEY_RX = re.compile(
    r"tokeniz|secretar|(?:credential|password|key|token|secret)less|"
    r"(?:^|_)(?:max|min|num|n|total|prompt|completion|input|"
    r"output|cached|reasoning)_tokens?(?:_|$)|tokens(?:_|$)"
)
_DENY_LAST_SEGMENT = frozenset(
    {
        "type", "types", "name", "names", "file", "files", "path", "paths", "dir", "url", "uri",
        "urls", "endpoint", "length", "len", "count", "limit", "max", "min", "env", "field",
        "header", "policy", "ttl", "expiry", "expires", "expiration", "at", "time", "timeout",
        "format", "prompt", "hint", "required", "enabled", "version", "label", "description",
        "placeholder", "mode", "prefix", "suffix", "usage", "index", "strategy", "provider",
        "manager", "store", "source", "method", "scope", "scopes", "rotation", "reset", "helper",
        "ref", "arn", "location", "kind", "class", "cls", "size", "lifetime", "style",
        "message", "msg", "error", "errors", "warning", "text", "help", "doc", "docs", "title",
        "note", "notes", "comment", "reason", "status", "state", "info", "log", "fields",
        "refs", "provided", "present", "missing", "valid", "invalid", "exists", "disabled",
        "active", "exposure", "flag", "flags", "param", "params", "option", "options",
        "schema", "model", "models", "callback", "handler", "factory", "regex", "pattern",
        "patterns", "template", "list", "rounds", "iterations", "id", "ids",
    }
)  # fmt: skip


@functools.lru_cache(maxsize=8192)
def _normalize_key(key: str) -> str:
    key = _CAMEL_SPLIT_RX.sub("_", key.strip("-.'\"[]"))
    return _NON_KEY_CHARS_RX.sub("_", key.lower()).strip("_")


@functools.lru_cache(maxsize=8192)
def _is_secret_key(key: str) -> bool:
    """Does an assignment/JSON key name a secret (``DB_PASSWORD``, ``apiKey``, ``auth``)?"""
    norm = _normalize_key(key)
    if not norm or _DENY_KEY_RX.search(norm):
        return False
    if norm.rsplit("_", 1)[-1] in _DENY_LAST_SEGMENT:
        return False
    return bool(_STRONG_KEY_RX.search(norm) or _WEAK_KEY_RX.search(norm))


_LOOSE_KEY_RX = re.compile(r"(?:^|_)keys?$")
"""``STRIPE_KEY``, ``mapsKey``: a name that holds a key as often as a secret (``SORT_KEY``,
``cache_key``); its value is a secret only when it looks like one (`_loose_value_ok`)."""


@functools.lru_cache(maxsize=8192)
def _is_loose_key(key: str) -> bool:
    norm = _normalize_key(key)
    if not norm or _DENY_KEY_RX.search(norm) or _is_secret_key(key):
        return False
    if norm in _LOOSE_KEY_DENY or norm.rsplit("_", 1)[-1] in _DENY_LAST_SEGMENT:
        return False
    return _LOOSE_KEY_RX.search(norm) is not None


_LOOSE_KEY_DENY = frozenset(
    {
        "key", "keys", "sort_key", "primary_key", "foreign_key", "partition_key", "cache_key",
        "hash_key", "range_key", "row_key", "group_key", "lookup_key", "dict_key", "map_key",
        "object_key", "s3_key", "bucket_key", "idempotency_key", "dedup_key", "unique_key",
        "hotkey", "hot_key", "shortcut_key", "monkey", "turkey", "whiskey", "hockey",
        "jockey", "donkey", "lackey", "storage_key_name", "public_key", "pub_key", "pubkey",
        "ssh_public_key", "publishable_key", "site_key", "sitekey", "key_id", "kid",
    }
)  # fmt: skip


def _loose_value_ok(value: str) -> bool:
    """Under a loose key: long, with letters and digits, and no word or identifier."""
    if len(value) < 12 or not any(c.isdigit() for c in value):
        return False
    if not any(c.isalpha() for c in value) or value.count("/") > 1 or " " in value:
        return False
    return _LOOSE_SHAPE_RX.fullmatch(value) is not None and not _LOOSE_WORDY_RX.fullmatch(value)


_LOOSE_SHAPE_RX = re.compile(r"[A-Za-z0-9+/=_.~!@#$%^&*-]{12,512}")
_LOOSE_WORDY_RX = re.compile(r"(?:[A-Za-z]{3,}|\d{1,4})(?:[._-](?:[A-Za-z]{2,}|\d{1,4}))*")


@functools.lru_cache(maxsize=8192)
def _kind_for_key(key: str) -> str:
    norm = _normalize_key(key)
    if re.search(r"(?:^|_)pin(?:_?code|_?number)?$", norm):
        return "pin"
    if re.search(r"pass|pwd|(?:^|_)pw$|contrase|psk", norm):
        return "password"
    for word, kind in (
        ("secret", "secret"),
        ("token", "token"),
        ("key", "api-key"),
        ("salt", "salt"),
        ("pepper", "salt"),
    ):
        if word in norm:
            return kind
    return "credential" if "credential" in norm else "auth"


def _is_placeholder(value: str) -> bool:
    """References, masks, code words and documentation examples: not secrets."""
    stripped = value.strip()
    if not stripped or len(set(stripped)) == 1 or set(stripped) <= _MASK_CHARS:
        return True
    lowered = stripped.lower()
    if lowered in _PLACEHOLDER_WORDS or lowered.startswith(_REFERENCE_PREFIXES):
        return True
    if stripped[0] == "$" and _SHELL_REFERENCE_RX.match(stripped):
        return True
    if stripped.startswith("<") and stripped.endswith(">"):
        return True
    if _TEMPLATE_RX.search(stripped) or _DOTTED_NUMBER_RX.fullmatch(stripped):
        return True
    return _EXAMPLE_VALUE_RX.search(stripped) is not None


def _secretish(value: str) -> bool:
    """A bare word after ``key:`` in running text that still looks like a credential."""
    if len(value) < 8:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    return (has_digit and has_alpha) or any(c in "!@#$%^&*+=?~|" for c in value)


_BUILTIN_RULES: tuple[_Rule, ...] = tuple(_catalogued_rules() + _own_rules())
