"""sandbox-memory: traceable, crash-safe memory for OpenAI Agents SDK sandbox agents.

Public names are loaded on first use: ``import sandbox_memory.cli`` (the ``sandbox-memory``
command) must not import the Agents SDK for a read command, which alone costs about a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `X as X`: an explicit re-export, for type checkers
    from ._sdk import UnsupportedSDK as UnsupportedSDK
    from ._sdk import check_sdk as check_sdk
    from .capability import Memory as Memory
    from .capability import for_person as for_person
    from .commands import Configure as Configure
    from .commands import ConversationSummary as ConversationSummary
    from .commands import ConversationView as ConversationView
    from .commands import Forget as Forget
    from .commands import LayoutView as LayoutView
    from .commands import MemoryClient as MemoryClient
    from .commands import Refresh as Refresh
    from .commands import Remember as Remember
    from .commands import parse_command as parse_command
    from .config import MemoryGenerateConfig as MemoryGenerateConfig
    from .config import MemoryLayoutConfig as MemoryLayoutConfig
    from .config import MemoryReadConfig as MemoryReadConfig
    from .engines.base import Candidate as Candidate
    from .engines.base import Extraction as Extraction
    from .engines.base import ExtractionEngine as ExtractionEngine
    from .engines.base import ExtractionRequest as ExtractionRequest
    from .errors import MemoryConfigError as MemoryConfigError
    from .errors import MemoryConfigTypeError as MemoryConfigTypeError
    from .errors import MemoryConflict as MemoryConflict
    from .errors import MemoryLeaseLost as MemoryLeaseLost
    from .errors import MemoryLockTimeout as MemoryLockTimeout
    from .errors import MemoryNotFound as MemoryNotFound
    from .errors import MemoryPathError as MemoryPathError
    from .errors import MemoryStoreUnavailable as MemoryStoreUnavailable
    from .errors import SandboxMemoryError as SandboxMemoryError
    from .public_route import record_run as record_run
    from .search.index import SearchHit as SearchHit
    from .stores.records import Entry as Entry
    from .stores.records import LogRecord as LogRecord
    from .stores.records import Source as Source

__version__ = "0.1.0"

_WHERE: dict[str, str] = {
    "UnsupportedSDK": "_sdk",
    "check_sdk": "_sdk",
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
    "MemoryConfigTypeError": "errors",
    "MemoryConflict": "errors",
    "MemoryNotFound": "errors",
    "MemoryLeaseLost": "errors",
    "MemoryLockTimeout": "errors",
    "MemoryPathError": "errors",
    "MemoryStoreUnavailable": "errors",
    "SandboxMemoryError": "errors",
    "record_run": "public_route",
    "SearchHit": "search.index",
    "Entry": "stores.records",
    "LogRecord": "stores.records",
    "Source": "stores.records",
}
"""Public name -> the module (under ``sandbox_memory``) that defines it."""

__all__ = sorted(_WHERE)
"""Every public name: the keys of ``_WHERE`` (``tests/test_public_names.py`` holds the typed
imports above to the same list)."""


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox_memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
