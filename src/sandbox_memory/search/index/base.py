"""The core every room of :class:`~.SearchIndex` stands on: the index's settings and state,
and its SQLite file opened, checked, written back and closed.

:class:`IndexBase` holds what the rooms share (the workspace, the store, the embedder and its
settings, the connection, the lock, the marks and caches) and the file's life: opened in place
over a local folder or as a local copy fetched from any other workspace, rebuilt when of
another version (:data:`~.schema.SCHEMA_VERSION`) or unreadable (set aside as ``.broken``),
written back by :meth:`IndexBase.save`. A room that calls another inherits it; the one call
down from here (:meth:`IndexBase._flags_taken_in`, the sync's) is declared abstract.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from ...datapolicy import exc_text
from ...stores.records import Entry
from ...stores.seam import MemoryStore
from ...stores.segments import LineCheck
from ...workspace import LocalWorkspace, Workspace
from ..embedding import Embedder
from .fts_writes import FtsWrites
from .hits import SearchHit
from .schema import _SCHEMA, INDEX_FILE, SCHEMA_VERSION, SYNCHRONOUS, _note_shared_out

logger = logging.getLogger("sandbox_memory")

Fusion = Literal["rrf", "rerank"]


class RemoteIndex(Protocol):
    """A search index held elsewhere for this layout (a shared store's, see
    ``search/postgres.py``) that the lookup at run start asks first."""

    async def curated(
        self,
        phrases: list[str],
        words: list[str],
        *,
        person: str | None,
        limit: int,
        max_terms: int,
    ) -> list[SearchHit] | None:
        """As :meth:`SearchIndex.curated`; ``None``: not available, use this index."""
        ...


class SharedVectors(Protocol):
    """The vectors a shared store keeps for its namespace's search documents (see
    ``search/postgres.py``), by the hash the index keys its own with (the embedder's name and
    the text)."""

    async def fetch_vectors(self, hashes: list[str]) -> dict[str, bytes]:
        """The stored vectors of ``hashes`` (float32 bytes, normalized) that the store holds."""
        ...

    async def put_vectors(self, vectors: list[tuple[str, str, bytes]]) -> int:
        """Keep ``(document, hash, vector)`` for each document the store holds now (the rest
        are skipped); returns how many were kept."""
        ...


class IndexBase(abc.ABC):
    """The search index of one layout, as its rooms share it: settings, state, the file."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        store: MemoryStore,
        memories_dir: str,
        sessions_dir: str,
        line_check: Callable[[str], LineCheck],
        embedder: Embedder | None = None,
        fusion: Fusion = "rrf",
        vector_weight: float = 0.25,
    ) -> None:
        self.ws = workspace
        self.embedder = embedder
        """Ranks by meaning beside BM25 (``None``: lexical only); see :meth:`_vector_ranked`."""
        self.fusion: Fusion = fusion
        """``rrf``: BM25's and the cosine ranking's documents fused; ``rerank``: BM25's top
        :data:`RERANK_POOL` only, reordered by the fusion of both rankings (see :meth:`_fused`)."""
        self.vector_weight = vector_weight
        """The cosine ranking's weight in the fusion (BM25's is 1)."""
        self.embed_failed = False
        """Whether the embedder failed since it last worked (warned once, then quiet)."""
        self.texts_embedded = 0
        """Texts sent to the embedder by this object (a cost figure for tests and bench)."""
        self.shared_vectors: SharedVectors | None = None
        """With a shared store that keeps its namespace's vectors: where vectors another
        sandbox made are fetched from, and this one's are put (see :meth:`_from_shared`)."""
        self.shared_vectors_failed = False
        """Whether the shared store's vectors could not be reached since they last could."""
        self.vectors_fetched = 0
        """Vectors taken from the shared store instead of embedded (a cost figure)."""
        self.line_check = line_check
        """How a rollout's lines are checked (only lines memory recorded are indexed)."""
        self.store = store
        self.memories_dir = memories_dir
        self.sessions_dir = sessions_dir
        self.rel_path = f"{memories_dir}/store/{INDEX_FILE}"
        self._db: sqlite3.Connection | None = None
        self._tmpdir: str | None = None
        self._cleanup: weakref.finalize[Any, Any] | None = None
        self._lock = asyncio.Lock()
        self._dirty: set[str] = set()
        self._dirty_scopes: set[str] = set()
        self._fts = FtsWrites()
        """FTS5 writes of the transaction under way, made in rowid order at its commit."""
        self._scopes_synced: set[str] = set()
        """Entry scopes compared in the sync under way (each once per sync)."""
        self._fetch = True
        self._unsaved = False
        self._flags_unsaved: set[str] = set()
        """Rollouts whose flags this copy took in: cleared once it is written back."""
        self.rows_indexed = 0
        """Documents written since this object was made (a cost figure for tests and bench)."""
        self.known_fallback_logged = False
        """Whether an extraction already warned that it read every entry (the index failed)."""
        self._known_words: dict[str, tuple[frozenset[str], dict[str, list[int]]]] = {}
        """Per set of wanted scopes (as JSON): those scopes, and per word the newest of their
        entries holding it, as :meth:`known_entries` found them (see :meth:`_known_words_of`)."""
        self._common_words: set[str] = set()
        """Words :meth:`known_entries` found held by more than :data:`KNOWN_PER_WORD`
        entries (their count is not taken again while no entry is dropped)."""
        self._known_built: dict[tuple[Any, ...], Entry] = {}
        """The entries :meth:`known_entries` built, by the index row each was built from
        (rowid and every column read): a row read again is not unpacked and validated again."""
        self._known_version: int | None = None
        """SQLite's ``data_version`` when these were last checked
        (:meth:`_check_known_lookups`)."""
        self._entry_scopes_written: set[str] = set()
        """Scopes whose entries this object wrote or dropped since that check."""
        self._entry_dropped = False
        """Whether this object dropped an entry since that check."""
        self.remote: RemoteIndex | None = None
        """A shared store's index, asked first by :meth:`curated` (``None``: this one only)."""
        self.shared_out = False
        """Whether the documents written or dropped are noted (table ``shared_out``) for a
        shared store's search index to take in (``search/postgres.py``)."""

    @property
    def in_place(self) -> bool:
        """Whether the SQLite file is the workspace's own (a local folder)."""

        return isinstance(self.ws, LocalWorkspace)

    async def _open(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        if isinstance(self.ws, LocalWorkspace):
            # SQLite opens the file by name: a link, FIFO or folder the agent put there is
            # set aside first (a link to another database would have the index written there).
            path = self.ws.library_file(self.rel_path)
        else:
            self._tmpdir = tempfile.mkdtemp(prefix="sandbox-memory-search-")
            # The copy goes with this object even if close() is never called.
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._tmpdir, True)
            path = Path(self._tmpdir) / INDEX_FILE
            data = await self.ws.read_bytes(self.rel_path) if self._fetch else None
            if data is not None:
                path.write_bytes(data)
        self._db = self._connect(path)
        if self.shared_out:
            _note_shared_out(self._db)
        return self._db

    def _connect(self, path: Path) -> sqlite3.Connection:
        for attempt in (1, 2):
            db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
            # Derived data: no flush to disk per commit. A process that dies mid-write leaves
            # the rollback journal, which the next open replays; an OS crash at worst leaves an
            # unreadable index, which is set aside and rebuilt.
            db.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
            try:
                row = None
                try:
                    row = db.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()
                except sqlite3.OperationalError:
                    pass
                if row is not None and row[0] != SCHEMA_VERSION:
                    db.close()
                    path.unlink()
                    logger.info("search index %s is of another version; rebuilding", path)
                    continue
                if row is None:
                    db.executescript(
                        f"BEGIN; {_SCHEMA} INSERT OR IGNORE INTO meta(k, v) "
                        f"VALUES ('schema', '{SCHEMA_VERSION}'); COMMIT;"
                    )
                return db
            except sqlite3.DatabaseError as exc:
                db.close()
                if attempt == 2:
                    raise
                self._move_aside(path, exc)
        raise AssertionError("unreachable")

    def _move_aside(self, path: Path, exc: BaseException) -> None:
        """Keep an unreadable index file as ``<name>.broken`` (the next open rebuilds it)."""

        aside = path.with_name(f"{path.name}.broken")
        path.replace(aside)
        logger.warning(
            "search index %s is unreadable (%s); kept as %s and rebuilt from the workspace",
            self.rel_path,
            exc_text(exc),
            aside.name,
        )

    async def save(self) -> None:
        """Write the local copy back to the workspace (backends other than a local folder)."""

        if self.in_place or self._db is None:
            return
        if self._unsaved:
            assert self._tmpdir is not None
            data = (Path(self._tmpdir) / INDEX_FILE).read_bytes()
            await self.ws.write_atomic(self.rel_path, data)
            self._unsaved = False
        taken, self._flags_unsaved = self._flags_unsaved, set()
        if taken:
            async with self._lock:
                await self._flags_taken_in(self._db, taken)

    def close(self) -> None:
        self._known_words.clear()
        self._common_words.clear()
        self._known_built.clear()
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None
            self._tmpdir = None

    def _set_aside(self, exc: BaseException) -> None:
        path = self._db_path()
        self.close()
        self._fetch = False  # a remote copy may be as damaged: start from the workspace
        if path is not None and path.exists():
            self._move_aside(path, exc)

    def _db_path(self) -> Path | None:
        if isinstance(self.ws, LocalWorkspace):
            return self.ws.root / self.rel_path
        return None if self._tmpdir is None else Path(self._tmpdir) / INDEX_FILE

    def _meta(self, db: sqlite3.Connection, key: str) -> str | None:
        row = db.execute("SELECT v FROM meta WHERE k = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @abc.abstractmethod
    async def _flags_taken_in(self, db: sqlite3.Connection, rollouts: set[str]) -> None:
        """Clear the changed-rollout flags of ``rollouts`` (see :mod:`.sync`)."""
