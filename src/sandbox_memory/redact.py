"""Secret redaction applied before anything an agent saw reaches disk, a log or a memory model.

`Redactor.redact_text` replaces every secret it finds with a typed marker such as
``[REDACTED:aws-access-key]`` (never a blank), and `Redactor.redact_json` does the same for
every string inside a JSON-like structure (the shape of Agents SDK input/output items).

Detection combines three layers:

* the regular expressions of the maintained ``detect-secrets`` plugins (AWS, GitHub, GitLab,
  Slack, Stripe, SendGrid, PyPI, Discord, Telegram, Twilio, Square, Mailchimp, OpenAI legacy keys,
  basic-auth URLs), its JWT validity check and its keyword list;
* our own patterns for formats detect-secrets does not cover, or covers too narrowly (current
  OpenAI/Anthropic keys, fine-grained GitHub PATs, private key *blocks*, connection strings,
  URL query tokens, Authorization headers, ~30 vendor prefixes);
* context rules: ``password=...`` / ``"token": "..."`` / ``--api-key ...`` assignments and
  long high-entropy strings that follow a secret-like word.

Every pattern is precompiled, starts with a literal where possible (so ``re`` can use its fast
prefix scan) and has bounded repetitions, so a multi-megabyte tool output is scanned in well
under a second.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import math
import re
import string
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["REDACTION_MARKER", "Redactor", "default_redactor"]

REDACTION_MARKER = "[REDACTED:{kind}]"

# Priorities decide the marker kind when several detectors flag overlapping text (lower wins).
_P_EXTRA = 0
_P_PRIVATE_KEY = 5
_P_VENDOR = 10
_P_CONTEXT = 20
_P_HEADER = 25
_P_ASSIGNMENT = 30
_P_ENTROPY = 40

_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "_-")
_MARKER_RX = re.compile(r"\[REDACTED:[^\]\s]{1,64}\]")
_MARKER_PREFIX = "[REDACTED:"

# Values never treated as secrets: references, placeholders and literals of code.
_PLACEHOLDER_WORDS = frozenset(
    {
        "none", "null", "nil", "true", "false", "undefined", "yes", "no", "on", "off",
        "redacted", "hidden", "masked", "omitted", "required", "optional", "empty", "n/a",
        "str", "string", "bytes", "int", "bool", "any", "object", "secretstr", "secretbytes",
        "number", "unknown", "self", "cls", "this", "todo", "tbd",
    }
)  # fmt: skip
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
    """One regular expression that yields secret spans."""

    kind: str
    regex: re.Pattern[str]
    priority: int = _P_VENDOR
    group: int | str = 0
    extend: bool = False  # grow the span over adjacent token chars (fixed-length patterns)
    validate: Callable[[str], bool] | None = None
    kind_of: Callable[[re.Match[str], str], str] | None = None
    lowered: bool = False  # pattern is lowercase and runs on text.lower()
    fallback: re.Pattern[str] | None = None  # IGNORECASE twin when lower() changes length
    source: str = "own"


def _rule(
    kind: str,
    pattern: str | re.Pattern[str],
    *,
    priority: int = _P_VENDOR,
    group: int | str | None = None,
    extend: bool = False,
    validate: Callable[[str], bool] | None = None,
    kind_of: Callable[[re.Match[str], str], str] | None = None,
    lowered: bool = False,
    source: str = "own",
) -> _Rule:
    regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
    fallback = re.compile(regex.pattern, re.IGNORECASE) if lowered else None
    if group is None:
        group = "secret" if "secret" in regex.groupindex else 0
    if isinstance(group, int) and group > regex.groups:
        group = 0
    return _Rule(
        kind=kind,
        regex=regex,
        priority=priority,
        group=group,
        extend=extend,
        validate=validate,
        kind_of=kind_of,
        lowered=lowered,
        fallback=fallback,
        source=source,
    )


def _lit(prefix: str, word: str = "A-Za-z0-9_") -> str:
    """`prefix` at a token start, written literal-first so `re` keeps its fast prefix search."""
    esc = re.escape(prefix)
    return f"{esc}(?<![{word}]{esc})"


def _llit(prefix: str) -> str:
    """Same as `_lit` for rules that run on lowercased text."""
    return _lit(prefix, "a-z0-9_")


# ---- validators ----------------------------------------------------------------------------


def _has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


def _not_reference(value: str) -> bool:
    return not _is_placeholder(value)


def _is_basic_credential(value: str) -> bool:
    padded = value + "=" * (-len(value) % 4)
    try:
        decoded = base64.b64decode(padded, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


def _jwt_fallback_check(token: str) -> bool:
    import json

    parts = token.split(".")
    try:
        header = base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4))
        return isinstance(json.loads(header.decode("utf-8")), dict)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        return False


def _load_jwt_check() -> Callable[[str], bool]:
    try:
        from detect_secrets.plugins.jwt import JwtTokenDetector
    except ImportError:  # pragma: no cover - detect-secrets is a hard dependency
        return _jwt_fallback_check
    ds_check: Callable[[str], bool] = JwtTokenDetector.is_formally_valid

    def check(token: str) -> bool:
        # Header and payload must be base64url JSON; the signature is opaque.
        head = ".".join(token.split(".")[:2])
        try:
            return bool(ds_check(head))
        except Exception:  # noqa: BLE001 - a broken third-party check must not leak secrets
            return _jwt_fallback_check(token)

    return check


# ---- kind helpers --------------------------------------------------------------------------

_DB_SCHEMES = frozenset(
    {
        "postgres", "postgresql", "mysql", "mariadb", "mongodb", "mongodb+srv", "redis",
        "rediss", "amqp", "amqps", "mssql", "sqlserver", "oracle", "cockroachdb", "clickhouse",
        "snowflake", "neo4j", "neo4j+s", "bolt", "couchdb", "cassandra", "memcached", "ldap",
        "ldaps", "postgresql+psycopg", "postgresql+psycopg2", "postgresql+asyncpg",
        "mysql+pymysql", "mysql+aiomysql", "sqlite", "nats", "kafka", "jdbc:postgresql",
        "jdbc:mysql",
    }
)  # fmt: skip
_SCHEME_RX = re.compile(r"([A-Za-z][A-Za-z0-9+.:-]{0,30})\Z")


def _url_credential_kind(match: re.Match[str], text: str) -> str:
    start = match.start()
    found = _SCHEME_RX.search(text, max(0, start - 31), start)
    if found:
        name = found.group(1).lower()
        for candidate in (name, name.rsplit(":", 1)[-1], name.split("+", 1)[0]):
            if candidate in _DB_SCHEMES:
                return "connection-string"
    return "url-password"


def _authorization_kind(match: re.Match[str], text: str) -> str:
    scheme = (match.groupdict().get("scheme") or "").lower()
    if scheme == "bearer":
        return "bearer-token"
    if scheme == "basic":
        return "basic-auth"
    return "authorization"


def _signed_url_kind(match: re.Match[str], text: str) -> str:
    name = text[match.start() : match.start("secret")].lower()
    return "gcp-signed-url" if "goog" in name else "aws-signed-url"


# ---- detect-secrets --------------------------------------------------------------------------

# (module, class, denylist index or None for all, kind, group, extend)
_DS_SPECS: tuple[tuple[str, str, int | None, str, int, bool], ...] = (
    ("aws", "AWSKeyDetector", 0, "aws-access-key", 0, False),
    ("aws", "AWSKeyDetector", 1, "aws-secret-access-key", 1, False),
    ("basic_auth", "BasicAuthDetector", 0, "url-password", 1, False),  # kind refined below
    ("discord", "DiscordBotTokenDetector", None, "discord-bot-token", 0, True),
    ("github_token", "GitHubTokenDetector", None, "github-token", 0, True),
    ("gitlab_token", "GitLabTokenDetector", None, "gitlab-token", 0, True),
    ("mailchimp", "MailchimpDetector", None, "mailchimp-api-key", 0, True),
    ("openai", "OpenAIDetector", None, "openai-api-key", 0, True),
    ("pypi_token", "PypiTokenDetector", None, "pypi-token", 0, True),
    ("sendgrid", "SendGridDetector", None, "sendgrid-api-key", 0, True),
    ("slack", "SlackDetector", 0, "slack-token", 0, True),
    ("slack", "SlackDetector", 1, "slack-webhook", 0, True),
    ("square_oauth", "SquareOAuthDetector", None, "square-oauth-secret", 0, True),
    ("stripe", "StripeDetector", None, "stripe-key", 0, True),
    ("telegram_token", "TelegramBotTokenDetector", None, "telegram-bot-token", 0, True),
    ("twilio", "TwilioKeyDetector", 0, "twilio-account-sid", 0, True),
    ("twilio", "TwilioKeyDetector", 1, "twilio-api-key", 0, True),
)
# Left out on purpose: PrivateKeyDetector (matches the header only; we replace whole blocks),
# JwtTokenDetector's regex (its lazy tail drops the signature; we reuse its validity check),
# NpmDetector (`.+` that backtracks quadratically on long lines), Keyword/HighEntropy (line- and
# file-type driven; reimplemented below), Artifactory/IBM/Cloudant/SoftLayer (noisy or slow).


def _detect_secrets_rules() -> list[_Rule]:
    import importlib

    rules: list[_Rule] = []
    for module_name, class_name, index, kind, group, extend in _DS_SPECS:
        try:
            module = importlib.import_module(f"detect_secrets.plugins.{module_name}")
            denylist = list(getattr(module, class_name).denylist)
        except (ImportError, AttributeError):  # pragma: no cover - version drift
            continue
        selected = denylist if index is None else denylist[index : index + 1]
        contextual = group != 0  # the secret is a capture group inside a wider context
        for regex in selected:
            if isinstance(regex, re.Pattern):
                rules.append(
                    _rule(
                        kind,
                        regex,
                        group=group,
                        extend=extend,
                        priority=_P_CONTEXT if contextual else _P_VENDOR,
                        kind_of=_url_credential_kind if kind == "url-password" else None,
                        source="detect-secrets",
                    )
                )
    return rules


def _detect_secrets_keywords() -> tuple[str, ...]:
    try:
        from detect_secrets.plugins.keyword import DENYLIST
    except ImportError:  # pragma: no cover
        return ()
    return tuple(str(word).lower() for word in DENYLIST)


# ---- own patterns ------------------------------------------------------------------------------

_B64 = r"[A-Za-z0-9+/]"
_Q = r"(?:\\{0,3}[\"'])?"  # optional (possibly JSON-escaped) quote
_SEP = r"[ \t]*(?:=>|:=|=|:)[ \t]*"
_URL_VALUE = r"[^&\s#\"'<>\\]{1,4096}"


def _own_rules() -> list[_Rule]:
    jwt_check = _load_jwt_check()
    r: list[_Rule] = []
    add = r.append

    # -- private keys: the whole block, header to footer --------------------------------------
    add(
        _rule(
            "private-key",
            r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]{0,65536}?-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"|(?:(?:\\[nr]|[\r\n\t ])+[A-Za-z0-9+/=]{16,}){0,4096})",
            priority=_P_PRIVATE_KEY,
        )
    )
    add(
        _rule(
            "private-key",
            r"---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----[\s\S]{0,65536}?"
            r"---- END SSH2 ENCRYPTED PRIVATE KEY ----",
            priority=_P_PRIVATE_KEY,
        )
    )
    add(
        _rule(
            "private-key",
            r"PuTTY-User-Key-File-\d:[\s\S]{0,65536}?Private-MAC: ?[0-9a-fA-F]+",
            priority=_P_PRIVATE_KEY,
        )
    )
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
            "openrouter-api-key",
            _lit("sk-or-") + r"v\d-[A-Za-z0-9]{32,}",
            priority=_P_VENDOR - 1,
        )
    )
    add(
        _rule(
            "openai-api-key",
            _lit("sk-") + r"(?!ant-|or-v\d-)(?=[A-Za-z0-9_-]{0,300}?\d)"
            r"(?:(?:proj|svcacct|admin|None)-)?[A-Za-z0-9_-]{20,}",
        )
    )
    add(_rule("huggingface-token", _lit("hf_") + r"[A-Za-z0-9]{30,}"))
    add(_rule("huggingface-token", _lit("api_org_") + r"[A-Za-z0-9]{30,}"))
    add(_rule("groq-api-key", _lit("gsk_") + r"[A-Za-z0-9]{40,}"))
    add(_rule("xai-api-key", _lit("xai-") + r"[A-Za-z0-9]{60,}"))
    add(_rule("replicate-token", _lit("r8_") + r"[A-Za-z0-9]{30,}"))
    add(_rule("perplexity-api-key", _lit("pplx-") + r"[A-Za-z0-9]{40,}"))

    # -- code hosting / CI ---------------------------------------------------------------------
    add(_rule("github-token", _lit("github_pat_") + r"[A-Za-z0-9_]{22,}"))
    add(_rule("github-token", r"gh[pousr]_(?<![A-Za-z0-9_]gh[pousr]_)[A-Za-z0-9]{30,}"))
    add(_rule("gitlab-token", _lit("glpat-") + r"[A-Za-z0-9_-]{20,}"))
    add(_rule("npm-token", _lit("npm_") + r"[A-Za-z0-9]{36,}"))
    add(_rule("npm-token", r":_authToken=[ \t]*(?P<secret>[^\s\"'\\]{8,})"))
    add(_rule("pypi-token", _lit("pypi-") + r"AgE[A-Za-z0-9_-]{50,}"))
    add(_rule("atlassian-api-token", r"AT[AC]TT3(?<![A-Za-z0-9_]AT[AC]TT3)[A-Za-z0-9_=-]{50,}"))
    add(_rule("postman-api-key", _lit("PMAK-") + r"[A-Za-z0-9]{20,}-[A-Za-z0-9]{30,}"))
    add(_rule("linear-api-key", _lit("lin_") + r"(?:api|oauth)_[A-Za-z0-9]{32,}"))
    add(_rule("notion-token", _lit("secret_") + r"[A-Za-z0-9]{43}(?![A-Za-z0-9])"))
    add(_rule("notion-token", _lit("ntn_") + r"[A-Za-z0-9]{40,}"))
    add(_rule("grafana-token", _lit("glsa_") + r"[A-Za-z0-9_-]{32,}"))
    add(_rule("grafana-token", _lit("glc_") + r"[A-Za-z0-9+/=_-]{32,}"))
    add(_rule("sentry-token", r"sntry[su]_(?<![A-Za-z0-9_]sntry[su]_)[A-Za-z0-9+/=_-]{40,}"))
    add(_rule("pulumi-token", _lit("pul-") + r"[a-f0-9]{40}(?![a-f0-9])"))

    # -- chat / mail -----------------------------------------------------------------------------
    add(_rule("slack-token", r"xox[abposre]-(?<![A-Za-z0-9_]xox[abposre]-)[A-Za-z0-9-]{10,}"))
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
    add(_rule("sendgrid-api-key", _lit("SG.") + r"[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}"))
    add(_rule("mailgun-api-key", _lit("key-") + r"[0-9a-zA-Z]{32}(?![0-9A-Za-z])"))
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
            r"[rsp]k_(?:live|test)_(?<![A-Za-z0-9_][rsp]k_(?:live|test)_)[A-Za-z0-9]{10,}",
        )
    )
    add(_rule("stripe-webhook-secret", _lit("whsec_") + r"[A-Za-z0-9+/=]{24,}"))
    add(
        _rule(
            "shopify-token",
            r"shp(?:at|ss|ca|pa)_(?<![A-Za-z0-9_]shp(?:at|ss|ca|pa)_)[A-Za-z0-9]{20,}",
        )
    )
    add(_rule("square-access-token", _lit("sq0atp-") + r"[A-Za-z0-9_-]{22,}"))
    add(_rule("square-oauth-secret", _lit("sq0csp-") + r"[A-Za-z0-9_-]{40,}"))
    add(_rule("square-access-token", _lit("EAAA") + r"[A-Za-z0-9_+-]{50,}"))

    # -- cloud -------------------------------------------------------------------------------------
    add(_rule("google-api-key", _lit("AIza") + r"[A-Za-z0-9_-]{35}", extend=True))
    add(_rule("google-oauth-client-secret", _lit("GOCSPX-") + r"[A-Za-z0-9_-]{20,}"))
    add(_rule("google-oauth-token", _lit("ya29.") + r"[A-Za-z0-9_-]{20,}"))
    add(_rule("google-oauth-token", _lit("1//0") + r"[A-Za-z0-9_-]{40,}"))
    add(
        _rule(
            "digitalocean-token",
            r"do[por]_v1_(?<![A-Za-z0-9_]do[por]_v1_)[A-Za-z0-9]{40,}",
        )
    )
    add(_rule("heroku-api-key", _lit("HRKU-") + r"[A-Za-z0-9_-]{20,}"))
    add(_rule("databricks-token", _lit("dapi") + r"[a-f0-9]{32}(?:-\d+)?(?![A-Za-z0-9])"))
    add(
        _rule(
            "doppler-token",
            _lit("dp.") + r"(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}",
        )
    )
    add(_rule("vault-token", r"hv[sbr]\.(?<![A-Za-z0-9_]hv[sbr]\.)[A-Za-z0-9_-]{24,}"))
    add(_rule("cloudflare-origin-ca-key", _lit("v1.0-") + r"[a-f0-9]{24}-[a-f0-9]{146}"))
    add(
        _rule(
            "azure-storage-key",
            r"(?:accountkey|sharedaccesskey)[ \t]*=[ \t]*(?P<secret>[a-z0-9+/]{20,}={0,2})",
            lowered=True,
            priority=_P_CONTEXT,
        )
    )
    add(
        _rule(
            "aws-secret-access-key",
            r"(?:aws_?secret_?access_?key|secret_?access_?key|aws_?secret_?key|aws_?secret)"
            + _Q
            + _SEP
            + _Q
            + r"(?P<secret>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
            lowered=True,
            priority=_P_CONTEXT,
        )
    )

    # -- vendor tokens that are only recognisable from context ---------------------------------
    add(
        _rule(
            "heroku-api-key",
            r"heroku[^\n]{0,40}?(?P<secret>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}"
            r"-[0-9a-f]{12})(?![0-9a-f])",
            lowered=True,
            priority=_P_CONTEXT,
        )
    )
    for vendor_kind, vendor_rx, value_rx in (
        ("heroku-api-key", r"heroku", r"[a-z0-9_-]{20,}"),
        ("atlassian-api-token", r"(?:atlassian|jira|confluence|bitbucket)", r"[a-z0-9_=+/-]{16,}"),
        ("cloudflare-api-token", r"(?:cloudflare|\bcf[_-])", r"[a-z0-9_-]{32,}"),
        ("twilio-auth-token", r"twilio", r"[a-z0-9]{32}"),
    ):
        add(
            _rule(
                vendor_kind,
                vendor_rx
                + r"[a-z0-9_.-]{0,30}?(?:token|key|secret|password|pat)[a-z0-9_]{0,12}"
                + _Q
                + _SEP
                + _Q
                + rf"(?P<secret>{value_rx})(?![a-z0-9_=+/-])",
                lowered=True,
                priority=_P_CONTEXT,
                validate=_not_reference,
            )
        )

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
        )
    )
    add(
        _rule(
            "azure-sas-signature",
            rf"[?&;]sig=(?P<secret>{_URL_VALUE})",
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
        )
    )
    add(
        _rule(
            "basic-auth",
            r"[ \t](?:-u|--user)[ \t=]+[\"']?[^\s:\"'@]{1,128}:(?P<secret>[^\s\"']{1,256})",
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
            r"hmac|key|otp)[ \t]+(?P<secret>[^\s\"'\\,;]{4,})",
            lowered=True,
            priority=_P_HEADER,
            kind_of=_authorization_kind,
            validate=_not_reference,
        )
    )
    add(
        _rule(
            "authorization",
            auth_head + r"(?:digest|aws4-hmac-sha256|signature)[ \t]+(?P<secret>[^\"'\\\r\n]{8,})",
            lowered=True,
            priority=_P_HEADER,
        )
    )
    add(
        _rule(
            "authorization",
            auth_head + r"(?P<secret>[a-z0-9._~+/=-]{16,})(?![a-z0-9._~+/=-]|[ \t]+[a-z0-9])",
            lowered=True,
            priority=_P_HEADER,
            validate=_has_digit,
        )
    )
    add(
        _rule(
            "bearer-token",
            _llit("bearer") + r"[ \t]+(?P<secret>[a-z0-9._~+/-]{16,}=*)",
            lowered=True,
            priority=_P_HEADER,
            validate=_has_digit,
        )
    )
    add(
        _rule(
            "basic-auth",
            _llit("basic") + r"[ \t]+(?P<secret>[a-z0-9+/]{8,}={0,2})(?![a-z0-9+/=])",
            lowered=True,
            priority=_P_HEADER,
            validate=_is_basic_credential,
        )
    )
    return r


# --------------------------------------------------------------------------------------------
# Context rules: assignments and high-entropy strings
# --------------------------------------------------------------------------------------------

_OWN_KEYWORDS = (
    "password", "passwd", "passphrase", "pwd", "secret", "token", "credential", "api_?key",
    "api-key", "apikey", "access_?key", "private_?key", "auth", "pass", "pw", "contrase",
)  # fmt: skip
_KEYWORD_ALT = "|".join(
    sorted(set(_OWN_KEYWORDS) | set(_detect_secrets_keywords()), key=len, reverse=True)
)
_ASSIGN_TRIGGER_SRC = (
    rf"(?:{_KEYWORD_ALT})(?P<tail>[a-z0-9_.-]{{0,48}})(?P<kq>\\{{0,3}}[\"'])?\]?[ \t]*"
    r"(?P<op>:=|=>|==|!=|=|:(?![:/])|>)"
)
_CLI_TRIGGER_SRC = (
    r"-(?<![a-z0-9_.-]-)-?(?P<key>[a-z0-9_.]{0,40}?(?:password|passwd|passphrase|token|secret|"
    r"api[_-]?key|apikey|credentials?|auth|pwd)[a-z0-9_.-]{0,40})(?P<op>[ \t]+)"
)
_ENTROPY_TRIGGER_SRC = (
    r"(?:key|secret|token|passw|pwd|credential|auth|signature|bearer)"
    r"[^\n]{0,60}?(?<![a-z0-9+/=_~.-])(?P<secret>[a-z0-9+/=_~.-]{20,})"
)

_KEY_LEFT_RX = re.compile(r"[A-Za-z0-9_.-]{0,64}\Z")
_VALUE_OPEN_RX = re.compile(r"[ \t]*(?P<q>\\{0,3}[\"'`])?")
_DQ_BODY_RX = re.compile(r'(?:[^"\\\r\n]|\\.){0,16384}')
_SQ_BODY_RX = re.compile(r"(?:[^'\\\r\n]|\\.){0,16384}")
_BT_BODY_RX = re.compile(r"[^`\r\n]{0,16384}")
_UNQUOTED_RX = re.compile(r"[^\s\"'`<>&;\\)\]}]{1,4096}")
_XML_VALUE_RX = re.compile(r"(?P<secret>[^<\r\n]{1,1024})</")
_DOTTED_IDENT_RX = re.compile(r"[A-Za-z_][A-Za-z_]*(?:\.[A-Za-z_][A-Za-z_0-9]*)+")
_SNAKE_IDENT_RX = re.compile(r"[a-z_][a-z_]*")
_CAMEL_SPLIT_RX = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

_STRONG_KEY_RX = re.compile(
    r"pass(?:wor|w)?d|passphrase|pwd|secret|token|credential|contrase|api_?key|apikey|"
    r"(?:auth|access|private|priv|client|service|account|db|database|signing|master|"
    r"encryption|session|storage|shared|admin|license|subscription|webhook)_?key|"
    r"(?:db|database|key)_?pass"
)
_WEAK_KEY_RX = re.compile(r"(?:^|_)(?:auth|pass|pw)$")
_DENY_KEY_RX = re.compile(
    r"tokeniz|secretar|passwordless|(?:^|_)(?:max|min|num|n|total|prompt|completion|input|"
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
    }
)  # fmt: skip


def _normalize_key(key: str) -> str:
    key = _CAMEL_SPLIT_RX.sub("_", key.strip("-.'\"[]"))
    return re.sub(r"[^a-z0-9ñ]+", "_", key.lower()).strip("_")


def _is_secret_key(key: str) -> bool:
    norm = _normalize_key(key)
    if not norm or _DENY_KEY_RX.search(norm):
        return False
    if norm.rsplit("_", 1)[-1] in _DENY_LAST_SEGMENT:
        return False
    return bool(_STRONG_KEY_RX.search(norm) or _WEAK_KEY_RX.search(norm))


def _kind_for_key(key: str) -> str:
    norm = _normalize_key(key)
    if re.search(r"pass|pwd|(?:^|_)pw$|contrase", norm):
        return "password"
    if "secret" in norm:
        return "secret"
    if "token" in norm:
        return "token"
    if "key" in norm:
        return "api-key"
    if "credential" in norm:
        return "credential"
    return "auth"


def _is_placeholder(value: str) -> bool:
    stripped = value.strip()
    if not stripped or len(set(stripped)) == 1:
        return True
    lowered = stripped.lower()
    if lowered in _PLACEHOLDER_WORDS or lowered.startswith(_REFERENCE_PREFIXES):
        return True
    return stripped.startswith("<") and stripped.endswith(">")


def _secretish(value: str) -> bool:
    if len(value) < 8:
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    return (has_digit and has_alpha) or has_symbol


def _line_end(text: str, pos: int, limit: int) -> int:
    cap = min(len(text), pos + limit)
    end = text.find("\n", pos, cap)
    return cap if end < 0 else end


def _at_value_end(text: str, pos: int) -> bool:
    """True when only spaces then a line end / separator follow `pos` (YAML-ish values)."""
    n = len(text)
    while pos < n and text[pos] in " \t":
        pos += 1
    if pos >= n or text[pos] in "\r\n,}#":
        return True
    return text.startswith(("\\n", "\\r"), pos)


def _take_value(text: str, pos: int, op: str, key: str) -> tuple[int, int] | None:
    """Span of the literal assigned at `pos`, or None when it is not a secret literal."""
    opener = _VALUE_OPEN_RX.match(text, pos)
    if opener is None:  # pragma: no cover - the pattern always matches
        return None
    start = opener.end()
    quote = opener.group("q")
    if quote:
        qchar = quote[-1]
        if len(quote) > 1:  # escaped quote inside a JSON string: \"value\"
            end = text.find(quote, start, _line_end(text, start, 16384))
            if end < 0:
                return None
        else:
            body_rx = {'"': _DQ_BODY_RX, "'": _SQ_BODY_RX}.get(qchar, _BT_BODY_RX)
            body = body_rx.match(text, start)
            if body is None:  # pragma: no cover
                return None
            end = body.end()
            if end >= len(text) or text[end] != qchar:
                return None
        value = text[start:end]
        if _is_placeholder(value) or value.lower() == key.lower():
            return None
        return start, end
    if op in ("==", "!="):
        return None
    bare = _UNQUOTED_RX.match(text, start)
    if bare is None:
        return None
    value = bare.group().rstrip(".,:")
    end = start + len(value)
    if not value or value[0] in "([{" or "(" in value or "[" in value:
        return None
    if _is_placeholder(value) or value.lower() in (key.lower(), _normalize_key(key)):
        return None
    if _DOTTED_IDENT_RX.fullmatch(value):
        return None  # attribute access such as settings.db_password
    if _SNAKE_IDENT_RX.fullmatch(value) and _is_secret_key(value):
        return None  # a variable that holds the secret, not the secret
    if key.lower().strip("-") in ("pwd", "oldpwd") and value.startswith(("/", "~")):
        return None  # shell working directory
    if op == ":":
        if "://" in value:
            return None
        if not _at_value_end(text, end) and not _secretish(value):
            return None  # prose such as "password: click the link below"
    return start, end


_ANNOTATION_RX = re.compile(
    r"[ \t]*[A-Za-z_][\w.]*(?:\[[^\]\n]{0,80}\])?"
    r"(?:[ \t]*\|[ \t]*[A-Za-z_][\w.]*(?:\[[^\]\n]{0,80}\])?){0,4}[ \t]*=(?!=)"
)


def _shannon_entropy(value: str) -> float:
    counts = Counter(value)
    total = len(value)
    return -sum(c / total * math.log2(c / total) for c in counts.values())


_HEX_RX = re.compile(r"[0-9a-fA-F]+")
_UUID_RX = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
# Each run is matched whole (the lookaheads), so a long digit or letter run can be split one
# way only: the nested "+" cannot backtrack exponentially (a Slack token hung here).
_WORDY_RX = re.compile(
    r"(?:[A-Z]?[a-z]{3,}(?![a-z])|[A-Z]{2,}(?=[A-Z][a-z]|[^A-Za-z]|\Z)|\d+(?!\d)|[._/+=~-])+"
)


def _looks_random(value: str) -> bool:
    """Heuristic for opaque credentials: long, mixed, high Shannon entropy, not an identifier."""
    value = value.strip(".=-_~")
    if len(value) < 20 or value.startswith(("/", "~", "./", "sha1-", "sha256-", "sha512-")):
        return False
    if "://" in value:
        return False
    if _UUID_RX.fullmatch(value):
        return False
    if _HEX_RX.fullmatch(value):
        if len(value) in (40, 64):  # git / sha digests
            return False
        return _has_digit(value) and _shannon_entropy(value) >= 3.0
    if not _has_digit(value) or not any(c.isalpha() for c in value):
        return False
    if len(value) <= 256 and _WORDY_RX.fullmatch(value):
        return False  # identifiers, versions, module paths
    return _shannon_entropy(value) >= 3.5


# --------------------------------------------------------------------------------------------
# Engine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    kind: str
    priority: int


@dataclass(frozen=True)
class _Compiled:
    assign: re.Pattern[str]
    cli: re.Pattern[str]
    entropy: re.Pattern[str]


def _compile_context(flags: int) -> _Compiled:
    return _Compiled(
        assign=re.compile(_ASSIGN_TRIGGER_SRC, flags),
        cli=re.compile(_CLI_TRIGGER_SRC, flags),
        entropy=re.compile(_ENTROPY_TRIGGER_SRC, flags),
    )


_BUILTIN_RULES: tuple[_Rule, ...] = tuple(_detect_secrets_rules() + _own_rules())
_CONTEXT_LOWER = _compile_context(0)
_CONTEXT_IGNORECASE = _compile_context(re.IGNORECASE)
_MIN_SECRET_TEXT = 6  # nothing shorter than "pwd=ab" can carry a secret


class Redactor:
    """Finds secrets in text and replaces each with a typed marker.

    Instances are cheap to share: the built-in rules are compiled once per process, and the
    counters are guarded by a lock so one redactor can serve several threads or tasks.
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
        self._rules: tuple[_Rule, ...] = tuple(extras) + _BUILTIN_RULES
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
        last = 0
        performed: Counter[str] = Counter()
        for start, end, kind in spans:
            pieces.append(text[last:start])
            pieces.append(REDACTION_MARKER.format(kind=kind))
            performed[kind] += 1
            last = end
        pieces.append(text[last:])
        self._count(performed)
        return "".join(pieces)

    def redact_json(self, value: Any) -> Any:
        """Return a copy of a JSON-like structure with every string redacted.

        Dict keys are redacted like any other string.  A string stored under a secret-like
        key (``password``, ``api_key``, ``Authorization``...) is replaced as a whole even when
        it does not match any known format, since the key is the only context it has.
        """
        return self._redact_value(value, None)

    def find(self, text: str) -> list[tuple[str, str]]:
        """Return the ``(kind, secret)`` pairs `redact_text` would replace, in text order."""
        return [(kind, text[start:end]) for start, end, kind in self._spans(text)]

    @property
    def counts(self) -> dict[str, int]:
        """Redactions performed so far, by kind."""
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    # ---- structures ------------------------------------------------------------------------

    def _redact_value(self, value: Any, key: str | None) -> Any:
        if isinstance(value, str):
            if key is not None:
                keyed = self._redact_keyed(key, value)
                if keyed is not None:
                    return keyed
            return self.redact_text(value)
        if isinstance(value, Mapping):
            value_key = _name_value_key(value)
            out: dict[Any, Any] = {}
            for k, v in value.items():
                sub_key = k if isinstance(k, str) else None
                if value_key is not None and k == "value":
                    sub_key = value_key
                new_key = self.redact_text(k) if isinstance(k, str) else k
                out[new_key] = self._redact_value(v, sub_key)
            return out
        if isinstance(value, list):  # {"api_keys": ["...", "..."]}: items inherit the key
            return [self._redact_value(v, key) for v in value]
        if isinstance(value, tuple):
            return tuple(self._redact_value(v, key) for v in value)
        return value

    def _redact_keyed(self, key: str, value: str) -> str | None:
        """Whole-value redaction for strings stored under a secret-like key."""
        stripped = value.strip()
        if not stripped or stripped in self._allowset or _MARKER_RX.fullmatch(stripped):
            return None
        norm = _normalize_key(key)
        if norm in ("authorization", "proxy_authorization"):
            scheme, _, credential = stripped.partition(" ")
            credential = credential.strip()
            if credential and " " not in credential and not _is_placeholder(credential):
                kind = {"bearer": "bearer-token", "basic": "basic-auth"}.get(
                    scheme.lower(), "authorization"
                )
                self._count(Counter({kind: 1}))
                return f"{scheme} {REDACTION_MARKER.format(kind=kind)}"
            return None
        if not _is_secret_key(key) or any(c.isspace() for c in stripped):
            return None
        if _is_placeholder(stripped) or len(stripped) < 3:
            return None
        found = self._spans(value)
        if (
            found
            and found[0][0] <= len(value) - len(value.lstrip())
            and found[0][1] >= len(value.rstrip())
        ):
            kind = found[0][2]  # a recognised format covering the whole value keeps its kind
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
        if not hits:
            return []
        return self._resolve(text, hits)

    def _scan(self, text: str) -> list[_Hit]:
        lowered = text.lower()
        same_length = len(lowered) == len(text)
        hits: list[_Hit] = []
        for rule in self._rules:
            if rule.lowered:
                if same_length:
                    regex, target = rule.regex, lowered
                else:
                    regex, target = rule.fallback or rule.regex, text
            else:
                regex, target = rule.regex, text
            for match in regex.finditer(target):
                start, end = match.span(rule.group)
                if start < 0 or end <= start:
                    continue
                if rule.extend:
                    while end < len(text) and text[end] in _TOKEN_CHARS:
                        end += 1
                if rule.validate is not None and not rule.validate(text[start:end]):
                    continue
                kind = rule.kind_of(match, text) if rule.kind_of is not None else rule.kind
                hits.append(_Hit(start, end, kind, rule.priority))
        context = _CONTEXT_LOWER if same_length else _CONTEXT_IGNORECASE
        target = lowered if same_length else text
        _scan_assignments(text, target, context, hits)
        _scan_entropy(text, target, context, hits)
        return hits

    def _resolve(self, text: str, hits: list[_Hit]) -> list[tuple[int, int, str]]:
        protected = self._protected(text)
        if protected:
            starts = [s for s, _ in protected]

            def shielded(hit: _Hit) -> bool:
                i = bisect.bisect_right(starts, hit.start) - 1
                return i >= 0 and protected[i][1] >= hit.end

            hits = [h for h in hits if not shielded(h)]
        if self._allowset:
            hits = [h for h in hits if text[h.start : h.end] not in self._allowset]
        if not hits:
            return []
        hits.sort(key=lambda h: (h.start, -h.end))
        spans: list[tuple[int, int, str]] = []
        cur_start, cur_end, best = hits[0].start, hits[0].end, hits[0]
        for hit in hits[1:]:
            if hit.start < cur_end:
                cur_end = max(cur_end, hit.end)
                if (hit.priority, -(hit.end - hit.start)) < (
                    best.priority,
                    -(best.end - best.start),
                ):
                    best = hit
                continue
            spans.append((cur_start, cur_end, best.kind))
            cur_start, cur_end, best = hit.start, hit.end, hit
        spans.append((cur_start, cur_end, best.kind))
        return spans

    def _protected(self, text: str) -> list[tuple[int, int]]:
        """Merged spans never redacted: allowlisted strings and existing markers."""
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


def _key_start(text: str, pos: int) -> int:
    left = _KEY_LEFT_RX.search(text, max(0, pos - 64), pos)
    return left.start() if left else pos


def _scan_assignments(text: str, target: str, context: _Compiled, hits: list[_Hit]) -> None:
    for match in context.assign.finditer(target):
        key_end = match.end("tail")
        key_start = _key_start(text, match.start())
        if key_start > 0 and text[key_start - 1] in "/@":
            continue  # part of a URL; URL rules handle it
        key = text[key_start:key_end]
        op = match.group("op")
        if not _is_secret_key(key):
            continue
        value_at = match.end()
        if op == ">":
            if key_start == 0 or text[key_start - 1] != "<" or match.group("kq"):
                continue
            xml = _XML_VALUE_RX.match(text, value_at)
            if xml is None or _is_placeholder(xml.group("secret")):
                continue
            span: tuple[int, int] | None = xml.span("secret")
        elif op == ":" and not match.group("kq") and _TYPE_WORD_RX.match(text, value_at):
            # `password: str = "..."` - skip the annotation, look at the default value
            annotated = _ANNOTATION_RX.match(text, value_at)
            span = _take_value(text, annotated.end(), "=", key) if annotated else None
        else:
            span = _take_value(text, value_at, op, key)
        if span is not None:
            hits.append(_Hit(span[0], span[1], _kind_for_key(key), _P_ASSIGNMENT))
    for match in context.cli.finditer(target):
        key = match.group("key")
        if not _is_secret_key(key):
            continue
        value_at = match.end()
        if value_at >= len(text) or text[value_at] in "-\r\n":
            continue
        span = _take_value(text, value_at, "=", key)
        if span is not None:
            hits.append(_Hit(span[0], span[1], _kind_for_key(key), _P_ASSIGNMENT))


_TYPE_WORD_RX = re.compile(
    r"[ \t]*(?:str|bytes|int|bool|float|Any|SecretStr|SecretBytes|Optional|Union|Secret|"
    r"string|number|list|dict|typing\.\w+)\b"
)


def _scan_entropy(text: str, target: str, context: _Compiled, hits: list[_Hit]) -> None:
    for match in context.entropy.finditer(target):
        start, end = match.span("secret")
        while end > start and text[end - 1] == ".":
            end -= 1  # sentence full stop
        if _looks_random(text[start:end]):
            hits.append(_Hit(start, end, "high-entropy-secret", _P_ENTROPY))


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
