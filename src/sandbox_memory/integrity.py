"""Segment integrity: a line of ``sessions/`` counts only if memory recorded it itself.

The agent's shell and file tools can append to ``sessions/<id>.jsonl``; a well-formed line
holding a ``user`` message would otherwise be taken for what the user said (and a preference
learned from it). Each line memory records therefore ends with a seal: an HMAC-SHA256 of the
line's bytes and its conversation's id, under a key that never enters the workspace::

    {...the segment, its keys as recorded...,"memory_seal":"<32 hex>"}

The seal is the line's last key, added after the segment is encoded, so the segment's own
shape (the SDK's keys, in the SDK's order) is untouched, and checking it costs one HMAC over
the line's bytes, never a second encoding. A line whose seal is missing or wrong (written by
the agent, edited, copied from another conversation, recorded under another key) is skipped by
every reader and reported once at WARNING: it is no one's statement.

Where the key lives (see :func:`host_keys`): ``$SANDBOX_MEMORY_SEGMENT_KEY`` when set (a fleet
of machines, or CI, sharing one key from a secret store), else a key file of the host process,
outside every workspace (``$SANDBOX_MEMORY_KEY_FILE``, else
``$XDG_CONFIG_HOME/sandbox-memory/segment.key``, else ``~/.config/sandbox-memory/
segment.key``), made on first use, mode 0600. The host process is the one that runs
``Runner.run`` (the local sandbox, the session API) or the command line; the sandbox only sees
the workspace. With the PostgreSQL shared store every machine must verify every other
machine's lines: the namespace's key lives in the database (``PostgresStore.segment_key``),
read by every process holding the DSN, and seals from the first contact with the store on.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Sequence
from pathlib import Path

from .errors import MemoryConfigError

logger = logging.getLogger("sandbox_memory")

SEAL_FIELD = "memory_seal"
"""The key a recorded line ends with."""

MEMORY_MD_NOTE = "memory_md_sha256"
"""The note a run's line carries when ``MEMORY.md`` changed while the run was live: its
SHA-256 at the run's end. An edit whose result a run's sealed line names is the agent's
(``runtime/live_edits.py``), whatever tool or path spelling made it."""

SEAL_HEX = 32
"""Hex characters of a seal: 128 bits of the HMAC-SHA256, far beyond what forging by guessing
could reach, 16 bytes less per line than the whole digest."""

_PREFIX = b',"' + SEAL_FIELD.encode() + b'":"'
_SUFFIX_LEN = len(_PREFIX) + SEAL_HEX + 2  # the seal, its closing quote and the line's brace

KEY_ENV = "SANDBOX_MEMORY_SEGMENT_KEY"
"""A key given by the environment (at least 32 characters): the same on every machine that
must verify another's lines."""

KEY_FILE_ENV = "SANDBOX_MEMORY_KEY_FILE"
"""Where the host's key file is, instead of the default under the user's config folder."""

MIN_KEY_CHARS = 32


class SegmentSeal:
    """Seals recorded lines with the first key; a line sealed with any of them verifies."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        if not keys or any(len(k) < MIN_KEY_CHARS for k in keys):
            raise MemoryConfigError("segment key", "<hidden>", "must be at least 32 bytes")
        self._keys = list(dict.fromkeys(keys))

    def led_by(self, keys: Sequence[bytes]) -> SegmentSeal:
        """A seal that seals with ``keys[0]`` and verifies with ``keys`` and this one's."""

        return SegmentSeal([*keys, *self._keys])

    def seal(self, line: bytes, rollout_id: str, *, notes: dict[str, str] | None = None) -> bytes:
        """``line`` (a JSON object with keys, and its ``\\n``) with its seal as the object's
        last key; ``notes``: memory's own keys, put just before the seal and sealed with the
        line (what the host saw of the run, such as :data:`MEMORY_MD_NOTE`)."""

        body = line[:-1] if line.endswith(b"\n") else line
        if not body.endswith(b"}") or body == b"{}":
            raise ValueError("a recorded line must be one JSON object with keys")
        if notes:
            extra = "".join(f",{json.dumps(k)}:{json.dumps(v)}" for k, v in notes.items())
            head: bytes | memoryview = body[:-1] + extra.encode("utf-8")
        else:
            head = memoryview(body)[:-1]
        return b"".join([head, _PREFIX, self._mac(self._keys[0], head, rollout_id), b'"}\n'])

    def verify(self, line: bytes | memoryview, rollout_id: str) -> bool:
        """Whether ``line`` (without its ``\\n``) carries a seal made for ``rollout_id``."""

        view = memoryview(line)
        n = len(view)
        at = n - _SUFFIX_LEN
        if (
            at < 2
            or bytes(view[at : at + len(_PREFIX)]) != _PREFIX
            or bytes(view[n - 2 :]) != b'"}'
        ):
            return False
        given = bytes(view[n - 2 - SEAL_HEX : n - 2])
        head = view[:at]
        return any(
            hmac.compare_digest(self._mac(key, head, rollout_id), given) for key in self._keys
        )

    def sign(self, purpose: str, data: bytes) -> str:
        """A seal of a small state record (``purpose`` names what it is, so a seal of one kind
        of record never verifies as another's)."""

        mac = hmac.new(self._keys[0], purpose.encode("utf-8") + b"\n" + data, hashlib.sha256)
        return mac.hexdigest()[:SEAL_HEX]

    def check(self, purpose: str, data: bytes, given: str) -> bool:
        """Whether ``given`` is a seal :meth:`sign` made of ``data`` under one of the keys."""

        wanted = given.encode("ascii", "replace")
        return any(
            hmac.compare_digest(
                hmac.new(key, purpose.encode("utf-8") + b"\n" + data, hashlib.sha256)
                .hexdigest()[:SEAL_HEX]
                .encode(),
                wanted,
            )
            for key in self._keys
        )

    @staticmethod
    def _mac(key: bytes, head: bytes | memoryview, rollout_id: str) -> bytes:
        """The seal of an object whose bytes are ``head`` and a ``}``, recorded in
        conversation ``rollout_id``: the id is part of what is signed, so a line copied into
        another conversation's file does not verify there."""

        mac = hmac.new(key, rollout_id.encode("utf-8") + b"\n", hashlib.sha256)
        mac.update(head)
        mac.update(b"}")
        return mac.hexdigest()[:SEAL_HEX].encode()


def host_keys() -> list[bytes]:
    """The keys of this host process: the environment's, else the key file's (made when
    missing). A key file that cannot be made or read (a read-only home) leaves a key held in
    this process alone, logged once at WARNING: what it records verifies only in it."""

    given = os.environ.get(KEY_ENV)
    if given:
        if len(given) < MIN_KEY_CHARS:
            raise MemoryConfigError(KEY_ENV, "<hidden>", "must be at least 32 characters")
        return [given.encode("utf-8")]
    return [_file_key(str(key_file()))]


def key_file() -> Path:
    """Where the host's key file is (see the module's docstring)."""

    chosen = os.environ.get(KEY_FILE_ENV)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sandbox-memory" / "segment.key"


@functools.lru_cache(maxsize=8)
def _file_key(path: str) -> bytes:
    target = Path(path)
    try:
        return _read_or_make(target)
    except OSError as exc:
        logger.warning(
            "the segment key file %s cannot be read or made (%s); this process seals and "
            "verifies recorded runs with a key of its own, so runs it records are not learned "
            "by another process; set %s or %s",
            target,
            exc.strerror or exc,
            KEY_ENV,
            KEY_FILE_ENV,
        )
        return secrets.token_hex(32).encode()


def _read_or_make(target: Path) -> bytes:
    try:
        key = target.read_bytes().strip()
    except FileNotFoundError:
        key = b""
    if len(key) >= MIN_KEY_CHARS:
        return key
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fresh = secrets.token_hex(32).encode()
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, fresh + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, target)  # never replaces a key another process made meanwhile
    except FileExistsError:
        pass
    finally:
        os.unlink(temp)
    key = target.read_bytes().strip()
    if len(key) < MIN_KEY_CHARS:
        raise OSError(0, f"{target} holds no key (fewer than {MIN_KEY_CHARS} characters)")
    return key


_exposure_told: set[str] = set()

TRUSTED_LOCAL_ENV = "SANDBOX_MEMORY_TRUST_LOCAL_AGENT"
"""Set to ``1`` by whoever runs trusted agents in a local sandbox and has read the warning of
:func:`warn_key_exposure`: it is then not given."""


def key_exposure(*, inherits_environment: bool) -> str | None:
    """What of this host's key an agent running as this OS user, with this process's
    environment when ``inherits_environment``, can read (a ``UnixLocalSandboxClient``
    session): ``None`` when nothing. The seal cannot hold against such an agent."""

    if os.environ.get(KEY_ENV):
        if inherits_environment:
            return f"${KEY_ENV} is in the environment the agent's shell inherits"
        return None
    return f"the key file {key_file()} belongs to the OS user the agent's shell runs as"


def warn_key_exposure(*, inherits_environment: bool) -> None:
    """Say once per process, at WARNING, that the agent can read the key (see
    :func:`key_exposure`): recorded lines and memory's records are then not protected from a
    forgery by an agent that looks for the key. Use a sandbox that does not run as this user
    (Docker, a hosted sandbox)."""

    if os.environ.get(TRUSTED_LOCAL_ENV) == "1":
        return
    exposed = key_exposure(inherits_environment=inherits_environment)
    if exposed is None or exposed in _exposure_told:
        return
    _exposure_told.add(exposed)
    logger.warning(
        "memory's seal does not hold against this sandbox's agent: %s (a local sandbox runs "
        "the agent as this user); a forgery by an agent that reads the key would count as "
        "memory's own. Use a container or hosted sandbox for agents you do not trust "
        "(or set %s=1 for agents you do)",
        exposed,
        TRUSTED_LOCAL_ENV,
    )
