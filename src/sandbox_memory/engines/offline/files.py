"""What files a run changed and how: one record per path from its patches and writes, and the
phrases that name them within a budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sandbox_memory.engines.changes import FileChange

from .limits import MAX_FILES_NAMED
from .records import Patch
from .walk import Rollout


@dataclass
class FileRecord:
    """One changed file: its first operation, the items that changed it, the last detail."""

    op: str
    first_id: str
    ids: list[str] = field(default_factory=list)
    change: FileChange | None = None

    def describe(self, path: str, *, detailed: bool = True) -> str:
        if detailed and self.change is not None:
            text = self.change.describe()
            if self.op == "created" and self.change.op != "created":
                text = text.replace("updated ", "created ", 1)
            return text
        return f"{self.op} `{path}`"


def files_phrase(paths: Sequence[str]) -> str:
    shown = list(paths[:MAX_FILES_NAMED])
    more = len(paths) - len(shown)
    text = ", ".join(shown)
    return text + (f" and {more} more" if more > 0 else "")


def describe_files(files: Mapping[str, FileRecord], budget: int) -> str:
    """What changed in ``files``, within ``budget`` characters: every file named by its path
    first (a file's history is found by its path), then what changed in each while it fits;
    only names that do not fit at all are counted; never a cut part."""

    items = list(files.items())
    parts = [record.describe(path, detailed=False) for path, record in items]
    kept = 0
    used = 0
    for part in parts:
        if used + len(part) + 2 > budget:
            break
        used += len(part) + 2
        kept += 1
    for index in range(kept):
        path, record = items[index]
        detailed = record.describe(path)
        extra = len(detailed) - len(parts[index])
        if extra > 0 and used + extra <= budget:
            parts[index] = detailed
            used += extra
    shown = parts[:kept]
    rest = len(items) - kept
    if rest:
        shown.append(f"and {rest} more file{'s' if rest != 1 else ''}")
    return "; ".join(shown)


def files_phrase_by_op(files: Mapping[str, FileRecord], budget: int) -> str:
    """``Changed: ...; added: ...``: files the run changed apart from those it created."""

    changed = {p: r for p, r in files.items() if r.op != "created"}
    added = {p: r for p, r in files.items() if r.op == "created"}
    parts: list[str] = []
    for label, group in (("Changed", changed), ("Added", added)):
        if group:
            room = budget - sum(len(x) + 2 for x in parts) - len(label) - 3
            if room <= 0:
                break
            # The label says it: "Changed: `a` in `f`: ..." rather than "updated `a` ...".
            described = describe_files(group, room + 8 * len(group))
            described = described.replace("created `" if label == "Added" else "updated `", "`")
            if len(described) > room:
                described = describe_files(group, room)
            parts.append(f"{label}: {described}")
    return ". ".join(parts)


def note_patch(files: dict[str, FileRecord], patch: Patch) -> None:
    for op, path in patch.files:
        record = files.get(path)
        if record is None:
            record = files[path] = FileRecord(op=op, first_id=patch.call_item_id)
        if patch.call_item_id not in record.ids:
            record.ids.append(patch.call_item_id)
        change = patch.changes.get(path)
        if change is not None:
            record.change = change


def changed_files(rollout: Rollout) -> dict[str, FileRecord]:
    """Path -> what changed it, for changes that did not fail."""

    files: dict[str, FileRecord] = {}
    for patch in rollout.patches:
        if patch.ok is False:
            continue
        note_patch(files, patch)
    return files


def changed_paths(files: Mapping[str, FileRecord]) -> list[str]:
    """Paths the run changed (a file it only created, a scratch script or a new test, is not a
    file whose history this lesson is part of)."""

    return [path for path, record in files.items() if record.op != "created"]
