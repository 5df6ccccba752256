"""Errors raised by sandbox-memory.

::

    MemoryError_ (base, subclass of Exception)
    ├── MemoryConfigError (also ValueError)   bad configuration or argument; names field and value
    │   ├── MemoryConfigTypeError (also TypeError) a value of the wrong type (where the SDK
    │   │                                     raises TypeError: model settings, limits)
    │   └── MemoryNotFound                    no memory at that root, or no such conversation
    ├── MemoryConflict                        stale version, unknown key, refused command (409)
    │   └── MemoryLeaseLost                   a shared store's lease ran out or was taken over
    ├── MemoryLockTimeout                     the layout lock could not be taken in time
    ├── MemoryPathError (also PermissionError) a memory path goes through a symbolic link
    └── MemoryStoreUnavailable                a shared store cannot be reached (no password shown)

Every message says what was wrong, with the value, and what to do.
"""

from __future__ import annotations

from typing import ClassVar


class SandboxMemoryError(Exception):
    """Base class of every error this package raises on purpose."""

    quotes_data: ClassVar[bool] = False
    """Whether the message may quote model output or tool data. Memory writes these messages
    itself (fields, values of arguments, paths, versions), so they appear in log lines even
    while the SDK's data policies are on (``datapolicy.exc_text``); a class that quotes a
    model's reply or a provider's answer says so."""


class MemoryConfigError(SandboxMemoryError, ValueError):
    """A configuration field or command argument has a value that cannot work."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"{field} {problem}, got: {value!r}")


class MemoryConfigTypeError(MemoryConfigError, TypeError):
    """A configuration value of the wrong type: a ``TypeError`` where the SDK's own config
    raises one (``except TypeError`` keeps working after the import swap), and a
    ``MemoryConfigError`` naming the field and the value.

    .. versionadded:: 0.1
    """


class MemoryNotFound(MemoryConfigError):
    """A read names memory that is not there: a workspace (or shared store) without memory, or
    a conversation it does not know. Memory is only created explicitly
    (:meth:`MemoryClient.create`, ``sandbox-memory init``); nothing was changed.

    ``field`` is ``"workspace"`` or ``"conversation"``, ``value`` the root or rollout id given.
    """

    def __init__(self, field: str, value: object, message: str) -> None:
        self.field = field
        self.value = value
        ValueError.__init__(self, message)


class MemoryConflict(SandboxMemoryError):
    """The memory changed since the caller read it, or the command cannot apply.

    The equivalent of the specification's ``409 SessionConflict``: re-read the view (its
    ``version``) and retry. Nothing was changed.
    """

    def __init__(self, message: str, *, current_version: int | None = None) -> None:
        self.current_version = current_version
        super().__init__(message)


class MemoryLockTimeout(SandboxMemoryError):
    """Another process held the layout lock for longer than the configured wait."""


class MemoryPathError(SandboxMemoryError, PermissionError):
    """A memory path goes through a symbolic link: it could lead outside the workspace.

    Memory never follows one; the read or write is refused and nothing is changed.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        why = "memory never follows links" if "link" in problem else "memory keeps regular files"
        super().__init__(f"memory path {path!r} {problem}; refused ({why})")


class MemoryLeaseLost(MemoryConflict):
    """The caller's lease on a shared store's layout, or its layout lock in the workspace, ran
    out or was taken over (fencing).

    A holder that lost its lease cannot write: its write is refused and nothing changed.
    """


class MemoryStoreUnavailable(SandboxMemoryError):
    """A shared store (PostgreSQL) could not be reached or failed; the message never holds a
    password. A sandbox keeps working from its workspace copy and catches up later."""


class EmbedderError(Exception):
    """An embedder could not give the vectors asked for (the search falls back to BM25).
    Not a :class:`SandboxMemoryError`: it never reaches a caller (``search/embedding.py``)."""
