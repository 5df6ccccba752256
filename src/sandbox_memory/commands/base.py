"""What every part of :class:`MemoryClient` stands on: the client's workspace, runtime and person, its switch defaults, and the checks that memory exists (:class:`ClientBase`); the helpers the commands share."""

from __future__ import annotations

import abc
import contextlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from ..config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from ..engines.base import ITEM_ID_FIELD
from ..errors import MemoryConfigError, MemoryConflict, MemoryNotFound, MemoryStoreUnavailable
from ..rules import retract
from ..runtime.facade import LayoutRuntime
from ..stores.records import (
    Entry,
    LogRecord,
    Source,
)
from ..stores.seam import EditedEntries
from ..stores.segments import (
    LineCheck,
    rollout_path,
    safe_rollout_id,
    text_value,
)
from ..workspace import LocalWorkspace, Workspace

if TYPE_CHECKING:
    from ..typing import MemoryCapability
from .models import Forget, Remember
from .views import ConversationSummary, ConversationView, LayoutView


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


class ClientBase(abc.ABC):
    """A client's workspace, runtime and person (see :class:`~sandbox_memory.commands.MemoryClient`)."""

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
    def for_session(cls, session: Any, memory: MemoryCapability) -> Self:
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

    # What one room calls of another: each is defined in its room (reading.py).

    @abc.abstractmethod
    async def conversations(self) -> list[ConversationSummary]: ...

    @abc.abstractmethod
    async def view(self, conversation: str | None = None) -> ConversationView | LayoutView: ...

    @abc.abstractmethod
    async def _local_view(self, conversation: str | None) -> ConversationView | LayoutView: ...
