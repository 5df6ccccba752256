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

import abc
import asyncio
import concurrent.futures
import contextvars
import errno
import fcntl
import functools
import hashlib
import io
import json
import logging
import math
import os
import posixpath
import secrets
import stat
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from . import bounded
from .datapolicy import exc_text
from .errors import MemoryConfigError, MemoryLeaseLost, MemoryLockTimeout, MemoryPathError

if TYPE_CHECKING:
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

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
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise MemoryConfigError("path", path, "must be a relative path inside the workspace")
    return str(p)


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


class Workspace(abc.ABC):
    """The file operations memory needs, whatever holds the files."""

    @abc.abstractmethod
    async def read_bytes(self, path: str) -> bytes | None:
        """Whole file, or ``None`` when it does not exist.

        A folder where the file belongs raises ``IsADirectoryError``.
        """

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

    async def read_text(self, path: str) -> str | None:
        data = await self.read_bytes(path)
        return None if data is None else data.decode("utf-8", errors="replace")

    async def write_text(self, path: str, text: str) -> None:
        await self.write_atomic(path, text.encode("utf-8"))

    def describe(self) -> str:
        return type(self).__name__


# ------------------------------------------------------------------------------- local folder

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class NotRegularFile(MemoryPathError):
    """A FIFO, a socket or a device where memory keeps a file (the agent's shell can make
    one): never opened to wait on, read or written through. Readers set it aside and read
    the path as missing; writers refuse."""

    def __init__(self, path: str) -> None:
        super().__init__(path, "is not a regular file")


class _Walk:
    """Descriptors of the folders on a path, opened from the root without following links."""

    def __init__(self, root: Path, rel: str, *, create: bool, whole: bool = False) -> None:
        self.rel = _check_rel(rel)
        parts = PurePosixPath(self.rel).parts
        self.name = parts[-1]
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
        try:
            for part in parts if whole else parts[:-1]:
                self.fd = self._enter(part, create=create)
        except BaseException:
            os.close(self.fd)
            raise

    def _enter(self, part: str, *, create: bool) -> int:
        try:
            child = self._open_dir(part)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(part, 0o755, dir_fd=self.fd)
            except FileExistsError:
                pass
            child = self._open_dir(part)
        os.close(self.fd)
        return child

    def _open_dir(self, part: str) -> int:
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, self.fd):
                raise MemoryPathError(self.rel, "goes through a symbolic link") from None
            raise

    def open(self, flags: int, mode: int = 0o644, *, name: str | None = None) -> int:
        """Open the last component, or its sibling ``name`` (never through a link)."""

        name = self.name if name is None else name
        rel = self.rel if name == self.name else posixpath.join(posixpath.dirname(self.rel), name)
        try:
            # Never waiting in the open: a FIFO the agent put here would block it (for a reader,
            # until a writer comes: forever, with the event loop stopped).
            fd = os.open(
                name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC, mode, dir_fd=self.fd
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and _is_link(name, self.fd)):
                raise MemoryPathError(rel, "is a symbolic link") from None
            if exc.errno == errno.ENXIO:  # a FIFO opened to write, no reader
                raise NotRegularFile(rel) from None
            raise
        # Only a regular file (or a folder, which reading refuses) is memory's: a FIFO, a
        # socket or a device is refused, never read or written through.
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind not in (stat.S_IFREG, stat.S_IFDIR):
            os.close(fd)
            raise NotRegularFile(rel)
        return fd

    def set_aside(self, what: str = "a FIFO, a socket or a device") -> str:
        """Move the last component (not a regular file: nothing memory wrote; the link
        itself, never what it points to) to ``<name>.broken-<ms>-<hex>`` beside it, and log
        it; the path reads as missing after."""

        aside = f"{self.name}.broken-{int(time.time() * 1000)}-{secrets.token_hex(2)}"
        os.rename(self.name, aside, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        logger.error(
            "memory found %s where its file %s belongs; kept as %s and starting it afresh",
            what,
            self.rel,
            aside,
        )
        return aside

    def lstat(self) -> os.stat_result:
        return os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> _Walk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_fd(fd: int, length: int | None) -> bytes:
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    chunks: list[bytes] = []
    left = info.st_size if length is None else length
    while left > 0:
        chunk = os.read(fd, min(left, 8 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    if length is None:  # the file may have grown since fstat
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def _open_regular(walk: _Walk, flags: int) -> int:
    """``walk``'s file opened with ``flags`` (``O_CREAT``), a FIFO, socket or device in its
    place set aside first: a file memory writes to is never one it cannot."""

    try:
        return walk.open(flags)
    except NotRegularFile:
        walk.set_aside()
        return walk.open(flags)


def _read_and_close(fd: int, offset: int, length: int | None) -> bytes:
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
        return _read_fd(fd, length)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> tuple[int, OSError | None]:
    """Write ``data``; return how many bytes were written and the error that stopped it."""

    view = memoryview(data)
    written = 0
    while written < len(data):
        try:
            n = os.write(fd, view[written:])
        except OSError as exc:
            return written, exc
        if n <= 0:
            break
        written += n
    return written, None


_DISK_WRITER: tuple[int, ThreadPoolExecutor] | None = None


async def _on_disk_writer(func: Callable[..., _T], *args: Any) -> _T:
    """``func(*args)`` on this process's one disk-writer thread: writes that wait for the disk
    leave the event loop, one at a time (the disk takes them one at a time anyway), on a single
    thread rather than the loop's default pool, whose threads each hold a memory arena of their
    own. A child made by fork starts its own writer (the parent's thread is not in it)."""

    global _DISK_WRITER
    if _DISK_WRITER is None or _DISK_WRITER[0] != os.getpid():
        _DISK_WRITER = (
            os.getpid(),
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-memory-write"),
        )
    ctx = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_DISK_WRITER[1], functools.partial(ctx.run, func, *args))


APPEND_ON_LOOP = 8
"""Small appends of one call made on the event loop (as :meth:`Workspace.append_line` makes
one); past this many, in a thread."""

PARALLEL_SYNC_FILES = 16
"""Files of one batched write from which their waits for the disk are made side by side."""

SYNC_THREADS = 16
"""Threads waiting for the disk side by side in one batched write."""

_SYNCERS: tuple[int, ThreadPoolExecutor] | None = None


def _sync_all(fds: Sequence[int]) -> None:
    """``os.fsync`` of each of ``fds``, every one done when this returns. From
    :data:`PARALLEL_SYNC_FILES` files on, the waits run side by side on a small pool: a journaling
    file system commits the waits that arrive together at once (ext4 on this project's machine:
    1,000 files synced in 0.28-0.37 s one after the other, 0.06-0.13 s side by side), where one
    at a time each costs a commit of its own."""

    global _SYNCERS
    if len(fds) < PARALLEL_SYNC_FILES:
        for fd in fds:
            os.fsync(fd)
        return
    if _SYNCERS is None or _SYNCERS[0] != os.getpid():
        _SYNCERS = (
            os.getpid(),
            ThreadPoolExecutor(max_workers=SYNC_THREADS, thread_name_prefix="sandbox-memory-sync"),
        )
    futures = [_SYNCERS[1].submit(os.fsync, fd) for fd in fds]
    # Every wait finished before any error is raised: the caller closes the descriptors next.
    concurrent.futures.wait(futures)
    for future in futures:
        future.result()


class LocalWorkspace(Workspace):
    """A workspace that is a folder on this machine."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"folder {self.root}"

    def _walk(self, path: str, *, create: bool = False) -> _Walk:
        return _Walk(self.root, path, create=create)

    @staticmethod
    async def _call(big: bool, func: Callable[..., _T], *args: Any) -> _T:
        """``func(*args)``: in a thread when it moves a lot of bytes, else on the loop."""

        if big:
            return await asyncio.to_thread(func, *args)
        return func(*args)

    def _open_read(self, path: str) -> int | None:
        """``path`` opened to read (one walk from the root); ``None`` when missing, or when
        not a regular file (set aside)."""

        try:
            with self._walk(path) as walk:
                try:
                    return walk.open(os.O_RDONLY)
                except NotRegularFile:
                    walk.set_aside()
                    return None
        except (FileNotFoundError, NotADirectoryError):
            return None

    def _read_sync(self, path: str, offset: int, length: int | None) -> bytes | None:
        fd = self._open_read(path)
        if fd is None:
            return None
        return _read_and_close(fd, offset, length)

    async def read_bytes(self, path: str) -> bytes | None:
        fd = self._open_read(path)
        if fd is None:
            return None
        try:
            big = os.fstat(fd).st_size >= BIG_WRITE_BYTES
        except BaseException:
            os.close(fd)
            raise
        # The thread owns the descriptor once handed over (it closes it, even if this task is
        # cancelled meanwhile).
        return await self._call(big, _read_and_close, fd, 0, None)

    async def read_range(self, path: str, offset: int, length: int) -> bytes | None:
        big = length >= BIG_WRITE_BYTES
        return await self._call(big, self._read_sync, path, offset, length)

    def _size(self, path: str, *, dirs: bool) -> int | None:
        try:
            with self._walk(path) as walk:
                info = walk.lstat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(info.st_mode):
            raise MemoryPathError(_check_rel(path), "is a symbolic link")
        if stat.S_ISDIR(info.st_mode):
            return info.st_size if dirs else None
        if not stat.S_ISREG(info.st_mode):
            return None  # a FIFO, a socket, a device: not memory's file (read as missing)
        return info.st_size

    async def size(self, path: str) -> int | None:
        return self._size(path, dirs=False)

    def _write_atomic_sync(self, path: str, data: bytes, sync: bool = True) -> None:
        with self._walk(path, create=True) as walk:
            tmp = f".{walk.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
            fd = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644, dir_fd=walk.fd
            )
            try:
                try:
                    written, failure = _write_all(fd, data)
                    if failure is not None:
                        raise failure
                    if written != len(data):
                        raise ShortWriteError(errno.ENOSPC, f"short write of {walk.rel}")
                    if sync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, walk.name, src_dir_fd=walk.fd, dst_dir_fd=walk.fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=walk.fd)
                except FileNotFoundError:
                    pass
                raise

    async def write_atomic(self, path: str, data: bytes) -> None:
        # Off the loop whatever its size: the wait for the disk (milliseconds) would stop every
        # other task of the loop (a close's other extractions, a run's record) for its length.
        await _on_disk_writer(self._write_atomic_sync, path, data)

    async def write_atomic_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        if type(self).write_atomic is not _LOCAL_WRITE_ATOMIC:
            # A workspace that changes how one file is written (a test's faults, a count of
            # writes) sees every file go through it.
            await super().write_atomic_many(items)
            return
        for start in range(0, len(items), WRITE_BATCH_FILES):
            batch = items[start : start + WRITE_BATCH_FILES]
            await _on_disk_writer(self._write_many_sync, batch)

    def _write_many_sync(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Every temporary file written first, then each waited for on disk, then each renamed
        over its file in order: the waits after the first find the data written out with it
        (about a fifth of the time of a wait per write, measured on ext4 with 60 records),
        and no file is replaced before its new bytes are on disk."""

        walks: list[_Walk] = []
        tmps: list[str] = []
        fds: list[int] = []
        renamed = 0
        try:
            for path, data in items:
                walks.append(self._walk(path, create=True))
                walk = walks[-1]
                tmps.append(f".{walk.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")
                fds.append(
                    os.open(
                        tmps[-1],
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC,
                        0o644,
                        dir_fd=walk.fd,
                    )
                )
                written, failure = _write_all(fds[-1], data)
                if failure is not None:
                    raise failure
                if written != len(data):
                    raise ShortWriteError(errno.ENOSPC, f"short write of {walk.rel}")
            _sync_all(fds)
            while fds:
                os.close(fds.pop())
            for walk, tmp in zip(walks, tmps, strict=True):
                os.replace(tmp, walk.name, src_dir_fd=walk.fd, dst_dir_fd=walk.fd)
                renamed += 1
        finally:
            for fd in fds:
                os.close(fd)
            for walk, tmp in list(zip(walks, tmps, strict=False))[renamed:]:
                try:
                    os.unlink(tmp, dir_fd=walk.fd)
                except FileNotFoundError:
                    pass
            for walk in walks:
                walk.close()

    async def write_derived(self, path: str, data: bytes) -> None:
        # No fsync: it costs milliseconds (most of a first record's time) and guards a file
        # that is rebuilt when lost.
        big = len(data) >= BIG_WRITE_BYTES
        await self._call(big, self._write_atomic_sync, path, data, False)

    def _append_sync(self, path: str, data: bytes) -> bool:
        with self._walk(path, create=True) as walk:
            fd = _open_regular(walk, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            # The lock keeps a mend and the line together, and a line written in several
            # system calls (a huge one) whole among other processes appending.
            fcntl.flock(fd, fcntl.LOCK_EX)
            end = os.lseek(fd, 0, os.SEEK_END)
            if end > 0 and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data
            written, failure = _write_all(fd, data)
            if written != len(data):
                # Undo the torn piece: the run is refused whole, never kept half.
                os.ftruncate(fd, end)
                raise ShortWriteError(
                    failure.errno if failure is not None else errno.ENOSPC,
                    f"appending {len(data)} bytes to {path} wrote only {written} "
                    f"({failure.strerror if failure is not None else 'disk full?'}); "
                    "the partial line was removed",
                )
        finally:
            os.close(fd)
        return end == 0

    def _append_many_sync(self, items: Sequence[tuple[str, bytes]]) -> None:
        for path, data in items:
            self._append_sync(path, data)

    def _touch(self, path: str, walk: _Walk | None = None) -> tuple[bool, _Walk | None]:
        """Create ``path`` empty if absent: in the folder ``walk`` holds (no second walk from
        the root), or from the root when that fails; returns the result and the walk to keep
        (the caller closes it)."""

        if walk is not None:
            try:
                os.close(_open_regular(walk, os.O_WRONLY | os.O_CREAT))
                return True, walk
            except OSError:  # its folder went away meanwhile: walk again
                walk.close()
        try:
            walk = self._walk(path, create=True)
        except OSError:
            return False, None
        try:
            os.close(_open_regular(walk, os.O_WRONLY | os.O_CREAT))
        except OSError:
            walk.close()
            return False, None
        return True, walk

    async def append_line(self, path: str, data: bytes, *, flag: str | None = None) -> bool:
        big = len(data) >= BIG_WRITE_BYTES
        if flag is None:
            return await self._call(big, self._append_sync, path, data)
        flagged, walk = self._touch(flag)
        try:
            was_empty = await self._call(big, self._append_sync, path, data)
            touched, walk = self._touch(flag, walk)
        finally:
            if walk is not None:
                walk.close()
        if not (flagged and touched):
            _flag_failed(path, flag)
        return was_empty

    async def write_derived_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        if type(self).write_derived is not LocalWorkspace.write_derived:
            await super().write_derived_many(items)  # a subclass changing one write sees each
            return
        await asyncio.to_thread(self._write_derived_many_sync, items)

    def _write_derived_many_sync(self, items: Sequence[tuple[str, bytes]]) -> None:
        for path, data in items:
            self._write_atomic_sync(path, data, False)

    async def append_lines(self, items: Sequence[tuple[str, bytes]]) -> None:
        if type(self).append_line is not LocalWorkspace.append_line:
            await super().append_lines(items)  # a subclass changing one append sees each
            return
        # In a thread when many: thousands of small appends (a copy fetching every
        # conversation's ``held/`` lines) would hold the event loop for seconds.
        await self._call(len(items) > APPEND_ON_LOOP, self._append_many_sync, items)

    async def check_paths(self, paths: list[str]) -> None:
        for path in paths:
            self._size(path, dirs=True)  # a link on the way or at the end raises

    def library_file(self, path: str) -> Path:
        """The absolute path of ``path`` for a library that opens files by name (SQLite), made
        safe to open: no link on the way (:class:`MemoryPathError`; the folders are created),
        and anything but a regular file in its place (a symbolic link, a FIFO, a folder) set
        aside, so the library creates a fresh file. The library opens the name after this
        check: a link put there in between is not caught (SQLite follows one to the main
        database file, not to its journal)."""

        with self._walk(path, create=True) as walk:
            try:
                info = os.stat(walk.name, dir_fd=walk.fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                if stat.S_ISLNK(info.st_mode):
                    walk.set_aside("a symbolic link")
                elif stat.S_ISDIR(info.st_mode):
                    walk.set_aside("a folder")
                elif not stat.S_ISREG(info.st_mode):
                    walk.set_aside()
        return self.root / _check_rel(path)

    async def listdir(self, path: str) -> list[str]:
        try:
            with _Walk(self.root, path, create=False, whole=True) as walk:
                return sorted(os.listdir(walk.fd))
        except (FileNotFoundError, NotADirectoryError):
            return []

    async def sizes(self, path: str) -> dict[str, int]:
        try:
            with _Walk(self.root, path, create=False, whole=True) as walk:
                with os.scandir(walk.fd) as entries:
                    return {
                        e.name: e.stat(follow_symlinks=False).st_size
                        for e in entries
                        if e.is_file(follow_symlinks=False)
                    }
        except (FileNotFoundError, NotADirectoryError):
            return {}

    async def remove(self, path: str) -> None:
        try:
            with self._walk(path) as walk:
                os.unlink(walk.name, dir_fd=walk.fd)
        except FileNotFoundError:
            pass

    async def remove_empty_dir(self, path: str) -> None:
        try:
            with self._walk(path) as walk:
                os.rmdir(walk.name, dir_fd=walk.fd)
        except (FileNotFoundError, NotADirectoryError):
            pass
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise

    async def mkdir(self, path: str) -> None:
        with _Walk(self.root, path, create=True, whole=True):
            pass

    async def create_exclusive(self, path: str, data: bytes) -> bool:
        with self._walk(path, create=True) as walk:
            tmp = self._write_tmp(walk, data)
            try:
                os.link(tmp, walk.name, src_dir_fd=walk.fd, dst_dir_fd=walk.fd)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                return self._create_then_write(walk, data)
            finally:
                os.unlink(tmp, dir_fd=walk.fd)
        return True

    @staticmethod
    def _write_tmp(walk: _Walk, data: bytes) -> str:
        """A new temporary sibling of ``walk``'s file holding ``data``; its name."""

        tmp = f".{walk.name}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644, dir_fd=walk.fd)
        try:
            written, failure = _write_all(fd, data)
        finally:
            os.close(fd)
        if failure is not None or written != len(data):
            os.unlink(tmp, dir_fd=walk.fd)
            if failure is not None:
                raise failure
            raise ShortWriteError(errno.ENOSPC, f"short write of {walk.rel}")
        return tmp

    @staticmethod
    def _create_then_write(walk: _Walk, data: bytes) -> bool:
        """Where hard links are not supported: an exclusive create, then the write."""

        try:
            fd = walk.open(os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return False
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        return True

    async def swap(self, path: str, expected: bytes, data: bytes | None) -> bool:
        deadline = time.monotonic() + SWAP_GUARD_WAIT_SECONDS
        with self._walk(path, create=True) as walk:
            guard = walk.open(os.O_RDWR | os.O_CREAT, name=posixpath.basename(swap_guard(path)))
            try:
                while True:
                    try:
                        fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise TimeoutError(
                                f"another swap of {walk.rel} held its guard for more than "
                                f"{SWAP_GUARD_WAIT_SECONDS:.0f}s"
                            ) from None
                        await asyncio.sleep(0.001)
                return self._swap_locked(walk, expected, data)
            finally:
                os.close(guard)  # releases the flock

    def _swap_locked(self, walk: _Walk, expected: bytes, data: bytes | None) -> bool:
        try:
            fd = walk.open(os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            if _read_fd(fd, len(expected) + 1) != expected:
                return False
        finally:
            os.close(fd)
        if data is None:
            os.unlink(walk.name, dir_fd=walk.fd)
            return True
        tmp = self._write_tmp(walk, data)
        try:
            os.replace(tmp, walk.name, src_dir_fd=walk.fd, dst_dir_fd=walk.fd)
        except BaseException:
            os.unlink(tmp, dir_fd=walk.fd)
            raise
        return True

    async def rename(self, source: str, destination: str) -> bool:
        with self._walk(source) as src:
            try:
                src.lstat()
            except FileNotFoundError:
                return False
            with self._walk(destination, create=True) as dst:
                if stat.S_ISDIR(_lstat_mode(dst.name, dst.fd)):
                    raise IsADirectoryError(errno.EISDIR, f"{dst.rel} is a directory")
                try:
                    os.replace(src.name, dst.name, src_dir_fd=src.fd, dst_dir_fd=dst.fd)
                except FileNotFoundError:
                    return False
        return True


_LOCAL_WRITE_ATOMIC = LocalWorkspace.write_atomic


def _lstat_mode(name: str, dir_fd: int) -> int:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return 0


# ------------------------------------------------------------------------------ session API

_SH_PRELUDE = r"""
nolink() {
  p=$ROOT; rest=$1
  while [ -n "$rest" ]; do
    c=${rest%%/*}
    if [ "$c" = "$rest" ]; then rest=; else rest=${rest#*/}; fi
    p=$p/$c
    if [ -L "$p" ]; then printf '%s\n' "$1" >&2; exit 40; fi
  done
  if [ -e "$p" ] && [ ! -f "$p" ] && [ ! -d "$p" ]; then
    a=$p.broken-$(date +%s)000-$$
    mv -f -- "$p" "$a" 2>/dev/null || exit 41
    printf 'aside:%s\n' "$1" >&2
  fi
}
"""
"""Shell functions every session command starts with: ``nolink REL`` exits 40 when any
component of the workspace path ``REL`` is a symbolic link, and moves a FIFO, socket or device
at ``REL`` aside (``<REL>.broken-<ms>-<pid>``, reported on standard error; exit 41 when it
cannot), so that no command of memory's waits on one."""

_APPEND_LOCKS: weakref.WeakKeyDictionary[object, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)
"""Appends through one session, by file: serialised in this process, so a line's marker and
its write are never another append's (across processes, each line being one ``write`` keeps
lines whole; see ``_APPEND_SCRIPT``)."""

APPEND_MARKER_SUFFIX = ".append-sbm"


def append_marker(rel: str) -> str:
    """The hidden sibling a session append keeps beside ``rel``: ``1`` while an append is under
    way or failed, ``0`` after a whole one; its time stamp tells whether something else wrote
    to ``rel`` since.

    The byte is overwritten in place (``1<>``), never truncated: on ext4 truncating a file
    that holds data waits on the journal (about 0.2 ms, and milliseconds while other processes
    sync), which made the marker's reset the slowest step of an append."""

    parent, name = posixpath.split(rel)
    return posixpath.join(parent, f".{name}{APPEND_MARKER_SUFFIX}")


_APPEND_SCRIPT = r"""
trap '' XFSZ 2>/dev/null
LC_ALL=C
nl='
'
f=$1 g=$2 t=$3 m=$4 n=$5 x=$6 hf=$7 src=$8 new=0 flagged=1 locked=0 mend=
[ "$src" = arg ] || trap 'rm -f -- "$t"' EXIT
dir() { [ -d "${1%/*}" ] || mkdir -p -- "${1%/*}"; }
flag() { [ "$hf" = 1 ] || return 0; { dir "$g" && : >> "$g"; } 2>/dev/null || flagged=0; }
lock() {
  [ $locked = 1 ] && return 0; locked=1
  if command -v flock >/dev/null 2>&1; then exec 9>>"$f" && flock 9; fi
}
undo() {
  lock
  a=$(wc -c < "$f") || return 29
  if [ "$src" = arg ]; then
    p=$(tail -c $((n + 1)) -- "$f"; echo .); p=${p%.}; p=${p##*"$nl"}
    [ -n "$p" ] || return 28
    case $x in "$p"*) ;; *) return 29 ;; esac
    b=$((a - ${#p}))
  else
    [ "$a" -gt "$b" ] || return 28
    [ "$(tail -c +$((b + 1)) -- "$f" | cksum)" = \
      "$(dd if="$t" bs=$((a - b)) count=1 2>/dev/null | cksum)" ] || return 29
  fi
  truncate -s "$b" -- "$f" 2>/dev/null || return 29
  return 28
}
dir "$f" || exit 4
flag
if [ "$src" = arg ]; then
  [ ${#x} -eq "$n" ] || exit 28
else
  [ "$(wc -c < "$t")" -eq "$n" ] || exit 28
fi
[ -z "${BASH_VERSION-}${ZSH_VERSION-}${KSH_VERSION-}${YASH_VERSION-}" ] || lock
if [ -s "$f" ]; then
  mark=; { IFS= read -r mark < "$m"; } 2>/dev/null
  if [ "$mark" != 0 ] || [ "$f" -nt "$m" ]; then
    lock
    [ -z "$(tail -c 1 -- "$f")" ] || mend=$nl
  fi
else
  new=1
fi
{ printf 1 1<>"$m"; } 2>/dev/null
if [ "$src" = arg ]; then
  printf %s "$mend$x" >> "$f" || { undo; exit $?; }
else
  printf %s "$mend" >> "$f" && b=$(wc -c < "$f") || exit 28
  dd if="$t" bs="$n" count=1 2>/dev/null >> "$f" || { undo; exit $?; }
fi
{ printf 0 1<>"$m"; } 2>/dev/null
flag
echo "$new $flagged"
"""
"""The durable append through a session. ``$1`` the file, ``$2`` the flag (or the file),
``$3`` the temporary copy (or the file), ``$4`` its marker (:func:`append_marker`), ``$5``
the byte count, ``$6`` the line (or empty), ``$7`` 1 when there is a flag, ``$8`` where the
line comes from: ``arg`` (``$6``) or ``copy`` (``$3``).

Every line is one ``write`` with ``O_APPEND``, which the kernel applies whole even among other
appenders: ``printf`` of the argument (``dash`` and ``ash`` write a string in one call;
shells that may split it take ``flock``), or ``dd`` with one block of the copy's size. Only
shell builtins run on the common path (the marker is read with ``read`` and written in place
with ``printf``). The last byte is looked at (``tail``, under ``flock``) only when the marker
does not say ``0`` (an append failed or did not finish, or it is missing or was left empty by
an older version) or is older than the file (something else wrote since): then a newline goes
first, so the line is
never glued to a torn one. A short write (a full disk) is found by the write's status; its
partial line, checked to be a prefix of this line, is cut off (exit code 28). Where that
cannot be done the marker stays set, so the next append starts on a line of its own (exit
code 29).
"""


class SessionWorkspace(Workspace):
    """A workspace reached through a live sandbox session (any backend)."""

    def __init__(self, session: BaseSandboxSession) -> None:
        self.session = session

    def describe(self) -> str:
        return f"sandbox session {type(self.session).__name__}"

    def _root(self) -> str:
        return str(self.session.state.manifest.root).rstrip("/") or "/"

    async def _sh(self, script: str, *rels: str, extra: tuple[str, ...] = ()) -> tuple[int, bytes]:
        """Run ``script`` with ``$1..`` the absolute paths of ``rels``, then ``extra``.

        Every path is first checked not to go through a link, by the same command (exit code
        40 raises :class:`MemoryPathError`).
        """

        checked = [_check_rel(r) for r in rels]
        n = len(checked)
        head = "ROOT=$1; shift; " + "".join(
            f'nolink "${i}"; a{i}=$ROOT/${i}; ' for i in range(1, n + 1)
        )
        if n:
            head += f"shift {n}; set -- " + " ".join(f'"$a{i}"' for i in range(1, n + 1))
            head += ' "$@"; '
        body = f"{_SH_PRELUDE}\n{head}\n{script}"
        result = await self.session.exec(
            "sh", "-c", body, "sh", self._root(), *checked, *extra, shell=False
        )
        errors = result.stderr.decode("utf-8", "replace").splitlines()
        for line in errors:
            if line.startswith("aside:"):
                logger.error(
                    "memory found a FIFO, a socket or a device where its file %s belongs; "
                    "kept as %s.broken-<ms>-<pid> and starting it afresh",
                    line[len("aside:") :],
                    line[len("aside:") :],
                )
        if result.exit_code == 40:
            bad = "".join(e for e in errors if not e.startswith("aside:")) or ", ".join(checked)
            raise MemoryPathError(bad, "goes through a symbolic link")
        if result.exit_code == 41:
            raise NotRegularFile(", ".join(checked))
        return result.exit_code, result.stdout

    async def read_bytes(self, path: str) -> bytes | None:
        from agents.sandbox.errors import WorkspaceReadNotFoundError

        rel = _check_rel(path)
        code, _ = await self._sh('[ -d "$1" ] && exit 21; [ -f "$1" ] || exit 3; exit 0', rel)
        if code == 3:
            return None
        if code == 21:
            raise IsADirectoryError(errno.EISDIR, f"{rel} is a directory")
        try:
            handle = await self.session.read(Path(rel))
        except WorkspaceReadNotFoundError:
            return None
        try:
            payload = handle.read()
        finally:
            handle.close()
        return payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)

    async def read_range(self, path: str, offset: int, length: int) -> bytes | None:
        code, out = await self._sh(
            '[ -f "$1" ] || exit 3; tail -c +"$2" -- "$1" | head -c "$3"',
            path,
            extra=(str(offset + 1), str(length)),
        )
        if code == 3:
            return None
        if code != 0:
            raise OSError(f"reading {path} at byte {offset} failed with exit code {code}")
        return out

    async def size(self, path: str) -> int | None:
        code, out = await self._sh('[ -f "$1" ] || exit 3; wc -c < "$1"', path)
        if code != 0:
            return None
        return int(out.strip() or b"0")

    async def sizes_of(self, paths: list[str]) -> list[int | None]:
        if not paths:
            return []
        script = 'for f; do if [ -f "$f" ]; then wc -c < "$f"; else echo -; fi; done'
        code, out = await self._sh(script, *paths)
        got = out.split()
        if code != 0 or len(got) != len(paths):
            raise OSError(f"sizing {', '.join(paths)} failed with exit code {code}")
        return [None if x == b"-" else int(x) for x in got]

    async def _mkparent(self, rel: str) -> str:
        parent = posixpath.dirname(rel)
        if parent:
            code, _ = await self._sh('mkdir -p -- "$1"', parent)
            if code != 0:
                raise OSError(f"could not create folder {parent} (exit code {code})")
        return parent

    async def write_atomic(self, path: str, data: bytes) -> None:
        rel = _check_rel(path)
        parent = await self._mkparent(rel)
        tmp = posixpath.join(
            parent, f".{posixpath.basename(rel)}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        )
        await self.session.write(Path(tmp), io.BytesIO(data))
        code, _ = await self._sh(
            '[ "$(wc -c < "$1")" -eq "$3" ] || { rm -f -- "$1"; exit 28; }; '
            '[ -d "$2" ] && { rm -f -- "$1"; exit 21; }; mv -f -- "$1" "$2"',
            tmp,
            rel,
            extra=(str(len(data)),),
        )
        _check_write(code, rel)

    async def write_derived(self, path: str, data: bytes) -> None:
        # A small record (a thread record is a rollout id) in one exec: folder, temporary
        # sibling and rename, where write_atomic takes two execs and a file transfer.
        try:
            text = data.decode("utf-8") if len(data) <= DERIVED_ARG_MAX_BYTES else None
        except UnicodeDecodeError:
            text = None
        if text is None or "\x00" in text:
            await self.write_atomic(path, data)
            return
        rel = _check_rel(path)
        tmp = posixpath.join(
            posixpath.dirname(rel),
            f".{posixpath.basename(rel)}.{secrets.token_hex(4)}{TMP_SUFFIX}",
        )
        code, _ = await self._sh(
            '[ -d "${2%/*}" ] || mkdir -p -- "${2%/*}" || exit 4; [ -d "$2" ] && exit 21; '
            'printf %s "$3" > "$1" || { rm -f -- "$1"; exit 28; }; mv -f -- "$1" "$2"',
            tmp,
            rel,
            extra=(text,),
        )
        _check_write(code, rel)

    async def append_line(self, path: str, data: bytes, *, flag: str | None = None) -> bool:
        rel = _check_rel(path)
        locks = _APPEND_LOCKS.setdefault(self.session, {})
        lock = locks.setdefault(rel, asyncio.Lock())
        async with lock:
            return await self._append(rel, data, flag)

    async def _append(self, rel: str, data: bytes, flag: str | None) -> bool:
        # One exec per append, whose shell starts no other process on the common path (see
        # _APPEND_SCRIPT). A line travels as an argument; one beyond what an argument holds
        # (or not UTF-8) is written to a temporary sibling first, one more call.
        try:
            payload = data.decode("utf-8") if len(data) <= APPEND_ARG_MAX_BYTES else None
        except UnicodeDecodeError:
            payload = None
        parent = posixpath.dirname(rel)
        tmp = ""
        source = "arg"
        if payload is None:
            await self._mkparent(rel)
            tmp = posixpath.join(parent, f".append.{secrets.token_hex(6)}{TMP_SUFFIX}")
            await self.session.write(Path(tmp), io.BytesIO(data))
            payload = ""
            source = "copy"
        code, out = await self._sh(
            _APPEND_SCRIPT,
            rel,
            flag if flag is not None else rel,
            tmp or rel,
            append_marker(rel),
            extra=(str(len(data)), payload, "1" if flag else "0", source),
        )
        if code in (28, 29):
            left = (
                "the partial line was removed"
                if code == 28
                else "a partial line may be left at the end of the file: readers skip it and "
                "the next line starts on a line of its own"
            )
            raise ShortWriteError(
                errno.ENOSPC,
                f"appending {len(data)} bytes to {rel} did not write them all (disk full?); "
                + left,
            )
        if code != 0:
            raise OSError(f"appending to {rel} failed with exit code {code}")
        new, _, flagged = out.strip().partition(b" ")
        if flag is not None and flagged != b"1":
            _flag_failed(rel, flag)
        return new == b"1"

    async def check_paths(self, paths: list[str]) -> None:
        if paths:
            await self._sh(":", *paths)  # every path goes through nolink first

    async def listdir(self, path: str) -> list[str]:
        code, out = await self._sh('[ -d "$1" ] || exit 0; ls -1A -- "$1"', path)
        if code != 0:
            return []
        return sorted(line for line in out.decode("utf-8", "replace").splitlines() if line)

    async def sizes(self, path: str) -> dict[str, int]:
        # One wc over every regular file: a fork per file would cost a second per 200 files.
        script = (
            '[ -d "$1" ] || exit 0; cd -- "$1" || exit 1; set --; '
            'for f in * .[!.]*; do [ -f "$f" ] && [ ! -L "$f" ] && set -- "$@" "$f"; done; '
            '[ $# -gt 0 ] || exit 0; echo "$#"; wc -c -- "$@"'
        )
        code, out = await self._sh(script, path)
        if code != 0:
            raise OSError(f"listing {path} failed with exit code {code}")
        lines = out.decode("utf-8", "replace").splitlines()
        if not lines:
            return {}
        count = int(lines[0])
        found: dict[str, int] = {}
        for line in lines[1 : 1 + count]:  # a "total" line follows when there are several
            size, _, name = line.strip().partition(" ")
            if name and size.isdigit():
                found[name.strip()] = int(size)
        return found

    async def remove(self, path: str) -> None:
        await self._sh('rm -f -- "$1"', path)

    async def remove_empty_dir(self, path: str) -> None:
        await self._sh('[ -d "$1" ] && [ ! -L "$1" ] && rmdir -- "$1" 2>/dev/null; exit 0', path)

    async def mkdir(self, path: str) -> None:
        code, _ = await self._sh('mkdir -p -- "$1"', path)
        if code != 0:
            raise OSError(f"could not create folder {path} (exit code {code})")

    def _tmp_of(self, rel: str) -> str:
        return posixpath.join(
            posixpath.dirname(rel), f".{posixpath.basename(rel)}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        )

    async def create_exclusive(self, path: str, data: bytes) -> bool:
        rel = _check_rel(path)
        await self._mkparent(rel)
        # The content goes to a temporary sibling, which ln (link(2): fails if the name
        # exists) puts in place whole. Where ln cannot link (no hard links), noclobber makes
        # the shell create the file with O_EXCL, then write it.
        code, _ = await self._sh(
            '{ [ -e "$1" ] || [ -L "$1" ]; } && exit 1; '
            'printf %s "$3" > "$2" || { rm -f -- "$2"; exit 28; }; '
            'ln -- "$2" "$1" 2>/dev/null; c=$?; rm -f -- "$2"; [ $c = 0 ] && exit 0; '
            '{ [ -e "$1" ] || [ -L "$1" ]; } && exit 1; '
            'set -C; printf %s "$3" > "$1" 2>/dev/null',
            rel,
            self._tmp_of(rel),
            extra=(data.decode("utf-8"),),
        )
        if code == 28:
            raise ShortWriteError(errno.ENOSPC, f"short write of {rel} (disk full?)")
        return code == 0

    async def swap(self, path: str, expected: bytes, data: bytes | None) -> bool:
        rel = _check_rel(path)
        await self._mkparent(rel)
        # One shell, under flock of the guard where flock exists (util-linux, BusyBox);
        # without it the compare and the rename are still one command, microseconds apart.
        code, _ = await self._sh(
            # The guard is held for one compare and one rename; like the append's, a plain flock.
            'if command -v flock >/dev/null 2>&1; then exec 9>>"$3" && flock 9 || exit 5; fi; '
            '[ -f "$1" ] && [ ! -L "$1" ] || exit 1; '
            'cur=$(cat -- "$1"; printf .) || exit 1; [ "$cur" = "$4." ] || exit 1; '
            '[ "$6" = remove ] && { rm -f -- "$1"; exit 0; }; '
            'printf %s "$5" > "$2" || { rm -f -- "$2"; exit 28; }; mv -f -- "$2" "$1"',
            rel,
            self._tmp_of(rel),
            swap_guard(rel),
            extra=(
                expected.decode("utf-8"),
                (data or b"").decode("utf-8"),
                "remove" if data is None else "put",
            ),
        )
        if code == 5:
            raise OSError(f"could not lock {swap_guard(rel)} to swap {rel}")
        _check_write(0 if code == 1 else code, rel)
        return code == 0

    async def rename(self, source: str, destination: str) -> bool:
        code, _ = await self._sh(
            '[ -e "$1" ] || exit 3; [ -d "$2" ] && exit 21; mv -f -- "$1" "$2"',
            source,
            destination,
        )
        if code == 21:
            raise IsADirectoryError(errno.EISDIR, f"{destination} is a directory")
        return code == 0


def _check_write(code: int, rel: str) -> None:
    """Raise for a session write's exit code: 28 short write, 21 a folder in the way."""

    if code == 28:
        raise ShortWriteError(errno.ENOSPC, f"short write of {rel} (disk full?)")
    if code == 21:
        raise IsADirectoryError(errno.EISDIR, f"{rel} is a directory")
    if code != 0:
        raise OSError(f"writing {rel} failed with exit code {code}")


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

    aside = f"{path}.broken-{int(time.time() * 1000)}-{secrets.token_hex(2)}"
    await workspace.rename(path, aside)
    logger.error(
        "memory found a folder where its file %s belongs; kept as %s and starting it afresh",
        path,
        aside,
    )
    return aside


def _pid_space() -> str | None:
    """This kernel boot and PID namespace: where a lock holder's pid can be checked."""

    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None


_PID_SPACE = _pid_space()


def _holder_dead(info: dict[str, object]) -> bool:
    """Whether the lock's holder is a process of this machine and PID namespace that is gone.

    Only then is a pid conclusive; a holder elsewhere (another container or machine sharing the
    folder) is presumed alive until its lease runs out. A reused pid reads as alive: safe.
    """

    owner = info.get("owner")
    if _PID_SPACE is None or info.get("pid_space") != _PID_SPACE or not isinstance(owner, str):
        return False
    try:
        pid = int(owner.split("-", 1)[0])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


UNREADABLE_LOCK_GRACE_SECONDS = 5.0
"""How long a lock file that does not parse (empty, cut short, not a lease) is respected before
it is taken over, counted from when a waiter first saw those bytes. Memory's own locks are
never seen so (:meth:`Workspace.create_exclusive` puts them in place whole); a holder of an
older version writes its lock within microseconds of creating it. Bounded by half of the
waiter's timeout, so a waiter with a short one takes such a lock over too."""


def _lease_of(raw: bytes) -> dict[str, Any] | None:
    """The lease a lock file holds, or ``None`` when it is not one (empty, torn, junk)."""

    try:
        info = bounded.loads(raw, limit=bounded.MAX_FIELD_BYTES, what="a lock file")
    except ValueError:
        return None
    if not isinstance(info, dict) or not isinstance(info.get("owner"), str):
        return None
    expires = info.get("expires_at")
    if not isinstance(expires, (int, float)) or isinstance(expires, bool):
        return None
    return info


class LeaseLock:
    """A per-layout lock held as a file inside the workspace, with a lease.

    It works for any backend and for a folder several sandboxes share. The lock file appears
    whole (:meth:`Workspace.create_exclusive`); every later change of it (renewal, takeover,
    release) is a compare-and-swap against the exact bytes last seen
    (:meth:`Workspace.swap`), so a holder never overwrites a lock another process took, and
    a waiter takes over only the stale lock it judged, never a live one written meanwhile.
    A lock whose lease ran out, whose holder process is gone, or which stays unreadable for
    :data:`UNREADABLE_LOCK_GRACE_SECONDS` is taken over (logged). A holder that finds its
    lock taken (its renewal came after the lease ran out) is :attr:`lost` and says so.
    Waiting is bounded by ``timeout`` and logged.
    """

    def __init__(
        self,
        workspace: Workspace,
        path: str,
        *,
        timeout: float,
        lease: float,
        poll: float = 0.05,
    ) -> None:
        self.workspace = workspace
        self.path = path
        self.timeout = timeout
        self.lease = lease
        self.poll = poll
        self.token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self._renewer: asyncio.Task[None] | None = None
        self._written: bytes | None = None
        """The lock file's bytes as this holder last wrote them (what a swap expects)."""
        self.held = False
        self.lost = False
        """Another process took the lock over while this one held it."""
        self._swapping = asyncio.Lock()

    def _payload(self) -> bytes:
        info: dict[str, object] = {"owner": self.token, "expires_at": time.time() + self.lease}
        if _PID_SPACE is not None:
            info["pid_space"] = _PID_SPACE
        return json.dumps(info).encode()

    def _hold(self, payload: bytes) -> None:
        self.held = True
        self.lost = False
        self._written = payload
        self._renewer = asyncio.create_task(self._renew())

    async def acquire(self) -> None:
        start = time.monotonic()
        warned = False
        unreadable: tuple[bytes, float] | None = None
        """Bytes of an unreadable lock and when this waiter first saw them."""
        while True:
            payload = self._payload()
            if await self.workspace.create_exclusive(self.path, payload):
                self._hold(payload)
                if warned:
                    waited = time.monotonic() - start
                    logger.warning("took memory lock %s after waiting %.1fs", self.path, waited)
                return
            waited = time.monotonic() - start
            if waited > self.timeout:
                raise MemoryLockTimeout(
                    f"memory lock {self.path} is held by another process for more than "
                    f"{self.timeout:.0f}s (generate.lock_timeout_seconds); the work stays "
                    "recorded and will be done at the next close"
                )
            try:
                raw = await self.workspace.read_bytes(self.path)
            except IsADirectoryError:
                await set_aside_folder(self.workspace, self.path)
                continue
            why = None if raw is None else self._why_stale(raw)  # None: released meanwhile
            if raw is not None and why is None and _lease_of(raw) is None:
                now = time.monotonic()
                if unreadable is None or unreadable[0] != raw:
                    unreadable = (raw, now)
                elif now - unreadable[1] >= min(UNREADABLE_LOCK_GRACE_SECONDS, self.timeout / 2):
                    why = (
                        f"has been unreadable for {now - unreadable[1]:.1f}s (a holder that "
                        "died while writing it, or a bad write)"
                    )
            if why is not None and raw is not None:
                payload = self._payload()
                if await self.workspace.swap(self.path, raw, payload):
                    self._hold(payload)
                    logger.warning("memory lock %s %s; took it over", self.path, why)
                    return
                continue  # it changed since it was read: look again
            if not warned and waited > 1.0:
                logger.warning("waiting for memory lock %s held by another process", self.path)
                warned = True
            await asyncio.sleep(self.poll)

    def _why_stale(self, raw: bytes) -> str | None:
        """Why the lease in ``raw`` may be taken over, or ``None`` while its holder has it
        (or when ``raw`` holds no lease: see :meth:`acquire`).

        Times read from disk are bounded by what is plausible: a lease never runs longer than
        ``lease`` seconds from now, so an expiry further ahead (a clock far off, a bad write)
        is not trusted to block memory for years.
        """

        info = _lease_of(raw)
        if info is None:
            return None
        expires = float(info["expires_at"])
        now = time.time()
        if not math.isfinite(expires):
            return f"has an expiry that is not a time ({expires})"
        if expires < now:
            return f"expired {now - expires:.0f}s ago"
        if expires > now + self.lease + LEASE_CLOCK_SLACK_SECONDS:
            return (
                f"expires {expires - now:.0f}s from now, beyond the longest lease "
                f"({self.lease:.0f}s): a clock far off or a bad write"
            )
        if _holder_dead(info):
            return f"was held by process {info.get('owner')} of this machine, which is gone"
        return None

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            if not await self.renew():
                return

    async def _swap(self, data: bytes | None) -> bool:
        """Swap the bytes this holder last wrote for ``data`` (``None``: remove the lock).
        Called under ``_swapping``: a renewal, a check and the release never overlap, so each
        expects the bytes the one before it wrote."""

        assert self._written is not None
        swapped = await self.workspace.swap(self.path, self._written, data)
        if swapped:
            self._written = data
        return swapped

    async def renew(self) -> bool:
        """Extend the lease (a swap of the bytes this holder last wrote); ``False`` when the
        lock was taken over meanwhile (then :attr:`lost`, logged at ERROR)."""

        async with self._swapping:
            if self._written is None or self.lost:
                return False
            try:
                if await self._swap(self._payload()):
                    return True
            except Exception as exc:  # noqa: BLE001 - a failed renewal must not kill the holder
                logger.warning("could not renew memory lock %s: %s", self.path, exc_text(exc))
                return True
            self.lost = True
        logger.error(
            "memory lock %s was taken over by another process while this one held it (it "
            "was not renewed within its %.0fs lease); this holder no longer owns it",
            self.path,
            self.lease,
        )
        return False

    async def check(self) -> None:
        """Fencing before a write that must be this holder's alone: renew the lease (a swap of
        the bytes this holder last wrote, so the check and the extension are one step);
        :class:`~sandbox_memory.errors.MemoryLeaseLost` when the lock was taken over. A swap
        that fails (an I/O error) raises too: the write waits for a lease known to be held."""

        if not self.held:
            raise MemoryLeaseLost(f"memory lock {self.path} is not held by this process")
        async with self._swapping:
            if not self.lost and self._written is not None:
                if await self._swap(self._payload()):
                    return
                self.lost = True
        raise MemoryLeaseLost(
            f"memory lock {self.path} was taken over by another process (this holder was "
            f"not heard from within its {self.lease:.0f}s lease); this write is refused, "
            "nothing was changed, and the work is done again at the next close"
        )

    async def release(self) -> None:
        async with self._swapping:  # never while a renewal's swap is under way
            if self._renewer is not None:
                self._renewer.cancel()
                try:
                    await self._renewer
                except (asyncio.CancelledError, Exception):
                    pass
                self._renewer = None
            if self.held:
                self.held = False
                if not self.lost and self._written is not None:
                    # Only this holder's lock goes: one another process took over stays.
                    await self._swap(None)
                self._written = None

    async def __aenter__(self) -> LeaseLock:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.release()
