"""The model-backed engine: phase 1 through any ``agents.Model`` with structured output."""

from __future__ import annotations

import json
import os
import re

from agents import Agent, ModelSettings, Runner
from agents.models.interface import Model
from agents.run import RunConfig
from pydantic import BaseModel, Field

from ..render import load_prompt
from .base import Candidate, Extraction, ExtractionRequest
from .transcript import render_transcript

KNOWN_ENTRIES_IN_PROMPT = 200
"""Most known entries shown to the model for key reuse."""

KNOWN_ENTRIES_MAX_CHARS = 4_000
"""Characters of known entries in the prompt (about 1,000 tokens, some 20 entries): the
phase-1 prompt stays flat however large memory grows. The entries sharing the most words with
the transcript go first (newest first on ties), so the facts this rollout may update are shown."""

KNOWN_ENTRIES_SCANNED = 2_000
"""Newest known entries ranked for relevance; older ones are not shown."""

_WORD_RE = re.compile(r"[a-z0-9][a-z0-9_-]{2,}")


class _ExtractionOutput(BaseModel):
    rollout_summary: str
    rollout_slug: str
    raw_memory: str
    candidates: list[Candidate] = Field(default_factory=list)


def credentials_available() -> bool:
    """Whether the default OpenAI provider can be reached (an API key is configured)."""

    return bool(os.environ.get("OPENAI_API_KEY"))


def build_user_message(request: ExtractionRequest) -> str:
    parts = [f"Conversation id: {request.rollout_id}"]
    if request.previous_summary:
        parts.append(
            "Summary of the earlier part (already processed):\n" + request.previous_summary
        )
    transcript = render_transcript(request.segments, max_chars=request.max_input_chars)
    if request.known_entries:
        known = _known_for_prompt(request, transcript)
        parts.append("Known entries (reuse these keys for the same facts):\n" + json.dumps(known))
    parts.append("Transcript of the new part:\n" + transcript)
    return "\n\n".join(parts)


def _known_for_prompt(request: ExtractionRequest, transcript: str) -> list[dict[str, str]]:
    """Known entries within :data:`KNOWN_ENTRIES_MAX_CHARS`, most relevant to the transcript first."""

    words = set(_WORD_RE.findall(transcript.lower()))
    candidates = request.known_entries[:KNOWN_ENTRIES_SCANNED]
    shared = [
        len(words.intersection(_WORD_RE.findall(f"{e.key} {e.content[:200]}".lower())))
        for e in candidates
    ]
    order = sorted(range(len(candidates)), key=lambda i: (-shared[i], i))
    known: list[dict[str, str]] = []
    used = 0
    for i in order:
        e = candidates[i]
        item = {"key": e.key, "kind": e.kind, "content": e.content[:200]}
        cost = len(json.dumps(item)) + 2
        if used + cost > KNOWN_ENTRIES_MAX_CHARS:
            continue
        known.append(item)
        used += cost
        if len(known) >= KNOWN_ENTRIES_IN_PROMPT:
            break
    return known


class ModelEngine:
    """Extract with a model through the SDK's ``Runner`` (so any provider the SDK drives works)."""

    name = "model"

    def __init__(
        self,
        model: str | Model,
        *,
        model_settings: ModelSettings | None = None,
    ) -> None:
        self.model = model
        self.model_settings = model_settings

    async def extract(self, request: ExtractionRequest) -> Extraction:
        instructions = load_prompt("phase_one.md")
        if request.extra_prompt:
            instructions += "\n\nDeveloper guidance for this deployment:\n" + request.extra_prompt
        agent: Agent[None] = Agent(
            name="sandbox-memory phase 1",
            instructions=instructions,
            model=self.model,
            model_settings=self.model_settings or ModelSettings(),
            output_type=_ExtractionOutput,
        )
        result = await Runner.run(
            agent,
            build_user_message(request),
            max_turns=1,
            run_config=RunConfig(tracing_disabled=True, workflow_name="sandbox-memory"),
        )
        out = result.final_output_as(_ExtractionOutput)
        return Extraction(
            rollout_summary=out.rollout_summary,
            rollout_slug=out.rollout_slug,
            raw_memory=out.raw_memory,
            candidates=out.candidates,
        )
