"""sandbox-memory: traceable, crash-safe memory for OpenAI Agents SDK sandbox agents."""

from .capability import Memory, for_person
from .commands import (
    Configure,
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
from .errors import MemoryConfigError, MemoryConflict, MemoryLockTimeout, SandboxMemoryError
from .public_route import record_run
from .store import Entry, LogRecord, Source

__version__ = "0.1.0"

__all__ = [
    "Candidate",
    "Configure",
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
    "MemoryGenerateConfig",
    "MemoryLayoutConfig",
    "MemoryLockTimeout",
    "MemoryReadConfig",
    "Refresh",
    "Remember",
    "SandboxMemoryError",
    "Source",
    "for_person",
    "parse_command",
    "record_run",
]
