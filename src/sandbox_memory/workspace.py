"""File I/O over a sandbox session or a local folder: atomic writes, appends and a lease lock.

Two workspaces share one interface (:class:`Workspace`):

- :class:`LocalWorkspace` works on a folder of this machine (a ``UnixLocalSandboxClient``
  workspace root, an unpacked snapshot, or any folder the CLI is pointed at);
- :class:`SessionWorkspace` goes through a live ``BaseSandboxSession`` (any backend: Docker,
  hosted), using only its public file and exec API.

Paths are POSIX strings relative to the workspace root. Every whole-file write is atomic (write
a temporary sibling, then rename): a crash leaves the old file or the new one, never half.
"""

from __future__ import annotations

import abc
import asyncio
import io
import json
import logging
import os
import posixpath
import secrets
import time
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING

import aiofiles
import aiofiles.os

from .errors import MemoryConfigError, MemoryLockTimeout

if TYPE_CHECKING:
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession

logger = logging.getLogger("sandbox_memory")

TMP_SUFFIX = ".tmp-sbm"
"""Suffix of temporary files written before a rename; leftovers are ignored by readers."""

APPEND_ARG_MAX_BYTES = 96 * 1024
"""Largest line a session append passes as a shell argument (Linux caps one at 128 KiB);
longer lines are written to a temporary file first, one more call."""


def _check_rel(path: str) -> str:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise MemoryConfigError("path", path, "must be a relative path inside the workspace")
    return str(p)


class Workspace(abc.ABC):
    """The file operations memory needs, whatever holds the files."""

    @abc.abstractmethod
    async def read_bytes(self, path: str) -> bytes | None:
        """Whole file, or ``None`` when it does not exist."""

    @abc.abstractmethod
    async def read_range(self, path: str, offset: int, length: int) -> bytes | None:
        """At most ``length`` bytes from ``offset``, or ``None`` when the file does not exist."""

    @abc.abstractmethod
    async def size(self, path: str) -> int | None:
        """Size in bytes, or ``None`` when the file does not exist."""

    @abc.abstractmethod
    async def write_atomic(self, path: str, data: bytes) -> None:
        """Replace the file with ``data`` atomically, creating parent folders."""

    @abc.abstractmethod
    async def append_line(self, path: str, data: bytes, *, flag: str | None = None) -> bool:
        """Append ``data`` (one line ending in ``\\n``), in O(len(data)); ``True`` when the file
        was absent or empty before.

        If the file ends with a torn line (no final newline), a newline is written first so
        the new line is never glued to the torn one. ``flag``, when given, is a file created
        empty before and again after the append: it tells a reader that ``path`` grew, without
        the reader sizing every file (a crash after the append still leaves the first).
        """

    @abc.abstractmethod
    async def listdir(self, path: str) -> list[str]:
        """Names in a folder (not recursive); ``[]`` when it does not exist."""

    @abc.abstractmethod
    async def remove(self, path: str) -> None:
        """Delete a file; missing files are fine."""

    @abc.abstractmethod
    async def mkdir(self, path: str) -> None:
        """Create a folder and its parents."""

    @abc.abstractmethod
    async def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` only if it does not exist; ``True`` when created."""

    @abc.abstractmethod
    async def rename(self, source: str, destination: str) -> bool:
        """Rename a file, replacing the destination; ``False`` when the source is missing."""

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


class LocalWorkspace(Workspace):
    """A workspace that is a folder on this machine."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def describe(self) -> str:
        return f"folder {self.root}"

    def _p(self, path: str) -> Path:
        return self.root / _check_rel(path)

    async def read_bytes(self, path: str) -> bytes | None:
        try:
            async with aiofiles.open(self._p(path), "rb") as fh:
                return await fh.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    async def read_range(self, path: str, offset: int, length: int) -> bytes | None:
        try:
            async with aiofiles.open(self._p(path), "rb") as fh:
                await fh.seek(offset)
                return await fh.read(length)
        except (FileNotFoundError, NotADirectoryError):
            return None

    async def size(self, path: str) -> int | None:
        try:
            return self._p(path).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    async def write_atomic(self, path: str, data: bytes) -> None:
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")
        try:
            async with aiofiles.open(tmp, "wb") as fh:
                await fh.write(data)
                await fh.flush()
                await asyncio.to_thread(os.fsync, fh.fileno())
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                tmp.unlink()

    async def append_line(self, path: str, data: bytes, *, flag: str | None = None) -> bool:
        # Plain os calls on purpose: an append is a few kilobytes, and a thread hop (aiofiles)
        # would cost more than the write itself. O_APPEND makes concurrent appends whole.
        target = self._p(path)
        flag_path = self._p(flag) if flag is not None else None
        flagged = flag_path is None or self._touch(flag_path)
        try:
            fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except FileNotFoundError:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            if end > 0 and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data
            os.write(fd, data)
        finally:
            os.close(fd)
        if flag_path is not None:
            flagged = self._touch(flag_path) and flagged
        if not flagged:
            _flag_failed(path, str(flag))
        return end == 0

    @staticmethod
    def _touch(path: Path) -> bool:
        try:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            except FileNotFoundError:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError:
            return False
        os.close(fd)
        return True

    async def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self._p(path)))
        except (FileNotFoundError, NotADirectoryError):
            return []

    async def sizes(self, path: str) -> dict[str, int]:
        try:
            with os.scandir(self._p(path)) as entries:
                return {e.name: e.stat().st_size for e in entries if e.is_file()}
        except (FileNotFoundError, NotADirectoryError):
            return {}

    async def remove(self, path: str) -> None:
        try:
            self._p(path).unlink()
        except FileNotFoundError:
            pass

    async def mkdir(self, path: str) -> None:
        self._p(path).mkdir(parents=True, exist_ok=True)

    async def create_exclusive(self, path: str, data: bytes) -> bool:
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return True

    async def rename(self, source: str, destination: str) -> bool:
        try:
            os.replace(self._p(source), self._p(destination))
        except FileNotFoundError:
            return False
        return True


class SessionWorkspace(Workspace):
    """A workspace reached through a live sandbox session (any backend)."""

    def __init__(self, session: BaseSandboxSession) -> None:
        self.session = session

    def describe(self) -> str:
        return f"sandbox session {type(self.session).__name__}"

    def _abs(self, path: str) -> str:
        return str(self.session.normalize_path(Path(_check_rel(path))))

    async def _sh(self, script: str, *args: str) -> tuple[int, bytes]:
        result = await self.session.exec("sh", "-c", script, "sh", *args, shell=False)
        return result.exit_code, result.stdout

    async def read_bytes(self, path: str) -> bytes | None:
        from agents.sandbox.errors import WorkspaceReadNotFoundError

        try:
            handle = await self.session.read(Path(_check_rel(path)))
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
            self._abs(path),
            str(offset + 1),
            str(length),
        )
        if code == 3:
            return None
        if code != 0:
            raise OSError(f"reading {path} at byte {offset} failed with exit code {code}")
        return out

    async def size(self, path: str) -> int | None:
        code, out = await self._sh('[ -f "$1" ] || exit 3; wc -c < "$1"', self._abs(path))
        if code != 0:
            return None
        return int(out.strip() or b"0")

    async def write_atomic(self, path: str, data: bytes) -> None:
        rel = _check_rel(path)
        parent = posixpath.dirname(rel)
        if parent:
            await self.session.mkdir(Path(parent), parents=True)
        tmp = posixpath.join(
            parent, f".{posixpath.basename(rel)}.{secrets.token_hex(4)}{TMP_SUFFIX}"
        )
        await self.session.write(Path(tmp), io.BytesIO(data))
        await self.session.mv(Path(tmp), Path(rel))

    async def append_line(self, path: str, data: bytes, *, flag: str | None = None) -> bool:
        # One exec per append: a line travels as an argument; one beyond what an argument
        # holds (or not UTF-8) is written to a temporary sibling first, one more call.
        rel = _check_rel(path)
        parent = posixpath.dirname(rel)
        try:
            payload = data.decode("utf-8") if len(data) <= APPEND_ARG_MAX_BYTES else None
        except UnicodeDecodeError:
            payload = None
        tmp_abs = ""
        if payload is None:
            if parent:
                await self.session.mkdir(Path(parent), parents=True)
            tmp = posixpath.join(parent, f".append.{secrets.token_hex(6)}{TMP_SUFFIX}")
            await self.session.write(Path(tmp), io.BytesIO(data))
            tmp_abs = self._abs(tmp)
            payload = ""
        flag_abs = self._abs(flag) if flag is not None else ""
        flag_dir = posixpath.dirname(flag_abs) if flag is not None else ""
        source = 'cat -- "$6"' if tmp_abs else 'printf "%s" "$5"'
        script = (
            '[ -d "$2" ] || mkdir -p -- "$2" || exit 4; '
            'flag() { [ -z "$3" ] || { { [ -d "$4" ] || mkdir -p -- "$4"; } && : >> "$3"; } '
            '2>/dev/null || flagged=0; }; flagged=1; flag "$@"; '
            'new=1; if [ -s "$1" ]; then new=0; '
            '[ -z "$(tail -c 1 -- "$1")" ] || printf "\\n" >> "$1"; fi; '
            f'{source} >> "$1"; rc=$?; [ -z "$6" ] || rm -f -- "$6"; [ $rc -eq 0 ] || exit $rc; '
            'flag "$@"; echo "$new $flagged"'
        )
        code, out = await self._sh(
            script,
            self._abs(rel),
            posixpath.dirname(self._abs(rel)),
            flag_abs,
            flag_dir,
            payload,
            tmp_abs,
        )
        if code != 0:
            raise OSError(f"appending to {path} failed with exit code {code}")
        new, _, flagged = out.strip().partition(b" ")
        if flag is not None and flagged != b"1":
            _flag_failed(path, flag)
        return new == b"1"

    async def listdir(self, path: str) -> list[str]:
        code, out = await self._sh('[ -d "$1" ] || exit 0; ls -1A -- "$1"', self._abs(path))
        if code != 0:
            return []
        return sorted(line for line in out.decode("utf-8", "replace").splitlines() if line)

    async def sizes(self, path: str) -> dict[str, int]:
        # One wc over every regular file: a fork per file would cost a second per 200 files.
        script = (
            '[ -d "$1" ] || exit 0; cd -- "$1" || exit 1; set --; '
            'for f in * .[!.]*; do [ -f "$f" ] && set -- "$@" "$f"; done; '
            '[ $# -gt 0 ] || exit 0; echo "$#"; wc -c -- "$@"'
        )
        code, out = await self._sh(script, self._abs(path))
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
        await self._sh('rm -f -- "$1"', self._abs(path))

    async def mkdir(self, path: str) -> None:
        await self.session.mkdir(Path(_check_rel(path)), parents=True)

    async def create_exclusive(self, path: str, data: bytes) -> bool:
        rel = _check_rel(path)
        parent = posixpath.dirname(rel)
        if parent:
            await self.session.mkdir(Path(parent), parents=True)
        # noclobber makes the shell open the file with O_EXCL: atomic on POSIX filesystems.
        code, _ = await self._sh(
            'set -C; printf "%s" "$2" > "$1" 2>/dev/null', self._abs(rel), data.decode("utf-8")
        )
        return code == 0

    async def rename(self, source: str, destination: str) -> bool:
        code, _ = await self._sh(
            '[ -f "$1" ] || exit 3; mv -f -- "$1" "$2"', self._abs(source), self._abs(destination)
        )
        return code == 0


def _flag_failed(path: str, flag: str) -> None:
    logger.warning(
        "appended to %s but could not create %s; if that rollout was read before, its new "
        "runs are learned only after its next run is recorded with the flag",
        path,
        flag,
    )


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


class LeaseLock:
    """A per-layout lock held as a file inside the workspace, with a lease.

    It works for any backend and for a folder several sandboxes share. The holder renews the
    lease while it works; a lock whose lease ran out (its holder died) is taken over. Waiting
    is bounded by ``timeout`` and logged.
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
        self.held = False

    def _payload(self) -> bytes:
        info: dict[str, object] = {"owner": self.token, "expires_at": time.time() + self.lease}
        if _PID_SPACE is not None:
            info["pid_space"] = _PID_SPACE
        return json.dumps(info).encode()

    async def acquire(self) -> None:
        start = time.monotonic()
        warned = False
        while True:
            if await self.workspace.create_exclusive(self.path, self._payload()):
                self.held = True
                self._renewer = asyncio.create_task(self._renew())
                waited = time.monotonic() - start
                if warned:
                    logger.warning("took memory lock %s after waiting %.1fs", self.path, waited)
                return
            raw = await self.workspace.read_bytes(self.path)
            expired = False
            try:
                info = json.loads(raw or b"{}")
                expired = float(info.get("expires_at", 0)) < time.time() or _holder_dead(info)
            except (ValueError, TypeError, AttributeError):
                expired = raw is not None  # unreadable lock file: a torn write by a dead holder
            if expired and raw is not None:
                stale = f"{self.path}.stale-{secrets.token_hex(4)}"
                if await self.workspace.rename(self.path, stale):
                    moved = await self.workspace.read_bytes(stale)
                    if moved is not None and moved != raw:
                        # Another waiter took the stale lock over first: this is its live lock.
                        await self.workspace.create_exclusive(self.path, moved)
                    await self.workspace.remove(stale)
                    if moved == raw:
                        logger.warning(
                            "memory lock %s had expired or its holder is gone; taking it over",
                            self.path,
                        )
                    continue
            waited = time.monotonic() - start
            if waited > self.timeout:
                raise MemoryLockTimeout(
                    f"memory lock {self.path} is held by another process for more than "
                    f"{self.timeout:.0f}s (generate.lock_timeout_seconds); the work stays "
                    "recorded and will be done at the next close"
                )
            if not warned and waited > 1.0:
                logger.warning("waiting for memory lock %s held by another process", self.path)
                warned = True
            await asyncio.sleep(self.poll)

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            try:
                await self.workspace.write_atomic(self.path, self._payload())
            except Exception as exc:  # noqa: BLE001 - a failed renewal must not kill the holder
                logger.warning("could not renew memory lock %s: %s", self.path, exc)

    async def release(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            try:
                await self._renewer
            except (asyncio.CancelledError, Exception):
                pass
            self._renewer = None
        if self.held:
            raw = await self.workspace.read_bytes(self.path)
            try:
                owner = json.loads(raw or b"{}").get("owner")
            except ValueError:
                owner = None
            if owner == self.token:
                await self.workspace.remove(self.path)
            self.held = False

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
