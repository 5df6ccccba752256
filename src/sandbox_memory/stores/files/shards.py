"""Layout shards as bytes: one entry a line (:data:`~..records.LAYOUT_FORMAT` 2), found and
parsed one key at a time, and :class:`LayoutEntries`, the view of layout memory a head holds
that parses an entry when first asked for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from json.decoder import scanstring as _scanstring  # type: ignore[attr-defined]

from pydantic import ValidationError

from ..records import LAYOUT_SHARDS, Entry, layout_shard
from .base import SealedShard, ViewedShard, _why


def _shard_bytes(entries: Mapping[str, str]) -> bytes:
    """A shard, one entry a line (:data:`LAYOUT_FORMAT` 2): still one JSON document, and as
    JSON text holds no raw newline, a newline then the key in quotes and a colon starts the
    line of that key's entry."""

    body = ",".join(f"\n{json.dumps(k)}:{entries[k]}" for k in sorted(entries))
    return ('{"entries":{' + body + "\n}}").encode("utf-8")


_JSON_KEY = rb'"(?:[^"\\\n]|\\.)*"'
_SHARD_LINES_RE = re.compile(
    rb'\{"entries":\{(?:\n'
    + _JSON_KEY
    + rb":\{[^\n]*\},)*(?:\n"
    + _JSON_KEY
    + rb":\{[^\n]*\})?\n\}\}"
)
"""A shard in the one-entry-a-line format (checked before a line is trusted to be an entry)."""


def _entry_line(raw: bytes, key: str) -> bytes | None:
    """The JSON of ``key``'s entry in a one-entry-a-line shard, without parsing any other."""

    needle = b"\n" + json.dumps(key).encode("utf-8") + b":"
    at = raw.find(needle)
    if at < 0:
        return None
    start = at + len(needle)
    end = raw.find(b"\n", start)
    line = raw[start:end]
    return line[:-1] if line.endswith(b",") else line


def _entry_lines(raw: bytes) -> dict[str, str]:
    """Key -> entry JSON of every line of a one-entry-a-line shard (nothing parsed)."""

    found: dict[str, str] = {}
    for line in raw.decode("utf-8").split("\n")[1:-1]:
        key, end = _scanstring(line, 1)
        found[key] = line[end + 1 : -1 if line.endswith(",") else None]
    return found


class LayoutEntries(Mapping[str, Entry]):
    """Layout memory's entries as one head holds them, each parsed when first asked for: a
    view of 20,000 entries costs reading their shards, and a caller that looks up one key (or
    only wants the version) parses one entry, not all of them.

    Holds the shards' bytes as read (a later commit does not change it). With ``acting``, only
    the entries that exist for ``person`` (:meth:`Entry.exists_for`).
    """

    def __init__(
        self,
        shards: Mapping[int, ViewedShard],
        put: Mapping[str, Entry],
        gone: Iterable[str],
        *,
        count: int = LAYOUT_SHARDS,
        person: str | None = None,
        acting: bool = False,
        on_error: Callable[[int, str], None] | None = None,
    ) -> None:
        self._shards = shards
        """Shard -> its bytes one entry a line, or its entries parsed (an earlier format), or
        its bytes with the seal not checked yet."""
        self._put = put
        self._gone = frozenset(gone)
        self._count = count
        """How many shards the entries are spread over (the head's)."""
        self._person = person
        self._acting = acting
        self._on_error = on_error
        self._parsed: dict[str, Entry | None] = {}
        self._keys: list[str] | None = None

    def _lookup(self, key: str) -> Entry | None:
        if key in self._parsed:
            return self._parsed[key]
        entry: Entry | None
        if key in self._put:
            entry = self._put[key]
        elif key in self._gone:
            entry = None
        else:
            sid = layout_shard(key, self._count)
            shard = self._shard(sid)
            if isinstance(shard, dict):
                entry = shard.get(key)
            else:
                line = None if shard is None else _entry_line(shard, key)
                try:
                    entry = None if line is None else Entry.model_validate_json(line)
                except ValidationError as exc:
                    if self._on_error is not None:
                        self._on_error(sid, _why(exc))
                    entry = None
        if entry is not None and self._acting and not entry.exists_for(self._person):
            entry = None
        self._parsed[key] = entry
        return entry

    def _shard(self, sid: int) -> bytes | dict[str, Entry] | None:
        shard = self._shards.get(sid)
        return shard.opened() if isinstance(shard, SealedShard) else shard

    def _all_keys(self) -> list[str]:
        if self._keys is None:
            found: dict[str, None] = {}
            for sid in sorted(self._shards):
                shard = self._shard(sid)
                if shard is None:
                    continue
                found.update(
                    dict.fromkeys(shard if isinstance(shard, dict) else _entry_lines(shard))
                )
            found.update(dict.fromkeys(self._put))
            keys = [k for k in found if k not in self._gone or k in self._put]
            self._keys = [k for k in keys if self._lookup(k) is not None] if self._acting else keys
        return self._keys

    def __getitem__(self, key: str) -> Entry:
        entry = self._lookup(key) if isinstance(key, str) else None
        if entry is None:
            raise KeyError(key)
        return entry

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._lookup(key) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._all_keys())

    def __len__(self) -> int:
        return len(self._all_keys())

    def __repr__(self) -> str:
        return f"LayoutEntries({dict(self)!r})"
