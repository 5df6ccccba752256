"""A person vouches for recorded runs memory cannot verify: seal them under this host's key.

Only lines memory recorded itself count (see :mod:`sandbox_memory.integrity`). Lines recorded
by the SDK's own memory before the switch, or under a key this host does not hold (a snapshot
restored on another machine, a key file lost), are skipped. A person who trusts such files
runs :meth:`~sandbox_memory.MemoryClient.adopt` (``sandbox-memory adopt``): every line of
``sessions/`` that is a JSON object is sealed again with this host's key, and is learned from
at the next close. It is a person's decision, never taken by memory itself: whatever the
agent appended to those files before is adopted with them.
"""

from __future__ import annotations

import logging
import re

from .. import bounded
from ..errors import MemoryConfigError
from ..integrity import SEAL_HEX
from ..layout_state import LayoutState
from ..stores.records import tail_hash
from ..stores.segments import rollout_path

logger = logging.getLogger("sandbox_memory")

_OLD_SEAL = re.compile(rb',"memory_seal":"[0-9a-f]{' + str(SEAL_HEX).encode() + rb'}"\}$')
"""A seal made under another key: replaced, not kept beside the new one."""


async def adopt_rollouts(st: LayoutState, rollout_ids: list[str]) -> dict[str, int]:
    """Seal the unverified lines of these rollouts; counts of ``adopted``, ``verified`` (left
    as they were) and ``unreadable`` (not a JSON object: still skipped) lines."""

    counts = {"adopted": 0, "verified": 0, "unreadable": 0}
    for rid in rollout_ids:
        async with st.write_lock(), st.session_file_lock(rid):
            await _adopt_one(st, rid, counts)
    return counts


async def _adopt_one(st: LayoutState, rid: str, counts: dict[str, int]) -> None:
    path = rollout_path(st.layout.sessions_dir, rid)
    data = await st.ws.read_bytes(path)
    if not data:
        return
    prog = await st.store.get_progress(rid)
    old_offset = prog.offset if prog is not None else 0
    check = st.line_check(rid)
    out: list[bytes] = []
    pos = new_pos = 0
    new_offset = 0 if old_offset else None
    changed = False
    end = data.rfind(b"\n") + 1  # a torn last line stays as it is
    while pos < end:
        cut = data.index(b"\n", pos)
        line = data[pos:cut]
        if new_offset is None and pos >= old_offset:
            new_offset = new_pos
        if check.seal.verify(line, rid):
            counts["verified"] += 1
            kept = line + b"\n"
        else:
            body = _OLD_SEAL.sub(b"}", line.rstrip(b"\r"))
            try:
                value = bounded.loads(body, limit=bounded.MAX_LINE_BYTES, what="a session line")
            except ValueError:
                value = None
            if isinstance(value, dict) and value:
                kept = check.seal.seal(body + b"\n", rid)
                counts["adopted"] += 1
                changed = True
            else:
                counts["unreadable"] += int(bool(line.strip()))
                kept = line + b"\n"
        out.append(kept)
        pos = cut + 1
        new_pos += len(kept)
    if new_offset is None:
        new_offset = new_pos
    if not changed:
        return
    out.append(data[end:])
    await st.ws.write_atomic(path, b"".join(out))
    if prog is not None and old_offset:
        tail = await tail_hash(st.ws, path, new_offset)
        await st.update_progress(rid, lambda p: p.read_to(new_offset, tail))
    logger.info("adopted the recorded runs of conversation %s under this host's key", rid)


def refuse_shared(shared: object) -> None:
    """Adoption rewrites the workspace's files; a shared store's copies are the store's."""

    if shared is not None:
        raise MemoryConfigError(
            "store",
            "PostgresStore",
            "adopt works on a workspace folder: adopt its runs before `sandbox-memory export`",
        )
