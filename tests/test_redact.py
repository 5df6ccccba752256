"""Behaviour of `sandbox_memory.redact`: secrets never survive, ordinary text always does."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox_memory.redact import REDACTION_MARKER, Redactor, default_redactor
from secret_corpus import BENIGN, CASES, SECRETS, SecretCase, secret_values

MARKER_RX = re.compile(r"\[REDACTED:[a-z0-9-]+\]")


@pytest.fixture
def redactor() -> Redactor:
    return Redactor()


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON-like structure, keys included, JSON-encoded strings decoded."""
    if isinstance(value, str):
        yield value
        try:
            decoded = json.loads(value)
        except ValueError:
            return
        if not isinstance(decoded, str):
            yield from _strings(decoded)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _conversation(text: str) -> list[dict[str, Any]]:
    """Agents SDK items carrying `text` as user input, tool arguments and tool output."""
    return [
        {"role": "user", "content": text},
        {"role": "user", "content": [{"type": "input_text", "text": text}]},
        {
            "type": "function_call",
            "name": "exec_command",
            "call_id": "call_1",
            "arguments": json.dumps({"cmd": text, "workdir": "/workspace"}),
        },
        {"type": "function_call_output", "call_id": "call_1", "output": text},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"Done.\n{text}"}],
        },
    ]


# ---- corpus -----------------------------------------------------------------------------------


def test_corpus_covers_at_least_45_distinct_formats() -> None:
    assert len({name for name, _ in SECRETS}) == len(SECRETS) >= 45


def test_secret_values_align_with_corpus_texts() -> None:
    values = secret_values()
    assert len(values) == len(SECRETS)
    assert all(value in text for value, (_, text) in zip(values, SECRETS, strict=True))


@pytest.mark.parametrize("case", CASES, ids=[c.format for c in CASES])
def test_secret_is_replaced_by_its_typed_marker(redactor: Redactor, case: SecretCase) -> None:
    out = redactor.redact_text(case.text)
    assert case.secret not in out
    assert REDACTION_MARKER.format(kind=case.kind) in out


@pytest.mark.parametrize("case", CASES, ids=[c.format for c in CASES])
def test_secret_is_removed_from_nested_conversation_items(
    redactor: Redactor, case: SecretCase
) -> None:
    out = redactor.redact_json(_conversation(case.text))
    leaked = [s for s in _strings(out) if case.secret in s]
    assert not leaked


def test_all_secrets_joined_in_one_tool_call_are_removed(redactor: Redactor) -> None:
    # Joined by line breaks, which JSON-encoded arguments carry as the two characters `\n`.
    out = redactor.redact_json(_conversation("\n".join(text for _, text in SECRETS)))
    strings = list(_strings(out))
    leaked = [name for name, value in zip(SECRETS, secret_values(), strict=True)
              if any(value in s for s in strings)]  # fmt: skip
    assert leaked == []


def test_redacted_tool_arguments_stay_valid_json(redactor: Redactor) -> None:
    arguments = json.dumps({"cmd": "\n".join(text for _, text in SECRETS)})
    redacted = redactor.redact_text(arguments)
    assert redacted != arguments
    decoded = json.loads(redacted)  # no escape sequence was cut in half by a marker
    assert decoded["cmd"].startswith("aws_access_key_id = [REDACTED:aws-access-key]\n")


def test_secret_right_after_an_escaped_line_break_keeps_the_escape(redactor: Redactor) -> None:
    arguments = json.dumps({"cmd": "signing key:\nZk3q9XvB2mN7pL4tR8sW1yC6qq"})
    out = redactor.redact_text(arguments)
    assert json.loads(out) == {"cmd": "signing key:\n[REDACTED:high-entropy-secret]"}


@pytest.mark.parametrize("case", CASES, ids=[c.format for c in CASES])
def test_redaction_is_idempotent(redactor: Redactor, case: SecretCase) -> None:
    once = redactor.redact_text(case.text)
    assert redactor.redact_text(once) == once


@pytest.mark.parametrize("text", BENIGN)
def test_benign_text_is_unchanged(redactor: Redactor, text: str) -> None:
    assert redactor.redact_text(text) == text
    assert redactor.find(text) == []


# ---- specific shapes ------------------------------------------------------------------------


def test_url_basic_auth_keeps_user_and_host(redactor: Redactor) -> None:
    text = "git clone https://deploy:Xq9vL2pT7mZr4KsB@git.example.com/acme/app.git"
    assert redactor.redact_text(text) == (
        "git clone https://deploy:[REDACTED:url-password]@git.example.com/acme/app.git"
    )


def test_connection_string_keeps_user_host_and_database(redactor: Redactor) -> None:
    text = "DATABASE_URL=postgresql://app:Xq9vL2pT7mZr4KsB@db.internal:5432/orders"
    assert redactor.redact_text(text) == (
        "DATABASE_URL=postgresql://app:[REDACTED:connection-string]@db.internal:5432/orders"
    )


def test_private_key_block_is_replaced_whole(redactor: Redactor) -> None:
    case = next(c for c in CASES if c.format == "rsa-private-key")
    out = redactor.redact_text(case.text)
    assert "BEGIN RSA PRIVATE KEY" not in out
    assert "END RSA PRIVATE KEY" not in out
    assert out == "$ cat ~/.ssh/id_key\n[REDACTED:private-key]\n$ ls"


def test_truncated_private_key_body_is_redacted(redactor: Redactor) -> None:
    case = next(c for c in CASES if c.format == "openssh-private-key")
    truncated = case.text.split("-----END")[0]
    out = redactor.redact_text(truncated)
    assert case.secret not in out
    assert "[REDACTED:private-key]" in out


def test_assignment_keeps_key_and_quotes(redactor: Redactor) -> None:
    assert (
        redactor.redact_text('DB_PASSWORD="c0rrect-h0rse"') == 'DB_PASSWORD="[REDACTED:password]"'
    )


def test_function_call_assignment_is_kept(redactor: Redactor) -> None:
    assert redactor.redact_text("password = get_password()") == "password = get_password()"


def test_bearer_header_keeps_scheme(redactor: Redactor) -> None:
    out = redactor.redact_text("Authorization: Bearer 9f2Kx7Lq3Vb8Rt1Zm4Np6Wc0Ys5Hd")
    assert out == "Authorization: Bearer [REDACTED:bearer-token]"


def test_git_sha_and_uuid_survive(redactor: Redactor) -> None:
    text = (
        "commit 3f786850e387550fdab836ed7e6dc881de23001b for run "
        "9b2e4f7a-1c3d-4e5f-8a6b-7c8d9e0f1a2b"
    )
    assert redactor.redact_text(text) == text


def test_text_whose_lowercase_changes_length_is_redacted_at_the_right_offsets(
    redactor: Redactor,
) -> None:
    text = "İstanbul office: PASSWORD=Xq9vL2pT7mZr4KsB done"
    assert redactor.redact_text(text) == "İstanbul office: PASSWORD=[REDACTED:password] done"


def test_find_reports_kind_and_secret(redactor: Redactor) -> None:
    case = next(c for c in CASES if c.format == "github-oauth-token")
    assert redactor.find(case.text) == [("github-token", case.secret)]


# ---- redact_json -----------------------------------------------------------------------------


def test_redact_json_returns_a_new_structure_and_leaves_the_input_untouched(
    redactor: Redactor,
) -> None:
    items = _conversation(CASES[0].text)
    original = copy.deepcopy(items)
    out = redactor.redact_json(items)
    assert items == original
    assert out is not items
    assert out[0] is not items[0]


def test_redact_json_replaces_values_stored_under_secret_keys(redactor: Redactor) -> None:
    out = redactor.redact_json({"username": "admin", "password": "hunter2", "retries": 3})
    assert out == {"username": "admin", "password": "[REDACTED:password]", "retries": 3}


def test_redact_json_keeps_the_authorization_scheme(redactor: Redactor) -> None:
    out = redactor.redact_json({"headers": {"Authorization": "Bearer abc"}})
    assert out == {"headers": {"Authorization": "Bearer [REDACTED:bearer-token]"}}


def test_redact_json_replaces_a_bare_authorization_token(redactor: Redactor) -> None:
    out = redactor.redact_json({"headers": {"authorization": "abc123token"}})
    assert out == {"headers": {"authorization": "[REDACTED:authorization]"}}


def test_redact_json_replaces_value_of_a_named_secret_pair(redactor: Redactor) -> None:
    out = redactor.redact_json({"env": [{"name": "API_TOKEN", "value": "tok"}]})
    assert out == {"env": [{"name": "API_TOKEN", "value": "[REDACTED:token]"}]}


def test_redact_json_leaves_non_string_scalars_alone(redactor: Redactor) -> None:
    value = {"n": 1, "ok": True, "none": None, "ratio": 0.5, "items": (1, "x")}
    assert redactor.redact_json(value) == value


# ---- configuration -----------------------------------------------------------------------------


def test_allowlisted_value_is_kept() -> None:
    case = next(c for c in CASES if c.format == "aws-access-key-id")
    redactor = Redactor(allowlist=[case.secret])
    assert redactor.redact_text(case.text) == case.text


def test_allowlist_does_not_spare_other_secrets() -> None:
    allowed = next(c for c in CASES if c.format == "aws-access-key-id")
    other = next(c for c in CASES if c.format == "aws-sts-access-key-id-json")
    redactor = Redactor(allowlist=[allowed.secret])
    out = redactor.redact_text(allowed.text + "\n" + other.text)
    assert allowed.secret in out
    assert other.secret not in out


def test_extra_pattern_adds_a_kind() -> None:
    redactor = Redactor(extra_patterns={"ticket-id": r"TCK-\d{6}"})
    assert redactor.redact_text("see TCK-123456 now") == "see [REDACTED:ticket-id] now"


def test_extra_pattern_secret_group_replaces_only_that_group() -> None:
    redactor = Redactor(extra_patterns={"employee-id": r"employee=(?P<secret>\d{6})"})
    out = redactor.redact_text("lookup employee=123456 done")
    assert out == "lookup employee=[REDACTED:employee-id] done"


def test_invalid_extra_pattern_raises_value_error_naming_kind_and_pattern() -> None:
    with pytest.raises(ValueError) as excinfo:
        Redactor(extra_patterns={"broken-kind": r"(unclosed[group"})
    message = str(excinfo.value)
    assert "broken-kind" in message
    assert "(unclosed[group" in message


# ---- counters ----------------------------------------------------------------------------------


def test_counts_report_redactions_by_kind(redactor: Redactor) -> None:
    ghp = next(c for c in CASES if c.format == "github-oauth-token")
    pw = next(c for c in CASES if c.format == "shell-password-quoted")
    redactor.redact_text(f"{ghp.text}\n{pw.text}\n{ghp.text}")
    assert redactor.counts == {"github-token": 2, "password": 1}


def test_total_is_the_sum_of_counts(redactor: Redactor) -> None:
    redactor.redact_json(_conversation(CASES[0].text))
    assert redactor.total == sum(redactor.counts.values()) > 0


def test_reset_counts_clears_counts_and_total(redactor: Redactor) -> None:
    redactor.redact_text(CASES[0].text)
    redactor.reset_counts()
    assert redactor.counts == {}
    assert redactor.total == 0


def test_find_does_not_count(redactor: Redactor) -> None:
    redactor.find(CASES[0].text)
    assert redactor.total == 0


def test_counts_returns_a_copy(redactor: Redactor) -> None:
    redactor.redact_text(CASES[0].text)
    redactor.counts.clear()
    assert redactor.total == 1


# ---- module ------------------------------------------------------------------------------------


def test_marker_template_names_the_kind() -> None:
    assert REDACTION_MARKER.format(kind="aws-access-key") == "[REDACTED:aws-access-key]"
    assert MARKER_RX.fullmatch(REDACTION_MARKER.format(kind="aws-access-key"))


def test_default_redactor_is_shared() -> None:
    assert default_redactor() is default_redactor()


def test_default_redactor_redacts_builtin_formats() -> None:
    case = next(c for c in CASES if c.format == "anthropic-api-key")
    assert case.secret not in default_redactor().redact_text(case.text)


def test_a_secret_under_a_secret_key_is_counted_once() -> None:
    redactor = Redactor()
    token = "ghp_" + "a1B2c3D4e5" * 4
    out = redactor.redact_json({"password": token, "note": "fine"})
    assert out == {"password": "[REDACTED:github-token]", "note": "fine"}
    assert redactor.total == 1
