"""The file backend of the store: entries, versions, the change log, progress, leases.

The store is the source of truth; ``MEMORY.md``, ``memory_summary.md`` and ``skills/`` are
rendered from it. :class:`~.seam.MemoryStore` is the seam: per-record operations (one
conversation's memory, one rollout's progress, one log line), so each costs the record it
touches, never the whole history; the records are those of :mod:`.records`. :class:`Store`
implements the seam with files, all under ``<memories_dir>/store/``:

- ``layout/head.json``            layout memory's version and change stamp, the shards' seals,
                                  the keys removed from shards not rewritten since
- ``layout/shard-NN.json``        layout memory's entries (the specification's agent memory),
                                  spread over :data:`LAYOUT_SHARDS` records by key hash; past
                                  :data:`SHARD_ENTRIES` each, over twice as many, and so on
                                  (``layout/shard-<count>-<N>.json``, the count in the head)
- ``layout/commit.json``          a change of layout memory being applied (see
                                  :meth:`Store.commit_layout`)
- ``layout/cites/<id>``           keys of layout entries citing a conversation, one commit a line
- ``conversations/<id>.json``     conversation memory (the specification's session memory)
- ``log.jsonl``                   every change: version, time, cause, scope, keys
- ``progress/<id>.json``          what phase 1 has read of one rollout; attempts and errors
- ``forgotten/<id>.json``         bytes read of a rollout phase 2 forgot (its progress, pruned)
- ``pending/<id>``                empty flag: the rollout grew since its progress was checked
- ``unindexed/<id>``              empty flag: the rollout was read to its end (its ``pending``
                                  flag cleared) since the search index last looked at it
- ``threads/<fingerprint>``       the rollout id of a conversation, known by its first items
- ``settings.json``               the switch defaults of the ``Memory`` configuration in use
- ``lock``                        the layout's lease lock

``progress.json`` and ``threads.json`` (one file for every rollout, written whole per change)
are read once and split into those records; ``layout.json`` (all of layout memory in one file,
parsed and written whole per change) is split into the layout records by the first writer.

The store is built of one room per job, each a class :class:`Store` inherits, all standing on
the record plumbing of :mod:`.base` (reading, writing and sealing records; the notes a shared
store's working copy keeps of the records that changed):

- :mod:`.layout`         layout memory read: head, shards, views, changes, citations
- :mod:`.layout_commits` layout memory changed: commits, recovery, ``layout.json`` split
  (:mod:`.shards`: a shard's bytes, one entry a line, and the lazy view of them)
- :mod:`.conversations`  conversation memory, the registry, the switch defaults, ``held/``
- :mod:`.progress`       rollout progress, forgotten progress, ``pending/`` and ``unindexed/``
- :mod:`.threads`        thread records
- :mod:`.legacy`         ``progress.json`` and ``threads.json`` split into records
- :mod:`.log`            the change log
"""

from __future__ import annotations

from ...workspace.records import unsealed
from ..records import COPY_RETRACTED
from .base import SHARED_COPY_FILE, TOUCHED_FILE
from .conversations import ConversationFiles
from .layout_commits import LayoutCommits
from .legacy import LegacyFiles
from .log import LogFiles
from .progress import ProgressFiles
from .shards import LayoutEntries
from .threads import FIRST_LINE_MAX_BYTES, ThreadFiles, _thread_data


class Store(
    LayoutCommits,
    ConversationFiles,
    ProgressFiles,
    ThreadFiles,
    LegacyFiles,
    LogFiles,
):
    """The store as files in the workspace (the embedded default)."""


__all__ = [
    "COPY_RETRACTED",
    "FIRST_LINE_MAX_BYTES",
    "SHARED_COPY_FILE",
    "TOUCHED_FILE",
    "LayoutEntries",
    "Store",
    "_thread_data",
    "unsealed",
]
