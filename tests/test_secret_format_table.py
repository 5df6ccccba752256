"""Every row of the secret-format table (`redact/formats.py`) proves itself: each of its
`secret` examples is found by that row and redacted by the whole redactor (no part of the secret
left), each of its `kept` examples passes the whole redactor unchanged."""

from __future__ import annotations

import re

import pytest

from sandbox_memory.redact import default_redactor
from sandbox_memory.redact.formats import FORMATS, PRIORITIES, Format
from sandbox_memory.redact.rules import _format_rule, _own_rules

_IDS = [f"{i}-{row.kind}" for i, row in enumerate(FORMATS)]


def _row_secret(row: Format, text: str) -> str | None:
    """What the row's own rule takes in ``text`` (as the matcher reads a hit)."""
    rule = _format_rule(row)
    for match in rule.regex.finditer(text.lower() if rule.lowered else text):
        start, end = match.span(rule.group)
        if rule.has_head and match.start("head") >= 0:
            start = match.start("head")
        if start < 0 or end <= start:
            continue
        if rule.validate is None or rule.validate(text[start:end]):
            return text[start:end]
    return None


def test_the_table_is_the_rule_set() -> None:
    assert [r.regex.pattern for r in _own_rules()] == [
        _format_rule(row).regex.pattern for row in FORMATS
    ]
    assert all(row.priority in PRIORITIES and row.secret for row in FORMATS)


@pytest.mark.parametrize("row", FORMATS, ids=_IDS)
def test_each_row_redacts_its_secrets_and_keeps_its_near_misses(row: Format) -> None:
    redactor = default_redactor()
    for text in row.secret:
        secret = _row_secret(row, text)
        assert secret, f"{row.kind}: the row finds nothing in {text!r}"
        out = redactor.redact_text(text)
        assert secret not in out and "[REDACTED:" in out, (row.kind, text, out)
    for text in row.kept:
        assert redactor.redact_text(text) == text, (row.kind, text)


def test_a_row_with_an_unknown_form_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'x-token'.*form must be one of"):
        _format_rule(Format("x-token", form="regex", pattern="x"))


def test_a_rule_read_from_its_pattern_text_matches_its_compiled_pattern() -> None:
    """Rules are compiled when they first run; what the matcher needs before that (the secret
    group, a head group) is read from the pattern's text and must agree with the compiled
    pattern's named groups."""

    from sandbox_memory.redact.rules import _BUILTIN_RULES

    for rule in _BUILTIN_RULES:
        compiled = re.compile(rule.pattern, rule.compiled.flags if rule.compiled else 0)
        assert rule.has_head == ("head" in compiled.groupindex), rule.kind
        if isinstance(rule.group, str):
            assert rule.group in compiled.groupindex, rule.kind
        else:
            assert rule.group <= compiled.groups, rule.kind
            if rule.group == 0:
                assert "secret" not in compiled.groupindex, rule.kind
        assert rule.regex.pattern == rule.pattern
