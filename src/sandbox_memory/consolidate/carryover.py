"""Memory the SDK's own ``Memory`` left in a layout, carried over (see docs/migrating.md).

First use: before memory first writes in a layout (a run starts or is recorded, a close, a
command: ``LayoutRuntime.first_use``), the SDK's rendered files are kept as they are then
under ``<memories_dir>/store/sdk/`` (secrets redacted, as everywhere memory writes), with
``kept.json`` naming them. Only these copies count as the SDK's memory: the agent's tools can
write anything under ``memories_dir``, and what they write later is not taken for it.

Read: until sandbox-memory has rendered memory in the layout (``store/rendered.json``
absent), a run is given the SDK's ``memory_summary.md`` as the SDK gives it (its prompt and
its token cut, ``_sdk.sdk_read_prompt``): the kept copy, or the file itself for a ``Memory``
that never writes (``generate=None``).

Generate: the first consolidation takes the kept ``memory_summary.md`` and ``MEMORY.md`` in,
before anything is rendered over the originals: each block (a paragraph or a list item, under
its headings) becomes a shared layout entry of kind ``fact``, logged with cause ``migration``,
whose source points to the kept file and line (``sdk-memory`` /
``store/sdk/MEMORY.md:12``). The SDK's ``rollout_summaries/`` and ``raw_memories/`` files stay
where they are, and its ``sessions/`` are extracted again like every rollout not extracted yet.
Nothing the SDK left is lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import TYPE_CHECKING

from ..stores.records import MAX_CONTENT_CHARS, Entry, LogRecord, Source, now_ms

if TYPE_CHECKING:
    from ..layout_state import LayoutState
    from ..stores.seam import LayoutEdit

logger = logging.getLogger("sandbox_memory")

SDK_RENDERED_FILES = (
    "memory_summary.md",
    "MEMORY.md",
    "raw_memories.md",
    "phase_two_selection.json",
)
"""The SDK's files at the top of ``memories_dir`` that our rendering writes over."""

TAKEN_IN = ("memory_summary.md", "MEMORY.md")
"""Of those, the ones whose text becomes entries (the other two are derived notes)."""

KEPT_DIR = "sdk"
"""Under ``<memories_dir>/store/``: the SDK's files as memory first found them."""

KEPT_LIST = "kept.json"
"""In ``store/sdk/``: which files were kept, and when (memory's first use of the layout)."""

SOURCE_CONVERSATION = "sdk-memory"
"""The source conversation of a carried-over entry (its item is the kept file and line)."""

MAX_SDK_FILE_BYTES = 4 << 20
"""Largest SDK file read (4 MiB, far above the SDK's own 15,000-token summary): a bigger one is
kept on disk whole and taken in up to this size, logged."""

MAX_ENTRY_CHARS = MAX_CONTENT_CHARS - 200
"""A block longer than this is taken in as several entries, cut at line ends (room left for
redaction markers, which can be longer than what they replace)."""

_BULLET = re.compile(r"^\s{0,3}(?:[-*+]|\d{1,3}[.)])\s+")
_HEADING = re.compile(r"^(#{1,6})\s+(.*\S)\s*$")


async def _rendered(state: LayoutState) -> bool:
    return await state.local.read_state(state.local.path("rendered.json")) is not None


async def _kept_names(state: LayoutState) -> list[str] | None:
    """The files kept at first use (``store/sdk/kept.json``), ``None`` when none were."""

    raw = await state.local.read_state(state.local.path(f"{KEPT_DIR}/{KEPT_LIST}"))
    if raw is None or len(raw) > 4096:
        return None
    try:
        names = json.loads(raw).get("files")
    except (ValueError, AttributeError):
        return None
    if not isinstance(names, list):
        return None
    return [n for n in names if n in SDK_RENDERED_FILES]


async def _memory_was_here(state: LayoutState) -> bool:
    """Whether memory has recorded or consolidated in this layout (a progress record or layout
    memory): then files appearing under ``memories_dir`` are not what the SDK left, an agent
    may have written them. Every path that writes those calls ``keep_sdk_files`` first."""

    # Asked of the store, wherever it keeps memory (the workspace's folders alone would say
    # "never here" for memory kept in PostgreSQL or the process).
    head = await state.store.layout_head()
    return bool(head.stamp or head.version or (await state.store.every_record()).rollouts)


async def keep_sdk_files(state: LayoutState) -> dict[str, bytes]:
    """The SDK's rendered files of this layout as memory first found them, redacted.

    The first time (nothing of ours in the layout yet), the files present are kept in
    ``store/sdk/`` with ``kept.json`` naming them; later calls return those copies, so what an
    agent writes under ``memories_dir`` afterwards is never taken for the SDK's memory. Empty
    once sandbox-memory has rendered here, or when memory was here before any SDK file.
    """

    from ..redact import redact_bytes  # imported on first use, like the runtime's redactor

    if await _rendered(state):
        return {}
    kept_dir = state.local.path(KEPT_DIR)
    names = await _kept_names(state)
    if names is not None:
        found: dict[str, bytes] = {}
        for name in names:
            raw = await state.ws.read_range(f"{kept_dir}/{name}", 0, MAX_SDK_FILE_BYTES)
            if raw is not None:
                found[name] = raw
        return found
    if await _memory_was_here(state):
        return {}
    mdir = state.layout.memories_dir
    found = {}
    for name in SDK_RENDERED_FILES:
        raw = await state.ws.read_range(f"{mdir}/{name}", 0, MAX_SDK_FILE_BYTES)
        if raw is None:
            continue
        size = await state.ws.size(f"{mdir}/{name}") or 0
        whole = raw
        if size > len(raw):
            logger.warning(
                "the SDK's %s/%s holds %d bytes; the first %d are taken in as memory, the "
                "whole file is kept in %s/",
                mdir,
                name,
                size,
                len(raw),
                kept_dir,
            )
            whole = await state.ws.read_bytes(f"{mdir}/{name}") or raw
        kept = redact_bytes(whole, state.redactor)
        await state.local.write_state(f"{kept_dir}/{name}", kept)
        found[name] = kept[:MAX_SDK_FILE_BYTES]
    if found:
        listing = {"files": sorted(found), "at": now_ms()}
        await state.local.write_state(f"{kept_dir}/{KEPT_LIST}", json.dumps(listing).encode())
    return found


async def sdk_summary(state: LayoutState) -> str | None:
    """The SDK's ``memory_summary.md`` of this layout while sandbox-memory has not rendered
    here yet, decoded as the SDK decodes it: the copy kept at first use, else (memory never
    wrote here: a read-only ``Memory``) the file itself; ``None`` otherwise."""

    if await _rendered(state):
        return None
    if await _kept_names(state) is not None:
        path = state.local.path(f"{KEPT_DIR}/memory_summary.md")
    elif await _memory_was_here(state):
        return None
    else:
        path = f"{state.layout.memories_dir}/memory_summary.md"
    raw = await state.ws.read_range(path, 0, MAX_SDK_FILE_BYTES)
    if raw is None:
        return None
    text = raw.decode("utf-8", errors="replace").strip()
    return text or None


def blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, text)`` of each paragraph or list item, prefixed with the headings
    it stands under (``Build > Tests: ...``)."""

    found: list[tuple[int, str]] = []
    headings: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0

    def close() -> None:
        body = "\n".join(current).strip()
        if body:
            trail = " > ".join(h for _, h in headings)
            found.append((start, f"{trail}: {body}" if trail else body))
        current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        heading = _HEADING.match(line)
        if heading:
            close()
            level = len(heading.group(1))
            headings[:] = [h for h in headings if h[0] < level] + [(level, heading.group(2))]
            continue
        if not line.strip():
            close()
            continue
        if _BULLET.match(line) and current:
            close()
        if not current:
            start = number
        current.append(line.rstrip())
    close()
    pieces: list[tuple[int, str]] = []
    for number, body in found:
        while len(body) > MAX_ENTRY_CHARS:
            cut = body.rfind("\n", 0, MAX_ENTRY_CHARS)
            cut = cut if cut > 0 else MAX_ENTRY_CHARS
            pieces.append((number, body[:cut].strip()))
            number += body[:cut].count("\n")
            body = body[cut:].strip()
        if body:
            pieces.append((number, body))
    return pieces


def entry_key(name: str, body: str) -> str:
    """A stable key: the file, the first words, a digest of the text (the same text, the same
    key, so a block in both files is one entry)."""

    words = re.sub(r"[^a-z0-9]+", "-", body.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:10]
    _ = name
    return f"sdk-{words}-{digest}" if words else f"sdk-{digest}"


async def carry_over(state: LayoutState, edit: LayoutEdit, changes: list[LogRecord]) -> int:
    """Before the first render in this layout: keep the SDK's files and take their text in as
    entries (see the module docstring). Returns how many entries were added; 0 when there is
    nothing of the SDK's or it was carried over already. Caller holds the layout lock."""

    st = state
    mdir = st.layout.memories_dir
    if await _rendered(st):
        return 0  # rendered here already: these files are ours
    found = await keep_sdk_files(st)
    if not found:
        return 0
    redactor = st.redactor
    stamp = now_ms()
    added: list[str] = []
    # memory_summary.md is what the SDK injected: its entries are the newest, shown first,
    # and each file's blocks keep their order (the first one the newest).
    for order, name in enumerate(TAKEN_IN):
        raw = found.get(name)
        if raw is None:
            continue
        text = raw.decode("utf-8", errors="replace")
        for index, (number, body) in enumerate(blocks(text)):
            content = redactor.redact_text(body)[:MAX_CONTENT_CHARS]
            key = entry_key(name, content)
            if key in added:
                continue
            await edit.load([key])
            if key in edit.entries:
                continue
            edit.entries[key] = Entry(
                key=key,
                content=content,
                kind="fact",
                sources=[
                    Source(
                        conversation=SOURCE_CONVERSATION,
                        item=f"store/{KEPT_DIR}/{name}:{number}",
                    )
                ],
                updated_at=stamp - order * 1_000_000 - index,
            )
            added.append(key)
    edit.version += 1
    changes.append(
        LogRecord(
            version=edit.version,
            at=stamp,
            cause="migration",
            scope="layout",
            keys=added,
            detail=json.dumps(
                {
                    "carried_over": sorted(found),
                    "kept_in": f"{mdir}/store/{KEPT_DIR}/",
                    "bytes": sum(len(v) for v in found.values()),
                }
            ),
        )
    )
    logger.info(
        "memory took in what the SDK's Memory left in %s/: %d entries from %s; the files are "
        "kept as they were in %s/",
        mdir,
        len(added),
        ", ".join(n for n in TAKEN_IN if n in found) or "no text file",
        st.local.path(KEPT_DIR),
    )
    return len(added)
