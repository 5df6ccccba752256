"""Where a layout's memory lives besides the workspace: shared stores.

Without a store, memory lives in the sandbox workspace (``memories/store/``, the embedded
default). :class:`PostgresStore` keeps it in PostgreSQL, shared by sandboxes on many machines;
the workspace then holds a working copy (:mod:`sandbox_memory.shared_copy`).

``PostgresStore`` needs the ``postgres`` extra: ``pip install 'sandbox-memory[postgres]'``.
"""

from __future__ import annotations

from .postgres import PostgresStore, redact_dsn
from .shared import Fence

__all__ = ["Fence", "PostgresStore", "redact_dsn"]
