"""How a patch is read: the files an ``apply_patch`` input or a unified diff touches, and what
changed in each (V4A text, unified diffs, or the SDK's JSON operations).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from sandbox_memory.engines.changes import FileChange, describe_operation, parse_patch

from ... import bounded

_PATCH_HEADER_RE = re.compile(
    r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$"
    r"|^--- (\S+)|^\+\+\+ (\S+)",
    re.MULTILINE,
)


def patch_files(text: str) -> list[tuple[str, str]]:
    """``(operation, path)`` for every file a V4A (``*** Update File:``) or unified
    (``--- a/x`` / ``+++ b/x``) patch touches, in order."""

    found: list[tuple[str, str]] = []
    minus_path: str | None = None
    for match in _PATCH_HEADER_RE.finditer(text):
        op, v4a_path, move_to, minus, plus = match.groups()
        if v4a_path:
            found.append(({"Add": "created", "Delete": "deleted"}.get(op, "updated"), v4a_path))
        elif move_to:
            found.append(("moved", move_to))
        elif minus is not None:
            minus_path = minus
        elif plus is not None:
            if plus == "/dev/null":
                if minus_path and minus_path != "/dev/null":
                    found.append(("deleted", _strip_diff_prefix(minus_path)))
            else:
                op_name = "created" if minus_path == "/dev/null" else "updated"
                found.append((op_name, _strip_diff_prefix(plus)))
            minus_path = None
    unique: dict[str, str] = {}
    for op_name, path in found:
        unique.setdefault(path, op_name)
    return [(op_name, path) for path, op_name in unique.items()]


def _strip_diff_prefix(path: str) -> str:
    return path[2:] if path.startswith(("a/", "b/")) else path


def operation_files(operations: Any) -> list[tuple[str, str]]:
    """Files of SDK ``ApplyPatchOperation``-shaped dicts (``type``, ``path``, ``move_to``)."""

    items = operations if isinstance(operations, list) else [operations]
    names = {"create_file": "created", "update_file": "updated", "delete_file": "deleted"}
    files: list[tuple[str, str]] = []
    for op in items:
        if isinstance(op, Mapping) and isinstance(op.get("path"), str) and op.get("path"):
            files.append((names.get(str(op.get("type")), "updated"), str(op["path"])))
            move_to = op.get("move_to")
            if isinstance(move_to, str) and move_to:
                files.append(("moved", move_to))
    return files


def operation_changes(operations: Any) -> list[FileChange]:
    """What each SDK ``ApplyPatchOperation``-shaped dict changes (its ``diff``)."""

    items = operations if isinstance(operations, list) else [operations]
    names = {"create_file": "created", "update_file": "updated", "delete_file": "deleted"}
    changes: list[FileChange] = []
    for op in items:
        if isinstance(op, Mapping) and isinstance(op.get("path"), str) and op.get("path"):
            diff = op.get("diff")
            changes.append(
                describe_operation(
                    names.get(str(op.get("type")), "updated"),
                    str(op["path"]),
                    diff if isinstance(diff, str) else None,
                )
            )
    return changes


_T = TypeVar("_T")


def _from_patch_input(
    raw: str, from_ops: Callable[[Any], list[_T]], from_text: Callable[[str], list[_T]]
) -> list[_T]:
    """Read an ``apply_patch`` input, patch text or SDK JSON operations, with one of two readers."""

    stripped = raw.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            payload = bounded.loads(raw, limit=bounded.MAX_LINE_BYTES, what="a patch")
        except ValueError:
            payload = None
        if isinstance(payload, Mapping):
            found = from_ops(payload.get("operations", payload.get("operation", payload)))
            for key in ("input", "patch", "diff"):
                value = payload.get(key)
                if not found and isinstance(value, str):
                    found = from_text(value)
            return found
        if isinstance(payload, list):
            return from_ops(payload)
    return from_text(raw)


def patch_input_changes(raw: str) -> list[FileChange]:
    """What an ``apply_patch`` input changes."""

    return _from_patch_input(raw, operation_changes, parse_patch)


def patch_input_files(raw: str) -> list[tuple[str, str]]:
    """Files named by an ``apply_patch`` input."""

    return _from_patch_input(raw, operation_files, patch_files)
