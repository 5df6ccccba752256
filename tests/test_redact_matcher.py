"""The redactor's prefilters: the compiled one (Hyperscan) and the pure-Python fallback give
byte-identical output on every input, so a platform without Hyperscan redacts the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_memory.redact import MATCHERS, Redactor, available_matchers
from secret_corpus import BENIGN, CASES

pytestmark = pytest.mark.skipif(
    "hyperscan" not in available_matchers(), reason="hyperscan is not installed here"
)

COMPILED = Redactor(matcher="hyperscan")
FALLBACK = Redactor(matcher="python")

# Pieces that make rules fire, nearly fire, or stop: context words, vendor prefixes, quotes,
# escapes, separators, non-ASCII text (offsets differ between bytes and characters there).
_FRAGMENTS = [
    *(case.text for case in CASES),
    *BENIGN,
    "password",
    "PASSWORD=",
    "token: ",
    "api_key = '",
    "secret",
    "Authorization: Bearer ",
    "--password ",
    "ghp_",
    "sk-",
    "xoxb-",
    "AKIA",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "://user:",
    "@host",
    "?token=",
    "&",
    '"',
    "'",
    "\\n",
    "\\",
    "\n",
    " ",
    "=",
    ":",
    "İstanbul ",
    "密码是",
    "Kennwort: ",
    "mot de passe ",
    "ü",
    "\x00",
    "Zk3q9XvB2mN7pL4tR8sW1yC6qq",
    "a1B2c3D4e5f6G7h8",
]


def _texts() -> st.SearchStrategy[str]:
    piece = st.one_of(
        st.sampled_from(_FRAGMENTS),
        st.text(min_size=1, max_size=30),
        st.text(
            alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ0123456789+/=_-.", min_size=1, max_size=60
        ),
    )
    return st.lists(piece, max_size=14).map("".join)


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_both_prefilters_are_known() -> None:
    assert MATCHERS == ("hyperscan", "python")
    assert COMPILED._matcher.name == "hyperscan"
    assert FALLBACK._matcher.name == "python"


def test_the_two_prefilters_agree_on_the_corpus() -> None:
    for text in [*(case.text for case in CASES), *BENIGN]:
        assert COMPILED.redact_text(text) == FALLBACK.redact_text(text)


@pytest.mark.slow
@_SETTINGS
@given(_texts())
def test_the_two_prefilters_agree_on_random_text(text: str) -> None:
    assert COMPILED.redact_text(text) == FALLBACK.redact_text(text)
    assert COMPILED.find(text) == FALLBACK.find(text)


@pytest.mark.slow
@_SETTINGS
@given(st.lists(_texts(), min_size=1, max_size=6))
def test_the_two_prefilters_agree_on_run_items(texts: list[str]) -> None:
    items: list[dict[str, Any]] = []
    for n, text in enumerate(texts):
        items.append(
            {
                "type": "function_call",
                "call_id": f"c{n}",
                "arguments": json.dumps({"cmd": text}),
            }
        )
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": text})
    assert COMPILED.redact_json(items) == FALLBACK.redact_json(items)


def test_an_unknown_matcher_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'re2'"):
        Redactor(matcher="re2")
