"""A workspace that is a folder on this machine (:class:`LocalWorkspace`): each path walked
from a descriptor of the root without following links, files opened without waiting, writes
atomic and, where they must be, on disk."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import errno
import fcntl
import functools
import os
import posixpath
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import MemoryPathError
from .base import (
    _NO_HARD_LINKS,
    _T,
    BIG_WRITE_BYTES,
    SWAP_GUARD_WAIT_SECONDS,
    TMP_SUFFIX,
    WRITE_BATCH_FILES,
    NotRegularFile,
    ShortWriteError,
    Workspace,
    _check_rel,
    _flag_failed,
    _rel_parts,
    aside_name,
    log_set_aside,
    swap_guard,
)

# ------------------------------------------------------------------------------- local folder

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


class _Walk:
    """Descriptors of the folders on a path, opened from the root without following links."""

    def __init__(self, root: Path, rel: str, *, create: bool, whole: bool = False) -> None:
        self.rel, parts = _rel_parts(rel)
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

        aside = aside_name(self.name)
        os.rename(self.name, aside, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        log_set_aside(what, self.rel, aside)
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
        return sorted(await self.names(path))

    async def read_many(self, folder: str, names: Sequence[str]) -> list[bytes | None]:
        if type(self).read_bytes is not _LOCAL_READ_BYTES:
            # A workspace that changes how one file is read (a test's count of reads) sees
            # every file go through it.
            return await super().read_many(folder, names)
        found: list[bytes | None] = []
        try:
            walk = _Walk(self.root, folder, create=False, whole=True)
        except (FileNotFoundError, NotADirectoryError):
            return [None] * len(names)
        with walk:
            for name in names:
                try:
                    fd = walk.open(os.O_RDONLY, name=name)
                except FileNotFoundError:
                    found.append(None)
                    continue
                except (OSError, MemoryPathError):
                    # Not a regular file (set aside), a link, a folder: as one read does it.
                    found.append(await self.read_bytes(posixpath.join(folder, name)))
                    continue
                found.append(_read_and_close(fd, 0, None))
        return found

    async def names(self, path: str) -> list[str]:
        try:
            with _Walk(self.root, path, create=False, whole=True) as walk:
                return os.listdir(walk.fd)
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

    async def stamps(self, path: str) -> dict[str, str]:
        # Size, modification and change times, inode: memory's writes replace a file (a new
        # inode), an edit in place moves its times; the change time is the kernel's, not one
        # a tool can set back (``touch -d`` sets the modification time only).
        try:
            with _Walk(self.root, path, create=False, whole=True) as walk:
                with os.scandir(walk.fd) as entries:
                    found: dict[str, str] = {}
                    for e in entries:
                        if e.is_file(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            found[e.name] = (
                                f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
                            )
                    return found
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
_LOCAL_READ_BYTES = LocalWorkspace.read_bytes


def _lstat_mode(name: str, dir_fd: int) -> int:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return 0
