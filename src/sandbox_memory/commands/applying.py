"""Changing memory through a client: a command applied with the version its caller saw, adopting a conversation, a refresh (:class:`ClientCommands`)."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Literal

from ..engines.base import ITEM_ID_FIELD
from ..errors import MemoryConfigError, MemoryConflict, MemoryStoreUnavailable
from ..rules import key_problem, secret_problem
from ..stores.records import (
    MAX_CONTENT_CHARS,
    Cause,
    ConversationMemory,
    CopyRetraction,
    Entry,
    LogRecord,
    Overrides,
    Source,
    now_ms,
    tail_hash,
    validate_key,
)
from ..stores.segments import (
    append_segment,
    build_segment,
    display_id,
    rollout_path,
    safe_rollout_id,
    text_value,
)

if TYPE_CHECKING:
    pass
from .base import ClientBase, _edit, _key_in_use
from .models import Command, Configure, Forget, Refresh, Remember, logger
from .views import ConversationView, LayoutView, visible_to


class ClientCommands(ClientBase):
    """The changes of :class:`~sandbox_memory.commands.MemoryClient`."""

    # --------------------------------------------------------------- commands

    async def apply(
        self,
        command: Command,
        *,
        expected: int,
        conversation: str | None = None,
        cause: Literal["person", "live_update"] = "person",
    ) -> ConversationView | LayoutView:
        """Apply ``command`` if the memory is still at version ``expected``.

        Raises :class:`~sandbox_memory.errors.MemoryNotFound` when ``conversation`` is not
        one this workspace knows (see :meth:`require`): a command changes a conversation's
        memory, it never starts one (:meth:`create` does), so a mistyped rollout id creates
        nothing.

        Every error comes before the change is committed, so an error means nothing was
        applied: a symbolic link where the change would be rendered (``MEMORY.md``, the
        summary, ``skills/<key>/``) raises :class:`~sandbox_memory.errors.MemoryPathError`
        first. Once committed, the command has been applied and its view is returned; a
        rendering that still fails (a full disk) is logged at ERROR and done again at the
        next close.
        """

        await self.runtime.first_use()  # before this command writes: the SDK's files kept
        await self._defaults()
        if isinstance(command, Refresh):
            return await self._refresh(conversation)  # the version is not checked
        rid = safe_rollout_id(conversation) if conversation is not None else None
        if rid is not None:
            await self._require_current(rid)
        if isinstance(command, Remember) and command.kind == "preference" and cause != "person":
            raise MemoryConflict(
                f"Remember of {command.key!r} refused: a preference is learned from the "
                "person's own words at the end of a run; an agent's edit may not make one"
            )
        if isinstance(command, Remember):
            validate_key(command.key)
            text_value("content", command.content)
            if command.person is not None:
                text_value("person", command.person)
                if self.runtime.redactor.find(command.person):
                    # Shown redacted: the value is what holds the secret.
                    raise MemoryConfigError(
                        "person",
                        display_id(command.person),
                        "holds what looks like a credential, not a person's name",
                    )
            if not command.content.strip():
                raise MemoryConfigError("content", command.content, "must not be empty")
            if len(command.content) > MAX_CONTENT_CHARS:
                raise MemoryConfigError(
                    "content", command.content[:40] + "...", f"is over {MAX_CONTENT_CHARS} chars"
                )
            if self.acting and command.person not in (None, self.person):
                raise MemoryConfigError(
                    "person",
                    command.person,
                    f"is not the person this client acts for ({self.person!r}): it cannot "
                    "write another person's private entries",
                )
            if key_problem(command.key, self.runtime.redactor):
                # The key is not repeated: it is what holds the secret.
                raise MemoryConflict("Remember refused: its key holds what looks like a credential")
            problem = secret_problem(command.content, self.runtime.redactor)
            if problem:
                raise MemoryConflict(f"Remember of {command.key!r} refused: {problem}")
        if isinstance(command, Forget):
            validate_key(command.key)
        rt = self.runtime
        async with contextlib.AsyncExitStack() as stack:
            if rt.shared is not None:
                # Under the store's lease, on a copy brought up to date: the version checked
                # is the store's, and the change goes back with a conditional write.
                fence = await stack.enter_async_context(rt.shared.session())
                if fence is None:
                    raise MemoryStoreUnavailable(
                        f"{rt.shared.store.describe()} is unreachable; the command was not applied"
                    )
            async with rt.write_lock():
                keys = [command.key] if isinstance(command, Remember | Forget) else []
                await rt.ws.check_paths(rt.render_paths(keys))  # before the commit, not after
                if rid is None:
                    await self._apply_layout(command, expected=expected, cause=cause)
                else:
                    await self._apply_conversation(command, rid, expected=expected, cause=cause)
                try:
                    await rt.consolidate_layout()
                except Exception as exc:  # noqa: BLE001 - the command is applied: say so
                    logger.error(
                        "memory applied %s%s, but rendering memory's files after it failed "
                        "(%s: %s); they are rendered again at the next close",
                        type(command).__name__,
                        f" of {keys[0]!r}" if keys else "",
                        type(exc).__name__,
                        exc,
                    )
        rt.bump()
        return await self._local_view(rid)

    async def apply_for(
        self,
        command: Command,
        *,
        person: str | None,
        expected: int,
        conversation: str | None = None,
        cause: Literal["person", "live_update"] = "live_update",
    ) -> ConversationView | LayoutView:
        """:meth:`apply` on behalf of ``person`` (``None``: no one in particular), for a door
        that acts for one person (the MCP server): another person's private entry does not
        exist for them, so Forget does not find it and Remember may not take its key; a
        private Remember is theirs only, and a Remember of their own private entry keeps it
        private (an agent acting for them does not make it shared). Checked at version
        ``expected``, which :meth:`apply` then requires, so nothing can change in between."""

        if isinstance(command, Remember) and command.person not in (None, person):
            raise MemoryConfigError(
                "person", command.person, f"must be None or the person acting ({person!r})"
            )
        if isinstance(command, Remember | Forget):
            view = await self.view(conversation)
            entry = view.entries.get(command.key)
            if view.version == expected and entry is not None and not visible_to(entry, person):
                where = "layout memory" if conversation is None else f"conversation {conversation}"
                if isinstance(command, Forget):
                    raise MemoryConflict(
                        f"Forget: no entry with key {command.key!r} in {where}",
                        current_version=view.version,
                    )
                raise MemoryConflict(
                    f"Remember refused: key {command.key!r} is not available in {where}; "
                    "choose another key",
                    current_version=view.version,
                )
            if isinstance(command, Remember) and entry is not None and entry.person is not None:
                command = command.model_copy(update={"person": entry.person})
        return await self.apply(command, expected=expected, conversation=conversation, cause=cause)

    async def _apply_layout(self, command: Command, *, expected: int, cause: Cause) -> None:
        """One command on layout memory: the entry it names is read and written, with its
        log record, in one commit (a few records, however many entries there are)."""

        store = self.store
        layout = await store.edit_layout()
        if layout.version != expected:
            raise MemoryConflict(
                f"layout memory is at version {layout.version}, not {expected}: re-read it and "
                "retry",
                current_version=layout.version,
            )
        if isinstance(command, Configure):
            raise MemoryConflict(
                "Configure applies to a conversation: pass conversation=<rollout id>"
            )
        edit_id = f"edit-{now_ms()}"
        source = Source(conversation=cause if cause == "person" else "live", item=edit_id)
        stamp = now_ms()
        keys = [command.key] if isinstance(command, Remember | Forget) else []
        await layout.load(keys)
        assert isinstance(command, Remember | Forget)  # Refresh and Configure are handled above
        self._check_target(
            command, layout.entries.get(command.key), "layout memory", layout.version
        )
        _edit(layout.entries, command, source, stamp)
        layout.version += 1
        record = LogRecord(
            version=layout.version,
            at=stamp,
            cause=cause,
            scope="layout",
            keys=keys,
            detail=json.dumps({"command": command.model_dump(by_alias=True), "item": edit_id}),
        )
        # A Forget: the conversations it was promoted from hold the same entry, and it goes
        # there too, as part of the commit (finished by the next writer if this one dies).
        copies = (
            [CopyRetraction(key=command.key, source=source, stamp=stamp, cause=cause)]
            if isinstance(command, Forget)
            else []
        )
        await layout.commit([record], copies=copies)

    def _check_target(
        self, command: Remember | Forget, held: Entry | None, where: str, version: int
    ) -> None:
        """A Forget needs an entry of its key that exists for this client; a Remember may not
        take a key another person's private entry holds (said as no more than "in use")."""

        if isinstance(command, Forget) and (held is None or not self._exists(held)):
            raise MemoryConflict(
                f"Forget: no entry with key {command.key!r} in {where}",
                current_version=version,
            )
        if held is not None and not self._exists(held):
            raise _key_in_use(command.key, version)

    async def _apply_conversation(
        self, command: Command, rid: str, *, expected: int, cause: Cause
    ) -> None:
        rt = self.runtime
        store = self.store
        memory: ConversationMemory = await store.load_conversation(rid)
        if memory.version != expected:
            raise MemoryConflict(
                f"conversation {rid} memory is at version {memory.version}, not {expected}: "
                "re-read it and retry",
                current_version=memory.version,
            )
        stamp = now_ms()
        if isinstance(command, Configure):
            changed = command.model_fields_set & {"use", "generate"}
            data = memory.overrides.model_dump()
            for name in changed:
                data[name] = getattr(command, name)
            memory.overrides = Overrides(**data)
            memory.version += 1
            await store.save_conversation(memory)
            await store.append_log(
                LogRecord(
                    version=memory.version,
                    at=stamp,
                    cause="person",
                    scope=f"conversation:{rid}",
                    keys=[],
                    detail=json.dumps({"configure": {n: data[n] for n in changed}}),
                )
            )
            return
        assert isinstance(command, Remember | Forget)
        self._check_target(
            command, memory.entries.get(command.key), f"conversation {rid}", memory.version
        )
        # The edit becomes a small item of the conversation's history: the change's source.
        path = rollout_path(rt.layout.sessions_dir, rid)
        size_before = await rt.ws.size(path) or 0
        prog = await store.get_progress(rid)
        offset = prog.offset if prog is not None else 0
        segment = build_segment(
            {
                "input": [{"type": "memory_edit", "command": command.model_dump(by_alias=True)}],
                "generated_items": [],
                "terminal_metadata": {"terminal_state": "completed", "has_final_output": False},
            },
            rollout_id=rid,
            person=getattr(command, "person", None),
            redactor=rt.redactor,
        )
        await append_segment(
            rt.ws,
            sessions_dir=rt.layout.sessions_dir,
            rollout_id=rid,
            segment=segment,
            seal=rt.state.seal,
        )
        item_id = str(segment["input"][0][ITEM_ID_FIELD])
        new_size = await rt.ws.size(path) or 0
        tail = await tail_hash(rt.ws, path, new_size)

        # Progress before the record: the conversation is marked for phase 2 to take in again
        # (the registry, the layout's promoted copy and the rendered files follow a Remember
        # or Forget) before the change is saved, so a process killed between the two leaves
        # it marked, and the next close finishes what the saved change needs. Marked and not
        # saved, phase 2 takes in the record unchanged.
        def advance(p: Any) -> None:
            if offset == size_before:
                # Read to its end before: the edit's own line is read too (it is this
                # change's source, not a run to learn from).
                p.read_to(new_size, tail)
            p.consolidated = False
            if p.slug is None:
                p.slug = "edits"
                p.updated_at = str(segment["updated_at"])

        await rt.update_progress(rid, advance)
        source = Source(conversation=rid, item=item_id)
        assert isinstance(command, Remember | Forget)
        _edit(memory.entries, command, source, stamp)
        memory.version += 1
        memory.head = item_id
        await store.save_conversation(memory)
        await store.append_log(
            LogRecord(
                version=memory.version,
                at=stamp,
                cause=cause,
                scope=f"conversation:{rid}",
                keys=[command.key],
                detail=json.dumps({"command": command.model_dump(by_alias=True), "item": item_id}),
            )
        )

    async def adopt(self, conversation: str | None = None) -> dict[str, int]:
        """Vouch for recorded runs memory cannot verify (recorded by the SDK's own memory, or
        under another host's key, as in a snapshot restored elsewhere): seal every line of
        ``sessions/`` that is a JSON object with this host's key, so the next close learns
        from it. A person's decision: lines the agent appended are adopted with them. Returns
        the counts of lines ``adopted``, ``verified`` (already sealed here) and
        ``unreadable`` (left, still skipped). Without ``conversation``, memory's own store
        records that carry no valid seal (layout shards, conversation records, the registry:
        written before records were sealed, or by the agent) are sealed too, counted as
        ``records_adopted``. Run it while no session records.

        .. versionadded:: 0.1
        """

        from ..record.adopt import adopt_rollouts, refuse_shared

        rt = self.runtime
        refuse_shared(rt.shared)
        if conversation is not None:
            await self.require(conversation)
            rids = [safe_rollout_id(conversation)]
        else:
            rids = sorted(
                name[: -len(".jsonl")]
                for name in await rt.ws.listdir(rt.layout.sessions_dir)
                if name.endswith(".jsonl") and not name.startswith(".")
            )
        counts = await adopt_rollouts(rt.state, rids)
        if conversation is None:
            async with rt.state.write_lock():
                records = await rt.state.store.adopt_records()
            counts["records_adopted"] = records["adopted"]
        for rid in rids:
            await self.store.mark_pending(rid)  # the next close reads what was adopted
        return counts

    async def refresh(self, conversation: str | None = None) -> ConversationView | LayoutView:
        """Learn from unprocessed runs now: ``Refresh``, which needs no version (it changes
        memory only as a close would, under the same rules)."""

        await self._defaults()
        return await self._refresh(conversation)

    async def _refresh(self, conversation: str | None) -> ConversationView | LayoutView:
        rt = self.runtime
        await self.require(conversation)  # a Refresh creates nothing: a typo is an error
        if conversation is None:
            if rt.generate_enabled:
                self._require_model()
            await rt.close()
            return await self._local_view(None)
        rid = safe_rollout_id(conversation)
        memory = await self.store.load_conversation(rid)
        if not rt.switch(memory.overrides.generate, "generate"):
            return await self._local_view(rid)
        self._require_model()

        def retry(p: Any) -> None:
            if p.status == "failed":
                p.status = "retrying"
                p.attempts = 0
            p.next_attempt_at = 0.0

        await rt.update_progress(rid, retry)
        await self.store.mark_pending(rid)
        await rt.close(only=[rid])
        return await self._local_view(rid)
