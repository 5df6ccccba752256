"""Recording a huge run segment off the event loop, in a child process.

Redacting and encoding a segment holds the GIL for time linear in its size (a 200 MB tool
output: over ten seconds), so a thread would still stall the loop. A segment whose strings
exceed :data:`OFFLOAD_CHARS` is built in a child process instead. A thread hands the payload
over and takes the line back through pipes without one long GIL-holding step (a pickled big
string would be one: about 1 ms per MB): big strings go as slices, each encoded and written
before the next is made, and the line comes back as bytes read straight from the pipe
(:func:`_send`, :func:`_receive`). Smaller segments are built in-process, as before. The child builds the line with the same code and the same redaction settings, so
the line is byte-identical to the one the in-process path would write; its redaction counts
come back with it. Any failure of the child falls back to the in-process path (logged at
WARNING): a run is never lost for it.
"""

from __future__ import annotations

import asyncio
import atexit
import io
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..datapolicy import exc_text
from ..integrity import SegmentSeal
from ..layout_state import RedactionSettings
from ..stores.segments import (
    EncodedSegment,
    build_segment,
    display_id,
    replay_plan,
    segment_fingerprint,
)

if TYPE_CHECKING:
    from ..redact import Redactor

logger = logging.getLogger("sandbox_memory")

OFFLOAD_CHARS = 4 << 20
"""A payload whose strings hold more characters than this (4 Mi) is redacted and encoded in a
child process: in-process, that work would hold the event loop for about 0.1 s per 1 MB. Below
it, the cost of handing the payload to a child is larger than the work itself."""


def payload_chars(value: Any, limit: int) -> int:
    """Characters in the strings of ``value``, counted until more than ``limit`` (cheap)."""

    total = 0
    stack = [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            for k, v in item.items():
                if isinstance(k, str):
                    total += len(k)
                stack.append(v)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


_child_redactors: dict[RedactionSettings, Redactor] = {}
_held: dict[str, Any] = {}
"""The segment the child built and holds until the parent says how to finish it."""


def _child_build(
    payload: dict[str, Any],
    rollout_id: str,
    person: str | None,
    segment_id: str | None,
    settings: RedactionSettings,
) -> tuple[str, str | None, list[str], dict[str, int]]:
    """Build and redact a segment; keep it. Returns its id, its history fingerprint, the
    digests of its leading input items (for replay recognition) and the redactions by kind."""

    redactor = _child_redactors.get(settings)
    if redactor is None:
        redactor = _child_redactors[settings] = settings.build()
    redactor.reset_counts()
    _held.clear()
    segment = build_segment(
        payload, rollout_id=rollout_id, person=person, redactor=redactor, segment_id=segment_id
    )
    encoded = _held["segment"] = EncodedSegment(segment)
    return (
        str(segment["segment_id"]),
        segment_fingerprint(segment),
        encoded.leading_digests(),
        (redactor.counts),
    )


def _child_finish(
    rollout_id: str,
    replayed: list[tuple[int, str]],
    seal: SegmentSeal,
    notes: dict[str, str] | None = None,
) -> tuple[bytes, list[tuple[str, str]], str | None]:
    """Finish the held segment: its conversation, its replayed items; encode and seal it."""

    encoded: EncodedSegment = _held.pop("segment")
    encoded.segment["rollout_id"] = rollout_id
    encoded.mark_replayed(replayed)
    line = seal.seal(encoded.line(), rollout_id, notes=notes)
    return line, encoded.new_item_digests(), segment_fingerprint(encoded.segment)


_HEAD = struct.Struct("<Q")

STREAM_MIN = 64 << 10
"""A ``str`` or ``bytes`` of at least this many characters (bytes) is not pickled with the
message that holds it: it follows the message, in slices (see :func:`_send`)."""

SLICE_BYTES = 256 << 10
"""Bytes of one slice of a big value: a string's slice is made and encoded in one step that
holds the GIL (this many ASCII characters, a quarter of that otherwise, so at most this many
bytes of UTF-8; about 0.1 to 2 ms here), a ``bytes`` value is written from views this big (no
copy; the write releases the GIL)."""


class _Chunks:
    """A pickler's file: each frame it flushes (about 64 KiB) goes out as one chunk, so the
    pickling of a message with many small objects is sliced too (the GIL is released while
    each chunk is written)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        if data:
            self.stream.write(_HEAD.pack(len(data)))
            self.stream.write(data)
        return len(data)


class _Pickler(pickle.Pickler):
    """Pickles a message, leaving its big strings and bytes out (a reference in their place)."""

    def __init__(self, file: _Chunks, big: list[str | bytes]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.big = big
        self._index: dict[int, int] = {}

    def persistent_id(self, obj: Any) -> Any:
        kind = type(obj)
        if (kind is str or kind is bytes) and len(obj) >= STREAM_MIN:
            index = self._index.get(id(obj))
            if index is None:
                index = self._index[id(obj)] = len(self.big)
                self.big.append(obj)
            return (kind is bytes, index)
        return None


def _send(stream: IO[bytes], obj: object) -> None:
    """Write one message to a pipe without one long GIL-holding step.

    The message is pickled without its big values, chunk by chunk, ended by an empty chunk;
    then each big value follows in the order the message refers to it: a string as slices of
    at most :data:`SLICE_BYTES` bytes of UTF-8 (lone surrogates kept), each made, encoded and
    written before the next, ended by an empty chunk; a ``bytes`` value as its length and its
    bytes, written from views of :data:`SLICE_BYTES`. Between the steps the thread waits in a
    ``write`` (the pipe is full until the other side reads), with the GIL released.
    """

    big: list[str | bytes] = []
    _Pickler(_Chunks(stream), big).dump(obj)
    stream.write(_HEAD.pack(0))
    for value in big:
        if isinstance(value, bytes):
            stream.write(_HEAD.pack(len(value)))
            view = memoryview(value)
            for start in range(0, len(value), SLICE_BYTES):
                stream.write(view[start : start + SLICE_BYTES])
        else:
            step = SLICE_BYTES if value.isascii() else SLICE_BYTES // 4
            for start in range(0, len(value), step):
                piece = value[start : start + step].encode("utf-8", "surrogatepass")
                stream.write(_HEAD.pack(len(piece)))
                stream.write(piece)
                del piece
            stream.write(_HEAD.pack(0))
    stream.flush()


def _read_exact(stream: IO[bytes], size: int) -> bytes:
    # A buffered read of ``size`` bytes fills one new ``bytes`` object straight from the pipe,
    # a system call at a time with the GIL released: a big value is never copied after it.
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the recording child process closed its pipe mid-message")
    return data


def _read_head(stream: IO[bytes]) -> int:
    head = stream.read(_HEAD.size)
    if len(head) < _HEAD.size:
        raise EOFError("the recording child process closed its pipe")
    size: int = _HEAD.unpack(head)[0]
    return size


def _read_chunks(stream: IO[bytes]) -> list[bytes]:
    parts = []
    while size := _read_head(stream):
        parts.append(_read_exact(stream, size))
    return parts


class _Unpickler(pickle.Unpickler):
    """Unpickles a message; reads each big value from the stream when first referred to."""

    def __init__(self, skeleton: bytes, stream: IO[bytes]) -> None:
        super().__init__(io.BytesIO(skeleton))
        self.stream = stream
        self.big: list[str | bytes] = []

    def persistent_load(self, pid: Any) -> Any:
        is_bytes, index = pid
        if index < len(self.big):
            return self.big[index]
        if index != len(self.big):
            raise pickle.UnpicklingError(f"big value {index} out of order")
        value: str | bytes
        if is_bytes:
            value = _read_exact(self.stream, _read_head(self.stream))
        else:
            # Each slice holds whole characters: decoded as it arrives, so only the text is
            # held (not its bytes too); joined in one step, as only the child gets big strings.
            pieces = []
            while size := _read_head(self.stream):
                pieces.append(_read_exact(self.stream, size).decode("utf-8", "surrogatepass"))
            value = "".join(pieces)
            del pieces
        self.big.append(value)
        return value


def _receive(stream: IO[bytes]) -> Any:
    """Read one message written by :func:`_send`."""

    parts = _read_chunks(stream)
    # The first read waits for the other side: a message has at least one chunk.
    if not parts:
        raise EOFError("the recording child process sent an empty message")
    return _Unpickler(b"".join(parts), stream).load()


class _Child:
    """One child process (``python -m sandbox_memory.record.offload``), started on first use and
    reused; one request at a time, so memory is bounded by one segment in flight. A plain
    interpreter running this module, never a fork of this process nor an import of its main
    script (what ``multiprocessing`` would do: a caller's unguarded script would run again)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._atexit = False

    def close(self) -> None:
        """End the child: it exits when its requests end."""

        with self.lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox_memory.record.offload"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        if not self._atexit:
            atexit.register(self.close)
            self._atexit = True
        return self._proc

    def request(self, op: str, *args: Any) -> Any:
        """Runs in a thread, the caller holding ``lock``: send a request, wait for the answer
        (the pipes release the GIL)."""

        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            _send(proc.stdin, (op, args))
            ok, value = _receive(proc.stdout)
        except BaseException:
            self._stop()
            raise
        if not ok:
            raise RuntimeError(value)
        return value

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


_child = _Child()


def _serve() -> None:
    """The child's loop: a request per frame on stdin, an answer per frame on stdout."""

    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to stderr, never into the answers
    requests = sys.stdin.buffer
    while True:
        try:
            args = _receive(requests)
        except EOFError:
            return
        try:
            op, rest = args
            func = _child_build if op == "build" else _child_finish
            answer: tuple[bool, Any] = (True, func(*rest))
        except Exception as exc:  # noqa: BLE001
            answer = (False, f"{type(exc).__name__}: {exc}")
        _send(answers, answer)


class Recording:
    """One run being recorded: built, then finished once its conversation and the items that
    conversation already recorded are known (see ``LayoutRuntime.record``)."""

    def __init__(
        self,
        payload: dict[str, Any],
        *,
        rollout_id: str,
        person: str | None,
        redactor: Redactor,
        settings: RedactionSettings | None,
    ) -> None:
        self.payload = payload
        self.rollout_id = rollout_id
        self.person = person
        self.redactor = redactor
        self.settings = settings
        self.fingerprint: str | None = None
        """History fingerprint of the segment as built (before replayed items are marked)."""
        self.segment_id = ""
        self._segment: EncodedSegment | None = None
        self._leading: list[str] = []
        self._counts: dict[str, int] = {}
        self._in_child = False

    async def build(self) -> None:
        """Build and redact the segment: in the child when the payload is big."""

        if self.settings is not None and payload_chars(self.payload, OFFLOAD_CHARS) > (
            OFFLOAD_CHARS
        ):
            # In a thread: waiting for the child (and starting it) never holds the loop.
            await asyncio.to_thread(_child.lock.acquire)
            try:
                sid, fp, leading, counts = await asyncio.to_thread(
                    _child.request,
                    "build",
                    self.payload,
                    self.rollout_id,
                    self.person,
                    None,
                    self.settings,
                )
            except Exception as exc:  # noqa: BLE001
                _child.lock.release()
                self._fell_back(exc)
            else:
                self._in_child = True
                self.segment_id, self.fingerprint = sid, fp
                self._leading, self._counts = leading, counts
                return
        self._build_here(None)

    def _build_here(self, segment_id: str | None) -> None:
        segment = build_segment(
            self.payload,
            rollout_id=self.rollout_id,
            person=self.person,
            redactor=self.redactor,
            segment_id=segment_id,
        )
        self._segment = EncodedSegment(segment)
        self.segment_id = str(segment["segment_id"])
        self.fingerprint = segment_fingerprint(segment)

    def _fell_back(self, exc: BaseException) -> None:
        logger.warning(
            "could not record a big run of conversation %s in a child process (%s); "
            "recording it in this process, which holds the event loop meanwhile",
            display_id(self.rollout_id),
            exc_text(exc),
        )

    async def finish(
        self,
        rollout_id: str,
        known: dict[str, list[str]],
        seal: SegmentSeal,
        notes: dict[str, str] | None = None,
    ) -> tuple[bytes, int, list[tuple[str, str]], str | None]:
        """The line, in conversation ``rollout_id``, sealed with ``seal``, its leading items
        that ``known`` (digest -> item ids) already holds replaced by references: ``(line,
        replayed, new item digests, fingerprint)``. A big line is sealed in the child, so the
        line read from its pipe is the one appended (no copy here)."""

        if self._in_child:
            self._in_child = False
            plan = replay_plan(self._leading, known)
            try:
                line, digests, fp = await asyncio.to_thread(
                    _child.request, "finish", rollout_id, plan, seal, notes
                )
            except Exception as exc:  # noqa: BLE001
                self._fell_back(exc)
                self._build_here(self.segment_id)
            else:
                self.redactor.add_counts(self._counts)
                return line, len(plan), digests, fp
            finally:
                _child.lock.release()
        encoded = self._segment
        assert encoded is not None
        encoded.segment["rollout_id"] = rollout_id
        replayed = encoded.mark_replayed(replay_plan(encoded.leading_digests(), known))
        return (
            seal.seal(encoded.line(), rollout_id, notes=notes),
            replayed,
            encoded.new_item_digests(),
            segment_fingerprint(encoded.segment) if replayed else self.fingerprint,
        )

    def abandon(self) -> None:
        """Release the child when the recording stops before :meth:`finish`."""

        if self._in_child:
            self._in_child = False
            _child.lock.release()


__all__ = [
    "OFFLOAD_CHARS",
    "RedactionSettings",
    "Recording",
    "payload_chars",
]

if __name__ == "__main__":  # the child: serve from the imported module, so what it pickles
    from sandbox_memory.record.offload import (
        _serve as serve,  # names sandbox_memory.record.offload's types
    )

    serve()
