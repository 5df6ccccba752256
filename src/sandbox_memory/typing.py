"""Protocols: what a part of the package needs of another, typed by what it does.

The modules below the capability (the SDK bridge, the agent tools, the commands) take a
:class:`MemoryCapability`: whatever carries the memory's configuration and knows the run's
conversation. :class:`sandbox_memory.Memory` is one; naming the class instead would tie each of
them back to ``capability.py``, which imports them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

    from .config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
    from .engines.base import ExtractionEngine


class MemoryCapability(Protocol):
    """A memory capability as the SDK bridge, the agent tools and the commands use it."""

    @property
    def layout(self) -> MemoryLayoutConfig: ...

    @property
    def read(self) -> MemoryReadConfig | None: ...

    @property
    def generate(self) -> MemoryGenerateConfig | None: ...

    @property
    def person(self) -> str | None: ...

    @property
    def engine(self) -> ExtractionEngine | None: ...

    @property
    def store(self) -> Any: ...

    @property
    def session(self) -> BaseSandboxSession | None: ...

    async def current_conversation(self) -> str | None:
        """The rollout id of the conversation the bound session is running now, if known."""
        ...
