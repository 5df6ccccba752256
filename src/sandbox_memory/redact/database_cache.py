"""Compiled Hyperscan databases kept on disk, so that a process loads its prefilter instead of
compiling it.

Compiling the prefilter runs Hyperscan's compiler: about 65 ms and, more to the point, about
7 MB of resident memory that stays with the process (its code pages and its heap), for a
database of about 130 KB. Loading a serialised database touches neither. A process whose
cache holds the database for its exact rules, Hyperscan version and machine loads it; any
other process compiles once and writes the file for the next one.

A file is ``MAGIC``, one JSON line (the SHA-256 of the database bytes and what the caller
stores with them) and the serialised database. A file that is cut short, altered, or made by
another build is never handed to Hyperscan: its digest or its key does not match, and the
database is compiled again and the file rewritten. Writes go to a temporary file renamed into
place, so concurrent processes see a whole file or none. The cache is best effort: where the
folder cannot be made or written, the process compiles as before.

The folder is ``$SANDBOX_MEMORY_CACHE_DIR`` if set (``off`` turns the cache off), else
``$XDG_CACHE_HOME/sandbox-memory``, else ``~/.cache/sandbox-memory``. At most `KEEP` files are
kept (the least recently written go first): one per set of rules in use.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import bounded

_LOG = logging.getLogger(__name__)

MAGIC = b"sandbox-memory hyperscan database 1\n"
KEEP = 16
_SUFFIX = ".hsdb"


def cache_dir() -> Path | None:
    """The folder databases are kept in, or ``None`` when the cache is off."""
    chosen = os.environ.get("SANDBOX_MEMORY_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off") else Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "sandbox-memory"


def database_key(hyperscan: Any, inputs: Sequence[object]) -> str:
    """A name for the database compiled from ``inputs`` by this Hyperscan on this machine."""
    described = json.dumps(
        [
            getattr(hyperscan, "__version__", "?"),
            sys.platform,
            platform.machine(),
            sys.byteorder,
            list(inputs),
        ],
        ensure_ascii=True,
        default=lambda b: b.decode("latin-1"),  # bytes expressions, losslessly
    )
    return hashlib.sha256(described.encode()).hexdigest()[:32]


def load(hyperscan: Any, key: str, mode: int) -> tuple[Any, dict[str, Any]] | None:
    """The database kept under ``key`` and what was stored with it, or ``None``."""
    folder = cache_dir()
    loadb = getattr(hyperscan, "loadb", None)
    if folder is None or loadb is None:
        return None
    try:
        raw = (folder / f"{key}{_SUFFIX}").read_bytes()
    except OSError:
        return None
    try:
        if not raw.startswith(MAGIC):
            raise ValueError("not a database file")
        header_end = raw.index(b"\n", len(MAGIC))
        header = bounded.loads(raw[len(MAGIC) : header_end], limit=bounded.MAX_FIELD_BYTES)
        blob = raw[header_end + 1 :]
        if header.get("key") != key or header.get("sha256") != hashlib.sha256(blob).hexdigest():
            raise ValueError("the file does not hold the database it names")
        return loadb(blob, mode), dict(header.get("extra") or {})
    except Exception as exc:  # noqa: BLE001 - a bad file means "compile again", never a failure
        _LOG.debug("ignoring the cached redaction database %s: %s", key, exc)
        return None


def save(hyperscan: Any, key: str, database: Any, extra: dict[str, Any]) -> None:
    """Keep ``database`` under ``key`` for the next process (silently skipped on failure)."""
    folder = cache_dir()
    dumpb = getattr(hyperscan, "dumpb", None)
    if folder is None or dumpb is None:
        return
    tmp: str | None = None
    try:
        blob = dumpb(database)
        header = {"key": key, "sha256": hashlib.sha256(blob).hexdigest(), "extra": extra}
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(MAGIC + json.dumps(header).encode() + b"\n" + blob)
        os.replace(tmp, folder / f"{key}{_SUFFIX}")
        tmp = None
        _prune(folder)
    except Exception as exc:  # noqa: BLE001 - the cache is best effort
        _LOG.debug("could not keep the redaction database in %s: %s", folder, exc)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _prune(folder: Path) -> None:
    kept = []
    for path in folder.glob(f"*{_SUFFIX}"):
        try:
            kept.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue
    kept.sort(reverse=True)
    for _, path in kept[KEEP:]:
        try:
            path.unlink()
        except OSError:
            pass
