"""How a key is chosen: from words, from a changed file's name and what failed in it (a fix), or
from the files a run changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .limits import KEY_MAX_CHARS, KEY_SUBJECT_WORDS
from .words import CAMEL_RE, stem_of, stems_of, words_of

FIX_KEY_WORDS = KEY_SUBJECT_WORDS + 1
"""Words of a fix's key: the changed file's name (one or two words) and what failed in it
(``invoice-applies-tax``), so a file's fixes are told apart by their failure."""

NAME_WORDS = 3
"""Words of a file's name kept in a key (``string-utils-helpers``)."""


def make_key(*parts: str) -> str:
    """A valid key (``[a-z0-9][a-z0-9-]{0,63}``) from words, cut at a word boundary."""

    words = [w for part in parts for w in words_of(part)]
    key = ""
    for word in words:
        candidate = f"{key}-{word}" if key else word
        if len(candidate) > KEY_MAX_CHARS:
            if not key:
                key = word[:KEY_MAX_CHARS]
            break
        key = candidate
    return key or "note"


_TEST_PATH_RE = re.compile(
    r"(?:^|/)(?:tests?|spec|specs|__tests__)/|(?:^|/)test_[^/]*$|_test\.\w+$|\.(?:test|spec)\.\w+$"
)
"""A path of a test file: a fix that changes a module and its test is about the module."""


_GENERIC_FILE_STEMS = frozenset({"__init__", "__main__", "index", "mod", "main", "init"})
"""File names that name their folder's package rather than a subject of their own."""


def file_name_words(path: str) -> list[str]:
    """The words a file is called by: its name without the extension
    (``acme_billing/invoice.py`` -> ``invoice``, ``src/TaxRate.ts`` -> ``tax rate``), its
    folder's for a package's ``__init__.py``, ``index.js`` or ``mod.rs``."""

    parts = [p for p in path.strip().strip("/").split("/") if p]
    if not parts:
        return []
    name = parts[-1]
    stem = name.rsplit(".", 1)[0] if "." in name.lstrip(".") else name
    if stem.lower() in _GENERIC_FILE_STEMS and len(parts) > 1:
        stem = parts[-2]
    return words_of(CAMEL_RE.sub(" ", stem).replace("_", " "))[:NAME_WORDS]


def _subject_file(paths: Sequence[str]) -> str | None:
    """The file a change is about: the first that is not a test, else the first."""

    return next((p for p in paths if not _TEST_PATH_RE.search(p)), paths[0] if paths else None)


def fix_key(paths: Sequence[str], failure: Sequence[str], fallback: Sequence[str] = ()) -> str:
    """A fix's name: the file it changed and what failed there (``invoice-applies-tax`` for
    ``acme_billing/invoice.py`` and ``test_invoice.InvoiceTotalTest.test_applies_tax_rate``);
    the failure alone when no file changed (a command fixed it); ``fallback``'s words (the
    command) when nothing names the failure. The same file and failure give the same key in
    every run."""

    path = _subject_file(paths)
    named = file_name_words(path) if path else []
    held = stems_of(named)
    wrong = [w for w in failure if stem_of(w) not in held]
    if named and wrong:
        return make_key(*[*named, *wrong][:FIX_KEY_WORDS])
    if named:
        return make_key(*named, "fix")
    if failure:
        return make_key(*failure[:KEY_SUBJECT_WORDS])
    return make_key(*fallback[:KEY_SUBJECT_WORDS], "fix")


def findings_key(read: Sequence[str], subject: Sequence[str]) -> str:
    """The name of what a run that changed nothing found: the file it looked into and what it
    was asked about (``invoice-tests-fail`` for a run that read ``acme_billing/invoice.py`` when
    asked why the invoice tests fail), as a fix about the same file would be named; the words of
    the request alone when it read no file. ``None`` of the words: ``findings``."""

    path = _subject_file(read)
    named = file_name_words(path) if path else []
    held = stems_of(named)
    rest = [w for w in subject if stem_of(w) not in held]
    words = [*named, *rest][:FIX_KEY_WORDS]
    return make_key(*words) if words else "findings"


def changes_key(paths: Sequence[str]) -> str:
    """The name of a run's changes without a fixed failure: its files' names, the changed
    files before the created ones (``test-invoice-regression`` for a run that added
    ``tests/test_invoice_regression.py``)."""

    words: list[str] = []
    for path in paths[:2]:
        words.extend(w for w in file_name_words(path) if w not in words)
    return make_key(*words[: KEY_SUBJECT_WORDS + 1]) if words else "changes"


def parent_words(paths: Sequence[str]) -> list[str]:
    """The folder of the first path, as words (``pkg/billing/invoice.py`` -> ``billing``)."""

    for path in paths:
        parts = [p for p in path.strip("/").split("/") if p]
        if len(parts) > 1:
            return words_of(parts[-2].replace("_", " "))[:2]
    return []
