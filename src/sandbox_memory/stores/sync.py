"""The workspace as a working copy of a shared store.

With ``Memory(store=...)`` the store holds the truth and ``memories/`` (and ``sessions/``) in
the workspace is a copy, so the agent's shell, grep, the memory prompt and snapshots work as
without a store. :class:`SharedCopy` keeps the two in step:

- **run start** (:meth:`SharedCopy.refresh`): runs recorded while the store was away are
  sent, then ``memories/`` is brought up to date from the store and re-rendered. A copy with
  changes the store has not taken yet (a close made while the store was away) is not
  overwritten: it is sent at the next close first.
- **record** (:meth:`SharedCopy.after_record`): each run segment goes to the store as soon as
  it is in the workspace file; when the store is away the run stays in the file and is sent
  later (idempotent by segment id, so never twice).
- **close and commands** (:meth:`SharedCopy.session`): under the namespace's lease (a fencing
  token goes with every write): send runs, send what the copy changed, bring the copy up to
  date, do the work locally (phase 1, phase 2, a command), send its changes, update the copy.

What the copy changed is found by comparing it with the state it was last brought to
(``<memories_dir>/store/shared.json``): per entry, the version it had in the store. Each
changed entry is written on condition that it is still at that version; an entry another
sandbox changed meanwhile is a :class:`~sandbox_memory.errors.MemoryConflict`, logged and left
as the store has it. Progress goes back as a watermark (segments extracted, in the store's
order) that never moves backwards; a segment the copy has not extracted is never counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

from .. import bounded
from ..datapolicy import exc_text
from ..errors import MemoryConflict, MemoryLockTimeout, MemoryStoreUnavailable
from ..integrity import SegmentSeal, host_keys
from ..record.segments import rollout_path
from .files import SHARED_COPY_FILE
from .records import (
    ConversationMemory,
    Entry,
    LayoutMemory,
    LogRecord,
    RolloutProgress,
)
from .shared import (
    LAYOUT_SCOPE,
    SETTINGS_NOTE,
    Fence,
    RolloutState,
    ScopeState,
    SharedStore,
    conversation_scope,
)

if TYPE_CHECKING:
    from ..config import MemoryGenerateConfig, MemoryLayoutConfig
    from ..record.segments import LineCheck
    from ..search.index import SearchHit, SearchIndex
    from ..workspace import Workspace
    from .files import Store

logger = logging.getLogger("sandbox_memory")


class _SealedState(Protocol):
    seal: SegmentSeal

    def line_check(self, rollout_id: str) -> LineCheck: ...


class StoreSearch(Protocol):
    """A shared store's own search index of its namespace (``stores/postgres_search.py``'s
    :class:`~sandbox_memory.stores.postgres_search.PostgresSearch` is one): what the working
    copy sends its index's changes to, and searches instead of the copy's once whole."""

    async def ready(self) -> bool: ...

    async def send(self, index: SearchIndex, fence: Fence | None) -> tuple[int, int]: ...

    async def search(
        self, query: str, *, conversation: str | None, limit: int, person: str | None
    ) -> list[SearchHit]: ...

    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit]: ...


class CopyHost(Protocol):
    """What the working copy needs of the layout's runtime (``runtime.LayoutRuntime`` is one):
    its workspace and store, its settings, and the steps a send or a fetch runs."""

    @property
    def ws(self) -> Workspace: ...

    @property
    def store(self) -> Store: ...

    @property
    def layout(self) -> MemoryLayoutConfig: ...

    @property
    def generate(self) -> MemoryGenerateConfig: ...

    @property
    def state(self) -> _SealedState: ...

    @property
    def search_index(self) -> SearchIndex: ...

    def bump(self) -> None: ...

    def session_file_lock(self, rollout_id: str) -> asyncio.Lock: ...

    async def pending_rollouts(self) -> list[str]: ...

    async def sync_search(self) -> bool: ...

    async def consolidate_conversation(self, rollout_id: str) -> bool: ...

    async def render_current(self) -> None: ...

    async def memory_md_edited(self) -> str | None: ...

    async def take_live_edits(self) -> None: ...


STATE_FILE = SHARED_COPY_FILE
"""Under ``<memories_dir>/store/``: what the copy was last brought to (versions, hashes)."""

NOTE_DIRS = ("raw_memories", "rollout_summaries")
"""Phase-1 notes under ``memories/`` that phase 2 of any machine reads: kept in the store."""

REGISTRY_FILE = "store/registry.json"

STORE_NOTES = (REGISTRY_FILE, SETTINGS_NOTE)
"""State files under ``memories/`` kept in the store as notes: the registry phase 2 derives and
the switch defaults of the ``Memory`` configuration that last consolidated."""

CLAIM = "extract:"
"""Prefix of a conversation's extraction claim in the store's lease table."""

REFRESH_LEASE_WAIT_SECONDS = 2.0
"""How long a run start waits for the lease to send its copy's changes: a run never waits long
for memory; past it, the run starts from the copy and the changes go at the close."""

PUSH_BATCH = 512
"""Recorded segments a copy sends in one transaction (whole rollouts: a batch may run over)."""

PULL_BATCH = 256
"""Rollouts (and conversations) a fetch from the store takes at a time: one statement for their
new segments, one wait for the disk for each kind of file they write."""


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


def _note_rollout(rel: str) -> str:
    """The rollout a note belongs to: ``raw_memories/<id>.md``,
    ``rollout_summaries/<id>_<slug>.md`` (a slug has no ``_``)."""

    folder, _, name = rel.partition("/")
    stem = name[: -len(".md")] if name.endswith(".md") else name
    return stem[: stem.rfind("_")] if folder == "rollout_summaries" and "_" in stem else stem


def _segment_id(line: bytes) -> str | None:
    try:
        value = bounded.loads(line, limit=bounded.MAX_LINE_BYTES, what="a session line")
    except ValueError:
        return None
    sid = value.get("segment_id") if isinstance(value, dict) else None
    return str(sid) if sid else None


class SharedCopy:
    """Keeps one layout's workspace copy in step with a shared store (:class:`SharedStore`)."""

    def __init__(
        self, runtime: CopyHost, store: SharedStore, search: StoreSearch | None = None
    ) -> None:
        self.rt = runtime
        self.store = store
        self.mdir = runtime.layout.memories_dir
        self.state_path = f"{runtime.store.dir}/{STATE_FILE}"
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
        runtime.store.shared_copy = True  # records are noted before they change
        self.store_search = search
        """The namespace's search index in the store, when the store holds one
        (``stores/postgres_search.py``): searches go there, and this copy's index notes what
        it writes so that its closes send it."""
        if search is not None:
            runtime.search_index.shared_out = True
            runtime.search_index.remote = self

    # ------------------------------------------------------------ outage

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

    # ------------------------------------------------------------ copy state

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

    async def _local_records(self, base: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
        """Conversations, rollouts (progress) and fingerprints whose records may have changed
        since the copy was last brought up to date: those noted before they changed
        (:meth:`Store.touched`), or every one when there are no notes (a copy written before
        notes were kept, or never brought up to date)."""

        st = self.rt.store
        touched = await st.touched() if base.get("noted") else None
        folders = {
            "conversations": f"{st.dir}/conversations/",
            "progress": f"{st.dir}/progress/",
            "forgotten": f"{st.dir}/forgotten/",
            "threads": f"{st.dir}/threads/",
        }
        if touched is None:
            touched = [
                prefix + n
                for prefix in folders.values()
                for n in await self.rt.ws.listdir(prefix.rstrip("/"))
                if not n.startswith(".")
            ]
        convs: list[str] = []
        rollouts: list[str] = []
        threads: list[str] = []
        for path in touched:
            folder, _, name = path[len(st.dir) + 1 :].partition("/")
            if folder == "threads":
                threads.append(name)
            elif name.endswith(".json"):
                (convs if folder == "conversations" else rollouts).append(name[: -len(".json")])
        return list(dict.fromkeys(convs)), list(dict.fromkeys(rollouts)), threads

    async def has_unsent_changes(self) -> bool:
        base = await self._base(to_change=False)
        st = self.rt.store
        if LAYOUT_SCOPE in base["scopes"] and (await st.layout_head()).stamp != base.get(
            "layout_stamp"
        ):
            return True
        convs, rollouts, _ = await self._local_records(base)
        for rid in convs:
            if await self._conversation_changed(base, rid):
                return True
        if await self._changed_progress(base, rollouts):
            return True
        registry = await self.rt.ws.read_bytes(f"{self.mdir}/{REGISTRY_FILE}")
        if registry is not None and _h(registry) != base["files"].get(REGISTRY_FILE):
            return True
        return await self.rt.memory_md_edited() is not None

    async def _conversation_changed(self, base: dict[str, Any], rid: str) -> bool:
        conv = await self.rt.store.load_conversation(rid)
        b = base["scopes"].get(conversation_scope(rid))
        if b is None:
            return True
        known: dict[str, list[Any]] = b["entries"]
        if sorted(known) != sorted(conv.entries):
            return True
        if any(known[k][1] != _entry_hash(e) for k, e in conv.entries.items()):
            return True
        return bool(_h(json.dumps([conv.head, conv.overrides.model_dump()])) != b.get("meta"))

    # ------------------------------------------------------------ entry points

    async def refresh(self) -> bool:
        """Run start: send runs recorded meanwhile, bring ``memories/`` up to date.

        Returns whether the copy changed. Never raises for an unreachable store.
        """

        try:
            await self.push_segments()
            if await self.has_unsent_changes():
                # Changes of this copy (an extraction after the last run, a live edit): send
                # them under the lease, if it comes soon, then take in the store's state.
                try:
                    async with self.session(timeout=REFRESH_LEASE_WAIT_SECONDS) as fence:
                        pass
                except MemoryLockTimeout:
                    fence = None
                if fence is None:
                    logger.info(
                        "memory copy has changes the store has not taken yet; they are sent "
                        "at the next close, and this run starts from the copy"
                    )
                    return False
                self.rt.bump()
                return True
            changed = await self.pull()
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "bringing memory up to date at run start")
            return False
        self._came_back()
        return changed

    async def use_store_key(self) -> None:
        """Seal and verify with the namespace's key (:meth:`PostgresStore.segment_key`), so
        every machine sharing the store verifies the runs the others recorded; this host's
        own key still verifies what was recorded before the store was first reached."""

        if self._keyed:
            return
        key = await self.store.segment_key()
        self.rt.state.seal = SegmentSeal([key, *host_keys()])
        self._keyed = True

    async def after_record(self, rollout_id: str, segment: dict[str, Any], line: bytes) -> None:
        """Send one recorded segment; an unreachable store leaves it in the file for later."""

        sid = segment.get("segment_id")
        if not sid:
            return
        try:
            if self.offline:
                await self.push_segments()  # a catch-up sends this one too
            else:
                await self.store.append_segment(rollout_id, str(sid), line.decode("utf-8"))
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, f"recording a run of {rollout_id}")
            return
        self._came_back()

    @contextlib.asynccontextmanager
    async def session(self, *, timeout: float | None = None) -> AsyncIterator[Fence | None]:
        """Under the lease: catch up both ways, let the caller work locally, send its changes.

        ``timeout``: how long to wait for the lease (default ``generate.lock_timeout_seconds``;
        then :class:`~sandbox_memory.errors.MemoryLockTimeout`).

        Yields the fence, or ``None`` when the store is unreachable (the caller works on the
        copy alone; its changes are sent at the next session).
        """

        async with self._session_lock:
            try:
                fence = await self.store.acquire(
                    timeout=self.rt.generate.lock_timeout_seconds if timeout is None else timeout
                )
            except MemoryStoreUnavailable as exc:
                self._went_away(exc, "taking the layout lease")
                yield None
                return
            renewer = asyncio.create_task(self._renew(fence))
            try:
                try:
                    await self.push_segments()
                    await self.rt.take_live_edits()
                    await self.push_state(fence)
                    await self.pull()
                except MemoryStoreUnavailable as exc:
                    self._went_away(exc, "catching up before a close")
                    yield None
                    return
                self._came_back()
                yield fence
                try:
                    await self.push_segments()
                    await self.push_state(fence)
                    await self.pull()
                except MemoryStoreUnavailable as exc:
                    self._went_away(exc, "sending a close's changes")
                else:
                    await self.send_search(fence)
            finally:
                renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await renewer
                with contextlib.suppress(Exception):
                    await self.store.release(fence)

    async def send_search(self, fence: Fence) -> None:
        """Under the lease, after the copy is sent and brought up to date: send what its
        search index wrote or dropped to the store's search index
        (:meth:`StoreSearch.send`). Derived data: a failure
        is logged and never fails the close; the notes stay for the next one."""

        if self.store_search is None:
            return
        # What the close's (or command's) own syncs of the index noted: the index is not
        # synced again here (a copy whose index was never built would build it whole).
        try:
            await self.store_search.send(self.rt.search_index, fence)
        except (MemoryStoreUnavailable, MemoryConflict) as exc:
            logger.warning(
                "memory search index could not be sent to %s (%s); the next close sends it",
                self.store.describe(),
                exc_text(exc),
            )

    async def _whole_index_for_store(self) -> None:
        """A close on a namespace whose store holds no whole search index yet (made before
        it had one, or no close has sent one): bring this copy's index wholly up to date, so
        the close sends all of it (its first sending is compared with the store's whole)."""

        if self.store_search is None:
            return
        try:
            if await self.store_search.ready():
                return
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "reading the store's search index")
            return
        await self.rt.sync_search()

    async def search(
        self, query: str, *, conversation: str | None, limit: int, person: str | None
    ) -> list[SearchHit] | None:
        """Hits from the store's search index; ``None`` when the store holds none yet (no
        close sent a whole index) or cannot be reached, or when an embedder is configured
        (the store's index ranks by BM25 alone): the caller searches the copy's."""

        if self.store_search is None or self.rt.search_index.embedder is not None:
            return None
        try:
            if not await self.store_search.ready():
                return None
            hits = await self.store_search.search(
                query, conversation=conversation, limit=limit, person=person
            )
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "searching")
            return None
        self._came_back()
        return hits

    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit] | None:
        """The lookup at run start (section "relevant to this task") on the store's search
        index; ``None`` as for :meth:`search`."""

        if self.store_search is None:
            return None
        try:
            if not await self.store_search.ready():
                return None
            hits = await self.store_search.curated(
                phrases, words, person=person, limit=limit, max_terms=max_terms
            )
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "looking up the run's input")
            return None
        self._came_back()
        return hits

    async def _renew(self, fence: Fence) -> None:
        while True:
            await asyncio.sleep(self.store.lease_seconds / 3)
            try:
                await self.store.renew(fence)
            except MemoryConflict:
                logger.warning(
                    "memory lease of namespace %s was lost; this close's writes are refused",
                    self.store.namespace,
                )
                return
            except MemoryStoreUnavailable as exc:
                logger.warning("could not renew the memory lease: %s", exc_text(exc))

    async def close(
        self, local_close: Callable[[Collection[str]], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """A close: phase 1 of the runs recorded here first, without the lease, then the rest
        under it (``local_close(skip)``: phase 1 of what is still pending but ``skip``, then
        phase 2).

        Extracting a conversation touches that conversation alone and its results go to the
        store with conditional writes, so it needs no lease: closes of several sandboxes
        extract at the same time, and each holds the lease only to send, fetch and
        consolidate. So that two closes do not extract one run twice, each claims the
        conversations it extracts (``extract:<rollout-id>`` in the lease table, renewed while
        held, lapsing with a dead holder), and a close under the lease leaves out those
        another close claimed: that one sends them at its turn.
        """

        unjudged: list[str] = []
        try:
            # Before any run of the copy is read: its lines were sealed with the namespace's
            # key, and a new process verifies with this host's alone until keyed.
            await self.use_store_key()
        except MemoryStoreUnavailable as exc:
            self._went_away(exc, "reading the namespace's segment key")
            if await self.rt.ws.size(self.state_path) is not None:
                # The copy reached the store before, so its runs may be sealed with the key
                # this process lacks: one would read as forged and be passed over for good.
                # Left pending for a close that holds the key.
                unjudged = await self.rt.pending_rollouts()
                if unjudged:
                    logger.info(
                        "memory close leaves %d rollout(s) for a close that reaches the store "
                        "(their lines are sealed with its key): %s",
                        len(unjudged),
                        ", ".join(unjudged),
                    )
        own = [r for r in await self.recorded_here() if r not in unjudged]
        taken: list[str] = []
        keeper: asyncio.Task[None] | None = None
        try:
            if own:
                try:
                    taken = await self.store.claim([CLAIM + r for r in own], holder=self.holder)
                    keeper = asyncio.create_task(self._keep_claims(taken))
                except MemoryStoreUnavailable as exc:
                    self._went_away(exc, "claiming conversations to extract")
                    taken = []
                    mine = own  # the copy is all there is: extract them here
                else:
                    mine = [r for r in own if CLAIM + r in taken]
                sem = asyncio.Semaphore(self.rt.generate.phase_one_concurrency)

                async def one(rid: str) -> None:
                    async with sem:
                        await self.rt.consolidate_conversation(rid)

                await asyncio.gather(*(one(r) for r in mine))
            async with self.session() as fence:
                skip: list[str] = list(unjudged)
                if fence is not None:
                    try:
                        # What was extracted under the claims is in the store now.
                        await self.store.unclaim(taken, holder=self.holder)
                        taken = []
                        skip += [
                            n[len(CLAIM) :]
                            for n in await self.store.claimed_by_others(CLAIM, holder=self.holder)
                        ]
                    except MemoryStoreUnavailable as exc:
                        self._went_away(exc, "reading which conversations others extract")
                report = await local_close(skip)
                if fence is not None:
                    await self._whole_index_for_store()
                return report
        finally:
            if keeper is not None:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await keeper
            if taken:
                with contextlib.suppress(Exception):
                    await self.store.unclaim(taken, holder=self.holder)

    async def _keep_claims(self, names: list[str]) -> None:
        while True:
            await asyncio.sleep(self.store.lease_seconds / 3)
            try:
                await self.store.claim(names, holder=self.holder)
            except MemoryStoreUnavailable as exc:
                logger.warning("could not renew the memory claims: %s", exc_text(exc))

    async def recorded_here(self) -> list[str]:
        """Pending rollouts holding runs recorded in this copy since it last took in the
        store's: the ones whose extraction is this sandbox's to do."""

        base = await self._base(to_change=False)
        sizes = await self.rt.ws.sizes(self.rt.layout.sessions_dir)
        pending = set(await self.rt.pending_rollouts())
        out: list[str] = []
        for name, size in sorted(sizes.items()):
            rid = name[: -len(".jsonl")] if name.endswith(".jsonl") else None
            if rid is None or name.startswith(".") or rid not in pending:
                continue
            if size > int(base["rollouts"].get(rid, {}).get("offset", 0)):
                out.append(rid)
        return out

    # ------------------------------------------------------------ segments

    async def push_segments(self) -> int:
        """Send every recorded segment of the copy the store may not have; how many were sent.

        Only lines memory recorded (a valid seal) are sent: a line the agent wrote stays in
        its sandbox's file, skipped there, and never reaches another machine.
        """

        await self.use_store_key()
        base = await self._base(to_change=False)
        sdir = self.rt.layout.sessions_dir
        batch: list[tuple[str, str, str]] = []
        sent = 0
        for name, size in sorted((await self.rt.ws.sizes(sdir)).items()):
            if not name.endswith(".jsonl") or name.startswith("."):
                continue
            rid = name[: -len(".jsonl")]
            known = base["rollouts"].get(rid, {})
            offset = int(known.get("offset", 0))
            path = rollout_path(sdir, rid)
            if size <= offset:
                continue
            data = await self.rt.ws.read_range(path, offset, size - offset) or b""
            check = self.rt.state.line_check(rid)
            for line in _lines_with_ends(data):
                if not check.seal.verify(line.rstrip(b"\n"), rid):
                    continue
                sid = _segment_id(line)
                if sid is not None:
                    batch.append((rid, sid, line.decode("utf-8")))
            if len(batch) >= PUSH_BATCH:
                # In the rollouts' name order, each one's in its file's: see append_segments.
                sent += len(await self.store.append_segments(batch))
                batch = []
        if batch:
            sent += len(await self.store.append_segments(batch))
        return sent

    # ------------------------------------------------------------ copy -> store

    async def push_state(self, fence: Fence) -> None:
        """Send what the copy changed since it was last brought up to date."""

        base = await self._base()
        st = self.rt.store
        new_logs = (await st.read_log())[int(base["log_lines"]) :]
        head = await st.layout_head()
        layout_refused = any(p.startswith(f"{st.layout_dir}/") for p in st.refused)
        if not layout_refused and (
            LAYOUT_SCOPE not in base["scopes"] or head.stamp != base.get("layout_stamp")
        ):
            # A shard refused for want of a seal reads as empty: its absence is not sent as
            # deletions (sent once the copy's layout is rebuilt and committed again).
            await self._push_layout(base, head.stamp, head.version, new_logs, fence)
        convs, rollouts, threads = await self._local_records(base)
        for rid in convs:
            conv = await st.load_conversation(rid)
            if st.conversation_path(rid) in st.refused:
                continue  # not memory's record: nothing of it is sent
            await self._push_scope(
                base,
                conversation_scope(conv.rollout_id),
                conv.entries,
                conv.version,
                conv.head,
                conv.overrides,
                new_logs,
                fence,
            )
        changed = await self._changed_progress(base, rollouts)
        await self._push_files(base, fence, changed)
        await self._push_progress(changed, fence)
        fresh: dict[str, str] = {}
        for fp in threads:
            found = await st.thread_for(fp)
            if found is not None:
                fresh[fp] = found
        await self.store.map_threads(fresh)  # one already stored stays as it is

    async def _push_layout(
        self, base: dict[str, Any], stamp: str, version: int, logs: list[LogRecord], fence: Fence
    ) -> None:
        """Send the layout entries the copy changed since it was last brought up to date.

        The copy's layout commits since then name the keys they changed (its head lists the
        latest ones, whichever process made them): only those are read and compared. When
        they are not known (more commits since than the head names, a rebuild), every entry
        is compared instead.
        """

        st = self.rt.store
        keys = None
        if LAYOUT_SCOPE in base["scopes"] and base.get("layout_stamp"):
            now, keys = await st.layout_changes(str(base["layout_stamp"]))
            if now != stamp:
                keys = None  # committed to meanwhile: compare all
        if keys is None:
            entries: dict[str, Entry] = (await st.load_layout()).entries
            await self._push_scope(base, LAYOUT_SCOPE, entries, version, None, None, logs, fence)
            return
        found = await st.layout_entries(keys)
        await self._push_scope(
            base, LAYOUT_SCOPE, found, version, None, None, logs, fence, only=keys
        )

    async def _push_scope(
        self,
        base: dict[str, Any],
        scope: str,
        entries: dict[str, Entry],
        version: int,
        head: str | None,
        overrides: Any,
        logs: list[LogRecord],
        fence: Fence,
        *,
        only: Collection[str] | None = None,
    ) -> None:
        """``entries``: the scope's entries as the copy holds them, or, with ``only``, those
        of the keys ``only`` names (the keys that may have changed; the rest did not)."""

        b = base["scopes"].get(scope) or {"version": 0, "entries": {}, "meta": None}
        known: dict[str, list[Any]] = b["entries"]
        changed = {
            k: e for k, e in entries.items() if known.get(k, [None, None])[1] != _entry_hash(e)
        }
        candidates = known if only is None else [k for k in only if k in known]
        removed = [k for k in candidates if k not in entries]
        meta = _h(json.dumps([head, overrides.model_dump() if overrides else None]))
        meta_changed = overrides is not None and meta != b.get("meta")
        # A change is logged before it is saved: a record past the scope's saved version is of
        # a change a killed close never saved (it is redone and logged again), not sent.
        scope_logs = [r for r in logs if r.scope == scope and r.version <= version]
        known_scope = scope in base["scopes"]
        if not changed and not removed and not meta_changed and not scope_logs and known_scope:
            return
        expected = {k: (known[k][0] if k in known else None) for k in [*changed, *removed]}
        bump = version - int(b["version"])
        if changed or removed or meta_changed or scope_logs:
            bump = max(1, bump)  # a change always moves the version other copies compare
        for attempt in (1, 2):
            try:
                await self.store.write_scope(
                    scope,
                    entries=changed,
                    remove=removed,
                    expected_entries=expected,
                    head=head,
                    overrides=overrides if meta_changed else None,
                    log=scope_logs,
                    fence=fence,
                    bump=bump,
                )
                return
            except MemoryConflict as exc:
                if attempt == 2 or type(exc) is not MemoryConflict:
                    raise
                now: ScopeState = await self.store.read_scope(scope)
                stale = sorted(k for k, v in expected.items() if now.entry_versions.get(k) != v)
                logger.warning(
                    "memory change of %s rejected for %s: changed in the store since this copy "
                    "read it (another sandbox); the store's version is kept",
                    scope,
                    ", ".join(stale),
                )
                for k in stale:
                    changed.pop(k, None)
                    expected.pop(k, None)
                removed = [k for k in removed if k not in stale]

    async def _note_paths(self) -> list[str]:
        out = list(STORE_NOTES)
        for d in NOTE_DIRS:
            out += [
                f"{d}/{n}"
                for n in await self.rt.ws.listdir(f"{self.mdir}/{d}")
                if not n.startswith(".")
            ]
        return out

    async def _push_files(
        self, base: dict[str, Any], fence: Fence, extracted: Collection[str]
    ) -> None:
        """Send the notes changed since the copy was last brought up to date.

        A rollout's notes are written only by its extraction, which then moves its progress:
        only the notes of ``extracted`` rollouts (progress changed), new notes and the store
        notes are read; a removed note is seen by its name missing.
        """

        known: dict[str, str] = base["files"]
        send: dict[str, bytes | None] = {}
        present = set()
        for rel in await self._note_paths():
            if rel in known and rel not in STORE_NOTES and _note_rollout(rel) not in extracted:
                present.add(rel)
                continue
            data = await self.rt.ws.read_bytes(f"{self.mdir}/{rel}")
            if data is None:
                continue
            present.add(rel)
            if known.get(rel) != _h(data):
                send[rel] = data
        for rel in known:
            if rel not in present:
                send[rel] = None
        await self.store.put_files(send, fence=fence)

    async def _changed_progress(
        self, base: dict[str, Any], rollouts: Collection[str]
    ) -> dict[str, RolloutProgress]:
        """Progress of ``rollouts`` (forgotten ones too) the copy changed since it was last
        brought up to date."""

        out: dict[str, RolloutProgress] = {}
        for rid in rollouts:
            prog = await self.rt.store.get_progress(rid)
            if prog is None:
                continue
            if base["rollouts"].get(rid, {}).get("progress") != _h(prog.model_dump_json()):
                out[rid] = prog
        return out

    async def _push_progress(self, changed: dict[str, RolloutProgress], fence: Fence) -> None:
        for rid, prog in changed.items():
            data = await self.rt.ws.read_range(
                rollout_path(self.rt.layout.sessions_dir, rid), 0, prog.offset
            )
            extracted = {_segment_id(line) for line in _lines_with_ends(data or b"")}
            ids = await self.store.segment_ids(rid)
            watermark = 0
            while watermark < len(ids) and ids[watermark] in extracted:
                watermark += 1
            await self.store.advance(
                rid,
                watermark=watermark,
                progress=prog.model_dump(exclude={"offset"}),
                fence=fence,
            )

    # ------------------------------------------------------------ store -> copy

    async def pull(self) -> bool:
        """Bring the copy up to date from the store and re-render; whether anything changed."""

        base = await self._base()
        st = self.rt.store
        changed = False
        # What changed since the copy last looked: rows written from its horizon on.
        horizon = await self.store.horizon()
        versions, rollouts, threads = await self.store.changed_since(int(base["xid"]))
        since = {
            scope: int(base["scopes"][scope]["version"]) if scope in base["scopes"] else 0
            for scope, v in versions.items()
            if base["scopes"].get(scope, {}).get("version") != v
        }
        conversations: list[ConversationMemory] = []
        for scope, state in (await self.store.read_changes(since)).items():
            b = base["scopes"].get(scope) if state.since else None
            known: dict[str, list[Any]] = dict(b["entries"]) if b else {}
            for k, e in state.entries.items():
                known[k] = [state.entry_versions[k], _entry_hash(e)]
            for k in state.removed:
                known.pop(k, None)
            if scope == LAYOUT_SCOPE:
                if state.since:
                    # Only what changed after the copy's version: one commit of those entries.
                    await st.commit_layout(
                        version=state.version, put=state.entries, delete=state.removed
                    )
                else:
                    await st.save_layout(LayoutMemory(version=state.version, entries=state.entries))
            elif scope.startswith("conversation:"):
                rid = scope.split(":", 1)[1]
                entries = state.entries
                if state.since:
                    conv_entries = dict((await st.load_conversation(rid)).entries)
                    conv_entries.update(entries)
                    for k in state.removed:
                        conv_entries.pop(k, None)
                    entries = conv_entries
                conversations.append(
                    ConversationMemory(
                        rollout_id=rid,
                        version=state.version,
                        head=state.head,
                        entries=entries,
                        overrides=state.overrides,
                    )
                )
                if len(conversations) == PULL_BATCH:
                    await st.save_conversations(conversations)
                    conversations = []
            base["scopes"][scope] = {
                "version": state.version,
                "entries": known,
                "meta": _h(json.dumps([state.head, state.overrides.model_dump()])),
            }
            self.rt.search_index.mark_scope(scope)
            changed = True
        await st.save_conversations(conversations)

        local_lines = len(await st.read_log())
        log_replaced = False
        if local_lines == base["log_lines"]:
            # The copy's log is what it last fetched: append only what came since.
            fresh = await self.store.read_log(after=int(base["log_seq"]))
            if fresh:
                for _, record in fresh:
                    await st.append_log(record)
                base["log_seq"], base["log_lines"] = fresh[-1][0], local_lines + len(fresh)
        else:
            # The copy logged changes of its own (now sent): the store's log replaces it.
            log = await self.store.read_log()
            await st.replace_log(r for _, r in log)
            base["log_seq"], base["log_lines"] = (log[-1][0] if log else 0), len(log)
            log_replaced = True

        notes, newest = await self.store.files(after=int(base.get("files_rev", 0)))
        for rel, data in notes.items():
            if data is None:
                if base["files"].pop(rel, None) is not None:
                    await self.rt.ws.remove(f"{self.mdir}/{rel}")
                    changed = True
            elif base["files"].get(rel) != _h(data):
                await self.rt.ws.write_atomic(f"{self.mdir}/{rel}", data)
                base["files"][rel] = _h(data)
                changed = True
        base["files_rev"] = newest

        await st.index_threads(threads)

        if await self._pull_rollouts(base, rollouts):
            changed = True
        if changed or await self.rt.ws.size(f"{self.mdir}/MEMORY.md") is None:
            await self.rt.render_current()
        base["xid"] = horizon
        base["noted"] = True  # from here on, records are noted before they change
        # The copy's layout memory is the store's now (its changes were sent first): the
        # commits after this stamp are the ones the next send looks at.
        base["layout_stamp"] = (await st.layout_head()).stamp
        await self._save_base(base)
        # The copy holds the store's records now (its own changes went first): the notes of
        # changed records start afresh (a kill before this leaves notes of records as sent).
        await st.clear_touched()
        if log_replaced:
            # The search index reads the log from where it stopped, and the log it read is
            # gone: take in the scopes marked above now, in this process.
            await self.rt.sync_search()
        if changed:
            self.rt.bump()
        return changed

    async def _pull_rollouts(self, base: dict[str, Any], rollouts: dict[str, RolloutState]) -> bool:
        """Sessions files in the store's order (runs only the copy has after them); progress.

        ``rollouts``: those written since the copy last looked. Taken :data:`PULL_BATCH` at a
        time: one statement reads a batch's new segments and each kind of file of a batch is
        written waiting for the disk once (a new sandbox on a store of 10,000 conversations
        fetches them all)."""

        todo: list[tuple[str, RolloutState]] = []
        for rid, state in rollouts.items():
            known = base["rollouts"].get(rid) or {}
            if (
                state.segments == known.get("n")
                and state.watermark == known.get("wm")
                and _h(json.dumps(state.progress, sort_keys=True)) == known.get("meta")
            ):
                continue
            todo.append((rid, state))
        changed = False
        for first in range(0, len(todo), PULL_BATCH):
            if await self._pull_rollout_batch(base, todo[first : first + PULL_BATCH]):
                changed = True
        return changed

    async def _pull_rollout_batch(
        self, base: dict[str, Any], batch: list[tuple[str, RolloutState]]
    ) -> bool:
        changed = False
        sdir = self.rt.layout.sessions_dir
        st = self.rt.store
        fetched: dict[str, dict[str, Any]] = {}
        async with contextlib.AsyncExitStack() as held:
            # Each lock is otherwise taken alone (an append to one rollout's file), so taking
            # a batch's in turn cannot deadlock.
            for rid, _ in batch:
                await held.enter_async_context(self.rt.session_file_lock(rid))
            datas: dict[str, bytes] = {}
            prefixes: dict[str, bytes] = {}
            knowns: dict[str, dict[str, Any]] = {}
            for rid, _ in batch:
                known = base["rollouts"].get(rid) or {"n": 0, "offset": 0}
                data = await self.rt.ws.read_bytes(rollout_path(sdir, rid)) or b""
                prefix = data[: int(known["offset"])]
                if _lines_with_ends(prefix) and len(_lines_with_ends(prefix)) != known["n"]:
                    prefix = b""  # the copy's file is not what it was: rebuild it whole
                    known = {"n": 0, "offset": 0}
                datas[rid], prefixes[rid], knowns[rid] = data, prefix, known
            news = await self.store.read_segments_many(
                {rid: int(knowns[rid]["n"]) for rid, _ in batch}
            )
            writes: list[tuple[str, bytes]] = []
            for rid, state in batch:
                data, prefix = datas[rid], prefixes[rid]
                new = news.get(rid, [])
                rest = data[len(prefix) :]
                new_lines = [line.encode("utf-8") for _, _, line in new]
                new_ids = [sid for _, sid, _ in new]
                local = _lines_with_ends(rest)
                torn = rest[sum(len(x) for x in local) :]
                local_ids = [_segment_id(x) for x in local]
                if local_ids[: len(new_ids)] != new_ids:
                    # Runs of other sandboxes came between: the store's order, then the runs
                    # only this copy has (not lost, sent at the next catch-up).
                    theirs = set(new_ids)
                    mine = [x for x, sid in zip(local, local_ids, strict=True) if sid not in theirs]
                    data = prefix + b"".join(new_lines) + b"".join(mine) + torn
                    writes.append((rollout_path(sdir, rid), data))
                lines = _lines_with_ends(data)
                fetched[rid] = {
                    "n": state.segments,
                    "offset": len(prefix) + sum(len(x) for x in new_lines),
                    "wm": state.watermark,
                    "meta": _h(json.dumps(state.progress, sort_keys=True)),
                    "wm_offset": sum(len(x) for x in lines[: state.watermark]),
                }
            if writes:
                await self.rt.ws.write_atomic_many(writes)
                changed = True
        live: dict[str, RolloutProgress] = {}
        gone: dict[str, RolloutProgress] = {}
        for rid, state in batch:
            known = fetched[rid]
            wm_offset = known.pop("wm_offset")
            if state.progress or state.watermark:
                prog = RolloutProgress.model_validate({**state.progress, "offset": wm_offset})
                known["progress"] = _h(prog.model_dump_json())
                if await st.get_progress(rid) != prog:
                    (gone if prog.forgotten else live)[rid] = prog
        if live or gone:
            await st.put_progress_many(live)
            await st.forget_progress_many(gone)
            changed = True
        # The rollouts may hold segments past their progress now: the next close looks, and
        # the search index takes in the runs other sandboxes recorded.
        await st.mark_pending_many(rid for rid, _ in batch)
        for rid, _ in batch:
            self.rt.search_index.mark(rid)
            base["rollouts"][rid] = fetched[rid]
        return changed
