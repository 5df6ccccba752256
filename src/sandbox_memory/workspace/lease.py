"""The per-layout lock held as a file inside the workspace, with a lease (:class:`LeaseLock`)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from .. import bounded
from ..datapolicy import exc_text
from ..errors import MemoryLeaseLost, MemoryLockTimeout
from .base import LEASE_CLOCK_SLACK_SECONDS, Workspace, logger, set_aside_folder


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
