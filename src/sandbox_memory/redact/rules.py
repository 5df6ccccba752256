"""The redactor's rules: secret formats, key names and the words that are never secrets (data)."""

from __future__ import annotations

import base64
import binascii
import functools
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

from .. import bounded

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
    """One precompiled regular expression that yields secret spans."""

    kind: str
    regex: re.Pattern[str]
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
    regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
    if not gate:
        # A rule whose pattern starts with a literal is skipped, cheaply, when the literal does
        # not occur: most rules are vendor prefixes, and most text holds none of them.
        gate = _gates(regex.pattern)
    if group is None:
        group = "secret" if "secret" in regex.groupindex else 0
    if isinstance(group, int) and group > regex.groups:
        group = 0
    return _Rule(
        kind=kind,
        regex=regex,
        priority=priority,
        group=group,
        has_head="head" in regex.groupindex,
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


_CATALOGUE_FORMATS: tuple[tuple[str, str, str], ...] = (
    # package registries: upload and publish tokens
    ("rubygems-api-token", "rubygems_", r"[a-f0-9]{48}(?![a-f0-9])"),
    ("clojars-api-token", "CLOJARS_", r"[a-z0-9]{60}(?![a-z0-9])"),
    ("dockerhub-token", "dckr_pat_", r"[A-Za-z0-9_-]{25,}"),
    ("dockerhub-token", "dckr_oat_", r"[A-Za-z0-9_-]{25,}"),
    ("artifactory-api-key", "AKCp", r"[A-Za-z0-9]{69}(?![A-Za-z0-9])"),
    ("artifactory-reference-token", "cmVmdGtu", r"[A-Za-z0-9]{56}(?![A-Za-z0-9])"),
    ("crates-io-token", "cio", r"[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
    ("nuget-api-key", "oy2", r"[a-z0-9]{43}(?![a-z0-9])"),
    ("packagist-token", "packagist_", r"[ou][ru]t_[a-f0-9]{68}"),
    # platforms and SaaS
    ("onepassword-service-token", "ops_eyJ", r"[A-Za-z0-9+/=_-]{100,}"),
    ("new-relic-key", "NRAK-", r"[A-Z0-9]{27}(?![A-Z0-9])"),
    ("new-relic-key", "NRII-", r"[A-Za-z0-9-]{32}"),
    ("flyio-token", "fo1_", r"[A-Za-z0-9_-]{43}"),
    ("planetscale-token", "pscale_tkn_", r"[A-Za-z0-9_=.-]{32,64}"),
    ("planetscale-token", "pscale_pw_", r"[A-Za-z0-9_=.-]{32,64}"),
    ("planetscale-token", "pscale_oauth_", r"[A-Za-z0-9_=.-]{32,64}"),
    ("supabase-token", "sbp_", r"[a-f0-9]{40}(?![a-f0-9])"),
    ("prefect-api-key", "pnu_", r"[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
    ("readme-api-key", "rdme_", r"[a-z0-9]{70}(?![a-z0-9])"),
    ("shippo-api-token", "shippo_live_", r"[a-f0-9]{40}"),
    ("shippo-api-token", "shippo_test_", r"[a-f0-9]{40}"),
    ("typeform-token", "tfp_", r"[A-Za-z0-9_.=-]{59,}"),
    ("frameio-token", "fio-u-", r"[A-Za-z0-9_=-]{64}"),
    ("dynatrace-token", "dt0c01.", r"[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    ("easypost-api-key", "EZAK", r"[A-Za-z0-9]{54}(?![A-Za-z0-9])"),
    ("easypost-api-key", "EZTK", r"[A-Za-z0-9]{54}(?![A-Za-z0-9])"),
    ("duffel-token", "duffel_live_", r"[A-Za-z0-9_=-]{43}"),
    ("duffel-token", "duffel_test_", r"[A-Za-z0-9_=-]{43}"),
    ("brevo-api-key", "xkeysib-", r"[a-f0-9]{64}-[A-Za-z0-9]{16}"),
    ("alibaba-access-key", "LTAI", r"[A-Za-z0-9]{20}(?![A-Za-z0-9])"),
    ("langsmith-api-key", "lsv2_pt_", r"[a-f0-9]{32}_[a-f0-9]{10}"),
    ("langsmith-api-key", "lsv2_sk_", r"[a-f0-9]{32}_[a-f0-9]{10}"),
    ("mapbox-token", "sk.eyJ", r"[A-Za-z0-9._-]{60,}"),
    ("airtable-token", "pat", r"[A-Za-z0-9]{14}\.[a-f0-9]{64}(?![a-f0-9])"),
    ("scalingo-token", "tk-us-", r"[A-Za-z0-9_-]{48}"),
    ("gitlab-token", "glrt-", r"[A-Za-z0-9_-]{20,}"),
    ("gitlab-token", "glffct-", r"[A-Za-z0-9_-]{20,}"),
    ("gitlab-token", "glpat-", r"[A-Za-z0-9_-]{20,300}\.[a-z0-9]{9}(?![a-z0-9])"),  # routable
    # second red-team pass: gitleaks, trufflehog and vendor documentation
    (
        "onepassword-secret-key",
        "A3-",
        r"[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})"
        r"-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}(?![A-Z0-9])",
    ),
    ("adobe-client-secret", "p8e-", r"[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
    ("aws-bedrock-api-key", "ABSK", r"[A-Za-z0-9+/]{100,}={0,2}"),
    ("aws-bedrock-api-key", "bedrock-api-key-", r"[A-Za-z0-9+/=_-]{40,}"),
    ("clickhouse-api-key", "4b1d", r"[A-Za-z0-9]{38}(?![A-Za-z0-9])"),
    ("facebook-access-token", "EAAM", r"[A-Za-z0-9]{80,}"),
    ("facebook-access-token", "EAAC", r"[A-Za-z0-9]{80,}"),
    ("flutterwave-key", "FLWSECK_TEST-", r"[A-Za-z0-9]{12,}(?:-X)?"),
    ("flutterwave-key", "FLWSECK-", r"[A-Za-z0-9]{12,}(?:-X)?"),
    ("flyio-token", "fm1r_", r"[A-Za-z0-9+/]{80,}={0,3}"),
    ("flyio-token", "fm1a_", r"[A-Za-z0-9+/]{80,}={0,3}"),
    ("flyio-token", "fm2_", r"[A-Za-z0-9+/]{80,}={0,3}"),
    ("grafana-token", "eyJrIjoi", r"[A-Za-z0-9]{40,}={0,3}"),
    ("harness-token", "pat.", r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}"),
    ("harness-token", "sat.", r"[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}"),
    ("infracost-token", "ico-", r"[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
    ("intra42-secret", "s-s4t2ud-", r"[a-f0-9]{64}"),
    ("intra42-secret", "s-s4t2af-", r"[a-f0-9]{64}"),
    ("octopus-deploy-key", "API-", r"(?=[A-Z]{0,25}[0-9])[A-Z0-9]{26}(?![A-Za-z0-9])"),
    ("openshift-token", "sha256~", r"[A-Za-z0-9_-]{43}"),
    ("settlemint-token", "sm_pat_", r"[A-Za-z0-9]{16}"),
    ("settlemint-token", "sm_aat_", r"[A-Za-z0-9]{16}"),
    ("settlemint-token", "sm_sat_", r"[A-Za-z0-9]{16}"),
    ("sourcegraph-token", "sgp_", r"(?:[a-f0-9]{16}_|local_)?[a-f0-9]{40}"),
    ("stripe-key", "sk_prod_", r"[A-Za-z0-9]{10,}"),
    ("stripe-key", "rk_prod_", r"[A-Za-z0-9]{10,}"),
    (
        "vault-token",
        "s.",
        r"(?=[A-Za-z]{0,23}[0-9])(?=[a-z0-9]{0,23}[A-Z])[A-Za-z0-9]{24}"
        r"(?![A-Za-z0-9._-])",
    ),
    (
        "authress-key",
        "sc_",
        r"[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}\."
        r"[A-Za-z0-9+/_=-]{30,120}",
    ),
    (
        "authress-key",
        "authress_",
        r"[a-z0-9]{5,30}\.[a-z0-9]{4,6}\.acc[_-][a-z0-9-]{10,32}\."
        r"[A-Za-z0-9+/_=-]{30,120}",
    ),
    (
        "tailscale-key",
        "tskey-",
        r"(?:auth|api|client|scim|webhook)?-?[A-Za-z0-9]{8,}-"
        r"[A-Za-z0-9]{20,}",
    ),
    ("posthog-personal-key", "phx_", r"[A-Za-z0-9]{40,}"),
    ("figma-token", "figd_", r"[A-Za-z0-9_-]{38,}"),
    ("netlify-token", "nfp_", r"[A-Za-z0-9]{36,}"),
    ("render-api-key", "rnd_", r"[A-Za-z0-9]{28,}"),
    ("resend-api-key", "re_", r"[A-Za-z0-9]{8}_[A-Za-z0-9]{24}(?![A-Za-z0-9])"),
    ("buildkite-token", "bkua_", r"[a-f0-9]{40}"),
    ("circleci-token", "CCIPAT_", r"[A-Za-z0-9]{20,}_[a-f0-9]{40}"),
    ("contentful-token", "CFPAT-", r"[A-Za-z0-9_-]{43}"),
    ("deno-deploy-token", "ddp_", r"[A-Za-z0-9]{36}"),
    ("pinecone-api-key", "pcsk_", r"[A-Za-z0-9]{4,10}_[A-Za-z0-9]{40,}"),
    ("nvidia-api-key", "nvapi-", r"[A-Za-z0-9_-]{60,}"),
    ("cerebras-api-key", "csk-", r"[a-z0-9]{40,}"),
    ("brevo-api-key", "xsmtpsib-", r"[a-f0-9]{64}-[A-Za-z0-9]{16}"),
    ("tencent-secret-id", "AKID", r"[A-Za-z0-9]{32}(?![A-Za-z0-9])"),
    ("sonarqube-token", "squ_", r"[a-f0-9]{40}"),
    ("sonarqube-token", "sqp_", r"[a-f0-9]{40}"),
    ("sonarqube-token", "sqa_", r"[a-f0-9]{40}"),
    ("hubspot-token", "pat-na1-", r"[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}"),
    ("hubspot-token", "pat-eu1-", r"[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}"),
    ("plaid-token", "access-production-", r"[a-f0-9]{8}-[a-f0-9-]{27}"),
    ("plaid-token", "access-development-", r"[a-f0-9]{8}-[a-f0-9-]{27}"),
    ("plaid-token", "access-sandbox-", r"[a-f0-9]{8}-[a-f0-9-]{27}"),
    ("bitbucket-app-password", "ATBB", r"[A-Za-z0-9]{32,}"),
    ("supabase-secret-key", "sb_secret_", r"[A-Za-z0-9_-]{20,}"),
    ("neon-api-key", "napi_", r"[a-z0-9]{60,}"),
    ("elevenlabs-api-key", "sk_", r"[a-f0-9]{48}(?![A-Za-z0-9])"),
    ("fireworks-api-key", "fw_", r"(?=[A-Za-z]{0,23}[0-9])[A-Za-z0-9]{20,}"),
    ("firebase-fcm-key", "AAAA", r"[A-Za-z0-9_-]{7}:[A-Za-z0-9_-]{100,}"),
    ("dropbox-token", "sl.", r"[A-Za-z0-9_.-]{120,}"),
    ("intercom-token", "dG9rO", r"[A-Za-z0-9+/]{40,}={0,2}"),
    ("salesforce-session", "00D", r"[A-Za-z0-9]{12,15}![A-Za-z0-9._]{60,}"),
    ("openai-session-key", "sess-", r"[A-Za-z0-9]{40}(?![A-Za-z0-9])"),
)
"""Vendor formats that start with a fixed prefix, checked against gitleaks' rule catalogue;
the kinds name the format (``docs/robustness.md`` lists every format covered)."""


_TRUNCATED_PREFIX_LIST = (
    r"gh[pousr]_", "github_pat_", "glpat-", r"xox[bpae]-", "sk-proj-", "sk-ant-", "sk_live_",
    "rk_live_", "npm_", "pypi-", "hf_", "dckr_pat_", "glsa_", "AKIA", "ASIA", "AIza", r"ya29\.",
    "shpat_", "sq0atp-",
)  # fmt: skip
"""Vendor prefixes after which a few characters cut short at the end of a text are the first
half of a token."""
_TRUNCATED_PREFIXES = "(?:" + "|".join(_TRUNCATED_PREFIX_LIST) + ")"


def _own_rules() -> list[_Rule]:
    rules: list[_Rule] = []
    add = rules.append

    add(_rule("age-secret-key", _lit("AGE-SECRET-KEY-1") + r"[A-Z0-9]{50,}"))

    # -- AI providers ------------------------------------------------------------------------
    add(
        _rule(
            "anthropic-api-key",
            _lit("sk-ant-") + r"[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{20,}",
            priority=_P_VENDOR - 1,
        )
    )
    add(
        _rule(
            "openrouter-api-key", _lit("sk-or-") + r"v\d-[A-Za-z0-9]{32,}", priority=_P_VENDOR - 1
        )
    )
    add(
        _rule(
            "openai-api-key",
            _lit("sk-")
            + r"(?!ant-|or-v\d-)(?=[A-Za-z0-9_-]{0,300}?\d)"
            + r"(?:(?:proj|svcacct|admin|None)-)?[A-Za-z0-9_-]{20,}",
        )
    )
    add(_rule("huggingface-token", _lit("hf_") + r"[A-Za-z0-9]{30,}"))
    add(_rule("huggingface-token", _lit("api_org_") + r"[A-Za-z0-9]{30,}"))
    add(_rule("groq-api-key", _lit("gsk_") + r"[A-Za-z0-9]{40,}"))
    add(_rule("xai-api-key", _lit("xai-") + r"[A-Za-z0-9]{60,}"))
    add(_rule("replicate-token", _lit("r8_") + r"[A-Za-z0-9]{30,}"))
    add(_rule("perplexity-api-key", _lit("pplx-") + r"[A-Za-z0-9]{40,}"))

    # -- code hosting / packages / dev tools ---------------------------------------------------
    add(_rule("github-token", _lit("github_pat_") + r"[A-Za-z0-9_]{22,}"))
    add(_rule("github-token", _rx_lit(r"gh[pousr]_") + r"[A-Za-z0-9]{30,}"))
    add(_rule("npm-token", _lit("npm_") + r"[A-Za-z0-9]{36,}"))
    add(_rule("npm-token", r":_authToken=[ \t]*(?P<secret>[^\s\"'\\]{8,4096})"))
    add(_rule("atlassian-api-token", _rx_lit(r"AT[AC]TT3") + r"[A-Za-z0-9_=-]{50,}"))
    add(_rule("postman-api-key", _lit("PMAK-") + r"[A-Za-z0-9]{20,}-[A-Za-z0-9]{30,}"))
    add(_rule("linear-api-key", _lit("lin_") + r"(?:api|oauth)_[A-Za-z0-9]{32,}"))
    add(_rule("notion-token", _lit("secret_") + r"[A-Za-z0-9]{43}(?![A-Za-z0-9])"))
    add(_rule("notion-token", _lit("ntn_") + r"[A-Za-z0-9]{40,}"))
    add(_rule("grafana-token", _lit("glsa_") + r"[A-Za-z0-9_-]{32,}"))
    add(_rule("grafana-token", _lit("glc_") + r"[A-Za-z0-9+/=_-]{32,}"))
    add(_rule("sentry-token", _rx_lit(r"sntry[su]_") + r"[A-Za-z0-9+/=_-]{40,}"))
    add(_rule("pulumi-token", _lit("pul-") + r"[a-f0-9]{40}(?![a-f0-9])"))

    # -- chat / mail -----------------------------------------------------------------------------
    add(
        _rule(
            "discord-bot-token",  # detect-secrets' format, with ASCII classes
            r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}",
            extend=True,
            prefilter=r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}",
        )
    )
    add(_rule("slack-token", _rx_lit(r"xox[abposrecd]-") + r"[A-Za-z0-9_%-]{10,}"))
    add(_rule("discord-mfa-token", _lit("mfa.") + r"[A-Za-z0-9_-]{80,}"))
    add(_rule("slack-token", _lit("xapp-") + r"\d-[A-Za-z0-9-]{20,}"))
    add(
        _rule(
            "slack-webhook",
            r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{20,}",
        )
    )
    add(
        _rule(
            "discord-webhook",
            r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/"
            r"(?P<secret>[A-Za-z0-9_-]{30,})",
        )
    )
    add(
        _rule(
            "telegram-bot-token",
            r":(?<=(?P<head>[0-9]{8}):)[A-Za-z0-9_-]{30,40}(?![A-Za-z0-9_-])",
            extend_left_digits=True,
            prefilter=r"[0-9]{8}:[A-Za-z0-9_-]{30}",
        )
    )
    add(_rule("mailgun-api-key", _lit("key-") + r"[0-9a-zA-Z]{32}(?![0-9A-Za-z])"))
    add(
        _rule(
            "mailchimp-api-key",
            r"-us(?<=" + _start("0-9a-z") + r"(?P<head>[0-9a-z]{32})-us)\d{1,2}(?![0-9])",
        )
    )
    add(
        _rule(
            "twilio-auth-token",
            r"AC[0-9a-f]{32}\\?[\"']?[ \t]*[,:][ \t]*\\?[\"']?(?P<secret>[0-9a-f]{32})(?![0-9a-f])",
            prefilter=r"AC[0-9a-f]{32}",
        )
    )

    # -- payments / commerce -----------------------------------------------------------------------
    add(
        _rule(
            "stripe-key",
            r"k_(?:live|test)_(?<=" + _start() + r"(?P<head>[rsp])k_(?:live|test)_)"
            r"[A-Za-z0-9]{10,}",
        )
    )
    add(_rule("stripe-webhook-secret", _lit("whsec_") + r"[A-Za-z0-9+/=]{24,}"))
    add(
        _rule(
            "shopify-token",
            _rx_lit(r"shp(?:at|ss|ca|pa)_") + r"[A-Za-z0-9]{20,}",
        )
    )
    add(_rule("square-access-token", _lit("sq0atp-") + r"[A-Za-z0-9_-]{22,}"))
    add(_rule("square-access-token", _lit("EAAA") + r"[A-Za-z0-9_+-]{50,}"))

    # -- cloud -------------------------------------------------------------------------------------
    add(_rule("google-api-key", _lit("AIza") + r"[A-Za-z0-9_-]{35}", extend=True))
    add(_rule("google-oauth-client-secret", _lit("GOCSPX-") + r"[A-Za-z0-9_-]{20,}"))
    add(_rule("google-oauth-token", _lit("ya29.") + r"[A-Za-z0-9_-]{20,}"))
    add(_rule("google-oauth-token", _lit("1//0") + r"[A-Za-z0-9_-]{40,}"))
    add(_rule("digitalocean-token", _rx_lit(r"do[por]_v1_") + r"[A-Za-z0-9]{40,}"))
    add(_rule("heroku-api-key", _lit("HRKU-") + r"[A-Za-z0-9_-]{20,}"))
    add(_rule("databricks-token", _lit("dapi") + r"[a-f0-9]{32}(?:-\d+)?(?![A-Za-z0-9])"))
    add(_rule("doppler-token", _lit("dp.") + r"(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}"))
    add(_rule("vault-token", _rx_lit(r"hv[sbr]\.") + r"[A-Za-z0-9_-]{24,}"))
    add(_rule("cloudflare-origin-ca-key", _lit("v1.0-") + r"[a-f0-9]{24}-[a-f0-9]{146}"))
    for name in ("accountkey", "sharedaccesskey"):
        add(
            _rule(
                "azure-storage-key",
                name + r"[ \t]*=[ \t]*(?P<secret>[a-z0-9+/]{20,}={0,2})",
                lowered=True,
                priority=_P_CONTEXT,
            )
        )
    for name in (r"aws_?secret(?:_?access)?(?:_?key)?", r"secret_?access_?key"):
        add(
            _rule(
                "aws-secret-access-key",
                name + _Q + _SEP + _Q + r"(?P<secret>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
                lowered=True,
                priority=_P_CONTEXT,
            )
        )

    # -- vendor tokens only recognisable from context ------------------------------------------
    add(
        _rule(
            "heroku-api-key",
            r"heroku[^\n]{0,40}?(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}"
            r"-[0-9a-f]{12})(?![0-9a-f])",
            lowered=True,
            priority=_P_CONTEXT,
        )
    )
    add(_vendor_context("heroku-api-key", "heroku", r"[a-z0-9_-]{20,}"))
    for vendor in ("atlassian", "jira", "confluence", "bitbucket"):
        add(_vendor_context("atlassian-api-token", vendor, r"[a-z0-9_=+/-]{16,}"))
    for vendor in ("cloudflare", _llit("cf_"), _llit("cf-")):
        add(_vendor_context("cloudflare-api-token", vendor, r"[a-z0-9_-]{32,}"))
    add(_vendor_context("twilio-auth-token", "twilio", r"[a-z0-9]{32}"))

    # -- structured tokens -----------------------------------------------------------------------
    add(
        _rule(
            "jwt",
            _lit("eyJ", "A-Za-z0-9_-")
            + r"[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*){0,3}",
            validate=_is_formal_jwt,
        )
    )

    # -- URLs and connection strings -------------------------------------------------------------
    add(
        _rule(
            "url-password",
            r"://[^\s:/?#@\"'<>\[\]{}\\]{0,256}:(?P<secret>[^\s/?#\"'<>\\]{1,512})@"
            r"(?=[A-Za-z0-9\[._-])",
            priority=_P_CONTEXT,
            kind_of=_url_credential_kind,
            validate=_not_reference,
        )
    )
    add(
        _rule(
            "url-token",  # a token as the whole user part: https://<token>@host (Sentry DSNs,
            # git remotes with a bare token)
            r"://(?P<secret>[A-Za-z0-9_~.-]{16,256})@(?=[A-Za-z0-9\[._-])",
            priority=_P_CONTEXT,
            validate=_is_token_user,
        )
    )
    add(
        _rule(
            "password",  # .netrc: machine <host> login <user> password <secret>
            r"machine[ \t]+\S+(?:\s+(?:login|account|port|protocol)[ \t]+\S+){0,4}\s+password"
            r"[ \t]+(?P<secret>(?:[^\s\\\"]|\\(?![nrt\"])){1,256})",
            lowered=True,
            priority=_P_CONTEXT,
            validate=_not_reference,
        )
    )
    add(
        _rule(
            "password",  # .pgpass lines (host:port:database:user:password), where it is named
            r"(?:^|(?<=\n)|(?<=\\n))[^:\s\x00\\]{1,253}:(?:\d{1,5}|\*):[^:\s\x00]{1,128}:[^:\s\x00]{1,128}:"
            r"(?P<secret>(?:[^\s\x00\\\"]|\\(?![nrt\"])){1,256})",
            priority=_P_CONTEXT,
            validate=_not_reference,
            gate=("pgpass",),
        )
    )
    add(
        _rule(
            "aws-signed-url",
            r"[?&;](?:x-amz-(?:signature|credential|security-token)|x-goog-(?:signature|credential))"
            rf"=(?P<secret>{_URL_VALUE})",
            lowered=True,
            priority=_P_CONTEXT,
            kind_of=_signed_url_kind,
            gate=("x-amz-", "x-goog-"),
        )
    )
    add(
        _rule(
            "azure-sas-signature",
            rf"sig=(?<=[?&;]sig=)(?P<secret>{_URL_VALUE})",
            lowered=True,
            priority=_P_CONTEXT,
        )
    )
    add(
        _rule(
            "url-token",
            r"[?&;#](?:access_token|id_token|refresh_token|auth_token|token|api_key|apikey|"
            r"api-key|key|client_secret|secret|password|passwd|pwd|signature|code_verifier|jwt|"
            r"session_?id|sessionid)"
            rf"=(?P<secret>{_URL_VALUE})",
            lowered=True,
            priority=_P_CONTEXT,
            validate=_not_reference,
            gate=(
                "token=",
                "key=",
                "secret=",
                "pass",
                "pwd=",
                "signature=",
                "verifier=",
                "jwt=",
                "session_id=",
                "sessionid=",
            ),
        )  # fmt: skip
    )
    for flag in ("-u", "--user"):
        add(
            _rule(
                "basic-auth",
                re.escape(flag)
                + rf"(?<=[ \t]{re.escape(flag)})[ \t=]+[\"']?[^\s:\"'@]{{1,128}}:"
                + r"(?P<secret>[^\s\"']{1,256})",
                lowered=True,
                priority=_P_CONTEXT,
                validate=_not_reference,
                prefilter=r"[ \t]" + re.escape(flag) + r"[ \t=]",
            )
        )

    # -- HTTP authorization ----------------------------------------------------------------------
    auth_head = _llit("authorization") + _Q + r"[ \t]*[:=][ \t]*" + _Q
    add(
        _rule(
            "authorization",
            auth_head
            + r"(?P<scheme>bearer|basic|token|bot|apikey|api-key|sso-key|jwt|negotiate|ntlm|"
            + r"hmac|key|otp|ssws)[ \t]+(?P<secret>[^\s\"'\\,;`]{4,4096})",
            lowered=True,
            priority=_P_HEADER,
            kind_of=_authorization_kind,
            validate=_not_reference,
        )
    )
    add(
        _rule(
            "authorization",
            auth_head
            + r"(?:digest|aws4-hmac-sha256|signature)[ \t]+(?P<secret>[^\"'\\\r\n]{8,4096})",
            lowered=True,
            priority=_P_HEADER,
        )
    )
    add(
        _rule(
            "authorization",
            auth_head + r"(?P<secret>[a-z0-9._~+/=-]{16,4096})(?![a-z0-9._~+/=(-]|[ \t]+[a-z0-9])",
            lowered=True,
            priority=_P_HEADER,
            validate=_has_digit,
        )
    )
    add(
        _rule(
            "bearer-token",
            _llit("bearer") + r"[ \t]+(?P<secret>[a-z0-9._~+/-]{16,4096}=*)",
            lowered=True,
            priority=_P_HEADER,
            validate=_has_digit,
        )
    )
    add(
        _rule(
            "basic-auth",
            _llit("basic") + r"[ \t]+(?P<secret>[a-z0-9+/]{8,4096}={0,2})(?![a-z0-9+/=])",
            lowered=True,
            priority=_P_HEADER,
            validate=_is_basic_credential,
        )
    )
    # -- formats from a public scanner catalogue (gitleaks' rules), as facts: prefix + body -----
    for kind, prefix, body in _CATALOGUE_FORMATS:
        # A prefix too short to gate the rule (``s.``) is looked for with a few body chars.
        short = re.escape(prefix) + r"[A-Za-z0-9]{8}" if len(prefix) < _MIN_GATE else None
        add(_rule(kind, _lit(prefix) + body, prefilter=short))
    add(
        _rule(
            "jwt",  # a JWT wrapped in base64 (gitleaks' jwt-base64): "eyJ" encodes as "ZXlK"
            _lit("ZXlK") + r"[A-Za-z0-9+/]{40,}={0,2}",
            validate=_is_base64_jwt,
        )
    )
    add(
        _rule(
            "facebook-access-token",  # <app id>|<app secret>
            r"\|(?<=(?P<head>[0-9]{14})\|)[A-Za-z0-9_-]{27,40}(?![A-Za-z0-9_-])",
            extend_left_digits=True,
            prefilter=r"[0-9]{14}\|[A-Za-z0-9_-]{27}",
        )
    )
    add(
        _rule(
            "maxmind-license-key",
            r"_mmk(?<=" + _start() + r"(?P<head>[A-Za-z0-9]{6}_[A-Za-z0-9]{29})_mmk)"
            r"(?![A-Za-z0-9_])",
            gate=("_mmk",),
        )
    )
    # password hashes: crypt(3), bcrypt, Apache, yescrypt, Argon2 (crackable offline)
    for pattern, gates in _HASH_FORMATS:
        add(_rule("password-hash", pattern, priority=_P_CONTEXT, gate=gates))
    # a token cut short at the end of a line or a text (a truncated or wrapped output, the
    # first half of a token split over two runs)
    add(
        _rule(
            "truncated-token",  # at a token start: "pnpm_store_v3", "x-pypi-ab12" hold none
            r"(?:(?<![A-Za-z0-9_.-])|(?<=\\[ntr]))"  # a token start
            + _TRUNCATED_PREFIXES
            + r"(?P<secret>(?=[A-Za-z_-]{0,40}[0-9])[A-Za-z0-9_-]{6,})"
            r"(?=\.{2,}|…|[ \t]*(?:\[|\()?(?:output )?truncated|[ \t]*(?:\\[nr]|\r?\n|\Z)"
            r"|\\?[\"'](?:[ \t]*[,}\]]|[ \t]*\Z))",
            priority=_P_VENDOR + 1,
            gate=_gates(_TRUNCATED_PREFIXES),
        )
    )
    # seed phrases of wallets: 12 to 24 lowercase words after their name
    add(
        _rule(
            "seed-phrase",
            r"(?:seed|recovery|mnemonic|backup|wallet|secret)[ \t]+(?:phrase|words|sentence|"
            r"seed)(?:[ \t]+(?:is|was)|[ \t]*[:=])[ \t]*(?:\\{0,3}[\"'])?"
            r"(?P<secret>(?:[a-z]{3,8}[ \t]+){11,23}[a-z]{3,8})",
            lowered=True,
            priority=_P_CONTEXT,
        )
    )
    add(
        _rule(
            "seed-phrase",
            r"mnemonic[ \t]*[:=][ \t]*(?:\\{0,3}[\"'])?(?P<secret>(?:[a-z]{3,8}[ \t]+){11,23}[a-z]{3,8})",
            lowered=True,
            priority=_P_CONTEXT,
        )
    )
    # a user and a password told as a pair: "login admin / S3cret!", "creds are admin/S3cret"
    for word in ("login", "log in", "logon", "credentials", "creds"):  # a literal start each
        add(
            _rule(
                "password",
                re.escape(word) + r"(?:[ \t]+(?:is|are|as|with))?"
                r"[ \t]*:?[ \t]+[\w.@-]{1,64}[ \t]*/[ \t]*"
                r"(?P<secret>[^\s/\"'`]{5,127}[^\s/\"'`.,;:)])",
                lowered=True,
                priority=_P_CONTEXT,
                validate=_mixed_credential,
            )
        )
    # session cookies by name, wherever they appear (a header, a cookie jar, a curl -b)
    add(
        _rule(
            "session-cookie",
            r"(?:_gitlab_session|jsessionid|phpsessid|connect\.sid|laravel_session|ci_session|"
            r"_session_id|sessionid|session_token|session-token|asp\.net_sessionid|\.aspxauth|"
            r"_rails_session|rack\.session|express:sess|__host-session|__secure-session|"
            r"remember_token|remember_user_token|auth_session|_forum_session|session|sess)"
            r"=(?P<secret>[^\s;&\"'`<>\\,]{12,4096})",
            lowered=True,
            priority=_P_CONTEXT,
            validate=_session_value,
        )
    )
    add(
        _rule(
            "slack-token",  # configuration and refresh tokens: xoxe.xoxp-1-..., xoxe-1-...
            _lit("xoxe") + r"(?:\.xox[bp])?-\d-[A-Za-z0-9]{140,}",
        )
    )
    add(
        _rule(
            "teams-webhook",
            r"webhook\.office\.com/webhookb2/[A-Za-z0-9@-]{20,}/IncomingWebhook/"
            r"(?P<secret>[A-Za-z0-9]{32}/[A-Za-z0-9-]{36})",
            gate=("webhook.office.com",),
        )
    )
    add(
        _rule(
            "terraform-cloud-token",
            r"\.atlasv1\.(?<=(?P<head>[a-z0-9]{14})\.atlasv1\.)[A-Za-z0-9_=-]{60,70}",
            gate=(".atlasv1.",),
        )
    )
    add(
        _rule(
            "azure-ad-client-secret",
            r"Q~(?<=(?P<head>[A-Za-z0-9_~.]{3}\d)Q~)[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])",
            gate=("q~",),
        )
    )

    # -- credentials on command lines whose flag carries no secret-like word ------------------
    for tools, flags, lowered in _COMMAND_FLAGS:
        add(
            _rule(
                "password",
                rf"(?:{tools})(?:[ \t]+[^\s|;&]{{1,200}}){{0,12}}?[ \t]+(?:{flags})"
                rf"(?:[ \t]*=[ \t]*|[ \t]+)(?!-){_ARG}",
                lowered=lowered,
                priority=_P_CONTEXT,
                validate=_not_reference,
                gate=_command_gates(f"(?:{tools})"),
            )
        )
    for pattern in _COMMAND_POSITIONAL:
        add(
            _rule(
                "password",
                pattern + _ARG,
                lowered=True,
                priority=_P_CONTEXT,
                validate=_not_reference,
                gate=_command_gates(pattern),
            )
        )
    for kind, pattern, validate, prefilter, gate in _SHAPE_FORMATS:
        add(
            _rule(
                kind,
                pattern,
                lowered=kind == "crypto-private-key",
                priority=_P_ENTROPY if kind == "dotted-token" else _P_CONTEXT,
                validate=validate,
                prefilter=prefilter,
                gate=gate,
            )
        )
    return rules


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


_HASH_FORMATS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\$2[abxy]?\$\d\d\$(?P<secret>[./A-Za-z0-9]{53})", ("$2",)),
    (
        r"\$(?:1|5|6|md5|apr1)\$(?:rounds=\d{1,9}\$)?[./A-Za-z0-9]{1,16}\$"
        r"(?P<secret>[./A-Za-z0-9]{20,})",
        ("$1$", "$5$", "$6$", "$md5$", "$apr1$"),
    ),
    (r"\$y\$[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{1,64}\$(?P<secret>[./A-Za-z0-9]{20,})", ("$y$",)),
    (
        r"\$argon2(?:id|i|d)\$v=\d+\$[^$\s]{1,64}\$[A-Za-z0-9+/]{8,}\$"
        r"(?P<secret>[A-Za-z0-9+/]{20,})",
        ("$argon2",),
    ),
)
"""Password hashes by their crypt prefix: the hash is redacted, the algorithm kept."""

_ARG = (
    r"\\?[\"']?(?P<secret>(?<=')[^'\n]{1,256}(?=')|(?<=\")[^\"\n\\]{1,256}(?=\\?\")"
    r"|[^\s'\"`|;&\\]{1,256})"
)
"""A command argument: quoted (without its quotes, also JSON-escaped ones) or bare."""

_COMMAND_FLAGS: tuple[tuple[str, str, bool], ...] = (
    ("redis-cli", "-a|--pass|--askpass", True),
    (
        r"(?:docker|podman|nerdctl|buildah|skopeo|oras|crane|helm(?:[ \t]+registry)?)[ \t]+login",
        "-p|--password",
        True,
    ),
    ("twine", "-p|--password", True),
    (r"az[ \t]+login|az[ \t]+ad|az[ \t]+acr|az[ \t]+aks|az[ \t]+keyvault", "-p|--password", True),
    ("sqlcmd|bcp|osql|isql", "-P|--password", False),
    ("zip|unzip|zipcloak", "-P|--password", False),
    ("ssh-keygen", "-N|-P", False),
    ("keytool", "-storepass|-keypass|-srcstorepass|-deststorepass|-srckeypass|-destkeypass", True),
    ("ldapsearch|ldapadd|ldapmodify|ldapdelete|ldapwhoami|ldappasswd|ldapcompare", "-w", False),
    ("mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport|mongostat", "-p", False),
    ("openssl", r"-pass(?:in|out)?[ \t]+pass:|-k", False),
    ("mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb", "--password", True),
    (r"gh[ \t]+secret[ \t]+set", "-b|--body", True),
    ("lftp|ncftp", r"-u[ \t]+[^\s,]{1,64},", True),
    ("sshpass", "-p", True),
    # SNMP: the community string (v1/v2c) and the v3 authentication and privacy passphrases
    (
        "snmpwalk|snmpbulkwalk|snmpget|snmpgetnext|snmpbulkget|snmpset|snmptable|snmptrap|"
        "snmpdelta|snmpdf|snmpstatus|snmpnetstat|onesixtyone",
        "-c|-A|-X",
        False,
    ),
)
"""(tools, flags, caseless): the argument after one of the flags of one of the tools is a
password, whatever the flag is called (``-P`` and ``-p`` differ for some tools)."""

_COMMAND_POSITIONAL: tuple[str, ...] = (
    # mysql -pSECRET, mysql -p'SECRET' (no space: -p alone prompts)
    r"(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb)"
    r"(?:[ \t]+[^\s|;&]{1,200}){0,12}?[ \t]+-p(?=[^\s])",
    r"(?:7z|7za|7zr|sshpass)(?:[ \t]+[^\s|;&]{1,200}){0,12}?[ \t]+-p(?=[^\s`])",
    r"(?:smbclient|rpcclient|smbmap|smbget|crackmapexec|netexec|nxc|enum4linux)"
    r"(?:[ \t]+[^\s|;&]{1,200}){0,12}?[ \t]+(?:-u|--user)[ \t=]+[\"']?[^\s%'\"]{1,128}%",
    r"rabbitmqctl(?:[ \t]+-\S+)*[ \t]+(?:add_user|change_password)[ \t]+\S+[ \t]+",
    r"htpasswd[ \t]+-[a-mo-z]*b[a-mo-z]*(?:[ \t]+-[a-z]+)*[ \t]+\S+[ \t]+\S+[ \t]+",
    r"htpasswd[ \t]+-(?=[a-z]*n)(?=[a-z]*b)[a-z]+(?:[ \t]+-[a-z]+)*[ \t]+\S+[ \t]+",
    r"net[ \t]+use[^\n]{0,200}?/user:\S+[ \t]+(?![/-])",
    r"vault[ \t]+login(?:[ \t]+-\S+)*[ \t]+(?:token=)?(?![-\w]+=)(?!-)",
    r"(?:sqlplus|rman|expdp|impdp|sqlldr|dgmgrl)(?:[ \t]+-\S+)*[ \t]+[\"']?[a-z0-9_$#]+/"
    r"(?=[^\s@/]+(?:@|[ \t]|$))",
    r"conn(?:ect)?[ \t]+[a-z0-9_$#]+/(?=[^\s@/]+@)",
    r"identified[ \t]+by[ \t]+(?:password[ \t]+)?",
    r"set[ \t]+password[^=\n]{0,80}=[ \t]*(?:password[ \t]*\([ \t]*)?",
    r"(?:echo|printf)(?:[ \t]+-[ne]+)?(?:[ \t]+'%s\\n')?[ \t]+(?=[^|\n]{1,256}\|[^|\n]{0,120}?"
    r"(?:--password-stdin|--with-token|chpasswd|passwd[ \t]+--stdin|--passphrase-fd))",
    r"pass[^\n]{0,200}?send[ \t]+(?:--[ \t]+)?(?=\\?\")",
    r"(?:-u|--user)[ \t=]+(?=[\"']?[^\s:\"'@]{8,128}:(?:[\s\"']|$))",
    r"config[ \t]+http-basic\.\S+[ \t]+\S+[ \t]+",
    r"convertto-securestring(?:[ \t]+-string)?[ \t]+(?=[\"'])",
)
"""Commands whose secret follows a fixed shape rather than a flag."""

_SECRET_FILE = (
    r"(?:master\.key|credentials\.key|[\w.-]*vault[_-]?pass[\w.-]*|\.pgpass|\.netrc|"
    r"[\w.-]*(?:secret|password|passwd|token|apikey|api_key)s?(?:\.txt)?|[\w-]+\.key)"
)
"""A file that holds a secret and nothing else (Rails' ``master.key``, Ansible's
``.vault_pass.txt``, ``db_password.txt``, ``server.key``; ``.pub`` files are not among them)."""

_SECRET_FILE_READ_RX = re.compile(
    r"cat(?<![\w-]cat)[ \t]+(?:-[a-z]+[ \t]+)*[^\s|;&<>\"']{0,200}?"
    + _SECRET_FILE
    + r"[ \t]*(?:\\?[\"'}\]]|\Z)"
)
"""A command (a tool call's arguments) that prints a secret file: the output that follows it
is the secret (``{"cmd": "cat config/master.key"}``, then the key in the next output)."""

_SHAPE_FORMATS: tuple[
    tuple[str, str, Callable[[str], bool] | None, str | None, tuple[str, ...]], ...
] = (
    # a private JSON Web Key (RFC 7517/7518): its private members, in a text that is a JWK
    (
        "jwk-private-key",
        r"\\{0,3}\"(?:d|p|q|dp|dq|qi|k)\\{0,3}\"[ \t]*:[ \t]*\\{0,3}\""
        r"(?P<secret>[A-Za-z0-9_-]{16,})",
        None,
        None,
        ("kty",),
    ),
    # a wallet's private key: 32 bytes in hex under a wallet or key name (an address has 20)
    (
        "crypto-private-key",
        r"(?:wallet|priv(?:ate)?[_ -]?key|eth(?:ereum)?[_ -]?key|signer|mnemonic)"
        r"[a-z0-9_ -]{0,24}\\{0,3}[\"']?[ \t]*[=:][ \t]*\\{0,3}[\"']?"
        r"(?P<secret>0x[0-9a-f]{64})(?![0-9a-z])",
        None,
        None,
        (
            "wallet",
            "privkey",
            "private_key",
            "private-key",
            "private key",
            "privatekey",
            "priv_key",
            "priv-key",
            "eth_key",
            "ethereum",
            "signer",
            "mnemonic",
        ),
    ),
    # a Bitcoin private key in Wallet Import Format, near a word that names one (the checksum
    # tells it from other base58; scanning every base58 run cost 8 ns a byte)
    (
        "bitcoin-wif-key",
        r"(?<![1-9A-HJ-NP-Za-km-z])(?P<secret>5[HJK][1-9A-HJ-NP-Za-km-z]{49}|"
        r"[KL][1-9A-HJ-NP-Za-km-z]{51})(?![1-9A-HJ-NP-Za-km-z])",
        _is_wif,
        None,
        (
            "wif",
            "privkey",
            "bitcoin",
            "btc",
            "wallet",
            "electrum",
            "private key",
            "private_key",
            "privatekey",
            "secret key",
            "seed",
        ),
    ),
    # what a secret file holds, printed after the command that printed it
    (
        "secret-file-content",
        r"cat(?<![\w-]cat)[ \t]+(?:-[a-z]+[ \t]+)*[^\s|;&<>]{0,200}?"
        + _SECRET_FILE
        + r"[ \t]*(?:\\[nr]|\r?\n)+(?P<secret>[^\s\\\"']{6,512})",
        _not_reference,
        None,
        ("cat",),
    ),
    # a bare token of three dot-separated base64url parts (bot and session tokens), no word
    # needed: random as a whole, so dotted names and versions are not taken
    (
        "dotted-token",
        r"(?<![A-Za-z0-9_.-])(?P<secret>[A-Za-z0-9_-]{20,120}\.[A-Za-z0-9_-]{6,60}\."
        r"[A-Za-z0-9_-]{20,200})(?![A-Za-z0-9_.-])",
        _is_random_dotted,
        r"[A-Za-z0-9_-]{4}\.[A-Za-z0-9_-]{6}[A-Za-z0-9_-]{0,54}\.[A-Za-z0-9_-]{4}",
        (),
    ),
)
"""Secrets known by their shape or their surroundings rather than a vendor prefix: (kind,
pattern with a ``secret`` group, validator, prefilter for a pattern without a literal, words
one of which the text must hold for the rule to run)."""


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
