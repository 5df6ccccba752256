"""Secret redaction applied before anything an agent saw reaches disk, a log or a memory model.

`Redactor.redact_text` replaces every secret it finds with a typed marker such as
``[REDACTED:aws-access-key]`` (never a blank); `Redactor.redact_json` does the same for every
string inside a JSON-like structure (the shape of Agents SDK input and output items).

Detection has three layers:

* regular expressions of the maintained ``detect-secrets`` plugins (AWS, GitHub, GitLab, Slack,
  Stripe, SendGrid, PyPI, Discord, Twilio, Square, OpenAI legacy keys, basic-auth URLs), its JWT
  validity check and its secret-keyword list;
* our own patterns where detect-secrets has no plugin or a too narrow one (current OpenAI and
  Anthropic keys, fine-grained GitHub PATs, whole private key blocks, connection strings, URL
  query tokens, Authorization headers, ~30 vendor prefixes);
* context rules: ``password=...`` / ``"token": "..."`` / ``--api-key ...`` assignments, and
  long high-entropy strings shortly after a secret-like word.

Speed: every pattern is precompiled and, where possible, starts with a literal so that ``re``
uses its fast prefix search; patterns that cannot are gated by a cheap substring test.  Nothing
can backtrack over more than a bounded window, and private key blocks are paired BEGIN-to-END
with a bisect instead of a lazy scan, so cost grows linearly with the input.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import json
import math
import re
import string
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["REDACTION_MARKER", "Redactor", "default_redactor"]

REDACTION_MARKER = "[REDACTED:{kind}]"

# Priorities pick the marker kind when detectors flag overlapping text (lower wins).
_P_EXTRA = 0
_P_PRIVATE_KEY = 5
_P_VENDOR = 10
_P_CONTEXT = 20
_P_HEADER = 25
_P_ASSIGNMENT = 30
_P_ENTROPY = 40

# A hit is (start, end, priority, kind); tuples keep pathological inputs cheap.
_Hit = tuple[int, int, int, str]

_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
_DIGIT_CHARS = frozenset(string.digits)
_KEY_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_MARKER_RX = re.compile(r"\[REDACTED:[^\]\s]{1,64}\]")
_MARKER_PREFIX = "[REDACTED:"
_BATCH_SEPARATOR = "\n" + "\x00" * 96 + "\n"
"""Joins strings scanned together: longer than any context window a rule looks across (60
characters) and made of a character no secret contains, so no hit spans two strings."""

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
_TEMPLATE_RX = re.compile(r"%[-#0 +]?\d*[sdrfxi]|%\(\w+\)|\{\d*\}|\{[a-z_]\w*\}")
_DOTTED_NUMBER_RX = re.compile(r"\d+(?:[.:]\d+)+")
_REFERENCE_PREFIXES = (
    "$", "%(", "{{", "#{", "@@", "<", _MARKER_PREFIX, "os.environ", "os.getenv", "process.env",
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


_LITERAL_RX = re.compile(r"[A-Za-z0-9_-]+")
_QUANTIFIERS = frozenset("?*+{")


def _literal_prefix(pattern: str) -> str | None:
    """The lowercased literal every match of ``pattern`` starts with (2+ chars), if any."""

    match = _LITERAL_RX.match(pattern)
    if match is None:
        return None
    literal = match.group()
    if match.end() < len(pattern) and pattern[match.end()] in _QUANTIFIERS:
        literal = literal[:-1]  # "ab?" only promises "a"
    return literal.lower() if len(literal) >= 2 else None


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
) -> _Rule:
    regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
    if not gate:
        # A rule whose pattern starts with a literal is skipped, cheaply, when the literal does
        # not occur: most rules are vendor prefixes, and most text holds none of them.
        literal = _literal_prefix(regex.pattern)
        if literal:
            gate = (literal,)
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


def _jwt_header_is_json(token: str) -> bool:
    head = token.split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
        return isinstance(json.loads(decoded.decode("utf-8")), dict)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return False


def _load_jwt_check() -> Callable[[str], bool]:
    """detect-secrets' JWT check (header and payload must be base64url JSON)."""
    try:
        from detect_secrets.plugins.jwt import JwtTokenDetector
    except ImportError:  # pragma: no cover - detect-secrets is a hard dependency
        return _jwt_header_is_json
    ds_check: Callable[[str], Any] = JwtTokenDetector.is_formally_valid

    def check(token: str) -> bool:
        head_and_payload = ".".join(token.split(".")[:2])  # the signature is opaque bytes
        try:
            return bool(ds_check(head_and_payload))
        except Exception:  # noqa: BLE001 - a failing third-party check must not leak secrets
            return _jwt_header_is_json(token)

    return check


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


# ---- detect-secrets --------------------------------------------------------------------------

# (module, class, denylist index or None for all, kind, secret group, extend, gate)
_DS_SPECS: tuple[tuple[str, str, int | None, str, int, bool, tuple[str, ...]], ...] = (
    ("aws", "AWSKeyDetector", 0, "aws-access-key", 0, False, ()),
    ("aws", "AWSKeyDetector", 1, "aws-secret-access-key", 1, False, ("aws",)),
    ("basic_auth", "BasicAuthDetector", 0, "url-password", 1, False, ()),
    ("discord", "DiscordBotTokenDetector", None, "discord-bot-token", 0, True, ()),
    ("github_token", "GitHubTokenDetector", None, "github-token", 0, True, ()),
    ("gitlab_token", "GitLabTokenDetector", None, "gitlab-token", 0, True, ()),
    ("openai", "OpenAIDetector", None, "openai-api-key", 0, True, ()),
    ("pypi_token", "PypiTokenDetector", None, "pypi-token", 0, True, ()),
    ("sendgrid", "SendGridDetector", None, "sendgrid-api-key", 0, True, ()),
    ("slack", "SlackDetector", 0, "slack-token", 0, True, ("xox",)),
    ("slack", "SlackDetector", 1, "slack-webhook", 0, True, ("hooks.slack.com",)),
    ("square_oauth", "SquareOAuthDetector", None, "square-oauth-secret", 0, True, ()),
    ("stripe", "StripeDetector", None, "stripe-key", 0, True, ("k_live_",)),
    ("twilio", "TwilioKeyDetector", 0, "twilio-account-sid", 0, True, ()),
    ("twilio", "TwilioKeyDetector", 1, "twilio-api-key", 0, True, ()),
)
# Not used, on purpose: PrivateKeyDetector (matches the header line only; we replace the whole
# block), JwtTokenDetector's regex (its lazy tail drops the signature; we reuse its validity
# check), NpmDetector (`.+` backtracks quadratically on long lines), Mailchimp and Telegram
# (leading character classes make them 10-30x slower; literal-first equivalents below),
# Keyword/HighEntropy (line and file-type driven; reimplemented below), Artifactory, IBM,
# Cloudant and SoftLayer (noisy or slow, niche).


def _detect_secrets_rules() -> list[_Rule]:
    import importlib

    rules: list[_Rule] = []
    for module_name, class_name, index, kind, group, extend, gate in _DS_SPECS:
        try:
            module = importlib.import_module(f"detect_secrets.plugins.{module_name}")
            denylist = list(getattr(module, class_name).denylist)
        except (ImportError, AttributeError):  # pragma: no cover - version drift
            continue
        selected = denylist if index is None else denylist[index : index + 1]
        for regex in selected:
            if not isinstance(regex, re.Pattern):  # pragma: no cover
                continue
            rules.append(
                _rule(
                    kind,
                    regex,
                    group=group,
                    extend=extend,
                    priority=_P_CONTEXT if group else _P_VENDOR,
                    kind_of=_url_credential_kind if kind == "url-password" else None,
                    validate=_not_reference if kind == "url-password" else None,
                    gate=gate,
                    source="detect-secrets",
                )
            )
    return rules


def _detect_secrets_keywords() -> tuple[str, ...]:
    """detect-secrets' secret-keyword regex fragments (``api_?key``, ``db_?pass``, ...)."""
    try:
        from detect_secrets.plugins.keyword import DENYLIST
    except ImportError:  # pragma: no cover
        return ()
    return tuple(str(word).lower() for word in DENYLIST)


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


def _own_rules() -> list[_Rule]:
    jwt_check = _load_jwt_check()
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
    add(_rule("slack-token", _rx_lit(r"xox[abposre]-") + r"[A-Za-z0-9-]{10,}"))
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
            validate=jwt_check,
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
                "session",
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
            )
        )

    # -- HTTP authorization ----------------------------------------------------------------------
    auth_head = _llit("authorization") + _Q + r"[ \t]*[:=][ \t]*" + _Q
    add(
        _rule(
            "authorization",
            auth_head
            + r"(?P<scheme>bearer|basic|token|bot|apikey|api-key|sso-key|jwt|negotiate|ntlm|"
            + r"hmac|key|otp)[ \t]+(?P<secret>[^\s\"'\\,;]{4,4096})",
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
    return rules


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
# Body of a block whose footer is missing (truncated output): header lines and base64 lines.
_BLOCK_BODY_RX = re.compile(
    r"(?:(?:\\[nr]|[\r\n\t ])+(?:[A-Za-z][A-Za-z-]{0,30}: ?[^\r\n\\]{0,200}|[A-Za-z0-9+/=]{16,})"
    r"){0,4096}"
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


# --------------------------------------------------------------------------------------------
# Context rules: assignments and high-entropy strings
# --------------------------------------------------------------------------------------------

# Literal anchors; `_is_secret_key` decides on the whole key around them.
_ASSIGN_ANCHORS = ("pass", "pw", "secret", "token", "key", "auth", "credential", "contrase")
_ASSIGN_TRIGGERS = tuple(
    re.compile(
        re.escape(anchor)
        + r"(?P<tail>[a-z0-9_.-]{0,48})(?P<kq>\\{0,3}[\"'])?\]?[ \t]*"
        + r"(?P<op>:=|=>|==|!=|=|:(?![:/])|>)"
    )
    for anchor in _ASSIGN_ANCHORS
)
_CLI_TRIGGER = re.compile(_lit("--", "a-z0-9_.-") + r"(?P<key>[a-z0-9_.-]{1,60})[ \t]+")
_ENTROPY_CANDIDATE_RX = re.compile(r"[A-Za-z0-9+/_~.-]{20,}={0,3}")
_ENTROPY_CONTEXT_RX = re.compile(
    r"key|secret|token|passw|pwd|credential|auth(?!or(?!i[sz]))|signature|bearer|private"
)
_ENTROPY_WINDOW = 60
_ENTROPY_MAX_LEN = 4096

_VALUE_OPEN_RX = re.compile(r"[ \t]*(?P<q>\\{0,3}[\"'`])?")
_DQ_BODY_RX = re.compile(r'(?:[^"\\\r\n]|\\.){0,16384}')
_SQ_BODY_RX = re.compile(r"(?:[^'\\\r\n]|\\.){0,16384}")
_BT_BODY_RX = re.compile(r"[^`\r\n]{0,16384}")
_UNQUOTED_RX = re.compile(r"[^\s\"'`<>&;\\)\]}]{1,4096}")
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
            r"pass(?:wor)?d|passphrase|pwd|secret|token|credential|contrase|apikey",
            r"(?:api|auth|access|private|priv|client|service|account|db|database|signing|master|"
            r"encryption|session|storage|shared|admin|license|subscription|webhook)_?key",
            r"(?:db|database|key)_?pass",
            *_detect_secrets_keywords(),
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
        "patterns", "template", "list",
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


@functools.lru_cache(maxsize=8192)
def _kind_for_key(key: str) -> str:
    norm = _normalize_key(key)
    if re.search(r"pass|pwd|(?:^|_)pw$|contrase", norm):
        return "password"
    for word, kind in (("secret", "secret"), ("token", "token"), ("key", "api-key")):
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


def _scan_assignments(text: str, lowered: str, hits: list[_Hit]) -> None:
    seen: set[int] = set()
    for trigger in _ASSIGN_TRIGGERS:
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


def _scan_entropy(text: str, lowered: str, hits: list[_Hit]) -> None:
    for match in _ENTROPY_CANDIDATE_RX.finditer(text):
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


# --------------------------------------------------------------------------------------------
# Redactor
# --------------------------------------------------------------------------------------------

_BUILTIN_RULES: tuple[_Rule, ...] = tuple(_detect_secrets_rules() + _own_rules())


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
        self._rules: tuple[_Rule, ...] = (*extras, *_BUILTIN_RULES)
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
        pieces: list[str] = []
        performed: Counter[str] = Counter()
        last = 0
        for start, end, kind in spans:
            pieces.append(text[last:start])
            pieces.append(REDACTION_MARKER.format(kind=kind))
            performed[kind] += 1
            last = end
        pieces.append(text[last:])
        self._count(performed)
        return "".join(pieces)

    def redact_json(self, value: Any) -> Any:
        """Return a redacted copy of a JSON-like structure (dicts, lists, tuples, strings).

        Every string is redacted, dict keys included.  A string stored under a secret-like key
        (``password``, ``api_key``, ``Authorization``, or the ``value`` of a
        ``{"name": "API_TOKEN", "value": ...}`` pair) is replaced as a whole even if it matches
        no known format, since the key is the only context it has.  Other values are returned
        as they are.
        """
        strings: list[str] = []
        keyed: dict[int, str] = {}
        self._collect(value, None, strings, keyed)
        replaced = self._redact_many([("" if i in keyed else t) for i, t in enumerate(strings)])
        replaced.update(keyed)
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

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    # ---- structures ------------------------------------------------------------------------
    #
    # A structure is redacted in one scan: its plain strings are joined with a separator that
    # no rule matches across (:data:`_BATCH_SEPARATOR`), scanned once, and the hits mapped back.
    # Scanning each string on its own costs ~100 rule calls per string, which dominated the
    # cost of recording a run segment.

    def _collect(self, value: Any, key: str | None, out: list[str], keyed: dict[int, str]) -> None:
        """Strings of ``value`` in walk order; those replaced whole for their key go in ``keyed``
        (by position) and are not scanned, so each secret is counted once."""
        if isinstance(value, str):
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
                self._collect(v, sub_key, out, keyed)
        elif isinstance(value, list | tuple):  # {"api_keys": ["...", "..."]}: items inherit it
            for v in value:
                self._collect(v, key, out, keyed)

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
            text = strings[i]
            pieces: list[str] = []
            last = 0
            for start, end, kind in pieces_at:
                pieces.append(text[last:start])
                pieces.append(REDACTION_MARKER.format(kind=kind))
                performed[kind] += 1
                last = end
            pieces.append(text[last:])
            changed[i] = "".join(pieces)
        self._count(performed)
        return changed

    def _redact_keyed(self, key: str, value: str) -> str | None:
        """Whole-value redaction of a string stored under a secret-like key (else None)."""
        stripped = value.strip()
        if not stripped or stripped in self._allowset or _MARKER_RX.fullmatch(stripped):
            return None
        if _normalize_key(key) in ("authorization", "proxy_authorization"):
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
        if not _is_secret_key(key) or len(stripped) < 3 or _is_placeholder(stripped):
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
        hits = self._scan(text)
        return self._resolve(text, hits) if hits else []

    def _scan(self, text: str) -> list[_Hit]:
        lowered = text.lower()
        if len(lowered) != len(text):  # e.g. "İ" lowercases to two code points
            lowered = text.translate(_ASCII_LOWER)
        n = len(text)
        hits: list[_Hit] = []
        for rule in self._rules:
            if rule.gate and not any(g in lowered for g in rule.gate):
                continue
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
        _scan_assignments(text, lowered, hits)
        _scan_entropy(text, lowered, hits)
        return hits

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
