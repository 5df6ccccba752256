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


The copy is built of one room per job, each a class :class:`SharedCopy` inherits, all
standing on the bookkeeping of :mod:`.base` (what the copy was last brought to; what one room
calls of another is declared there), and given what :mod:`.host` describes (the runtime, the
store's search index):

- :mod:`.session`   run start, a session under the lease, the close with its claims
- :mod:`.segments`  recorded runs sent to the store; the namespace's segment key
- :mod:`.changes`   what the copy changed since it was last brought up to date
- :mod:`.push`      copy to store: scopes, notes, progress, thread records
- :mod:`.fetch`     store to copy: scopes, the log, notes, thread records, rollouts
- :mod:`.search`    the store's own search index: sent to, searched
"""

from __future__ import annotations

from .changes import CopyChanges
from .fetch import CopyFetch
from .host import CopyHost, StoreSearch
from .push import CopyPush
from .search import CopySearch
from .segments import CopySegments
from .session import CopySession


class SharedCopy(CopySession, CopySegments, CopyChanges, CopyPush, CopyFetch, CopySearch):
    """Keeps one layout's workspace copy in step with a shared store (:class:`SharedStore`)."""


__all__ = ["CopyHost", "SharedCopy", "StoreSearch"]
