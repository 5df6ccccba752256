"""Bounded parsing: every JSON document memory reads from the workspace goes through :func:`loads`.

The agent's tools can write anything in the workspace (``sessions/``, ``memories/store/``, the
search index), so a file memory reads is untrusted input. ``json.loads`` of a value nested
100,000 deep raises ``RecursionError`` (not a ``ValueError``), which escaped every caller and
failed every close; a value nested a few hundred deep parses, then breaks the recursive code
that walks it (redaction, clipping, rendering). :func:`loads` bounds both the size and the
nesting, and says what was wrong with a :class:`UnsafeJSON`, a ``ValueError``: every caller
already skips and reports a document that is not valid JSON, so a hostile one takes the same
road. Pydantic's parser (``model_validate_json``) has its own depth bound (a ``ValueError``
past 200); its callers bound the size with :func:`check_size`.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting accepted. What memory writes nests at most about ten deep (a segment, its
items, an item's content parts, their annotations); a run's structured ``final_output`` or a
tool's JSON arguments add what the agent's own types add. 64 leaves room for those and keeps
every recursive walk of a value far from Python's recursion limit (1,000 frames)."""

MAX_LINE_BYTES = 512 << 20
"""Longest session line parsed (512 MiB). The largest run segment tried is 200 MB
(docs/robustness.md, "A huge tool output"); a longer line is skipped and reported, not held."""

MAX_STATE_BYTES = 64 << 20
"""Largest state record parsed (64 MiB): a layout shard at 20,000 entries is about 100 kB,
``MEMORY.md`` at 20,000 entries 2.4 MB, a conversation's memory at 10,000 segments well
under this."""

MAX_FIELD_BYTES = 1 << 20
"""Largest JSON text inside a value parsed (1 MiB): tool arguments, a log record's detail, a
token's decoded header, a row of the search index."""


class UnsafeJSON(ValueError):
    """A document too large or nested too deep to parse; ``str()`` says which and by how much."""


def check_size(data: str | bytes | bytearray | memoryview, *, limit: int, what: str) -> None:
    """Raise :class:`UnsafeJSON` when ``data`` is longer than ``limit`` (bytes or characters)."""

    if len(data) > limit:
        raise UnsafeJSON(f"{what} is {len(data):,} bytes, more than the {limit:,} parsed")


def loads(
    data: str | bytes | bytearray | memoryview,
    *,
    limit: int,
    what: str = "document",
    max_depth: int = MAX_DEPTH,
) -> Any:
    """``json.loads(data)`` bounded: at most ``limit`` long and ``max_depth`` deep.

    Raises :class:`UnsafeJSON` (a ``ValueError``) past either bound, ``ValueError`` for text
    that is not JSON. The depth is checked without recursion, and only when the document holds
    more brackets than ``max_depth`` (most records hold a few): what this adds to a parse is
    two byte counts.
    """

    check_size(data, limit=limit, what=what)
    if isinstance(data, memoryview | bytearray):
        data = bytes(data)
    try:
        value = json.loads(data)
    except RecursionError:
        raise UnsafeJSON(f"{what} is nested deeper than {max_depth}") from None
    if _brackets(data) > max_depth and _nesting(data, max_depth) > max_depth:
        raise UnsafeJSON(f"{what} is nested deeper than {max_depth}")
    return value


_KEEP = b'"[]{}'
_NOT_KEPT = bytes(b for b in range(256) if b not in _KEEP)
_STRING_RE = re.compile(rb'"[^"]*"')
_INNERMOST_RE = re.compile(rb"\[\]|\{\}")


def _nesting(data: str | bytes, most: int) -> int:
    """How deep the valid JSON text ``data`` nests, counted up to ``most + 1``.

    Read from the text, not the parsed value (a walk of every node of a large record cost as
    much as its parse): escaped backslashes and quotes are taken out, then every byte but
    quotes and brackets, then the strings (brackets inside them are text); each round then
    removes every pair with nothing inside, which is every value of the deepest level left, and
    the rounds are the depth. Every step is a pass in C over a text that only shrinks.
    """

    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    kept = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_KEPT)
    brackets = _STRING_RE.sub(b"", kept)
    depth = 0
    while brackets and depth <= most:
        brackets = _INNERMOST_RE.sub(b"", brackets)
        depth += 1
    return depth


def _brackets(data: str | bytes) -> int:
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")


def check_depth(value: Any, *, max_depth: int = MAX_DEPTH, what: str = "document") -> None:
    """Raise :class:`UnsafeJSON` when ``value`` (parsed JSON) nests deeper than ``max_depth``."""

    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise UnsafeJSON(f"{what} is nested deeper than {max_depth}")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
