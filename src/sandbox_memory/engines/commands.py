"""Shell command lines as memory reads them: their simple commands, and whether one only looks.

One decision lives here, for every step that needs it: a command that only reads memory's own
files (``grep -n test memories/MEMORY.md``, ``cat memories/memory_summary.md``) is the agent
consulting what earlier runs learned. It teaches nothing about the project, so it is not
learned (the offline engine), not listed as one of the run's commands (its summary and notes),
does not count as evidence for an entry (``rules.py``), and its output, which only repeats
memory, is not indexed as something the run saw (``search/``): :func:`reads_memory` for one
command line, :class:`MemoryReads` for the items of a transcript.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from .transcript import function_arguments, output_call_id, shell_commands

COMMAND_SCAN_CHARS = 8_000
"""Characters of a shell command parsed for test runners and file writes.

Real command lines are short; a longer one is mostly a heredoc body, whose text is data."""

MAX_PREFIX_STRIPS = 5
"""Prefixes (``FOO=1``, ``uv run``, ``timeout 60`` ...) removed from one command segment: real
command lines stack two or three."""

SHELL_TOOL_NAMES = frozenset({"exec_command", "shell", "bash", "run_command", "run_shell_command"})
"""Function tools whose ``cmd`` / ``command`` argument is a shell command line."""

READ_ONLY_PROGRAMS = frozenset(
    """cat ls grep egrep fgrep rg find fd head tail echo printf pwd which whereis wc less more tree
    stat file printenv whoami date diff cmp test [ true false sleep du df ps type command man
    nl sort uniq cut awk jq yq""".split()
)
"""Programs that only look (so do ``sed`` without ``-i`` and read-only ``git``: see
:func:`only_looks`)."""

READ_ONLY_GIT = frozenset(
    {"status", "diff", "log", "show", "branch", "blame", "remote", "rev-parse", "ls-files", "grep"}
)
"""``git`` subcommands that only look."""

SEGMENT_SPLIT_RE = re.compile(r"\s*(?:&&|\|\||;|\||\n)\s*")
"""Where one simple command of a command line ends and the next begins."""

_PREFIX_RE = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+|sudo\s+|time\s+|nice\s+|timeout\s+\S+\s+"
    r"|(?:uv|poetry|pipenv|hatch|pdm|rye)\s+run\s+|npx\s+|bunx\s+|pnpm\s+exec\s+"
    r"|(?:\S*/)?env\s+|exec\s+)"
)
_HEREDOC_RE = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")
_WRITE_REDIRECT_RE = re.compile(r"(?<![0-9&<>=-])>>?\s*(?!&|/dev/)\S")
_IN_PLACE_RE = re.compile(r"(?:^|\s)(?:-i\S*|--in-place)\b")

MEMORY_FILES_RE = re.compile(
    r"(?:^|[\s/'\"=])(?:MEMORY\.md|memory_summary\.md|raw_memories(?:\.md)?\b|rollout_summaries\b"
    r"|phase_two_selection\.json|memories/(?:skills|store)\b)"
)
"""Memory's own files, by the seed's fixed names (whatever folder the layout puts them in),
and the skills and store folders under the default ``memories/``."""


def strip_heredocs(cmd: str) -> str:
    """Drop heredoc bodies (file contents, not commands) from a command line."""

    if "<<" not in cmd:
        return cmd
    kept: list[str] = []
    terminator: str | None = None
    for line in cmd.split("\n"):
        if terminator is not None:
            if line.strip() == terminator:
                terminator = None
            continue
        kept.append(line)
        match = _HEREDOC_RE.search(line)
        if match:
            terminator = match.group(1)
    return "\n".join(kept)


def command_segments(cmd: str) -> list[str]:
    """The simple commands of a command line, prefixes like ``FOO=1`` or ``uv run`` removed,
    ``cd`` steps and heredoc bodies dropped."""

    text = strip_heredocs(cmd[:COMMAND_SCAN_CHARS])
    segments: list[str] = []
    for raw in SEGMENT_SPLIT_RE.split(text):
        segment = raw.strip().lstrip("(").strip()
        for _ in range(MAX_PREFIX_STRIPS):
            stripped = _PREFIX_RE.sub("", segment, count=1)
            if stripped == segment:
                break
            segment = stripped
        if not segment or segment.startswith(("cd ", "pushd ", "#")) or segment in ("cd", ")"):
            continue
        segments.append(segment)
    return segments


def _segment_looks(segment: str) -> bool:
    words = segment.split()
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if program == "git":
        return len(words) > 1 and words[1] in READ_ONLY_GIT
    if program == "sed":
        return not _IN_PLACE_RE.search(segment) and not _WRITE_REDIRECT_RE.search(segment)
    return program in READ_ONLY_PROGRAMS and not _WRITE_REDIRECT_RE.search(segment)


def only_looks(cmd: str) -> bool:
    """Whether every simple command of ``cmd`` only reads (``cat``, ``grep``, ``git log``, a
    ``sed`` without ``-i``), writing no file."""

    segments = command_segments(cmd)
    return bool(segments) and all(_segment_looks(segment) for segment in segments)


def reads_memory(cmd: str) -> bool:
    """Whether ``cmd`` only looks, and at memory's own files (see the module docstring)."""

    return bool(MEMORY_FILES_RE.search(cmd[:COMMAND_SCAN_CHARS])) and only_looks(cmd)


def command_of(item: Mapping[str, Any]) -> str | None:
    """The shell command line a recorded tool call runs (a shell function tool, a hosted or
    local shell call), or ``None`` for any other item."""

    kind = item.get("type")
    if kind == "function_call" and item.get("name") in SHELL_TOOL_NAMES:
        args = function_arguments(item)
        cmd = args.get("cmd", args.get("command"))
        if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
            cmd = shlex.join(cmd)
        return cmd if isinstance(cmd, str) and cmd.strip() else None
    if kind in ("shell_call", "local_shell_call"):
        commands = shell_commands(item)
        return " && ".join(commands) if commands else None
    return None


class MemoryReads:
    """Which items of a transcript are the agent reading memory: fed the items in order, it
    says so of a call that :func:`reads_memory` and of the output that answers it."""

    def __init__(self) -> None:
        self._calls: set[str] = set()

    def is_read(self, item: Mapping[str, Any]) -> bool:
        kind = item.get("type")
        if isinstance(kind, str) and kind.endswith("_output"):
            return output_call_id(item) in self._calls
        cmd = command_of(item)
        if cmd is None or not reads_memory(cmd):
            return False
        call_id = item.get("call_id")
        if isinstance(call_id, str) and call_id:
            self._calls.add(call_id)
        elif isinstance(item.get("id"), str):
            self._calls.add(str(item["id"]))  # a local shell call's output may answer its id
        return True


__all__ = [
    "COMMAND_SCAN_CHARS",
    "MemoryReads",
    "command_of",
    "command_segments",
    "only_looks",
    "reads_memory",
    "strip_heredocs",
]
