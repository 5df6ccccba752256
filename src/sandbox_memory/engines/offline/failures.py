"""How a failure is read from a command's output: its most telling error line, the words naming
what failed (a test, a file and an exception, a diagnostic) and the failing tests' ids.
"""

from __future__ import annotations

import re

from sandbox_memory.engines.text import shorten
from sandbox_memory.engines.transcript import one_line

from .limits import ERROR_LINE_CHARS, FAILURE_SUBJECT_WORDS
from .words import CAMEL_RE, subject_words

DETAIL_LOOKAHEAD_LINES = 30
"""Lines after a test-failure header (``FAIL: test_x``, ``--- FAIL: TestX``) searched for the
reason (``AssertionError: ...``): a failing test's traceback is short."""


_TEST_FAILURE_LINE_RE = re.compile(r"^(?:FAILED|FAIL|ERROR)\b:?\s+\S|^--- FAIL:")


_EXCEPTION_LINE_RE = re.compile(r"^\s*(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit)\b")


_DIAGNOSTIC_LINE_RE = re.compile(r"^[\w./-]+\.\w+[:(]\d+(?:[:,]\d+)?\)?:\s*\S")


_ERROR_PATTERNS: tuple[re.Pattern[str], ...] = (
    _TEST_FAILURE_LINE_RE,
    re.compile(r"^error(?:\[\w+\])?:", re.IGNORECASE),
    _EXCEPTION_LINE_RE,
    re.compile(r"^E\s+\S"),
    _DIAGNOSTIC_LINE_RE,
    re.compile(r"panic:|fatal:|npm ERR!|command not found|No such file|Traceback", re.IGNORECASE),
    re.compile(r"\b(?:error|failed|failure)\b", re.IGNORECASE),
)
"""Error lines, best first: test-runner failure lines, compiler errors, the exception line a
Python traceback ends with, pytest ``E`` lines, ``path:line:col: message`` diagnostics of
linters and compilers, then anything saying error or failed."""


_EXCEPTION_RE = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")


_UNITTEST_ID_RE = re.compile(r"^(?:FAIL|ERROR): (\w+) \(([\w.]+)\)", re.MULTILINE)


_PYTEST_ID_RE = re.compile(r"([\w./-]+?)\.py::(?:[\w\[\]-]+::)*([\w-]+)")


_GO_TEST_RE = re.compile(r"--- FAIL:\s+(\w+)")


_JS_TEST_RE = re.compile(r"^FAIL\s+([\w./-]+?)\.(?:test|spec)\.\w+", re.MULTILINE)


_TRACE_FILE_RE = re.compile(r'File "([^"]+?)\.\w+", line \d+')


_DIAGNOSTIC_RE = re.compile(r"^([\w./-]+?)\.\w+[:(]\d+(?:[:,]\d+)?\)?:\s*(?:error:?\s*)?(\S+)")


def quote_error(line: str) -> str:
    return shorten(line.replace("`", "'"), ERROR_LINE_CHARS)


def error_line(text: str) -> str | None:
    """The most telling error line of a failing command's output, or None if it is empty.

    A test-failure header that does not say why (unittest's ``FAIL: test_x (...)``, Go's
    ``--- FAIL: TestX``) gets the reason that follows it appended (``AssertionError: ...``).
    """

    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    for pattern in _ERROR_PATTERNS:
        found = [n for n, line in enumerate(lines) if pattern.search(line)]
        if not found:
            continue
        # An exception line ends a traceback: the last one is the one raised.
        at = found[-1] if pattern is _EXCEPTION_LINE_RE else found[0]
        chosen = lines[at].strip()
        if pattern is _TEST_FAILURE_LINE_RE and not _EXCEPTION_RE.search(chosen):
            for follow in lines[at + 1 : at + 1 + DETAIL_LOOKAHEAD_LINES]:
                stripped = follow.strip()
                if _EXCEPTION_LINE_RE.search(stripped) or _DIAGNOSTIC_LINE_RE.search(stripped):
                    chosen = f"{chosen} - {stripped}"
                    break
        return one_line(chosen, ERROR_LINE_CHARS)
    return one_line(lines[-1], ERROR_LINE_CHARS)


def failure_subject(text: str, line: str | None) -> list[str]:
    """Words naming what failed: the test (file and name), else the file of a traceback, else
    the error line's words."""

    drop = frozenset({"test", "tests", "spec", "py", "src", "lib", "failed", "fail", "error"})
    match = _PYTEST_ID_RE.search(line or "") or _PYTEST_ID_RE.search(text)
    if match:
        stem = match.group(1).rsplit("/", 1)[-1]
        return subject_words(f"{stem} {match.group(2)}".replace("_", " "), drop)[
            :FAILURE_SUBJECT_WORDS
        ]
    unit = _UNITTEST_ID_RE.search(line or "") or _UNITTEST_ID_RE.search(text)
    if unit:
        module = unit.group(2).split(".", 1)[0]
        return subject_words(f"{module} {unit.group(1)}".replace("_", " "), drop)[
            :FAILURE_SUBJECT_WORDS
        ]
    go = _GO_TEST_RE.search(text)
    if go:
        return subject_words(CAMEL_RE.sub(" ", go.group(1)), drop)[:FAILURE_SUBJECT_WORDS]
    js = _JS_TEST_RE.search(text)
    if js:
        return subject_words(js.group(1).rsplit("/", 1)[-1].replace("_", " "), drop)[
            :FAILURE_SUBJECT_WORDS
        ]
    traces = _TRACE_FILE_RE.findall(text)
    local = [t for t in traces if "site-packages" not in t and not t.startswith("<")]
    if local and line:
        stem = local[-1].rsplit("/", 1)[-1].replace("_", " ")
        exc = line.split(":", 1)[0]
        return subject_words(f"{stem} {CAMEL_RE.sub(' ', exc)}", drop)[:FAILURE_SUBJECT_WORDS]
    diagnostic = _DIAGNOSTIC_RE.search(line or "")
    if diagnostic:
        stem = diagnostic.group(1).rsplit("/", 1)[-1].replace("_", " ")
        return subject_words(f"{stem} {diagnostic.group(2)}", drop)[:FAILURE_SUBJECT_WORDS]
    if line:
        return subject_words(CAMEL_RE.sub(" ", line), drop)[:FAILURE_SUBJECT_WORDS]
    return []


def failing_tests(line: str) -> list[str]:
    """Test ids an error line names (``tests/a.py::test_x``, ``test_x (mod.Class.test_x)``)."""

    found = [m.group(0) for m in _PYTEST_ID_RE.finditer(line)]
    found += [f"{m.group(2)}.{m.group(1)}" for m in _UNITTEST_ID_RE.finditer(line)]
    return list(dict.fromkeys(found))
