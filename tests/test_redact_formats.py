"""The token formats the redactor takes from detect-secrets' catalogue are its own data: building
the redactor imports neither detect-secrets nor the HTTP stack its plugins pull in, and the
formats find exactly what the plugins' patterns find (checked where detect-secrets is installed,
as it is for the tests)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_memory.redact.rules import _BUILTIN_RULES, _DS_FORMATS, _is_formal_jwt
from secret_corpus import BENIGN, CASES

# (plugin module, class) of each entry of `_DS_FORMATS`, in its order, and which of the
# plugin's patterns it stands for.
_PLUGINS = (
    ("aws", "AWSKeyDetector", 0),
    ("aws", "AWSKeyDetector", 1),
    ("basic_auth", "BasicAuthDetector", 0),
    ("github_token", "GitHubTokenDetector", 0),
    *(("gitlab_token", "GitLabTokenDetector", i) for i in range(7)),
    ("openai", "OpenAIDetector", 0),
    ("pypi_token", "PypiTokenDetector", 0),
    ("pypi_token", "PypiTokenDetector", 1),
    ("sendgrid", "SendGridDetector", 0),
    ("slack", "SlackDetector", 0),
    ("slack", "SlackDetector", 1),
    ("square_oauth", "SquareOAuthDetector", 0),
    ("stripe", "StripeDetector", 0),
    ("twilio", "TwilioKeyDetector", 0),
    ("twilio", "TwilioKeyDetector", 1),
)

_HTTP_STACK = ("detect_secrets", "requests", "urllib3", "charset_normalizer")


def test_building_and_using_the_redactor_imports_no_http_stack() -> None:
    code = (
        "import sys\n"
        "from sandbox_memory.redact import default_redactor\n"
        "r = default_redactor()\n"
        "assert r.redact_text('key AKIAIOSFODNN7EXAMPLE') != 'key AKIAIOSFODNN7EXAMPLE'\n"
        "r.redact_text('jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl')\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {_HTTP_STACK!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


def _plugin_patterns() -> list[re.Pattern[str]]:
    pytest.importorskip("detect_secrets")
    found = []
    for module_name, class_name, index in _PLUGINS:
        module = importlib.import_module(f"detect_secrets.plugins.{module_name}")
        found.append(list(getattr(module, class_name).denylist)[index])
    return found


def _ours() -> list[re.Pattern[str]]:
    catalogued = [rule for rule in _BUILTIN_RULES if rule.source == "detect-secrets"]
    assert len(catalogued) == len(_DS_FORMATS) == len(_PLUGINS)
    return [rule.regex for rule in catalogued]


def test_each_catalogued_format_is_the_plugins_pattern() -> None:
    for ours, theirs in zip(_ours(), _plugin_patterns(), strict=True):
        assert ours.pattern == theirs.pattern
        # VERBOSE changes nothing in a pattern without blanks or comments
        assert ours.flags == theirs.flags & ~re.VERBOSE, ours.pattern
        assert theirs.flags & re.VERBOSE == 0 or not re.search(r"[\s#]", theirs.pattern)


def _spans(patterns: list[re.Pattern[str]], text: str) -> list[list[tuple[int, int]]]:
    return [[m.span(m.re.groups and 1) for m in rx.finditer(text)] for rx in patterns]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from([c.text for c in CASES] + BENIGN),
            st.sampled_from(["AKIA", "aws_secret='", "://u:", "@h", "ghp_", "glpat-", "xoxb-1-",
                             "SG.", "sq0csp-", "sk_live_", "AC", "SK", "T3BlbkFJ", "'", "\n"]),
            st.text(alphabet="abcdefABCDEF0123456789_-/+", min_size=1, max_size=50),
        ),
        max_size=10,
    ).map("".join)
)  # fmt: skip
def test_catalogued_formats_find_what_the_plugins_find(text: str) -> None:
    assert _spans(_ours(), text) == _spans(_plugin_patterns(), text)


def _b64(value: object) -> str:
    import base64

    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_the_jwt_check_wants_json_header_and_payload_or_an_encrypted_header() -> None:
    head, body = _b64({"alg": "HS256"}), _b64({"sub": "1"})
    assert _is_formal_jwt(f"{head}.{body}.{_b64(b'sig')}")
    assert _is_formal_jwt(f"{head}.{body}.not+base64!")  # the signature is opaque
    assert _is_formal_jwt(f"{head}.{_b64([1, 2])}.x")  # any JSON, as detect-secrets takes it
    assert not _is_formal_jwt(f"{head}.{_b64(b'not json')}.x")
    assert not _is_formal_jwt(f"{head}.{body[:-1]}")  # a length no base64 text has
    not_utf8 = _b64(b"\xff\xfe")
    assert not _is_formal_jwt(f"{head}.{not_utf8}.x")
    jwe = f"{_b64({'alg': 'RSA-OAEP', 'enc': 'A256GCM'})}.{_b64(b'k')}.iv.{_b64(b'c')}.tag"
    assert _is_formal_jwt(jwe)
    deep = _b64(b"[" * 100_000)
    assert _is_formal_jwt(f"{head}.{deep}.x")  # too deep to decode: the header decides
