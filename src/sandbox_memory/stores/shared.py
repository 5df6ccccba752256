"""The shared-store contract: what a store that several sandboxes share must offer
(:class:`SharedStore`), the records it hands over (:class:`ScopeState`, :class:`RolloutState`),
and the lease that fences its writes (:class:`Fence`); what its own search index offers is
``shared_copy/host.py``'s ``StoreSearch`` (it names the search index's types, which
import the store package). The working copy (``shared_copy/``) is written against these
alone; ``stores/postgres/`` is one backend of them, and a new one is a module implementing
them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .records import Defaults, Entry, LogRecord, Overrides

LAYOUT_SCOPE = "layout"

CONVERSATION_PREFIX = "conversation:"

SETTINGS_NOTE = "store/settings.json"
"""The switch defaults of the ``Memory`` configuration that last consolidated the namespace,
kept as a note (like the registry): a copy sends and fetches it with the other notes."""


def conversation_scope(rollout_id: str) -> str:
    return f"{CONVERSATION_PREFIX}{rollout_id}"


@dataclass(frozen=True)
class Fence:
    """A lease held on a namespace: writes carrying it are refused once it is lost."""

    holder: str
    token: int
    """Grows by one at every acquisition: a newer holder always has a larger token."""


@dataclass
class ScopeState:
    """One scope (layout memory or one conversation's memory) as stored."""

    scope: str
    version: int
    head: str | None
    overrides: Overrides
    entries: dict[str, Entry]
    entry_versions: dict[str, int]
    """The scope version at which each entry last changed: what a per-entry write expects."""
    since: int = 0
    """Read as changes after this version (:meth:`SharedStore.read_changes`): ``entries``
    holds those changed after it, ``removed`` those removed after it; 0: the whole scope."""
    removed: list[str] = field(default_factory=list)


@dataclass
class RolloutState:
    rollout_id: str
    segments: int
    """Segments recorded (they are numbered 1..segments, in the order they were stored)."""
    watermark: int
    """Segments 1..watermark are extracted; it never moves backwards."""
    progress: dict[str, Any]


@runtime_checkable
class SharedStore(Protocol):
    """What the working copy needs of a shared store (:class:`~sandbox_memory.stores.
    PostgresStore` is one): scopes written under versions and a fenced lease, recorded
    segments, progress as a watermark, claims, notes, and what changed since a horizon. A
    ``Memory(store=...)`` that lacks one of these is refused by name."""

    namespace: str
    lease_seconds: float

    @property
    def dsn(self) -> str: ...

    def describe(self) -> str: ...

    async def acquire(self, *, timeout: float, holder: str | None = None) -> Fence: ...

    async def renew(self, fence: Fence) -> None: ...

    async def release(self, fence: Fence) -> None: ...

    async def claim(self, names: Sequence[str], *, holder: str) -> list[str]: ...

    async def claimed_by_others(self, prefix: str, *, holder: str) -> list[str]: ...

    async def unclaim(self, names: Sequence[str], *, holder: str) -> None: ...

    async def horizon(self) -> int: ...

    async def changed_since(
        self, xid: int
    ) -> tuple[dict[str, int], dict[str, RolloutState], dict[str, str]]: ...

    async def read_scope(self, scope: str) -> ScopeState: ...

    async def read_changes(self, since: dict[str, int]) -> dict[str, ScopeState]: ...

    async def write_scope(
        self,
        scope: str,
        *,
        entries: dict[str, Entry] | None = None,
        remove: Sequence[str] = (),
        expected_version: int | None = None,
        expected_entries: dict[str, int | None] | None = None,
        head: str | None = None,
        overrides: Overrides | None = None,
        log: Sequence[LogRecord] = (),
        fence: Fence | None = None,
        bump: int = 1,
    ) -> int: ...

    async def read_log(self, *, after: int = 0) -> list[tuple[int, LogRecord]]: ...

    async def append_segment(self, rollout_id: str, segment_id: str, line: str) -> int: ...

    async def append_segments(self, segments: Sequence[tuple[str, str, str]]) -> list[int]: ...

    async def segment_key(self) -> bytes: ...

    async def segment_ids(self, rollout_id: str) -> list[str]: ...

    async def read_segments(
        self, rollout_id: str, *, after: int = 0
    ) -> list[tuple[int, str, str]]: ...

    async def read_segments_many(
        self, after: Mapping[str, int]
    ) -> dict[str, list[tuple[int, str, str]]]: ...

    async def rollouts(self) -> dict[str, RolloutState]: ...

    async def advance(
        self,
        rollout_id: str,
        *,
        watermark: int,
        progress: dict[str, Any],
        fence: Fence | None = None,
    ) -> int: ...

    async def map_threads(self, threads: dict[str, str]) -> None: ...

    async def put_files(
        self, files: dict[str, bytes | None], *, fence: Fence | None = None
    ) -> None: ...

    async def files(self, *, after: int = 0) -> tuple[dict[str, bytes | None], int]: ...

    async def holds_memory(self) -> bool: ...

    async def list_conversations(self) -> list[str]: ...

    async def load_defaults(self) -> Defaults | None: ...

    async def save_defaults(self, defaults: Defaults, *, fence: Fence | None = None) -> None: ...
