"""``Memory``: the capability a user adds to a ``SandboxAgent``.

Read: :meth:`Memory.instructions` injects the memory prompt (progressive disclosure, the
summary within a character budget). Record and generate: :meth:`Memory.bind` installs our
manager for the sandbox session (see ``_sdk.py``). Edit: the live-update tools.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Literal

from agents.items import TResponseInputItem
from agents.model_settings import ModelSettings
from agents.models.interface import Model
from agents.sandbox.capabilities.memory import Memory as _SDKMemory
from agents.sandbox.manifest import Manifest
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.tool import Tool
from pydantic import ConfigDict, Field, PrivateAttr, SkipValidation, field_validator

from . import _sdk, spans
from .config import (
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    _bind_sdk_type_names,
)
from .consolidate.carryover import sdk_summary
from .consolidate.selection import displayed_entries
from .datapolicy import exc_text
from .engines.base import ExtractionEngine
from .errors import MemoryConfigError
from .render.files import read_prompt_entries, render_read_prompt, render_summary_text
from .render.relevant import CANDIDATES as RELEVANT_CANDIDATES
from .render.relevant import HEADER as RELEVANT_HEADER
from .render.relevant import QUERY_TERMS, input_text, render_relevant, task_terms
from .stores.segments import history_fingerprint, run_rollout_id, text_value
from .stores.shared import SharedStore
from .tools import live_update_tools, search_tool

logger = logging.getLogger("sandbox_memory")


@contextlib.contextmanager
def for_person(person: str | None) -> Iterator[None]:
    """Runs started inside this block are for ``person``: private entries follow them.

    .. versionadded:: 0.1
    """

    if person is not None:
        text_value("person", person)
    token = _sdk.current_person.set(person)
    try:
        yield
    finally:
        _sdk.current_person.reset(token)


class Memory(_SDKMemory):
    """Memory learned from earlier runs, kept in the sandbox workspace.

    ``Memory()`` reads and generates. ``Memory(generate=None)`` only reads;
    ``Memory(read=None)`` only generates. Reading needs ``Shell``; live update also
    ``Filesystem``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    type: Literal["memory"] = "memory"
    layout: MemoryLayoutConfig = Field(default_factory=MemoryLayoutConfig)  # type: ignore[assignment]
    """Where memory lives in the workspace."""
    read: MemoryReadConfig | None = Field(default_factory=MemoryReadConfig)  # type: ignore[assignment]
    """Read-side configuration; ``None`` disables reading (and the ``use`` default)."""
    generate: MemoryGenerateConfig | None = Field(default_factory=MemoryGenerateConfig)  # type: ignore[assignment]
    """Generation configuration; ``None`` disables learning (and the ``generate`` default)."""
    person: str | None = None
    """Default person runs are for (``for_person`` overrides it per run)."""
    engine: ExtractionEngine | None = Field(default=None, exclude=True)
    """An engine object overriding ``generate.engine`` (tests, custom extractors)."""
    store: SkipValidation[SharedStore | None] = Field(default=None, exclude=True)
    """A shared store (``sandbox_memory.stores.PostgresStore``) holding this layout's memory
    for sandboxes on many machines; the workspace keeps a working copy. ``None``: the
    workspace alone (the default)."""

    _fingerprint: str | None = PrivateAttr(default=None)
    _rollout_id: str | None = PrivateAttr(default=None)
    _run_input: str | list[Any] | None = PrivateAttr(default=None)
    _cache: tuple[Any, str | None] | None = PrivateAttr(default=None)
    _started: bool = PrivateAttr(default=False)

    @field_validator("person")
    @classmethod
    def _person_is_text(cls, value: str | None) -> str | None:
        return None if value is None else text_value("person", value)

    @field_validator("layout", "read", "generate", mode="before")
    @classmethod
    def _accept_sdk_config(cls, value: Any) -> Any:
        """The SDK's config classes of the same names are taken field by field (migration)."""

        import dataclasses

        from agents.sandbox import config as sdk_config

        sdk_types = (
            sdk_config.MemoryLayoutConfig,
            sdk_config.MemoryReadConfig,
            sdk_config.MemoryGenerateConfig,
        )
        if isinstance(value, sdk_types):
            return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return value

    def model_post_init(self, context: object, /) -> None:
        _ = context
        if self.read is None and self.generate is None:
            raise MemoryConfigError(
                "Memory", None, "requires at least one of `read` or `generate`; both are None"
            )
        if not isinstance(self.layout, MemoryLayoutConfig):
            raise MemoryConfigError(
                "layout", self.layout, "must be a sandbox_memory.MemoryLayoutConfig"
            )
        if self.read is not None and not isinstance(self.read, MemoryReadConfig):
            raise MemoryConfigError("read", self.read, "must be a MemoryReadConfig or None")
        if self.generate is not None and not isinstance(self.generate, MemoryGenerateConfig):
            raise MemoryConfigError(
                "generate", self.generate, "must be a sandbox_memory.MemoryGenerateConfig or None"
            )
        if self.store is not None:
            # Checked here, not by pydantic, for an error that names the field and the value.
            if not isinstance(self.store, SharedStore):
                raise MemoryConfigError(
                    "store",
                    self.store,
                    "must be a shared store (sandbox_memory.stores.PostgresStore) or None",
                )

    def clone(self) -> Memory:
        return self.model_copy(deep=False, update={"session": None})

    def required_capability_types(self) -> set[str]:
        if self.read is None:
            return set()
        if self.read.live_update:
            return {"filesystem", "shell"}
        return {"shell"}

    def bind(self, session: BaseSandboxSession) -> None:
        _sdk.renew_shared_http_client()  # the agent's model by name, in a new event loop
        self.session = session
        self._cache = None
        self._started = False
        self._rollout_id = _sdk.current_rollout_id()
        self._run_input = _sdk.current_run_input()
        if self.generate is not None:
            _sdk.check_sdk()
            _sdk.install(session, self)

    def process_context(self, context: list[TResponseInputItem]) -> list[TResponseInputItem]:
        # Only remembered here: the history's first item tells which conversation this is.
        self._fingerprint = history_fingerprint(context)
        if self._run_input is None:
            # The conversation so far, as the run starts (kept for the whole run: the read
            # prompt stays the same on every turn).
            self._run_input = list(context)
        return context

    @spans.traced(spans.READ)
    async def instructions(self, manifest: Manifest) -> str | None:
        if self.read is None:
            return None
        if self.session is None:
            raise ValueError("Memory capability is not bound to a SandboxSession")
        manager = _sdk.find_manager(self.session, self)
        wait = manager.runtime.generate.wait_for_extraction_seconds if manager else 0.0
        if manager is not None and not await manager.wait_idle(wait):
            logger.warning(
                "memory from the previous run is still being extracted after %gs; this run "
                "starts with the memory as it stands (generate.wait_for_extraction_seconds)",
                wait,
            )
        runtime = _sdk.runtime_for(self.session, self)
        if not self._started:
            self._started = True
            await runtime.start_run()
        person = _sdk.current_person.get() or self.person
        cache_key = (runtime.generation, id(runtime), self._rollout_id, self._fingerprint, person)
        if self._cache is not None and self._cache[0] == cache_key:
            spans.note(cached=True, **spans.prompt_figures(self._cache[1]))
            return self._cache[1]
        try:
            text = await self._build_prompt(runtime, manifest, person)
        except Exception as exc:  # noqa: BLE001 - unreadable memory must not fail the run
            logger.warning(
                "memory could not be read (%s); this run starts without memory",
                exc_text(exc),
            )
            return None
        spans.note(**spans.prompt_figures(text))
        self._cache = (cache_key, text)
        return text

    async def _build_prompt(
        self, runtime: Any, manifest: Manifest, person: str | None
    ) -> str | None:
        assert self.read is not None
        store = runtime.store
        conversation_id = await self._conversation_id(runtime)
        conversation_entries: list[Any] = []
        use = True
        if conversation_id is not None:
            conversation = await store.load_conversation(conversation_id)
            use = runtime.switch(conversation.overrides.use, "use")
            conversation_entries = list(conversation.entries.values())
        summary = ""
        if use:
            budget = self.read.max_summary_chars
            shown = await read_prompt_entries(runtime.state.local, person=person, budget=budget)
            if shown is None:  # not rendered yet by this version: the whole store
                shown = displayed_entries(await store.load_layout(), await store.load_registry())
            summary = render_summary_text(
                layout_entries=shown,
                conversation_entries=conversation_entries,
                person=person,
                budget=budget,
            )
        relevant = ""
        if use and self.read.relevant:
            relevant = await self._relevant(runtime, summary, person)
        memory_dir = self.layout.memories_dir  # as spelled, as the SDK shows it
        if self.workspace_scope.cwd is not None:
            from pathlib import Path

            memory_dir = self.workspace_scope.model_resource_path(
                workspace_root=manifest.root, workspace_relative_path=Path(memory_dir)
            ).as_posix()
        if use and not summary and not relevant:
            # Memory the SDK's Memory left, not taken in yet: given as the SDK gives it.
            left = await sdk_summary(runtime.state)
            # Editable as in the SDK only when memory never renders (no generation): else
            # the first close takes in the files as first found, and replaces them.
            editable = self.read.live_update and self.generate is None
            sdk_prompt = (
                _sdk.sdk_read_prompt(memory_dir=memory_dir, summary=left, live_update=editable)
                if left
                else None
            )
            if sdk_prompt is not None:
                privacy = render_read_prompt(
                    memory_dir=memory_dir, summary="", live_update=False, person=person
                )
                return "\n\n".join(p for p in (privacy, sdk_prompt) if p)
        if not summary and not relevant and not person:
            return None  # with a person, the privacy rules are given every turn regardless
        return render_read_prompt(
            memory_dir=memory_dir,
            summary=summary,
            live_update=self.read.live_update,
            person=person,
            relevant=relevant,
        )

    async def _relevant(self, runtime: Any, summary: str, person: str | None) -> str:
        """The section "relevant to this task" for this run's input (see ``render/relevant.py``);
        empty when the input has no words or nothing beyond the summary matches."""

        assert self.read is not None
        query = input_text(self._run_input)
        phrases, words = task_terms(query)
        hits = await runtime.search_index.curated(
            phrases, words, person=person, limit=RELEVANT_CANDIDATES, max_terms=QUERY_TERMS
        )
        body = render_relevant(
            hits,
            summary=summary,
            query=query,
            budget=self.read.max_relevant_chars - len(RELEVANT_HEADER) - 1,
            phrases=phrases,
        )
        return f"{RELEVANT_HEADER}\n{body}" if body else ""

    async def current_conversation(self) -> str | None:
        """The rollout id of the conversation this bound run belongs to, if it has memory."""

        if self.session is None:
            return None
        return await self._conversation_id(_sdk.runtime_for(self.session, self))

    async def _conversation_id(self, runtime: Any) -> str | None:
        """This run's conversation: the id the SDK resolved for it, else its history's."""

        if self._rollout_id is not None:
            try:
                rid = run_rollout_id(self._rollout_id)
            except MemoryConfigError:
                rid = None
            if rid is not None and (await runtime.store.conversation_exists(rid)):
                return rid
        found: str | None = await runtime.conversation_for(self._fingerprint)
        return found

    def tools(self) -> list[Tool]:
        if self.read is None or self.session is None:
            return []
        tools = [search_tool(self)]
        if self.read.live_update:
            tools += live_update_tools(self)
        return tools


# config.py names the SDK's Model and ModelSettings for type checkers only (the command line
# imports it without the SDK); pydantic needs them to validate Memory's config fields, and
# typing.get_type_hints on the config classes finds them once bound.
_bind_sdk_type_names()
Memory.model_rebuild(_types_namespace={"Model": Model, "ModelSettings": ModelSettings})
