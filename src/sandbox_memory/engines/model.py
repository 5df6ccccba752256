"""The model-backed engine: phase 1 through any ``agents.Model`` with structured output.

Each extraction is one model request (plus retries of transient provider failures). The
request carries a per-attempt timeout and the SDK's own hidden retries are switched off, so
the time an extraction may take is known; the caller (``extract/rollout.py``) bounds it further by
the close's time budget. Failures raise :class:`ModelExtractionError` saying what was wrong.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import math
import os
import re
import time
import weakref
from typing import Any, Literal

from agents import Agent, AgentOutputSchemaBase, ModelSettings, Runner
from agents.exceptions import (
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelRefusalError,
    ModelTimeoutError,
)
from agents.models.interface import Model, ModelProvider
from agents.retry import ModelRetrySettings
from agents.run import RunConfig
from agents.strict_schema import ensure_strict_json_schema
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import bounded, spans
from ..errors import SandboxMemoryError
from ..render.files import load_prompt
from .base import Candidate, EntryKind, Extraction, ExtractionRequest
from .transcript import render_transcript

KNOWN_ENTRIES_IN_PROMPT = 200
"""Most known entries shown to the model for key reuse."""

KNOWN_ENTRIES_MAX_CHARS = 4_000
"""Characters of known entries in the prompt (about 1,000 tokens, some 20 entries): the
phase-1 prompt stays flat however large memory grows. The entries sharing the most words with
the transcript go first (newest first on ties), so the facts this rollout may update are shown."""

KNOWN_ENTRIES_SCANNED = 2_000
"""Newest known entries ranked for relevance; older ones are not shown."""

DEFAULT_CALL_TIMEOUT_SECONDS = 60.0
"""Default per-attempt timeout of a phase-1 request (``ModelSettings.timeout``): a phase-1 reply
is a few hundred tokens, so a minute is generous; the OpenAI client's own default is 600 s."""

DEFAULT_CALL_RETRIES = 2
"""Retries of a transient failure (429, 5xx, connection error, timeout) within one extraction,
honouring ``retry-after`` while the close's time budget allows."""

RETRY_BACKOFF_SECONDS = 1.0
"""First wait before a retry without ``retry-after``; doubles per retry."""

RETRY_AFTER_CAP_SECONDS = 60.0
"""Longest ``retry-after`` waited for within one extraction; a provider asking for more (or
for longer than the close's time budget has left) ends the attempt, and the time it asked
for is carried into the rollout's next attempt (:attr:`ModelExtractionError.retry_at`)."""

OUTPUT_EXCERPT_CHARS = 120
"""Characters of a malformed model output quoted in the error record."""

PHASE_ONE_DEFAULT_SETTINGS = ModelSettings(
    timeout=DEFAULT_CALL_TIMEOUT_SECONDS,
    # An explicit no-retry budget makes the SDK switch the OpenAI client's hidden retries off;
    # retries are this engine's (counted, and stopped when the close's time is up).
    retry=ModelRetrySettings(max_retries=0),
)
"""What phase-1 requests use unless ``phase_one_model_settings`` overrides a field."""

_WORD_RE = re.compile(r"[a-z0-9][a-z0-9_-]{2,}")


class _SubjectsOut(BaseModel):
    """:class:`Subjects` as the model writes them: every field required."""

    model_config = ConfigDict(extra="forbid")

    files: list[str]
    commands: list[str]
    tests: list[str]
    people: list[str]
    tools: list[str]


class _CandidateOut(BaseModel):
    """A candidate as the model writes it: every field required, no defaults (strict schemas
    of OpenAI and Azure refuse ``default``)."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(
        description="The subject's name (`invoice-tax-rounding`, `test-command`), the same "
        "across runs; a known entry's key when this is about its subject (the candidate is "
        "its new version); one candidate per key and per subject."
    )
    content: str = Field(
        description="The lesson in one or two sentences, the whole of it as it stands now."
    )
    kind: EntryKind
    sources: list[str]
    action: Literal["remember", "forget"]
    keywords: list[str]
    subjects: _SubjectsOut = Field(
        description="What it is about; two candidates naming the same files and tests are "
        "one subject and become one entry."
    )


class _ExtractionOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rollout_summary: str
    rollout_slug: str
    raw_memory: str
    candidates: list[_CandidateOut]


class _ExtractionParsed(BaseModel):
    """What is accepted back: a provider without strict structured outputs may leave out a
    candidate's optional fields (``Candidate``'s defaults fill them) or add others."""

    rollout_summary: str
    rollout_slug: str
    raw_memory: str
    candidates: list[Candidate]


class ModelExtractionError(SandboxMemoryError):
    """A phase-1 model request failed; the message says how (kept in the progress record).

    ``retry_at`` is the wall-clock time (``time.time()``) before which the provider asked not
    to be called again (its ``retry-after``/``retry-after-ms``), or ``None``: the rollout's
    next attempt is not scheduled earlier.
    """

    quotes_data = True  # the model's reply or the provider's answer, quoted

    def __init__(
        self, message: str, *, transient: bool = False, retry_at: float | None = None
    ) -> None:
        super().__init__(message)
        self.transient = transient
        self.retry_at = retry_at


def credentials_source() -> str | None:
    """How the SDK's default OpenAI provider gets credentials, or ``None`` when it has none:
    ``OPENAI_API_KEY``, ``set_default_openai_key`` or ``set_default_openai_client``."""

    from agents.models import _openai_shared

    if _openai_shared.get_default_openai_client() is not None:
        return "set_default_openai_client() was called"
    if _openai_shared.get_default_openai_key():
        return "set_default_openai_key() was called"
    if os.environ.get("OPENAI_API_KEY"):
        return "OPENAI_API_KEY is set"
    return None


def credentials_available() -> bool:
    """Whether the default OpenAI provider can be reached (credentials are configured)."""

    return credentials_source() is not None


def build_user_message(request: ExtractionRequest) -> str:
    parts = [f"Conversation id: {request.rollout_id}"]
    if request.previous_summary:
        parts.append(
            "Summary of the earlier part (already processed):\n" + request.previous_summary
        )
    transcript = render_transcript(
        request.segments,
        max_chars=request.max_input_chars,
        external_tools=frozenset(request.external_tools),
    )
    if request.known_entries:
        known = _known_for_prompt(request, transcript)
        parts.append("Known entries (reuse these keys for the same facts):\n" + json.dumps(known))
    if request.feedback:
        parts.append(
            "Your previous answer for this transcript had every candidate rejected:\n"
            + request.feedback
            + "\nAnswer again, following the rules (an empty candidates list is fine)."
        )
    parts.append("Transcript of the new part:\n" + transcript)
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=4_096)
def _entry_words(key: str, content: str) -> frozenset[str]:
    """A known entry's words as :func:`_known_for_prompt` compares them (its key and the start
    of its content): a close's extractions are shown mostly the same entries."""

    return frozenset(_WORD_RE.findall(f"{key} {content[:200]}".lower()))


def _known_for_prompt(request: ExtractionRequest, transcript: str) -> list[dict[str, object]]:
    """Known entries within :data:`KNOWN_ENTRIES_MAX_CHARS`, most relevant to the transcript first."""

    words = set(_WORD_RE.findall(transcript.lower()))
    candidates = request.known_entries[:KNOWN_ENTRIES_SCANNED]
    shared = [len(words.intersection(_entry_words(e.key, e.content))) for e in candidates]
    order = sorted(range(len(candidates)), key=lambda i: (-shared[i], i))
    known: list[dict[str, object]] = []
    used = 0
    for i in order:
        e = candidates[i]
        item: dict[str, object] = {"key": e.key, "kind": e.kind, "content": e.content[:200]}
        if e.subjects is not None and (e.subjects.files or e.subjects.tests):
            # What it is about: a candidate about the same files and test is its new version.
            item["subjects"] = {"files": e.subjects.files, "tests": e.subjects.tests}
        cost = len(json.dumps(item)) + 2
        if used + cost > KNOWN_ENTRIES_MAX_CHARS:
            continue
        known.append(item)
        used += cost
        if len(known) >= KNOWN_ENTRIES_IN_PROMPT:
            break
    return known


def phase_one_settings(override: ModelSettings | None) -> ModelSettings:
    """The defaults of :data:`PHASE_ONE_DEFAULT_SETTINGS` with ``override``'s fields on top."""

    return PHASE_ONE_DEFAULT_SETTINGS.resolve(override)


class ModelEngine:
    """Extract with a model through the SDK's ``Runner`` (so any provider the SDK drives works)."""

    name = "model"

    def __init__(
        self,
        model: str | Model,
        *,
        model_settings: ModelSettings | None = None,
        retries: int = DEFAULT_CALL_RETRIES,
    ) -> None:
        self.model = model
        self.model_settings = phase_one_settings(model_settings)
        self.retries = retries
        self.calls = 0
        """Requests sent to the provider (every attempt, retries included)."""
        self._providers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ModelProvider] = (
            weakref.WeakKeyDictionary()
        )

    async def extract(self, request: ExtractionRequest) -> Extraction:
        instructions = load_prompt("phase_one.md")
        if request.extra_prompt:
            instructions += "\n\nDeveloper guidance for this deployment:\n" + request.extra_prompt
        agent: Agent[None] = Agent(
            name="sandbox-memory phase 1",
            instructions=instructions,
            model=self.model,
            model_settings=self.model_settings,
            output_type=ExtractionSchema(),
        )
        message = build_user_message(request)
        attempt = 0
        while True:
            attempt += 1
            self.calls += 1
            spans.add(model_calls=1)
            try:
                run_config = RunConfig(tracing_disabled=True, workflow_name="sandbox-memory")
                provider = self._provider_for_this_loop()
                if provider is not None:
                    run_config.model_provider = provider
                result = await Runner.run(agent, message, max_turns=1, run_config=run_config)
                out = result.final_output_as(_ExtractionParsed)
                spans.add(
                    input_tokens=result.context_wrapper.usage.input_tokens,
                    output_tokens=result.context_wrapper.usage.output_tokens,
                )
                break
            except Exception as exc:  # noqa: BLE001 - classified and re-raised with its cause
                failure = describe_failure(exc, self.model_settings)
                delay = _retry_delay(exc, attempt)
                if not failure.transient or attempt > self.retries or delay is None:
                    raise failure from exc
                if request.deadline is not None and time.monotonic() + delay >= request.deadline:
                    raise ModelExtractionError(
                        f"{failure} (a retry in {delay:g}s would pass the close's time budget)",
                        transient=True,
                        retry_at=failure.retry_at,
                    ) from exc
                await asyncio.sleep(delay)
        return Extraction(
            rollout_summary=out.rollout_summary,
            rollout_slug=out.rollout_slug,
            raw_memory=out.raw_memory,
            candidates=out.candidates,
        )

    def _provider_for_this_loop(self) -> ModelProvider | None:
        """For a model given by name, the SDK's provider with an OpenAI client of this event
        loop's own (``None``: the SDK's default provider is used as it is).

        The SDK's default provider shares one HTTP client per process, and its pooled
        connections belong to the event loop that opened them: after ``asyncio.run`` returns,
        a second ``asyncio.run`` fails on them with "Event loop is closed". A client per loop
        (dropped with its loop) keeps every loop working and still reuses connections within
        one. An application's own client (``set_default_openai_client``) is used as given.
        """

        if not isinstance(self.model, str):
            return None
        from agents.models import _openai_shared
        from agents.models.multi_provider import MultiProvider

        if _openai_shared.get_default_openai_client() is not None:
            return None
        loop = asyncio.get_running_loop()
        provider = self._providers.get(loop)
        if provider is None:
            from openai import AsyncOpenAI, DefaultAsyncHttpx2Client

            # Like the SDK's own client: key from set_default_openai_key or OPENAI_API_KEY,
            # base URL, organisation and project from the environment.
            client = AsyncOpenAI(
                api_key=_openai_shared.get_default_openai_key(),
                http_client=DefaultAsyncHttpx2Client(),
            )
            provider = MultiProvider(openai_client=client)
            self._providers[loop] = provider
        return provider


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from now the provider asked to wait, or ``None`` when absent or unreadable.

    Read the SDK's way along the error's chain: ``retry-after-ms`` (milliseconds), else
    ``retry-after`` in seconds or as an HTTP date, from an ``openai`` error's response or an
    error's own ``headers``. LiteLLM errors (``LitellmModel``) keep the provider's headers in
    ``litellm_response_headers`` (their ``response`` is a stand-in without them), read last.
    """

    from agents.models import _retry_runtime as sdk

    if not isinstance(exc, Exception):
        return None
    seconds = sdk.get_retry_after(exc)
    if seconds is None:
        for err in sdk.iter_error_chain(exc):
            headers = getattr(err, "litellm_response_headers", None)
            if headers is None:
                continue
            ms = sdk.parse_retry_after_ms(sdk.header_lookup(headers, "retry-after-ms"))
            seconds = (
                ms
                if ms is not None
                else sdk.parse_retry_after_value(sdk.header_lookup(headers, "retry-after"))
            )
            if seconds is not None:
                break
    if seconds is None or not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _retry_delay(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before retrying ``exc``, or ``None`` when it must not be retried."""

    after = _retry_after(exc)
    if after is not None:
        return after if after <= RETRY_AFTER_CAP_SECONDS else None
    return float(RETRY_BACKOFF_SECONDS * 2 ** (attempt - 1))


def describe_failure(exc: BaseException, settings: ModelSettings) -> ModelExtractionError:
    """A :class:`ModelExtractionError` that says what went wrong with the request."""

    import openai

    if isinstance(exc, ModelExtractionError):
        return exc
    if isinstance(exc, ModelRefusalError):
        return ModelExtractionError(f"the model refused to answer: {exc}")
    if isinstance(exc, ModelTimeoutError | openai.APITimeoutError):
        return ModelExtractionError(
            f"no reply within the per-attempt timeout ({settings.timeout:g}s)"
            if settings.timeout
            else f"the request timed out ({exc})",
            transient=True,
        )
    if isinstance(exc, openai.APIConnectionError):
        return ModelExtractionError(f"could not reach the provider: {exc}", transient=True)
    if isinstance(exc, openai.APIStatusError):
        code = exc.status_code
        after = _retry_after(exc)
        detail = f"HTTP {code} from the provider: {exc.message}"
        if after is not None:
            detail += f" (retry-after {after:.3g}s)"
        return ModelExtractionError(
            detail,
            transient=code == 429 or code >= 500,
            retry_at=time.time() + after if after is not None else None,
        )
    if isinstance(exc, ModelBehaviorError):
        return ModelExtractionError(_behaviour_detail(exc))
    if isinstance(exc, MaxTurnsExceeded):
        # LitellmModel reports a refusal this way: a reply without a final output.
        return ModelExtractionError(
            "the model's reply held no output matching the schema (a refusal, or a tool call)"
        )
    return ModelExtractionError(f"{type(exc).__name__}: {exc}")


def _behaviour_detail(exc: ModelBehaviorError) -> str:
    text = str(exc)
    if "incomplete" in text:
        return f"the response was incomplete: {text}"
    return text


@functools.cache
def _strict_schema() -> dict[str, Any]:
    """The strict JSON schema of :class:`_ExtractionOutput`, made once per process (pydantic
    builds it anew at each call: a few milliseconds per extraction)."""

    return ensure_strict_json_schema(_ExtractionOutput.model_json_schema())


class ExtractionSchema(AgentOutputSchemaBase):
    """The structured output of phase 1: a strict schema valid for OpenAI and Azure (every
    property required, ``additionalProperties: false``, no ``default``), parsed with errors
    that say what was wrong."""

    def __init__(self) -> None:
        self._schema = copy.deepcopy(_strict_schema())

    def is_plain_text(self) -> bool:
        return False

    def name(self) -> str:
        return "sandbox_memory_extraction"

    def json_schema(self) -> dict[str, Any]:
        return self._schema

    def is_strict_json_schema(self) -> bool:
        return True

    def validate_json(self, json_str: str) -> _ExtractionParsed:
        excerpt = json.dumps(json_str[:OUTPUT_EXCERPT_CHARS])
        try:
            value = bounded.loads(json_str, limit=bounded.MAX_STATE_BYTES, what="the output")
        except ValueError as err:
            raise ModelBehaviorError(
                f"the model's output is not valid JSON ({err}); it began {excerpt}"
            ) from None
        try:
            return _ExtractionParsed.model_validate(value)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}"
                for e in err.errors()[:5]
            )
            raise ModelBehaviorError(
                f"the model's output does not match the schema ({problems}); it began {excerpt}"
            ) from None
