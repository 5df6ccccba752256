"""What a code change changed, read from the run's own tool calls.

The agent's last message may say only "Done."; the patch it applied says which files changed and
how. This module reads V4A patches (the sandbox ``apply_patch`` tool), unified diffs (``git
apply``, ``patch -p1``, usually fed through a shell heredoc) and whole-file writes (``cat > f
<<EOF``), and describes each file's change in a few words: the function it touched and the first
line that changed (``return subtotal`` → ``return round(subtotal * (1 - discount), 2)``).

Linear in the patch text, bounded by :data:`MAX_PATCH_SCAN_CHARS`; deterministic.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

MAX_PATCH_SCAN_CHARS = 200_000
"""Characters of one patch or written file read: a bigger one is described by its head."""

MAX_QUOTED_LINE_CHARS = 100
"""Longest changed line quoted in a description; a longer one is not quoted (never cut)."""

MAX_SYMBOLS = 3
"""Functions or classes named for a created or rewritten file."""

MAX_DIFF_LINES = 2_000
"""Lines of an old and a new file compared when a file is rewritten whole."""

_V4A_FILE_RE = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$")
_V4A_MOVE_RE = re.compile(r"^\*\*\* Move to: (.+?)\s*$")
_UNIFIED_HUNK_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?(.*)$")
_SYMBOL_RE = re.compile(
    r"^\s*(?:export\s+)?(?:async\s+)?(?:def|class|func|fn|function|interface|struct|enum|type)"
    r"\s+([A-Za-z_][\w]*)"
)
_HEREDOC_RE = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)['\"]?")
_APPLY_RE = re.compile(r"(?:^|[\s;&|(])(?:git\s+apply|git\s+am|patch)(?:\s|$)")
_WRITE_TARGET_RE = re.compile(r"(?<![0-9&<>])>\s*([^\s;&|<>]+)")
_TEE_RE = re.compile(r"\btee\s+(?:-a\s+)?([^\s;&|<>]+)")
_PATCH_FILE_ARG_RE = re.compile(
    r"(?:git\s+apply|git\s+am|patch)\b[^<\n;&|]*?(?:-i\s*|<\s*|\s)([\w./-]+\.(?:patch|diff))\b"
)


@dataclass
class FileChange:
    """One file a change touched and, when it can be said briefly, how."""

    op: str
    """``created``, ``updated``, ``deleted`` or ``moved``."""
    path: str
    symbol: str | None = None
    """The function or class the first changed hunk sits in."""
    removed_line: str | None = None
    added_line: str | None = None
    added: int = 0
    removed: int = 0
    symbols: tuple[str, ...] = ()
    """Functions and classes a created or rewritten file defines."""

    def describe(self) -> str:
        """``updated `x.py` (in `total`): `old` → `new``` and the like; never cuts a line."""

        where = f"`{self.path}`"
        if self.op == "deleted":
            return f"deleted {where}"
        if self.op == "moved":
            return f"moved to {where}"
        if self.op == "created":
            text = f"created {where}"
            if self.symbols:
                text += " (defines " + ", ".join(f"`{s}`" for s in self.symbols) + ")"
            return text
        text = f"updated {where}"
        if self.symbol:
            text += f" in `{self.symbol}`"
        removed, added = _quotable(self.removed_line), _quotable(self.added_line)
        if removed and added:
            text += f": `{removed}` → `{added}`"
        elif added:
            text += f": added `{added}`"
        elif removed:
            text += f": removed `{removed}`"
        elif self.symbols:
            text += " (defines " + ", ".join(f"`{s}`" for s in self.symbols) + ")"
        more = self.added + self.removed - (1 if removed else 0) - (1 if added else 0)
        if more > 0 and (removed or added):
            text += f" and {more} more changed line{'s' if more != 1 else ''}"
        return text


def _quotable(line: str | None) -> str | None:
    if line is None:
        return None
    flat = " ".join(line.split())
    if not flat or len(flat) > MAX_QUOTED_LINE_CHARS or "`" in flat:
        return None
    return flat


def _symbol_of(context: str) -> str | None:
    match = _SYMBOL_RE.match(context)
    return match.group(1) if match else None


def _defined(lines: list[str]) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for line in lines:
        match = _SYMBOL_RE.match(line)
        if match:
            found.setdefault(match.group(1), None)
            if len(found) >= MAX_SYMBOLS:
                break
    return tuple(found)


def _strip_prefix(path: str) -> str:
    path = path.split("\t", 1)[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


class _PatchReader:
    def __init__(self) -> None:
        self.changes: list[FileChange] = []
        self.current: FileChange | None = None
        self.context_symbol: str | None = None
        self.created_lines: list[str] = []

    def start(self, change: FileChange) -> None:
        self.finish()
        self.current = change
        self.context_symbol = None
        self.created_lines = []
        self.changes.append(change)

    def finish(self) -> None:
        if self.current is not None and self.current.op == "created":
            self.current.symbols = _defined(self.created_lines)
        self.current = None

    def context(self, text: str) -> None:
        symbol = _symbol_of(text)
        if symbol:
            self.context_symbol = symbol

    def line(self, raw: str) -> None:
        change = self.current
        if change is None or not raw:
            return
        sign, body = raw[0], raw[1:]
        if sign == " ":
            self.context(body)
            return
        if sign == "+":
            change.added += 1
            if change.op == "created":
                self.created_lines.append(body)
                return
            if change.added_line is None and body.strip():
                change.added_line = body
                change.symbol = change.symbol or self.context_symbol
        elif sign == "-":
            change.removed += 1
            if change.removed_line is None and body.strip():
                change.removed_line = body
                change.symbol = change.symbol or self.context_symbol


def parse_patch(text: str) -> list[FileChange]:
    """Every file a V4A or unified patch touches, in order, with its first changed lines."""

    reader = _PatchReader()
    lines = text[:MAX_PATCH_SCAN_CHARS].splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        v4a = _V4A_FILE_RE.match(line)
        if v4a:
            op = {"Add": "created", "Delete": "deleted"}.get(v4a.group(1), "updated")
            reader.start(FileChange(op=op, path=v4a.group(2)))
            continue
        move = _V4A_MOVE_RE.match(line)
        if move:
            reader.start(FileChange(op="moved", path=move.group(1)))
            continue
        if line.startswith("--- ") and index < len(lines) and lines[index].startswith("+++ "):
            minus = line[4:].strip()
            plus = lines[index][4:].strip()
            index += 1
            if plus.split("\t", 1)[0] == "/dev/null":
                reader.start(FileChange(op="deleted", path=_strip_prefix(minus)))
            else:
                op = "created" if minus.split("\t", 1)[0] == "/dev/null" else "updated"
                reader.start(FileChange(op=op, path=_strip_prefix(plus)))
            continue
        hunk = _UNIFIED_HUNK_RE.match(line)
        if hunk:
            reader.context(hunk.group(1))
            continue
        if line.startswith("@@"):
            reader.context(line[2:].strip())
            continue
        if line.startswith(("*** ", "diff --git", "index ", "new file mode", "deleted file")):
            continue
        reader.line(line)
    reader.finish()
    unique: dict[str, FileChange] = {}
    for change in reader.changes:
        unique.setdefault(change.path, change)
    return list(unique.values())


def describe_operation(op: str, path: str, diff: str | None) -> FileChange:
    """One SDK ``ApplyPatchOperation`` (``create_file`` / ``update_file`` / ``delete_file``),
    its ``diff`` being V4A hunks without file headers."""

    reader = _PatchReader()
    change = FileChange(op=op, path=path)
    reader.start(change)
    for line in (diff or "")[:MAX_PATCH_SCAN_CHARS].splitlines():
        if line.startswith("@@"):
            reader.context(line[2:].strip())
        elif not line.startswith("*** "):
            reader.line(line)
    reader.finish()
    return change


def describe_write(path: str, new_text: str, old_text: str | None) -> FileChange:
    """A whole-file write: compared with what the run read of the file before, if it did."""

    new_lines = new_text[:MAX_PATCH_SCAN_CHARS].splitlines()
    if old_text is None:
        change = FileChange(op="updated", path=path, added=len(new_lines))
        change.symbols = _defined(new_lines)
        change.added = 0  # unknown what changed: say what the file defines instead
        return change
    old_lines = old_text[:MAX_PATCH_SCAN_CHARS].splitlines()[:MAX_DIFF_LINES]
    change = FileChange(op="updated", path=path)
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines[:MAX_DIFF_LINES], autojunk=False)
    last_symbol: str | None = None
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag == "equal":
            for line in old_lines[a0:a1]:
                last_symbol = _symbol_of(line) or last_symbol
            continue
        change.removed += a1 - a0
        change.added += b1 - b0
        if change.removed_line is None and change.added_line is None:
            change.symbol = last_symbol
            change.removed_line = next((x for x in old_lines[a0:a1] if x.strip()), None)
            change.added_line = next((x for x in new_lines[b0:b1] if x.strip()), None)
    return change


def heredocs(cmd: str) -> list[tuple[str, str]]:
    """``(command line, body)`` of every heredoc in a shell command, in order."""

    found: list[tuple[str, str]] = []
    lines = cmd[:MAX_PATCH_SCAN_CHARS].split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        match = _HEREDOC_RE.search(line)
        if not match:
            continue
        terminator = match.group(1)
        body: list[str] = []
        while index < len(lines) and lines[index].strip() != terminator:
            body.append(lines[index])
            index += 1
        index += 1
        found.append((line, "\n".join(body) + "\n"))
    return found


def applies_patch(command_line: str) -> bool:
    """Whether a command line applies a patch (``git apply``, ``git am``, ``patch``)."""

    return bool(_APPLY_RE.search(command_line))


def patch_file_argument(command_line: str) -> str | None:
    """The patch file a ``git apply x.patch`` / ``patch -p1 < x.diff`` line reads."""

    match = _PATCH_FILE_ARG_RE.search(command_line)
    return match.group(1) if match else None


def write_target(command_line: str) -> str | None:
    """The file a heredoc is written to (``cat > f <<EOF``, ``tee f <<EOF``)."""

    head = command_line.split("<<", 1)[0]
    match = _WRITE_TARGET_RE.search(head) or _TEE_RE.search(head)
    if not match:
        return None
    target = match.group(1).strip("'\"")
    return None if not target or target.startswith(("/dev/", "&")) else target


__all__ = [
    "FileChange",
    "applies_patch",
    "describe_operation",
    "describe_write",
    "heredocs",
    "parse_patch",
    "patch_file_argument",
    "write_target",
]
