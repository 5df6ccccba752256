"""The working copy's bookkeeping, which every room of :class:`~.SharedCopy` stands on.

:class:`CopyBase` holds what the rooms share (the runtime, the store, the store's search
index, whether the store answered last time) and keeps the copy's bookkeeping
(``<memories_dir>/store/shared.json``: what the copy was last brought to, per scope, rollout
and note), read, parsed once per change and saved. What one room calls of another is declared
here, abstract.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import json
import logging
import os
import secrets
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from .. import bounded
from ..datapolicy import exc_text
from ..stores.files import SHARED_COPY_FILE
from ..stores.records import Entry, RolloutProgress
from ..stores.shared import Fence, SharedStore
from .host import CopyHost, StoreSearch

if TYPE_CHECKING:
    from ..search.index import SearchHit

logger = logging.getLogger("sandbox_memory")

STATE_FILE = SHARED_COPY_FILE
"""Under ``<memories_dir>/store/``: what the copy was last brought to (versions, hashes)."""

REGISTRY_FILE = "store/registry.json"


def _h(data: bytes | str) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:20]


def _entry_hash(entry: Entry) -> str:
    return _h(entry.model_dump_json())


def _lines_with_ends(data: bytes) -> list[bytes]:
    """Complete lines (each with its ``\\n``); a torn last line is left out."""

    out: list[bytes] = []
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return out
        out.append(data[start : end + 1])
        start = end + 1


def _segment_id(line: bytes) -> str | None:
    try:
        value = bounded.loads(line, limit=bounded.MAX_LINE_BYTES, what="a session line")
    except ValueError:
        return None
    sid = value.get("segment_id") if isinstance(value, dict) else None
    return str(sid) if sid else None


class CopyBase(abc.ABC):
    """The bookkeeping and the attributes the rooms of :class:`~.SharedCopy` share.

    Each room (:mod:`.session`, :mod:`.segments`, :mod:`.changes`, :mod:`.push`,
    :mod:`.fetch`, :mod:`.search`) is a subclass; :class:`~.SharedCopy` inherits them all.
    What one room calls of another is declared here.
    """

    def __init__(
        self, runtime: CopyHost, store: SharedStore, search: StoreSearch | None = None
    ) -> None:
        self.rt = runtime
        self.store = store
        self.mdir = runtime.layout.memories_dir
        self.state_path = runtime.state.local.path(STATE_FILE)
        self.offline = False
        """The store did not answer last time; logged once per outage."""
        self._keyed = False
        """Whether the namespace's segment key is in use (see :meth:`use_store_key`)."""
        self._session_lock = asyncio.Lock()
        self._base_kept: tuple[bytes, dict[str, Any] | None] | None = None
        """The bookkeeping's bytes as last checked or saved here, and their parse as read-only
        callers share it: a close reads the file about a dozen times, and at 10,000
        conversations checking its nesting cost as much as parsing it."""
        self.holder = f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(4)}"
        """Who this copy is in the store's claims."""
        runtime.working_copy.note_changes()  # records are noted before they change
        self.store_search = search
        """The namespace's search index in the store, when the store holds one
        (``search/postgres.py``): searches go there, and this copy's index notes what
        it writes so that its closes send it."""
        if search is not None:
            runtime.search_index.shared_out = True
            runtime.search_index.remote = self

    def _went_away(self, exc: BaseException, doing: str) -> None:
        if not self.offline:
            logger.warning(
                "memory store unreachable while %s (%s); working from the workspace copy, "
                "runs are kept there and sent when the store is back",
                doing,
                exc_text(exc),
            )
        self.offline = True

    def _came_back(self) -> None:
        if self.offline:
            logger.warning("memory store %s is reachable again; catching up", self.store.dsn)
        self.offline = False

    async def _base(self, *, to_change: bool = True) -> dict[str, Any]:
        """The copy's bookkeeping. ``to_change=False``: the caller only reads it, and may get the
        object other readers got; otherwise a fresh one, the caller's to change and save."""

        raw = await self.rt.ws.read_bytes(self.state_path)
        kept = self._base_kept
        if kept is None or raw is None or kept[0] != raw:
            data = self._parse_base(raw, checked=False)
            self._base_kept = None if raw is None else (raw, None if to_change else data)
            return data
        if to_change:
            return self._parse_base(raw, checked=True)
        if kept[1] is None:
            self._base_kept = (raw, self._parse_base(raw, checked=True))
        shared = self._base_kept
        assert shared is not None and shared[1] is not None
        return shared[1]

    def _parse_base(self, raw: bytes | None, *, checked: bool) -> dict[str, Any]:
        """``raw`` parsed; ``checked``: these very bytes passed :func:`bounded.loads` here before,
        so a plain parse will do."""

        try:
            if not raw:
                data = {}
            elif checked:
                data = json.loads(raw)
            else:
                data = bounded.loads(raw, limit=bounded.MAX_STATE_BYTES, what=self.state_path)
        except ValueError:
            data = {}
        if not isinstance(data, dict) or data.get("namespace") != self.store.namespace:
            # A copy of another namespace (or none yet): everything comes from the store.
            data = {"namespace": self.store.namespace}
        for key in ("scopes", "rollouts", "files"):
            data.setdefault(key, {})
        data.pop("hashes", None)  # kept by copies before the notes of changed records
        data.pop("threads", None)
        data.setdefault("log_seq", 0)
        data.setdefault("log_lines", 0)
        data.setdefault("xid", 0)
        return data

    async def _save_base(self, base: dict[str, Any]) -> None:
        raw = json.dumps(base).encode("utf-8")
        self._base_kept = None
        await self.rt.ws.write_atomic(self.state_path, raw)
        if len(raw) <= bounded.MAX_STATE_BYTES:
            # Written here from a value: nested as the code builds it, within the size bound.
            self._base_kept = (raw, None)

    # ------------------------------------------------------------ what rooms call of others

    @abc.abstractmethod
    async def use_store_key(self) -> None:
        """Seal and verify with the namespace's key (:mod:`.segments`)."""

    @abc.abstractmethod
    async def push_segments(self) -> int:
        """Send the recorded segments the store may not have (:mod:`.segments`)."""

    @abc.abstractmethod
    async def has_unsent_changes(self) -> bool:
        """Whether the copy changed anything the store has not taken (:mod:`.changes`)."""

    @abc.abstractmethod
    async def _local_records(self, base: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
        """Records that may have changed since the copy was brought up to date
        (:mod:`.changes`)."""

    @abc.abstractmethod
    async def _changed_progress(
        self, base: dict[str, Any], rollouts: Collection[str]
    ) -> dict[str, RolloutProgress]:
        """Progress the copy changed since it was brought up to date (:mod:`.changes`)."""

    @abc.abstractmethod
    async def recorded_here(self) -> list[str]:
        """Pending rollouts with runs recorded in this copy (:mod:`.changes`)."""

    @abc.abstractmethod
    async def push_state(self, fence: Fence) -> None:
        """Send what the copy changed (:mod:`.push`)."""

    @abc.abstractmethod
    async def pull(self) -> bool:
        """Bring the copy up to date from the store (:mod:`.fetch`)."""

    @abc.abstractmethod
    async def send_search(self, fence: Fence) -> None:
        """Send the search index's changes to the store's (:mod:`.search`)."""

    @abc.abstractmethod
    async def _whole_index_for_store(self) -> None:
        """Make this copy's index whole when the store holds none (:mod:`.search`)."""

    @abc.abstractmethod
    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit] | None:
        """The run start's lookup on the store's search index (:mod:`.search`): what makes
        the copy the search index's ``remote`` (set in ``__init__``)."""
