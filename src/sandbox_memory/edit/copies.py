"""A layout entry's copies in conversation memory, kept in step when the entry changes.

Not a step of its own: a Forget (:mod:`.commands`) and a deleted line in a live edit
(:mod:`.live_edits`) retract a layout entry, and its copies in every conversation go with it.
"""

from __future__ import annotations

from ..rules import retract, same_fact
from ..stores.records import (
    COPY_RETRACTED,
    LONG_LIVED_KINDS,
    Cause,
    ConversationMemory,
    Entry,
    LogRecord,
    Source,
)
from ..stores.seam import MemoryStore


async def save_changed_conversation(
    store: MemoryStore,
    conversation: ConversationMemory,
    *,
    at: int,
    cause: Cause,
    keys: list[str],
    detail: str | None = None,
    log_first: bool = False,
) -> LogRecord:
    """Save a changed conversation memory under its next version; return its log record
    (``log_first``: appended before the save, so a change redone after a crash is logged
    under the same version, and read once)."""

    conversation.version += 1
    record = LogRecord(
        version=conversation.version,
        at=at,
        cause=cause,
        scope=f"conversation:{conversation.rollout_id}",
        keys=keys,
        detail=detail,
    )
    if log_first:
        await store.append_log(record)
    await store.save_conversation(conversation)
    return record


async def retract_copies(
    store: MemoryStore,
    entry: Entry,
    source: Source,
    *,
    stamp: int,
    cause: Cause,
    log: bool = False,
) -> list[LogRecord]:
    """Retract, in every conversation, the copies of a retracted layout entry.

    A layout entry is one lesson however many conversations taught it: each of them holds
    it (promoted from there, shown there as *This conversation*), and forgetting it in
    layout memory must not leave it there. A copy is an active entry of the same key that
    shares a source with it or is of a long-lived kind, for the same person. Returns the
    log records (``log``: each appended before its conversation is saved: the retraction of
    a Forget's commit, done again after a crash). The conversations looked at are those the store's index says held the key
    (all of them, once, for a store written before the index).
    """

    records: list[LogRecord] = []
    holders = await store.conversations_holding(entry.key)
    every = holders is None
    loaded: list[ConversationMemory] = []
    for rid in await store.list_conversations() if holders is None else holders:
        conversation = await store.load_conversation(rid)
        if every:
            loaded.append(conversation)
        copy = conversation.entries.get(entry.key)
        if copy is None or copy.status != "active" or copy.person != entry.person:
            continue
        if not (same_fact(copy, entry) or copy.kind in LONG_LIVED_KINDS):
            continue
        retract(copy, [source], stamp)
        records.append(
            await save_changed_conversation(
                store,
                conversation,
                at=stamp,
                cause=cause,
                keys=[entry.key],
                detail=COPY_RETRACTED,
                log_first=log,
            )
        )
    if every:
        # Every conversation was read (a store from before the index): index them all, so
        # the next Forget reads only the conversations holding its key.
        await store.note_holders(loaded)
    return records
