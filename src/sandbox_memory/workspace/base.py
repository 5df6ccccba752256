"""What every workspace offers (:class:`Workspace`), the rules of its paths, and what the
workspaces share: the temporary and guard names, a short write, a folder set aside."""

from __future__ import annotations

import abc
import errno
import functools
import hashlib
import logging
import posixpath
import secrets
import time
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import TypeVar

from ..errors import MemoryConfigError, MemoryPathError

logger = logging.getLogger("sandbox_memory")

_T = TypeVar("_T")

TMP_SUFFIX = ".tmp-sbm"
"""Suffix of temporary files written before a rename; leftovers are ignored by readers."""

APPEND_ARG_MAX_BYTES = 96 * 1024
"""Largest line a session append passes as a shell argument (Linux caps one at 128 KiB);
longer lines are written to a temporary file first, one more call."""

DERIVED_ARG_MAX_BYTES = 4 * 1024
"""A derived record up to this size is written through a session in one exec, as an
argument (:meth:`SessionWorkspace.write_derived`); a larger one as a file transfer."""

LEASE_CLOCK_SLACK_SECONDS = 60.0
"""How far another machine's clock may run ahead before its lease is not believed."""

BIG_WRITE_BYTES = 1 << 20
"""Reads and writes at least this big leave the event loop (a thread does the system call); a
write that waits for the disk (:meth:`LocalWorkspace.write_atomic`) always does."""

WRITE_BATCH_FILES = 128
"""Files :meth:`LocalWorkspace.write_atomic_many` holds open at once (two descriptors each:
the file and its folder), well under a process's usual limit of 1,024."""


def _check_rel(path: str) -> str:
    return _rel_parts(path)[0]


@functools.lru_cache(maxsize=8_192)
def _rel_parts(path: str) -> tuple[str, tuple[str, ...]]:
    """``path`` checked to stay inside the workspace, normalised, and its components: worked
    out once per path (a close walks the same few hundred paths thousands of times). A path
    refused raises each time (exceptions are not cached)."""

    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise MemoryConfigError("path", path, "must be a relative path inside the workspace")
    return str(p), p.parts


SWAP_GUARD_SUFFIX = ".guard-sbm"

SWAP_GUARD_WAIT_SECONDS = 10.0
"""Longest wait, on the local folder, for another swap of the same file to finish (each holds
the guard for one read and one rename: microseconds); past it the swap raises
``TimeoutError``. Through a session the guard is a plain ``flock``, like the append's."""

_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EMLINK, errno.EXDEV}
)
"""``link(2)`` errors of a file system that cannot hard-link (FAT, some FUSE mounts)."""


def swap_guard(rel: str) -> str:
    """The hidden sibling whose ``flock`` every :meth:`Workspace.swap` of ``rel`` holds."""

    parent, name = posixpath.split(rel)
    return posixpath.join(parent, f".{name}{SWAP_GUARD_SUFFIX}")


class ShortWriteError(OSError):
    """An append wrote fewer bytes than it was given (a full disk); what it wrote is undone."""

    quotes_data = False  # sizes and a path, written by memory (see datapolicy.exc_text)


class NotRegularFile(MemoryPathError):
    """A FIFO, a socket or a device where memory keeps a file (the agent's shell can make
    one): never opened to wait on, read or written through. Readers set it aside and read
    the path as missing; writers refuse."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "is not a regular file")


class Workspace(abc.ABC):
    """The file operations memory needs, whatever holds the files."""

    @abc.abstractmethod
    async def read_bytes(self, path: str) -> bytes | None:
        """Whole file, or ``None`` when it does not exist.

        A folder where the file belongs raises ``IsADirectoryError``.
        """

    async def read_many(self, folder: str, names: Sequence[str]) -> list[bytes | None]:
        """:meth:`read_bytes` of each file ``names`` names in ``folder``, in order: a backend
        may reach the folder once for them all (hundreds of small records read together)."""

        return [await self.read_bytes(posixpath.join(folder, name)) for name in names]

    @abc.abstractmethod
    async def read_range(self, path: str, offset: int, length: int) -> bytes | None:
        """At most ``length`` bytes from ``offset``, or ``None`` when the file does not exist."""

    @abc.abstractmethod
    async def size(self, path: str) -> int | None:
        """Size in bytes, or ``None`` when the file does not exist."""

    async def sha256(self, path: str) -> str | None:
        """SHA-256 (hex) of a file's bytes, or ``None`` when it does not exist."""

        data = await self.read_bytes(path)
        return None if data is None else hashlib.sha256(data).hexdigest()

    async def sizes_of(self, paths: list[str]) -> list[int | None]:
        """:meth:`size` of each path, in order (one command through a session)."""

        return [await self.size(p) for p in paths]

    @abc.abstractmethod
    async def write_atomic(self, path: str, data: bytes) -> None:
        """Replace the file with ``data`` atomically, creating parent folders."""

    async def write_atomic_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`write_atomic` of each ``(path, data)``, in order: each file is replaced whole
        (a crash leaves its old bytes or its new ones), and every one is on disk when this
        returns. A backend may wait for the disk once for the lot instead of once a file
        (:class:`LocalWorkspace` does); this default writes them one by one.
        """

        for path, data in items:
            await self.write_atomic(path, data)

    async def write_derived(self, path: str, data: bytes) -> None:
        """Replace the file atomically like :meth:`write_atomic`, without waiting for the disk.

        For a record rebuilt from other files when a crash loses it (the old file, none, or an
        empty one may be found after a power loss).
        """

        await self.write_atomic(path, data)

    @abc.abstractmethod
    async def append_line(self, path: str, data: bytes, *, flag: str | None = None) -> bool:
        """Append ``data`` (one line ending in ``\\n``) whole, in O(len(data)); ``True`` when
        the file was absent or empty before.

        If the file ends with a torn line (no final newline), a newline is written first so
        the new line is never glued to the torn one. Concurrent appends never interleave.
        An append that could not be written whole (a full disk) is undone where possible
        and raises :class:`ShortWriteError`. ``flag``, when given, is a file created empty
        before and again after the append: it tells a reader that ``path`` grew, without the
        reader sizing every file (a crash after the append still leaves the first).
        """

    async def write_derived_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`write_derived` of each ``(path, data)``, in order; a backend may write them in
        one go (:class:`LocalWorkspace` does, off the event loop); this default goes one by one.
        """

        for path, data in items:
            await self.write_derived(path, data)

    async def append_lines(self, items: Sequence[tuple[str, bytes]]) -> None:
        """:meth:`append_line` of each ``(path, data)``, in order; a backend may do them in one
        go (:class:`LocalWorkspace` does, off the event loop); this default appends one by one.
        """

        for path, data in items:
            await self.append_line(path, data)

    @abc.abstractmethod
    async def check_paths(self, paths: list[str]) -> None:
        """Raise :class:`~sandbox_memory.errors.MemoryPathError` when any of ``paths`` (a
        file or folder, present or not) is, or goes through, a symbolic link: what a write of
        it would refuse, found before anything is written (one command through a session)."""

    @abc.abstractmethod
    async def listdir(self, path: str) -> list[str]:
        """Names in a folder (not recursive); ``[]`` when it does not exist."""

    async def names(self, path: str) -> list[str]:
        """:meth:`listdir` in no particular order: a caller that only compares sets of names
        need not pay for sorting 10,000 of them."""

        return await self.listdir(path)

    @abc.abstractmethod
    async def remove(self, path: str) -> None:
        """Delete a file; missing files are fine."""

    @abc.abstractmethod
    async def remove_empty_dir(self, path: str) -> None:
        """Delete a folder if it is empty; a missing or non-empty one is left as it is."""

    @abc.abstractmethod
    async def mkdir(self, path: str) -> None:
        """Create a folder and its parents."""

    @abc.abstractmethod
    async def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` only if it does not exist; ``True`` when created.

        The file appears whole: ``data`` is written to a temporary sibling that is then
        hard-linked to ``path`` (``link(2)`` fails when ``path`` exists), so no reader ever
        sees it empty or half written. Only on a file system without hard links is it created
        empty and then written (readers of a lease give an unreadable one a grace period).
        """

    @abc.abstractmethod
    async def swap(self, path: str, expected: bytes, data: bytes | None) -> bool:
        """Compare and swap: replace the file with ``data`` (remove it when ``None``) only if
        it holds exactly ``expected``; ``True`` when swapped, ``False`` when it held something
        else or was missing.

        Every swap of ``path`` holds an exclusive ``flock`` of a hidden sibling
        (:func:`swap_guard`) while it compares and replaces, so two swaps (another process's,
        another machine's on the same kernel's file system) never interleave; the replacement
        is atomic (a temporary sibling renamed into place).
        """

    @abc.abstractmethod
    async def rename(self, source: str, destination: str) -> bool:
        """Rename a file or folder; a destination file is replaced, a destination folder is
        refused (``IsADirectoryError``); ``False`` when the source is missing."""

    async def sizes(self, path: str) -> dict[str, int]:
        """Size of every file in a folder (not recursive), by name; ``{}`` when it does not
        exist. One call, however many files: how the search index finds what grew."""

        found: dict[str, int] = {}
        for name in await self.listdir(path):
            size = await self.size(posixpath.join(path, name))
            if size is not None:
                found[name] = size
        return found

    @abc.abstractmethod
    async def stamps(self, path: str) -> dict[str, str]:
        """A stamp of every file in a folder (not recursive), by name, that moves whenever
        the file's bytes change, whoever wrote them (memory, another process, the agent's
        tools, a person); ``{}`` when the folder does not exist. One call, however many
        files: how a process holding files' text between closes knows which to read again."""

    async def read_text(self, path: str) -> str | None:
        data = await self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    async def write_text(self, path: str, text: str) -> None:
        await self.write_atomic(path, text.encode("utf-8"))

    def describe(self) -> str:
        return type(self).__name__


def _flag_failed(path: str, flag: str) -> None:
    logger.warning(
        "appended to %s but could not create %s; if that rollout was read before, its new "
        "runs are learned only after its next run is recorded with the flag",
        path,
        flag,
    )


async def set_aside_folder(workspace: Workspace, path: str) -> str:
    """Move a folder found where a file belongs to ``<path>.broken-<ms>``, and log it.

    Like an unreadable state file, it is kept (nothing in it is lost) and memory goes on with
    a fresh file.
    """

    aside = aside_name(path)
    await workspace.rename(path, aside)
    log_set_aside("a folder", path, aside)
    return aside


def aside_name(path: str) -> str:
    """Where something memory cannot use as its file is kept: ``<path>.broken-<ms>-<hex>``."""

    return f"{path}.broken-{int(time.time() * 1000)}-{secrets.token_hex(2)}"


def log_set_aside(what: str, path: str, aside: str) -> None:
    """Say, once, that ``what`` (a folder, a FIFO, a link) was found where memory's file
    ``path`` belongs and kept as ``aside``."""

    logger.error(
        "memory found %s where its file %s belongs; kept as %s and starting it afresh",
        what,
        path,
        aside,
    )
