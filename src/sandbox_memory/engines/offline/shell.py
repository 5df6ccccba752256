"""How a shell command is read: its kind (test, lint, type-check, build, install), its program
and signature, the files it writes, and how it is quoted in an entry.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from sandbox_memory.engines.commands import command_segments

from .limits import COMMAND_CHARS, SIGNATURE_WORDS

CATEGORIES: tuple[tuple[str, re.Pattern[str], str, re.Pattern[str], str], ...] = (
    (
        "test-command",
        re.compile(
            r"^(?:\S*/)?(?:python[\d.]*\s+-m\s+(?:pytest|unittest|nose2?)\b|pytest\b|py\.test\b"
            r"|tox\b|nox\b|(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?test\b|jest\b|vitest\b|mocha\b"
            r"|go\s+test\b|cargo\s+(?:test|nextest)\b|make\s+(?:test|tests|check)\b"
            r"|(?:mvn|mvnw|gradle|gradlew)\b.*\btest\b|dotnet\s+test\b|ctest\b"
            r"|(?:bundle\s+exec\s+)?rspec\b|phpunit\b|mix\s+test\b|deno\s+test\b|hatch\s+test\b"
            r"|swift\s+test\b|playwright\s+test\b)"
        ),
        "Run the tests with",
        re.compile(r"\brun(?:ning)?\s+(?:the\s+)?(?:\w+\s+)?tests?\b|\btests?\b.*\bwith\b"),
        "test",
    ),
    (
        "lint-command",
        re.compile(
            r"^(?:\S*/)?(?:ruff(?:\s+check)?\b(?!\s+format)|flake8\b|pylint\b|eslint\b"
            r"|(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?lint\b|golangci-lint\b|cargo\s+clippy\b"
            r"|rubocop\b|shellcheck\b|pre-commit\s+run\b|make\s+lint\b|black\s+--check\b)"
        ),
        "Run the linter with",
        re.compile(r"\blint"),
        "lint",
    ),
    (
        "typecheck-command",
        re.compile(
            r"^(?:\S*/)?(?:mypy\b|pyright\b|tsc\b|(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?"
            r"(?:typecheck|type-check|tsc)\b|make\s+typecheck\b)"
        ),
        "Type-check with",
        re.compile(r"\btype[- ]?check"),
        "typecheck",
    ),
    (
        "build-command",
        re.compile(
            r"^(?:\S*/)?(?:(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?build\b|cargo\s+build\b"
            r"|go\s+build\b|python[\d.]*\s+-m\s+build\b|make\s*$|make\s+(?:build|all)\b"
            r"|(?:mvn|mvnw)\s+package\b|(?:gradle|gradlew)\s+build\b|docker\s+build\b)"
        ),
        "Build with",
        re.compile(r"\bbuild"),
        "build",
    ),
    (
        "install-command",
        re.compile(
            r"^(?:\S*/)?(?:pip3?\s+install\s+(?:-e\b|-r\b|\.)|python[\d.]*\s+-m\s+pip\s+install"
            r"\s+(?:-e\b|-r\b|\.)|uv\s+sync\b|uv\s+pip\s+install\s+(?:-e\b|-r\b|\.)"
            r"|poetry\s+install\b|pdm\s+install\b|(?:npm|pnpm|yarn|bun)\s+(?:install|ci|i)\s*$"
            r"|bundle\s+install\b|go\s+mod\s+download\b|cargo\s+fetch\b)"
        ),
        "Install the dependencies with",
        re.compile(r"\binstall"),
        "install",
    ),
)
"""Kinds of command worth remembering when they pass: ``(key, command pattern, content prefix,
pattern of a known entry's content that means the same procedure, word its key must share)``.
Patterns match one shell segment after prefixes like ``uv run`` or ``FOO=1`` are removed."""


BENIGN_EXIT_ONE = frozenset({"grep", "egrep", "fgrep", "rg", "diff", "cmp", "test", "["})
"""Programs whose exit code 1 means "no match" or "differs", not failure."""


CHECK_CATEGORIES = frozenset({"test-command", "lint-command", "typecheck-command"})
"""Kinds of command that check rather than change: never the command that fixed a failure."""


_REDIRECT_RE = re.compile(r"(?<![0-9&<>])>>?\s*([^\s;&|<>]+)")


def quote_cmd(cmd: str) -> str:
    """The command in backticks, whole; a command line too long to quote is said shorter: its
    first simple commands that fit, whole, and ``…`` outside the quote."""

    flat = " ".join(cmd.replace("`", "'").split())
    if len(flat) <= COMMAND_CHARS:
        return f"`{flat}`"
    kept = ""
    for part in re.split(r"\s+(?:&&|\|\||;)\s+", flat):
        joined = f"{kept} && {part}" if kept else part
        if len(joined) > COMMAND_CHARS:
            break
        kept = joined
    if not kept:
        words = flat.split()
        program = " ".join(words[:SIGNATURE_WORDS])
        return f"a `{program}` command" if len(program) <= COMMAND_CHARS else "a long command"
    return f"`{kept}` …"


def command_category(cmd: str) -> str | None:
    """``test-command``, ``lint-command``, ... when a segment of ``cmd`` runs such a tool."""

    segments = command_segments(cmd)
    for key, pattern, *_ in CATEGORIES:
        if any(pattern.search(segment) for segment in segments):
            return key
    return None


def program_of(segments: Sequence[str]) -> str:
    if not segments:
        return ""
    first = segments[0].split(None, 1)[0] if segments[0].split() else ""
    return first.rsplit("/", 1)[-1]


def signature_of(segments: Sequence[str], cmd: str) -> str:
    base = segments[0] if segments else cmd
    return " ".join(base.split()[:SIGNATURE_WORDS])


def shell_written_files(cmd: str) -> list[str]:
    """Files a command line writes with ``sed -i``, ``perl -i``, ``tee`` or ``cat/echo >``."""

    files: list[str] = []
    for segment in command_segments(cmd):
        try:
            tokens = shlex.split(segment, comments=False, posix=True)
        except ValueError:
            tokens = segment.split()
        if not tokens:
            continue
        program = tokens[0].rsplit("/", 1)[-1]
        if program in ("sed", "perl") and any(
            t.startswith("-i") or t == "--in-place" or (t.startswith("-") and "i" in t[1:3])
            for t in tokens[1:]
        ):
            last = tokens[-1]
            if not last.startswith("-") and len(tokens) > 2:
                files.append(last)
        elif program == "tee":
            files.extend(t for t in tokens[1:] if not t.startswith("-"))
        elif program in ("cat", "echo", "printf"):
            for match in _REDIRECT_RE.finditer(segment):
                target = match.group(1).strip("'\"")
                if target and not target.startswith(("/dev/", "&")):
                    files.append(target)
    return list(dict.fromkeys(files))
