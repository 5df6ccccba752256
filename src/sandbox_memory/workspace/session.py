"""A workspace reached through a live sandbox session (:class:`SessionWorkspace`): every
operation one shell command through the session's exec, its paths checked by the same command."""

from __future__ import annotations

import asyncio
import errno
import io
import posixpath
import secrets
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MemoryPathError

if TYPE_CHECKING:
    from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from .base import (
    APPEND_ARG_MAX_BYTES,
    DERIVED_ARG_MAX_BYTES,
    TMP_SUFFIX,
    NotRegularFile,
    ShortWriteError,
    Workspace,
    _check_rel,
    _flag_failed,
    log_set_aside,
    swap_guard,
)

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
    printf 'aside:%s %s\n' "$1" "${a##*/}" >&2
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
        # ``${10}``, not ``$10`` (which is ``$1`` and a 0): a command may name ten paths or more.
        head = "ROOT=$1; shift; " + "".join(
            f'nolink "${{{i}}}"; a{i}=$ROOT/${{{i}}}; ' for i in range(1, n + 1)
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
                path, _, aside = line[len("aside:") :].rpartition(" ")
                log_set_aside("a FIFO, a socket or a device", path, aside)
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

    async def _over_files(self, path: str, command: str) -> list[str]:
        """The output lines of one ``command`` run over every regular file of the folder
        ``path`` (its names as ``"$@"``, from inside it; no line when it has none, or is
        missing): a fork per file would cost a second per 200 files."""

        script = (
            '[ -d "$1" ] || exit 0; cd -- "$1" || exit 1; set --; '
            'for f in * .[!.]*; do [ -f "$f" ] && [ ! -L "$f" ] && set -- "$@" "$f"; done; '
            f"[ $# -gt 0 ] || exit 0; {command}"
        )
        code, out = await self._sh(script, path)
        if code != 0:
            raise OSError(f"listing {path} failed with exit code {code}")
        return out.decode("utf-8", "replace").splitlines()

    async def sizes(self, path: str) -> dict[str, int]:
        lines = await self._over_files(path, 'echo "$#"; wc -c -- "$@"')
        if not lines:
            return {}
        count = int(lines[0])
        found: dict[str, int] = {}
        for line in lines[1 : 1 + count]:  # a "total" line follows when there are several
            size, _, name = line.strip().partition(" ")
            if name and size.isdigit():
                found[name.strip()] = int(size)
        return found

    async def stamps(self, path: str) -> dict[str, str]:
        # POSIX cksum: each file's CRC and size, of its bytes as they are.
        found: dict[str, str] = {}
        for line in await self._over_files(path, 'cksum -- "$@"'):
            crc, _, rest = line.partition(" ")
            size, _, name = rest.partition(" ")
            if name and crc.isdigit() and size.isdigit():
                found[name] = f"{size}:{crc}"
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
