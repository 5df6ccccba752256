"""Configuration of the Memory capability, named like the SDK's own classes.

``MemoryLayoutConfig``, ``MemoryReadConfig`` and ``MemoryGenerateConfig`` accept everything the
SDK's classes of the same names accept, so a user can swap imports; the extra fields are ours.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .errors import MemoryConfigError

if TYPE_CHECKING:
    # Types only: the command line imports this module and must not pay for the SDK.
    from agents.model_settings import ModelSettings
    from agents.models.interface import Model

DEFAULT_SUMMARY_BUDGET_CHARS = 8_000
"""The specification's injection limit: 8,000 characters of memory text per run."""

DEFAULT_MAX_RAW_MEMORIES = 256
"""The SDK's and the specification's default selection size for phase 2."""

MAX_RAW_MEMORIES_LIMIT = 4_096
"""Upper bound the SDK enforces for ``max_raw_memories_for_consolidation``; we keep it."""

DEFAULT_MAX_ROLLOUT_CHARS = 200_000
"""Transcript characters sent to a phase-1 model (about 50k tokens): head and tail are kept."""

DEFAULT_PHASE_ONE_CONCURRENCY = 4
"""Rollouts extracted at once at close: enough to hide model latency, small enough for 2 cores."""

DEFAULT_MAX_MODEL_CALLS_PER_CLOSE = 64
"""Model calls one close may spend; the rest waits for the next close, recorded."""

DEFAULT_MAX_INPUT_TOKENS_PER_CLOSE = 2_000_000
"""Estimated input tokens one close may send to memory models (chars / 4)."""

DEFAULT_MAX_SECONDS_PER_CLOSE = 300.0
"""Wall time one close may spend on memory before leaving the rest for the next close."""

DEFAULT_MAX_ATTEMPTS = 5
"""Extraction attempts for one rollout before it is parked as failed (visible in the state)."""

DEFAULT_WAIT_FOR_EXTRACTION_SECONDS = 10.0
"""Longest a run waits at its start for the previous run's extraction (so it starts with that
run's memory); past it the run starts with memory as it stands and the extraction goes on."""

DEFAULT_LOCK_TIMEOUT_SECONDS = 60.0
"""How long a closer waits for another process's layout lock before giving up (logged)."""

DEFAULT_LOCK_LEASE_SECONDS = 120.0
"""A lock not renewed for this long is presumed dead and taken over."""

EngineChoice = Literal["auto", "model", "offline"]


def validate_relative_dir(name: str, value: object) -> str:
    """Return ``value`` normalised, or raise naming ``name`` if it is not a safe relative dir."""

    if not isinstance(value, str):
        raise MemoryConfigError(name, value, "must be a string")
    text = value.strip()
    if not text or text in {".", "./"}:
        raise MemoryConfigError(name, value, "must be a non-empty path relative to the workspace")
    if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
        raise MemoryConfigError(name, value, "must be relative to the sandbox workspace root")
    parts = text.replace("\\", "/").split("/")
    if ".." in parts:
        raise MemoryConfigError(
            name, value, "must not contain '..' (it would escape the workspace)"
        )
    return posixpath.normpath(text.replace("\\", "/"))


def model_settings(name: str, value: object) -> ModelSettings | None:
    """``value`` as ``ModelSettings``; a dict with a key ``ModelSettings`` lacks is refused."""

    import dataclasses

    if value is None:
        return None
    from agents.model_settings import ModelSettings

    if isinstance(value, ModelSettings):
        return value
    if not isinstance(value, dict):
        raise MemoryConfigError(name, value, "must be a ModelSettings or a dict of its fields")
    accepted = sorted(f.name for f in dataclasses.fields(ModelSettings))
    for key in value:
        if key not in accepted:
            raise MemoryConfigError(
                f"{name}[{key!r}]",
                value[key],
                f"is not a ModelSettings field (accepted: {', '.join(accepted)})",
            )
    try:
        return ModelSettings(**value)
    except (TypeError, ValueError) as exc:
        raise MemoryConfigError(name, value, f"is not valid ModelSettings ({exc})") from None


@dataclass
class MemoryLayoutConfig:
    """Where memory lives in the sandbox workspace."""

    memories_dir: str = "memories"
    """Directory of the memory files (``MEMORY.md``, ``memory_summary.md``, ...)."""

    sessions_dir: str = "sessions"
    """Directory of the per-rollout JSONL files, one line per run segment."""

    def __post_init__(self) -> None:
        self.memories_dir = validate_relative_dir("layout.memories_dir", self.memories_dir)
        self.sessions_dir = validate_relative_dir("layout.sessions_dir", self.sessions_dir)
        if self.memories_dir == self.sessions_dir:
            raise MemoryConfigError(
                "layout.sessions_dir",
                self.sessions_dir,
                "must differ from layout.memories_dir",
            )


@dataclass
class MemoryReadConfig:
    """How memory is read at the start of each run."""

    live_update: bool = True
    """Let the agent fix stale memory during the run (needs ``Filesystem``)."""

    max_summary_chars: int = DEFAULT_SUMMARY_BUDGET_CHARS
    """Budget of the injected memory text (the specification's ``maxLength``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_summary_chars, int) or self.max_summary_chars < 200:
            raise MemoryConfigError(
                "read.max_summary_chars", self.max_summary_chars, "must be an int >= 200"
            )


@dataclass
class MemoryGenerateConfig:
    """How runs become memory.

    The SDK's fields keep their meaning; ``engine``, the budgets and the retry settings are ours.
    """

    max_raw_memories_for_consolidation: int = DEFAULT_MAX_RAW_MEMORIES
    """Newest raw memories kept for phase 2; older conversations are forgotten."""

    phase_one_model: str | Model = "gpt-5.4-mini"
    """Model used for phase-1 extraction by the model engine (any ``agents.Model`` or name)."""

    phase_one_model_settings: ModelSettings | dict[str, Any] | None = None
    """Model settings for phase 1, on top of the defaults (``timeout=60`` seconds per attempt,
    the OpenAI client's hidden retries off: see docs/configuration.md). A dict must use
    ``ModelSettings`` field names."""

    phase_two_model: str | Model = "gpt-5.5"
    """Accepted for compatibility with the SDK; not used: phase 2 here is code, not a model loop
    (see docs/configuration.md)."""

    phase_two_model_settings: ModelSettings | dict[str, Any] | None = None
    """Model settings for phase 2 (see ``phase_two_model``)."""

    extra_prompt: str | None = None
    """Guidance appended to the model engine's phase-1 prompt (what signals matter for your use
    case). Phase 2 is code and has no prompt; the offline engine ignores it."""

    phase_two_max_turns: int = 500
    """Accepted for compatibility with the SDK; phase 2 here takes no agent turns."""

    engine: EngineChoice = "auto"
    """``model``, ``offline``, or ``auto``: the model where credentials exist, else offline."""

    max_rollout_chars: int = DEFAULT_MAX_ROLLOUT_CHARS
    """Transcript size sent to a phase-1 model; longer rollouts keep head and tail."""

    phase_one_concurrency: int = DEFAULT_PHASE_ONE_CONCURRENCY
    """Rollouts extracted concurrently: at close, and by the workers after runs (one queue)."""

    max_model_calls_per_close: int = DEFAULT_MAX_MODEL_CALLS_PER_CLOSE
    """Budget: model calls per close."""

    max_input_tokens_per_close: int = DEFAULT_MAX_INPUT_TOKENS_PER_CLOSE
    """Budget: estimated input tokens per close."""

    max_seconds_per_close: float = DEFAULT_MAX_SECONDS_PER_CLOSE
    """Budget: wall time per close."""

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Attempts per rollout before extraction is parked as failed."""

    external_tools: tuple[str, ...] = ()
    """Names of function tools whose results are external data (like MCP or web results)."""

    redact_patterns: dict[str, str] = field(default_factory=dict)
    """Extra secret patterns, kind -> regex, redacted like the built-in ones."""

    redact_allowlist: tuple[str, ...] = ()
    """Exact strings never redacted."""

    lock_timeout_seconds: float = DEFAULT_LOCK_TIMEOUT_SECONDS
    """How long to wait for another process's layout lock."""

    wait_for_extraction_seconds: float = DEFAULT_WAIT_FOR_EXTRACTION_SECONDS
    """Longest a run waits at its start for the previous run's extraction to finish."""

    def __post_init__(self) -> None:
        n = self.max_raw_memories_for_consolidation
        if not isinstance(n, int) or n <= 0 or n > MAX_RAW_MEMORIES_LIMIT:
            raise MemoryConfigError(
                "generate.max_raw_memories_for_consolidation",
                n,
                f"must be an int between 1 and {MAX_RAW_MEMORIES_LIMIT}",
            )
        if self.engine not in ("auto", "model", "offline"):
            raise MemoryConfigError(
                "generate.engine", self.engine, "must be 'auto', 'model' or 'offline'"
            )
        for name in (
            "max_rollout_chars",
            "phase_one_concurrency",
            "max_model_calls_per_close",
            "max_input_tokens_per_close",
            "max_attempts",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise MemoryConfigError(f"generate.{name}", value, "must be a positive int")
        for name in ("max_seconds_per_close", "lock_timeout_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise MemoryConfigError(f"generate.{name}", value, "must be a positive number")
        for name in ("wait_for_extraction_seconds",):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise MemoryConfigError(f"generate.{name}", value, "must be a positive number")
        if self.extra_prompt is not None and not isinstance(self.extra_prompt, str):
            raise MemoryConfigError("generate.extra_prompt", self.extra_prompt, "must be a str")
        for name in ("phase_one_model_settings", "phase_two_model_settings"):
            setattr(self, name, model_settings(f"generate.{name}", getattr(self, name)))
        self.external_tools = tuple(self.external_tools)
        self.redact_allowlist = tuple(self.redact_allowlist)
