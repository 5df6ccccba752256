"""File I/O over a sandbox session or a local folder: atomic writes, appends and a lease lock.

Two workspaces share one interface (:class:`Workspace`):

- :class:`LocalWorkspace` works on a folder of this machine (a ``UnixLocalSandboxClient``
  workspace root, an unpacked snapshot, or any folder the CLI is pointed at);
- :class:`SessionWorkspace` goes through a live ``BaseSandboxSession`` (any backend: Docker,
  hosted), using only its public file and exec API.

Paths are POSIX strings relative to the workspace root. Every whole-file write is atomic (write
a temporary sibling, then rename): a crash leaves the old file or the new one, never half.

No read or write leaves the workspace root: memory's paths never go through a symbolic link.
The local folder is walked one component at a time from a descriptor of the root, each opened
with ``O_NOFOLLOW`` (no window between a check and the use); through a session every
component is checked by the same shell command that then does the work. A link anywhere on
the path raises :class:`~sandbox_memory.errors.MemoryPathError`, which names the path.
"""

from __future__ import annotations

from .base import (
    APPEND_ARG_MAX_BYTES as APPEND_ARG_MAX_BYTES,
)
from .base import (
    BIG_WRITE_BYTES as BIG_WRITE_BYTES,
)
from .base import (
    DERIVED_ARG_MAX_BYTES as DERIVED_ARG_MAX_BYTES,
)
from .base import (
    LEASE_CLOCK_SLACK_SECONDS as LEASE_CLOCK_SLACK_SECONDS,
)
from .base import (
    SWAP_GUARD_SUFFIX as SWAP_GUARD_SUFFIX,
)
from .base import (
    SWAP_GUARD_WAIT_SECONDS as SWAP_GUARD_WAIT_SECONDS,
)
from .base import (
    TMP_SUFFIX as TMP_SUFFIX,
)
from .base import (
    WRITE_BATCH_FILES as WRITE_BATCH_FILES,
)
from .base import (
    NotRegularFile as NotRegularFile,
)
from .base import (
    ShortWriteError as ShortWriteError,
)
from .base import (
    Workspace as Workspace,
)
from .base import (
    set_aside_folder as set_aside_folder,
)
from .base import (
    swap_guard as swap_guard,
)
from .lease import (
    _PID_SPACE as _PID_SPACE,
)
from .lease import (
    UNREADABLE_LOCK_GRACE_SECONDS as UNREADABLE_LOCK_GRACE_SECONDS,
)
from .lease import (
    LeaseLock as LeaseLock,
)
from .local import (
    APPEND_ON_LOOP as APPEND_ON_LOOP,
)
from .local import (
    PARALLEL_SYNC_FILES as PARALLEL_SYNC_FILES,
)
from .local import (
    SYNC_THREADS as SYNC_THREADS,
)
from .local import (
    LocalWorkspace as LocalWorkspace,
)
from .session import (
    _APPEND_SCRIPT as _APPEND_SCRIPT,
)
from .session import (
    APPEND_MARKER_SUFFIX as APPEND_MARKER_SUFFIX,
)
from .session import (
    SessionWorkspace as SessionWorkspace,
)
from .session import (
    append_marker as append_marker,
)
