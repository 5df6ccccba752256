"""The rendered files patched at the keys a command changed, for a process that holds no
rendering (a fresh ``MemoryClient``, the CLI, an MCP server's first command).

A process that holds no rendering would take up the one the last process saved
(``store/rendering.json``: every active entry's row, 3.2 MB at 20,000 entries) to render again
after one command. What a command changes is a few keys; what the rendered files need beyond
those keys is small: the newest shown entries (``memory_summary.md`` and ``store/prompt.json``
are cut from them), the top of the changed keys' kind blocks of ``MEMORY.md`` (a changed entry
is the newest of its block), and the lessons of the files that name more of them than
``## Files`` lists. :class:`SavedPatch` (``store/rendering-patch.json``, sealed) keeps exactly
that, with the stamps it was rendered at; ``MEMORY.md`` is patched in place: the changed keys'
lines taken out of their kind blocks and put at the top of theirs, their files' lines of
``## Files`` rewritten. Every output is byte-identical to rendering every entry again
(``tests/test_render_patch.py`` compares them after random commands).

Whatever this cannot place with certainty (a key the registry shows too, a private entry, an
entry naming files, an entry older than the top of its block, a cut that reaches past the rows
kept) raises :class:`NotPatchable`, and the caller renders from every entry as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel

from ..stores.records import Entry
from .files import (
    KIND_TITLES,
    entry_files,
    entry_line,
    file_line,
    prompt_entry_json,
)

PATCH_FORMAT = 1
"""Shape of ``store/rendering-patch.json`` (:class:`SavedPatch`); another is not read. Bump it
when what a line or a section of ``MEMORY.md`` looks like changes: a patch keeps every line
it does not touch as it was rendered."""

PATCH_MARGIN = 64
"""Shown entries kept past the prompt's cut: as many entries of the cut can be forgotten by
patches before the cut reaches past what is kept (then the files are rendered from every entry
once, which keeps this many again)."""


class NotPatchable(Exception):
    """The change cannot be patched with certainty: render from every entry."""


class SavedPatch(BaseModel):
    """``store/rendering-patch.json``: what a patch of the rendered files needs, as rendered
    at ``layout_stamp`` into the ``MEMORY.md`` of digest ``memory_md_sha256``."""

    format: int
    layout_stamp: str
    memory_md_sha256: str
    others: str
    """Digest of the rendering's other inputs (the registry, the selection, the budget): a
    patch needs them unchanged."""
    saved_stamp: str
    saved_version: int
    """Layout memory's stamp and version of the saved rendering (``store/rendering.json`` and
    its delta): a patch is not made when that one is due to be brought up to date."""
    shown: int
    """Shown (shared, active) entries: ``memory_summary.md`` counts those it leaves out."""
    keys: list[str]
    updated_at: list[int]
    kinds: list[str]
    short: list[str]
    """The newest shown entries, newest first, to the prompt's cut and :data:`PATCH_MARGIN`
    more: key, ``updated_at``, kind, line without sources."""
    prompt: dict[str, str]
    """``store/prompt.json``'s shared entries (:func:`prompt_entry_json`) by key."""
    private: str
    """``store/prompt.json``'s private lists, as JSON."""
    private_keys: list[str]
    """The keys of those lists."""
    files: dict[str, list[tuple[int, str]]]
    """The files of ``## Files`` naming more lessons than it lists: every lesson
    (``updated_at``, key), newest first. Every other file's line lists all of its lessons."""


_Row = tuple[int, str, str, str]
"""A shown entry as :class:`SavedPatch` keeps it: ``updated_at``, key, kind, short line."""

_BREAK = b"\n\n## "
"""Between two sections of ``MEMORY.md``: the blank line that ends one and the next title.
An entry's line is one line and starts with ``- ``, so nothing else holds it."""

_BREAK_RE = re.compile(re.escape(_BREAK))
""":data:`_BREAK` found by the regular expression engine: ``bytes.find`` of it took 2.0 ms
over the 2.4 MB ``MEMORY.md`` of 20,000 entries (its first bytes, a line's end, are on every
line), the engine 0.7 ms."""

_KIND_OF_TITLE = {title.encode(): kind for kind, title in KIND_TITLES.items()}
_KIND_ORDER = list(KIND_TITLES)
_FILES_TITLE = b"Files"
_OLDER_RE = re.compile(rb"^(.*?)(?: and (\d+) older)?$")


class _Part:
    """A section of ``MEMORY.md``: a span of the file's bytes, not copied until edited (then
    bytes of its own)."""

    __slots__ = ("data", "start", "end")

    def __init__(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        self.data, self.start = data, start
        self.end = len(data) if end is None else end

    def __len__(self) -> int:
        return self.end - self.start

    def find(self, sub: bytes, start: int = 0) -> int:
        at = self.data.find(sub, self.start + start, self.end)
        return at if at < 0 else at - self.start

    def startswith(self, prefix: bytes, at: int) -> bool:
        return self.data.startswith(prefix, self.start + at, self.end)

    def view(self, start: int = 0, end: int | None = None) -> memoryview:
        stop = self.end if end is None else self.start + end
        return memoryview(self.data)[self.start + start : stop]

    def without(self, start: int, end: int) -> _Part:
        """This section without its bytes from ``start`` to ``end``."""

        return _Part(b"".join((self.view(0, start), self.view(end))))

    def bytes(self) -> bytes:
        return self.data[self.start : self.end]


class Patch:
    """One patch: the saved record taken up, the changes applied one key at a time, then the
    outputs (:meth:`memory_md`, :meth:`summary_lines`, the prompt's entries)."""

    def __init__(self, saved: SavedPatch, memory_md: bytes, *, registry_keys: set[str]) -> None:
        if not memory_md.endswith(b"\n"):
            raise NotPatchable("MEMORY.md does not end a line")
        self.saved = saved
        self.rows: list[_Row] = list(
            zip(saved.updated_at, saved.keys, saved.kinds, saved.short, strict=True)
        )
        self.shown = saved.shown
        self.prompt = dict(saved.prompt)
        self.files = {path: list(lessons) for path, lessons in saved.files.items()}
        self.registry_keys = registry_keys
        self.private_keys = set(saved.private_keys)
        # Sections of MEMORY.md: the header, then each titled section (title line first),
        # spans of the file's bytes (only the sections a change edits are copied).
        self.parts: list[_Part] = []
        start, end = 0, len(memory_md) - 1
        for found in _BREAK_RE.finditer(memory_md, 0, end):
            self.parts.append(_Part(memory_md, start, found.start()))
            start = found.end()
        self.parts.append(_Part(memory_md, start, end))

    # ------------------------------------------------------------ changes

    def apply(self, key: str, entry: Entry | None) -> None:
        """``key``'s entry is now ``entry`` (``None``: gone)."""

        if key in self.registry_keys:
            raise NotPatchable(f"{key} is shown from a conversation's facts too")
        if key in self.private_keys:
            raise NotPatchable(f"{key} is in a person's cut of the prompt")
        now = entry if entry is not None and entry.status == "active" else None
        if now is not None and now.person is not None:
            raise NotPatchable(f"{key} is private")
        if now is not None and entry_files(now):
            raise NotPatchable(f"{key} names files")
        held = next((i for i, row in enumerate(self.rows) if row[1] == key), None)
        shown = self._take_out_line(key, None if held is None else self.rows[held][2])
        if held is not None:
            if not shown:
                raise NotPatchable(f"{key} is kept as shown but MEMORY.md has no line of it")
            del self.rows[held]
        if shown:
            self.shown -= 1
            self._take_out_of_files(key)
        self.prompt.pop(key, None)
        if now is not None:
            self._put(now)

    def _put(self, entry: Entry) -> None:
        stamp = (entry.updated_at, entry.key)
        top = next((row for row in self.rows if row[2] == entry.kind), None)
        if top is not None:
            newest = stamp > (top[0], top[1])
        else:
            # No kept row of its kind: every row of its block is older than the last kept.
            newest = not self.rows or stamp > (self.rows[-1][0], self.rows[-1][1])
            if not self.rows and self.shown:
                raise NotPatchable("no shown entry kept")
        if not newest:
            raise NotPatchable(f"{entry.key} is not the newest of its block")
        short = entry_line(entry, with_sources=False)
        at = next(
            (i for i, row in enumerate(self.rows) if (row[0], row[1]) < stamp), len(self.rows)
        )
        self.rows.insert(at, (entry.updated_at, entry.key, entry.kind, short))
        self.prompt[entry.key] = prompt_entry_json(entry)
        self.shown += 1
        self._put_line(entry.kind, entry_line(entry).encode("utf-8"))

    # ------------------------------------------------------------ MEMORY.md

    def _title(self, i: int) -> bytes:
        part = self.parts[i]
        end = part.find(b"\n")
        return part.view(0, len(part) if end < 0 else end).tobytes()

    def _take_out_line(self, key: str, kind: str | None) -> bool:
        """Take ``key``'s line out of its kind block (of ``kind`` when known); whether it
        was there."""

        prefix = b"- **" + key.encode() + b"** ("
        for i in range(1, len(self.parts)):
            found = _KIND_OF_TITLE.get(self._title(i))
            if found is None or (kind is not None and found != kind):
                continue
            part = self.parts[i]
            body = len(self._title(i)) + 2
            if part.startswith(prefix, body):
                start = body
            else:
                start = part.find(b"\n" + prefix, body) + 1
                if start == 0:
                    continue
            end = part.find(b"\n", start)
            if end < 0 and start == body:
                del self.parts[i]  # its only line: the block goes
            elif end < 0:
                self.parts[i] = part.without(start - 1, len(part))
            else:
                self.parts[i] = part.without(start, end + 1)
            return True
        return False

    def _put_line(self, kind: str, line: bytes) -> None:
        """``line`` at the top of ``kind``'s block (the block made when there is none)."""

        title = KIND_TITLES[kind].encode()
        place = len(self.parts)
        for i in range(1, len(self.parts)):
            t = self._title(i)
            if t == title:
                body = len(t) + 2
                part = self.parts[i]
                self.parts[i] = _Part(b"".join((part.view(0, body), line, b"\n", part.view(body))))
                return
            later = _KIND_OF_TITLE.get(t)
            if later is None or _KIND_ORDER.index(later) > _KIND_ORDER.index(kind):
                place = i
                break
        self.parts.insert(place, _Part(title + b"\n\n" + line))

    def _take_out_of_files(self, key: str) -> None:
        """``key`` taken off the lines of ``## Files`` that name it."""

        index = next((i for i in range(1, len(self.parts)) if self._title(i) == _FILES_TITLE), None)
        crowded = [
            path for path, lessons in self.files.items() if any(k == key for _, k in lessons)
        ]
        if index is None:
            if crowded:
                raise NotPatchable("## Files is missing")
            return
        part = self.parts[index].bytes()
        word = key.encode()
        lines: dict[int, int] = {}  # start -> end of each line naming the key
        at = part.find(word)
        while at >= 0:
            start = part.rfind(b"\n", 0, at) + 1
            end = part.find(b"\n", at)
            lines[start] = len(part) if end < 0 else end
            at = part.find(word, lines[start])
        edits: list[tuple[int, int, bytes | None]] = []
        done: set[str] = set()
        for start, end in sorted(lines.items()):
            parsed = _file_line(part[start:end])
            if parsed is None:
                continue
            path, keys, more = parsed
            if key not in keys:
                continue
            edits.append((start, end, self._file_line(path, key, keys, more)))
            done.add(path)
        for path in crowded:
            if path in done:
                continue
            head = f"- `{path}`: ".encode()
            start = part.find(b"\n" + head) + 1 if not part.startswith(head, 7) else 7
            if start == 0:
                raise NotPatchable(f"## Files has no line of {path}")
            end = part.find(b"\n", start)
            end = len(part) if end < 0 else end
            parsed = _file_line(part[start:end])
            if parsed is None:
                raise NotPatchable(f"## Files' line of {path} is not one")
            edits.append((start, end, self._file_line(path, key, *parsed[1:])))
        if not edits:
            return
        pieces: list[bytes] = []
        last = 0
        for start, end, text in sorted(edits, key=lambda e: e[0]):
            pieces.append(part[last:start])
            if text is not None:
                pieces.append(text)
                last = end
            else:
                last = end + 1  # the line and its end go
        pieces.append(part[last:])
        part = b"".join(pieces)
        if part.endswith(b"\n"):
            part = part[:-1]  # the last line went: the section ends at the line before
        if part == _FILES_TITLE + b"\n":
            del self.parts[index]
        else:
            self.parts[index] = _Part(part)

    def _file_line(self, path: str, key: str, keys: list[str], more: int) -> bytes | None:
        """``path``'s line of ``## Files`` without ``key`` (``None``: no lesson left)."""

        lessons = self.files.get(path)
        if lessons is not None:
            lessons[:] = [lesson for lesson in lessons if lesson[1] != key]
            return file_line(path, lessons).encode() if lessons else None
        if more:
            raise NotPatchable(f"the lessons of {path} are not all kept")
        left = [k for k in keys if k != key]
        return file_line(path, [(0, k) for k in left]).encode() if left else None

    # ------------------------------------------------------------ outputs

    def memory_md(self) -> bytes:
        pieces: list[memoryview | bytes] = []
        for part in self.parts:
            pieces += (part.view(), _BREAK)
        pieces[-1] = b"\n"
        return b"".join(pieces)

    def cut(self, budget: int) -> list[str]:
        """The shared keys of the prompt's cut at ``budget`` (as ``_cut`` takes them)."""

        keys: list[str] = []
        used = 0
        for _, key, _, short in self.rows:
            if used > budget:
                return keys
            used += len(short) + 1
            keys.append(key)
        if len(self.rows) < self.shown:
            raise NotPatchable("the prompt's cut reaches past the shown entries kept")
        return keys

    def summary_lines(self, budget: int) -> tuple[list[str], int]:
        """``memory_summary.md``'s lines and how many shown entries it leaves out."""

        lines: list[str] = []
        used = 0
        for i, (_, _, _, short) in enumerate(self.rows):
            if used + len(short) + 1 > budget:
                return lines, self.shown - i
            lines.append(short)
            used += len(short) + 1
        if len(self.rows) < self.shown:
            raise NotPatchable("the summary reaches past the shown entries kept")
        return lines, 0

    def saved_after(
        self,
        *,
        layout_stamp: str,
        memory_md_sha256: str,
        cut: Sequence[str],
        prompt: Mapping[str, str],
    ) -> SavedPatch:
        """The record after this patch: rows to the cut and :data:`PATCH_MARGIN` more."""

        return saved_patch(
            self.rows[: len(cut) + PATCH_MARGIN],
            layout_stamp=layout_stamp,
            memory_md_sha256=memory_md_sha256,
            others=self.saved.others,
            saved_stamp=self.saved.saved_stamp,
            saved_version=self.saved.saved_version,
            shown=self.shown,
            prompt={k: prompt[k] for k in cut},
            private=self.saved.private,
            private_keys=self.saved.private_keys,
            files=self.files,
        )


def _file_line(line: bytes) -> tuple[str, list[str], int] | None:
    """A line of ``## Files``: its path, the keys it lists and the count of older ones."""

    if not line.startswith(b"- `"):
        return None
    cut = line.find(b"`: ", 3)
    if cut < 0:
        return None
    match = _OLDER_RE.match(line[cut + 3 :])
    if match is None:
        return None
    keys = [k.decode() for k in match[1].split(b", ")]
    return line[3:cut].decode("utf-8"), keys, int(match[2] or 0)


def saved_patch(
    rows: Iterable[_Row],
    *,
    layout_stamp: str,
    memory_md_sha256: str,
    others: str,
    saved_stamp: str,
    saved_version: int,
    shown: int,
    prompt: Mapping[str, str],
    private: str,
    private_keys: Iterable[str],
    files: Mapping[str, list[tuple[int, str]]],
) -> SavedPatch:
    """The record of a rendering made from every entry."""

    kept = list(rows)
    return SavedPatch(
        format=PATCH_FORMAT,
        layout_stamp=layout_stamp,
        memory_md_sha256=memory_md_sha256,
        others=others,
        saved_stamp=saved_stamp,
        saved_version=saved_version,
        shown=shown,
        keys=[r[1] for r in kept],
        updated_at=[r[0] for r in kept],
        kinds=[r[2] for r in kept],
        short=[r[3] for r in kept],
        prompt=dict(prompt),
        private=private,
        private_keys=sorted(private_keys),
        files=dict(files),
    )
