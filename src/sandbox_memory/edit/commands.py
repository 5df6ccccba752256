"""Edit: the specification's commands (Remember, Forget, Configure, Refresh) with versions.

A command is applied with the version the caller last saw; a stale version raises
:class:`~sandbox_memory.errors.MemoryConflict` and changes nothing. ``conversation=None``
addresses the layout memory (the specification's agent memory), a rollout id addresses that
conversation's memory (the specification's session memory).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, field_serializer

from .. import bounded
from ..config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from ..engines.base import ITEM_ID_FIELD, EntryKind
from ..errors import MemoryConfigError, MemoryConflict, MemoryNotFound, MemoryStoreUnavailable
from ..record.segments import (
    LineCheck,
    append_segment,
    build_segment,
    display_id,
    rollout_path,
    safe_rollout_id,
    text_value,
)
from ..rules import key_problem, retract, secret_problem
from ..runtime.facade import LayoutRuntime
from ..stores.records import (
    MAX_CONTENT_CHARS,
    Cause,
    ConversationMemory,
    CopyRetraction,
    Entry,
    LogRecord,
    Overrides,
    Source,
    iso_to_ms,
    now_ms,
    tail_hash,
    validate_key,
)
from ..stores.seam import EditedEntries
from ..workspace import LocalWorkspace, Workspace

if TYPE_CHECKING:
    from ..search.index import SearchHit
    from ..typing import MemoryCapability

logger = logging.getLogger("sandbox_memory")


class Remember(BaseModel):
    tag: Literal["Remember"] = Field(default="Remember", alias="_tag")
    key: str
    content: str
    kind: EntryKind = "fact"
    person: str | None = None
    """Owner of a private entry (a preference); ``None`` for shared work."""

    model_config = {"populate_by_name": True}


class Forget(BaseModel):
    tag: Literal["Forget"] = Field(default="Forget", alias="_tag")
    key: str

    model_config = {"populate_by_name": True}


class Configure(BaseModel):
    """``True``/``False`` set a switch; ``None`` removes the override; absent leaves it."""

    tag: Literal["Configure"] = Field(default="Configure", alias="_tag")
    use: bool | None = None
    generate: bool | None = None

    model_config = {"populate_by_name": True}


class Refresh(BaseModel):
    tag: Literal["Refresh"] = Field(default="Refresh", alias="_tag")

    model_config = {"populate_by_name": True}


Command = Remember | Forget | Configure | Refresh


def parse_command(data: dict[str, Any]) -> Command:
    """A command from its JSON form (``{"_tag": "Remember", ...}``)."""

    tag = data.get("_tag")
    kinds: dict[str, type[BaseModel]] = {
        "Remember": Remember,
        "Forget": Forget,
        "Configure": Configure,
        "Refresh": Refresh,
    }
    if tag not in kinds:
        raise MemoryConfigError("command._tag", tag, f"must be one of {sorted(kinds)}")
    return kinds[tag].model_validate(data)  # type: ignore[return-value]


class ConversationView(BaseModel):
    rollout_id: str
    version: int
    head: str | None
    entries: dict[str, Entry]
    processed: list[str]
    settings: dict[str, bool]
    overrides: dict[str, bool]


class LayoutView(BaseModel):
    version: int
    entries: Mapping[str, Entry]
    """Read only; each entry is parsed when first asked for (a view of 20,000 entries whose
    caller wants its version or one key parses one entry)."""

    @field_serializer("entries")
    def _entries(self, entries: Mapping[str, Entry]) -> dict[str, Entry]:
        return dict(entries)


class ConversationSummary(BaseModel):
    """One line of :meth:`MemoryClient.conversations`."""

    rollout_id: str
    active: int
    """Active entries of its conversation memory."""
    retracted: int
    version: int
    updated_at: int | None
    """Last change of its memory or its recorded history (ms), ``None`` if never."""
    recorded: bool
    """Whether ``sessions/<rollout_id>.jsonl`` exists."""


def visible_to(entry: Entry, person: str | None) -> bool:
    """Whether ``person`` (``None``: no one in particular) may see ``entry``, active or
    retracted: shared entries and their own private ones. Another person's private entry does
    not exist for them (:meth:`MemoryClient.view_for`, :meth:`MemoryClient.apply_for`)."""

    return entry.exists_for(person)


def _edit(
    entries: dict[str, Entry] | EditedEntries,
    command: Remember | Forget,
    source: Source,
    stamp: int,
) -> None:
    """A person's Remember (add, replace or revive) or Forget (retract) of one entry."""

    if isinstance(command, Remember):
        entries[command.key] = Entry(
            key=command.key,
            content=command.content.strip(),
            kind=command.kind,
            sources=[source],
            updated_at=stamp,
            person=command.person,
        )
        return
    retract(entries[command.key], [source], stamp)


def _key_in_use(key: str, version: int) -> MemoryConflict:
    """A Remember of a key another person's private entry holds: refused, saying no more."""

    return MemoryConflict(
        f"Remember of {key!r} refused: the key is in use; choose another key",
        current_version=version,
    )


def _logged_person(record: LogRecord) -> str | None:
    """The person a logged command made a private entry for (``None``: shared, or no command)."""

    try:
        detail = json.loads(record.detail or "null")
    except ValueError:
        return None
    command = detail.get("command") if isinstance(detail, dict) else None
    person = command.get("person") if isinstance(command, dict) else None
    return person if isinstance(person, str) else None


VIEW_CHUNK_BYTES = 4 << 20
"""Bytes of a rollout read at a time to list its processed items: a 100 MB rollout is never
held (or parsed) whole to show a conversation."""

_ITEM_ID_RE = re.compile(rb'"' + ITEM_ID_FIELD.encode() + rb'":"((?:[^"\\]|\\.)*)"')
"""An item id as the recorder writes it. Inside a JSON string every quote is escaped, so the
pattern only matches the field itself."""


async def processed_item_ids(ws: Workspace, path: str, end: int, check: LineCheck) -> list[str]:
    """The recorded item ids in the first ``end`` bytes of a rollout, in order.

    Found in the bytes, a chunk at a time, without parsing the segments (the view lists the ids;
    it needs nothing else of a run); only in lines memory recorded (``check``: their seal).
    """

    found: list[str] = []
    pos = 0
    carry = b""
    while pos < end:
        data = await ws.read_range(path, pos, min(VIEW_CHUNK_BYTES, end - pos))
        if not data:
            break
        pos += len(data)
        block = carry + data
        # An id may straddle the cut: keep the tail from the last complete line for next time.
        cut = block.rfind(b"\n") + 1 if pos < end else len(block)
        view = memoryview(block)
        start = 0
        while start < cut:
            stop = block.find(b"\n", start, cut)
            stop = cut if stop < 0 else stop
            if check.seal.verify(view[start:stop], check.rollout_id):
                for match in _ITEM_ID_RE.finditer(block, start, stop):
                    found.append(json.loads(b'"' + match.group(1) + b'"'))
            start = stop + 1
        del view
        carry = block[cut:]
    return found


class MemoryClient:
    """Read and change memory in a workspace folder or a live sandbox session.

    >>> client = MemoryClient("/path/to/workspace")
    >>> view = await client.view()                       # layout memory (create() starts it)
    >>> await client.apply(Remember(key="budget", content="...", kind="fact"),
    ...                    expected=view.version)

    With ``store=`` (a :class:`~sandbox_memory.stores.PostgresStore`) the client works on the
    shared store: views are read from it and commands are written to it, conditional on the
    version given; ``workspace`` is then only a local working copy (a temporary folder when
    omitted), so no sandbox is needed.

    With ``person=`` the client acts for that person: another person's private entries do not
    exist for it (views leave them out, a ``Forget`` of one finds no entry, a ``Remember`` of
    its key is refused, search and the log show nothing of them). The agent's own tools act
    for the run's person (:meth:`for_session`). Without it the client is the host's: it sees
    and changes every entry.
    """

    def __init__(
        self,
        workspace: Workspace | Path | str | None = None,
        *,
        store: Any = None,
        layout: MemoryLayoutConfig | None = None,
        read: MemoryReadConfig | None = None,
        generate: MemoryGenerateConfig | None = None,
        use_default: bool | None = None,
        generate_default: bool | None = None,
        runtime: LayoutRuntime | None = None,
        person: str | None = None,
    ) -> None:
        """``use_default``/``generate_default``: the switches' defaults; ``None`` takes the ones
        the workspace's ``Memory`` was configured with (recorded in the store), else on.
        ``person``: act for this person (see the class)."""

        self._scratch: str | None = None
        self.person = None if person is None else text_value("person", person)
        """Whom this client acts for (see :attr:`acting`)."""
        self.acting = person is not None
        """Whether this client acts for :attr:`person` (``None``: a run for no one), so that
        other people's private entries do not exist for it; else it is the host's."""
        if workspace is None:
            if store is None and runtime is None:
                raise MemoryConfigError(
                    "workspace", None, "is needed unless a store= or runtime= is given"
                )
            import tempfile

            self._scratch = workspace = tempfile.mkdtemp(prefix="sandbox-memory-copy-")
        ws = workspace if isinstance(workspace, Workspace) else LocalWorkspace(Path(workspace))
        self._pending_defaults: tuple[bool | None, bool | None, bool] | None = None
        self._own_workspace = False
        """Whether this is a sandbox's own memory (:meth:`for_session`): its layout memory is
        there by configuration, even before the first close writes a file."""
        if runtime is None:
            runtime = LayoutRuntime(
                ws,
                layout=layout or MemoryLayoutConfig(),
                generate=(generate or MemoryGenerateConfig())
                if generate_default is not False
                else None,
                read=(read or MemoryReadConfig()) if use_default is not False else None,
                store=store,
            )
            if use_default is None or generate_default is None:
                self._pending_defaults = (use_default, generate_default, read is not None)
        self.runtime = runtime

    async def _defaults(self) -> None:
        """Take the switch defaults the workspace recorded, for those the caller left open."""

        if self._pending_defaults is None:
            return
        use, generate, read_given = self._pending_defaults
        self._pending_defaults = None
        recorded = None
        shared = self.runtime.shared
        if shared is not None:
            # The shared store records them; the copy's are what it fetched last.
            with contextlib.suppress(MemoryStoreUnavailable):
                recorded = await shared.store.load_defaults()
        if recorded is None:
            recorded = await self.store.load_defaults()
        if recorded is None:
            return
        rt = self.runtime
        if use is None:
            if not recorded.use:
                rt.read = None
            elif not read_given and rt.read is not None:
                rt.read = MemoryReadConfig(max_summary_chars=recorded.max_summary_chars)
        if generate is None:
            rt.generate_enabled = recorded.generate

    @classmethod
    def for_session(cls, session: Any, memory: MemoryCapability) -> MemoryClient:
        from .. import _sdk

        client = cls(_sdk.workspace_for_session(session), runtime=_sdk.runtime_for(session, memory))
        client._own_workspace = True
        # The run's tools act for the run's person (none: shared memory only).
        client.person = _sdk.current_person.get() or memory.person
        client.acting = True
        return client

    def _exists(self, entry: Entry) -> bool:
        """Whether ``entry`` exists for this client (:meth:`Entry.exists_for`, when acting)."""

        return not self.acting or entry.exists_for(self.person)

    def _own(self, entries: dict[str, Entry]) -> dict[str, Entry]:
        if not self.acting:
            return entries
        return {k: e for k, e in entries.items() if e.exists_for(self.person)}

    @property
    def store(self) -> Any:
        return self.runtime.store

    # ------------------------------------------------------------------ views

    async def has_memory(self) -> bool:
        """Whether this workspace holds memory or recorded runs of this layout."""

        layout = self.runtime.layout
        ws = self.runtime.ws
        return bool(await ws.listdir(layout.memories_dir) or await ws.listdir(layout.sessions_dir))

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

    async def has_conversation(self, conversation: str) -> bool:
        """Whether ``conversation`` has memory or a recorded history here."""

        rid = safe_rollout_id(conversation)
        rt = self.runtime
        return await self.store.conversation_exists(rid) or (
            await rt.ws.size(rollout_path(rt.layout.sessions_dir, rid)) is not None
        )

    def where(self) -> str:
        """Where this client's memory lives, in words (the shared store when there is one)."""

        shared = self.runtime.shared
        if shared is None:
            return self.runtime.ws.describe()
        return f"namespace {shared.store.namespace} of {shared.store.dsn}"

    async def require(self, conversation: str | None = None) -> None:
        """Raise :class:`~sandbox_memory.errors.MemoryNotFound`, naming it, unless this
        workspace (or shared store) holds memory and, if given, knows ``conversation``.

        A mistyped root or rollout id is an error, not an empty memory: memory is created only
        by :meth:`create` (``sandbox-memory init``). A sandbox's own client
        (:meth:`for_session`) always has its layout memory, even before its first close.
        """

        shared = self.runtime.shared
        if self._own_workspace:
            here = True
        elif shared is not None:
            here = await shared.store.holds_memory()
        else:
            here = await self.has_memory()
        if not here:
            layout = self.runtime.layout
            missing = (
                "the namespace holds no memory (check the namespace and the DSN, or start "
                "memory there with MemoryClient(store=...).create() or `sandbox-memory init`)"
                if shared is not None
                else f"neither {layout.memories_dir}/ nor {layout.sessions_dir}/ is there "
                "(check the root, or start memory with MemoryClient.create() or "
                "`sandbox-memory init`)"
            )
            raise MemoryNotFound(
                "workspace", self.where(), f"no memory in {self.where()}: {missing}"
            )
        if conversation is None or await self.has_conversation(conversation):
            return
        names = [c.rollout_id for c in await self.conversations()]
        listed = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise MemoryNotFound(
            "conversation",
            conversation,
            f"no conversation {conversation!r} in {self.where()} (known: {listed or 'none'}; "
            f"start one with MemoryClient.create({conversation!r}) or "
            f"`sandbox-memory init -c {conversation}`)",
        )

    async def _require_current(self, conversation: str | None) -> None:
        """:meth:`require`, looking at the shared store again before failing (the copy may
        not have a conversation another sandbox started since it was last brought up to date)."""

        try:
            await self.require(conversation)
        except MemoryNotFound:
            if self.runtime.shared is None:
                raise
            await self.runtime.shared.refresh()
            await self.require(conversation)

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
        ``search/index.py`` and docs/search.md.

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
        held = layout.entries.get(command.key)
        if isinstance(command, Forget) and (held is None or not self._exists(held)):
            raise MemoryConflict(
                f"Forget: no entry with key {command.key!r} in layout memory",
                current_version=layout.version,
            )
        if held is not None and not self._exists(held):
            raise _key_in_use(command.key, layout.version)
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
        held = memory.entries.get(command.key)
        if isinstance(command, Forget) and (held is None or not self._exists(held)):
            raise MemoryConflict(
                f"Forget: no entry with key {command.key!r} in conversation {rid}",
                current_version=memory.version,
            )
        if held is not None and not self._exists(held):
            raise _key_in_use(command.key, memory.version)
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

    def _require_model(self) -> None:
        """Refresh needs a model: the specification's 409 when none is available."""

        rt = self.runtime
        if rt.has_engine_object:
            return
        g = rt.generate
        if g.engine != "model" or not isinstance(g.phase_one_model, str):
            return  # the offline engine, or a model object, is always there
        from ..engines.model import credentials_available

        if not credentials_available():
            raise MemoryConflict(
                "Refresh needs a model, and none is available: generate.engine is 'model' with "
                f"phase_one_model={g.phase_one_model!r} but OPENAI_API_KEY is not set; set it, "
                "pass a Model object, or use engine 'auto' or 'offline'"
            )
