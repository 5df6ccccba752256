"""The model-backed engine: phase 1 through any ``agents.Model`` with structured output."""

from __future__ import annotations

import json
import os

from agents import Agent, ModelSettings, Runner
from agents.models.interface import Model
from agents.run import RunConfig
from pydantic import BaseModel, Field

from ..render import load_prompt
from .base import Candidate, Extraction, ExtractionRequest
from .transcript import render_transcript

KNOWN_ENTRIES_IN_PROMPT = 200
"""Known entries shown to the model for key reuse: bounds the prompt as memory grows."""


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
    if request.known_entries:
        known = [
            {"key": e.key, "kind": e.kind, "content": e.content[:200]}
            for e in request.known_entries[:KNOWN_ENTRIES_IN_PROMPT]
        ]
        parts.append("Known entries (reuse these keys for the same facts):\n" + json.dumps(known))
    parts.append(
        "Transcript of the new part:\n"
        + render_transcript(request.segments, max_chars=request.max_input_chars)
    )
    return "\n\n".join(parts)


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
