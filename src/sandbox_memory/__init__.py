"""sandbox-memory: traceable, crash-safe memory for OpenAI Agents SDK sandbox agents.

Public names are loaded on first use: ``import sandbox_memory.cli`` (the ``sandbox-memory``
command) must not import the Agents SDK for a read command, which alone costs about a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .capability import Memory, for_person
    from .commands import (
        Configure,
        ConversationSummary,
        ConversationView,
        Forget,
        LayoutView,
        MemoryClient,
        Refresh,
        Remember,
        parse_command,
    )
    from .config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
    from .engines.base import Candidate, Extraction, ExtractionEngine, ExtractionRequest
    from .errors import (
        MemoryConfigError,
        MemoryConflict,
        MemoryLockTimeout,
        MemoryNotFound,
        MemoryPathError,
        SandboxMemoryError,
    )
    from .public_route import record_run
    from .search import SearchHit
    from .store import Entry, LogRecord, Source

__version__ = "0.1.0"

_WHERE: dict[str, str] = {
    "Memory": "capability",
    "for_person": "capability",
    "Configure": "commands",
    "ConversationSummary": "commands",
    "ConversationView": "commands",
    "Forget": "commands",
    "LayoutView": "commands",
    "MemoryClient": "commands",
    "Refresh": "commands",
    "Remember": "commands",
    "parse_command": "commands",
    "MemoryGenerateConfig": "config",
    "MemoryLayoutConfig": "config",
    "MemoryReadConfig": "config",
    "Candidate": "engines.base",
    "Extraction": "engines.base",
    "ExtractionEngine": "engines.base",
    "ExtractionRequest": "engines.base",
    "MemoryConfigError": "errors",
    "MemoryConflict": "errors",
    "MemoryNotFound": "errors",
    "MemoryLockTimeout": "errors",
    "MemoryPathError": "errors",
    "SandboxMemoryError": "errors",
    "record_run": "public_route",
    "SearchHit": "search",
    "Entry": "store",
    "LogRecord": "store",
    "Source": "store",
}
"""Public name -> the module (under ``sandbox_memory``) that defines it."""

__all__ = [
    "Candidate",
    "Configure",
    "ConversationSummary",
    "ConversationView",
    "Entry",
    "Extraction",
    "ExtractionEngine",
    "ExtractionRequest",
    "Forget",
    "LayoutView",
    "LogRecord",
    "Memory",
    "MemoryClient",
    "MemoryConfigError",
    "MemoryConflict",
    "MemoryNotFound",
    "MemoryGenerateConfig",
    "MemoryLayoutConfig",
    "MemoryLockTimeout",
    "MemoryPathError",
    "MemoryReadConfig",
    "Refresh",
    "Remember",
    "SandboxMemoryError",
    "SearchHit",
    "Source",
    "for_person",
    "parse_command",
    "record_run",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox_memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
