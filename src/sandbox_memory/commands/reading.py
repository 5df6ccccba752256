"""Reading memory through a client: views, the list of conversations, holders of a key, the change log, search (:class:`ClientReads`)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from .. import bounded
from ..errors import MemoryConfigError, MemoryStoreUnavailable
from ..stores.records import (
    ConversationMemory,
    LogRecord,
    iso_to_ms,
    validate_key,
)
from ..stores.segments import (
    rollout_path,
    safe_rollout_id,
)

if TYPE_CHECKING:
    from ..search.index import SearchHit
from .base import ClientBase, _logged_person, processed_item_ids
from .views import ConversationSummary, ConversationView, LayoutView, visible_to


class ClientReads(ClientBase):
    """The reads of :class:`~sandbox_memory.commands.MemoryClient`."""

    async def conversations(self) -> list[ConversationSummary]:
        """Every conversation with memory or a recorded history, most recently updated first."""

        rt = self.runtime
        if rt.shared is not None:
            await rt.shared.refresh()  # the copy holds the store's conversations
        ids = set(await self.store.list_conversations())
        if rt.shared is not None:
            with contextlib.suppress(MemoryStoreUnavailable):
                ids.update(await rt.shared.store.list_conversations())
        recorded: set[str] = set()
        for name in await rt.ws.listdir(rt.layout.sessions_dir):
            if name.endswith(".jsonl") and not name.startswith("."):
                recorded.add(name[: -len(".jsonl")])
        progress = await self.store.list_progress()
        out: list[ConversationSummary] = []
        for rid in ids | recorded:
            memory = await self.store.load_conversation(rid)
            stamps = [memory.updated_at] if memory.updated_at else []
            prog = progress.get(rid)
            if prog is not None and prog.updated_at:
                stamps.append(iso_to_ms(prog.updated_at))
            active = sum(1 for e in memory.entries.values() if e.status == "active")
            out.append(
                ConversationSummary(
                    rollout_id=rid,
                    active=active,
                    retracted=len(memory.entries) - active,
                    version=memory.version,
                    updated_at=max(stamps) if stamps else None,
                    recorded=rid in recorded,
                )
            )
        out.sort(key=lambda c: (c.updated_at or 0, c.rollout_id), reverse=True)
        return out

    async def create(self, conversation: str | None = None) -> ConversationView | LayoutView:
        """Start memory here (layout memory, or an empty memory for ``conversation``)."""

        await self._defaults()
        rt = self.runtime
        async with contextlib.AsyncExitStack() as stack:
            if rt.shared is not None:
                await stack.enter_async_context(rt.shared.session())
            await self._create(conversation)
        rt.bump()
        return await self.view(conversation)

    async def _create(self, conversation: str | None) -> None:
        rt = self.runtime
        async with rt.write_lock():
            if conversation is not None:
                rid = safe_rollout_id(conversation)
                if not await self.has_conversation(rid):
                    await self.store.save_conversation(ConversationMemory(rollout_id=rid))
            await rt.consolidate_layout()

    async def view(self, conversation: str | None = None) -> ConversationView | LayoutView:
        """Layout memory (``None``) or one conversation's memory, with its version.

        Raises :class:`~sandbox_memory.errors.MemoryNotFound` for a workspace without memory or
        an unknown conversation (see :meth:`require`).
        """

        if self.runtime.shared is not None:
            await self.runtime.shared.refresh()
        await self.require(conversation)
        return await self._local_view(conversation)

    async def _local_view(self, conversation: str | None) -> ConversationView | LayoutView:
        await self._defaults()
        if conversation is None:
            # Each entry parsed when asked for (most callers want the version, or one key).
            version, entries = await self.store.layout_view(person=self.person, acting=self.acting)
            return LayoutView.model_construct(version=version, entries=entries)
        return await self._conversation_view(safe_rollout_id(conversation))

    async def _conversation_view(self, rid: str) -> ConversationView:
        memory = await self.store.load_conversation(rid)
        prog = await self.store.get_progress(rid)
        offset = prog.offset if prog is not None else 0
        processed = await processed_item_ids(
            self.runtime.ws,
            rollout_path(self.runtime.layout.sessions_dir, rid),
            offset,
            self.runtime.state.line_check(rid),
        )
        return ConversationView(
            rollout_id=rid,
            version=memory.version,
            head=memory.head,
            entries=self._own(memory.entries),
            processed=processed,
            settings={
                "use": self.runtime.switch(memory.overrides.use, "use"),
                "generate": self.runtime.switch(memory.overrides.generate, "generate"),
            },
            overrides=memory.overrides.model_dump(exclude_none=True),
        )

    async def holders(self, key: str, *, conversation: str | None = None) -> list[str | None]:
        """Where an active entry ``key`` is shown: ``conversation`` (the run's own), layout
        memory (``None``), and the conversations whose facts ``MEMORY.md`` lists.

        What a Forget of "the entry the agent sees" has to reach.
        """

        validate_key(key)
        found: list[str | None] = []
        if conversation is not None:
            memory = await self.store.load_conversation(safe_rollout_id(conversation))
            held = memory.entries.get(key)
            if held is not None and held.status == "active" and self._exists(held):
                found.append(memory.rollout_id)
        entry = (await self.store.layout_entries([key])).get(key)
        if entry is not None and entry.status == "active" and self._exists(entry):
            found.append(None)
        registry = await self.store.load_registry()
        for rid, group in registry.conversations.items():
            if rid not in found and any(e.key == key for e in group):
                found.append(rid)
        return found

    async def view_for(
        self, conversation: str | None = None, *, person: str | None
    ) -> ConversationView | LayoutView:
        """:meth:`view` as ``person`` sees it (``None``: no one in particular): another
        person's private entries are not there (:func:`visible_to`)."""

        view = await self.view(conversation)
        entries = {k: e for k, e in view.entries.items() if visible_to(e, person)}
        return view.model_copy(update={"entries": entries})

    async def log_for(self, *, person: str | None) -> list[LogRecord]:
        """:meth:`log` as ``person`` sees it: a record keeps only the keys that are not another
        person's private entries in its scope, and goes when it had only such keys or was a
        command for another person; prose (rejection reasons, forgotten conversations, which
        can name such keys) keeps its first clause ("2 change(s) rejected")."""

        records = await self.log()
        hidden: set[tuple[str, str]] = set()
        layout = await self.store.layout_for_reading()
        hidden.update(("layout", k) for k, e in layout.entries.items() if not visible_to(e, person))
        for rid in await self.store.list_conversations():
            memory = await self.store.load_conversation(rid)
            scope = f"conversation:{rid}"
            hidden.update(
                (scope, k) for k, e in memory.entries.items() if not visible_to(e, person)
            )
        out: list[LogRecord] = []
        for record in records:
            keys = [k for k in record.keys if (record.scope, k) not in hidden]
            if record.keys and not keys:
                continue
            detail = record.detail
            try:
                data = (
                    bounded.loads(detail, limit=bounded.MAX_FIELD_BYTES, what="a log detail")
                    if detail
                    else None
                )
            except ValueError:
                data = None
            if isinstance(data, dict):
                command = data.get("command")
                owner = command.get("person") if isinstance(command, dict) else None
                if owner is not None and owner != person:
                    continue
                if len(keys) != len(record.keys):
                    detail = None
            elif detail is not None:
                detail = detail.split(":", 1)[0]
            out.append(record.model_copy(update={"keys": keys, "detail": detail}))
        return out

    async def log(self) -> list[LogRecord]:
        """Every change, oldest first (:class:`~sandbox_memory.errors.MemoryNotFound` where
        there is no memory)."""

        if self.runtime.shared is not None:
            await self.runtime.shared.refresh()
        await self.require()
        records: list[LogRecord] = await self.store.read_log()
        if self.acting:
            records = [r for r in records if _logged_person(r) in (None, self.person)]
        return records

    async def search(
        self,
        query: str,
        *,
        conversation: str | None = None,
        limit: int = 10,
        person: str | None = None,
    ) -> list[SearchHit]:
        """Ranked full-text hits over entries, rollout summaries and recorded items.

        ``conversation`` keeps to one conversation's material; ``person`` adds that person's
        private entries and runs (without it, only shared memory is searched). A client acting
        for a person searches as that person; another ``person`` is refused. See
        ``search/index/`` (``query.py``) and docs/search.md.

        .. versionadded:: 0.1
        """

        if self.acting:
            if person is not None and person != self.person:
                raise MemoryConfigError(
                    "person", person, f"is not the person this client acts for ({self.person!r})"
                )
            person = self.person

        await self._require_current(conversation)
        rid = safe_rollout_id(conversation) if conversation is not None else None
        shared = self.runtime.shared
        if shared is not None:
            # One index for every sandbox of the namespace, in the store (when a close sent
            # it); else the copy's, brought up to date from the store first.
            found = await shared.search(query, conversation=rid, limit=limit, person=person)
            if found is not None:
                return found
            await shared.refresh()
        hits: list[SearchHit] = await self.runtime.search_index.search(
            query, conversation=rid, limit=limit, person=person
        )
        await self.runtime.save_search()
        return hits
