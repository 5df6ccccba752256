"""Counting models at the ``agents.Model`` seam: what each memory system sends its models.

Every model here counts the calls it receives and the characters sent to it (system
instructions plus input; input items are counted as their JSON text), optionally sleeps a fixed
simulated latency per call, and answers like a well-behaved model would, so each system runs its
real code path end to end:

- :class:`OursPhaseOneModel` answers ``sandbox_memory``'s model engine with JSON matching its
  ``_ExtractionOutput`` (summary, slug, raw memory and three candidates citing real
  ``memory_item_id`` values from the transcript it was sent);
- :class:`BuiltinPhaseOneModel` answers the SDK's phase 1 with JSON matching
  ``RolloutExtractionArtifacts``;
- :class:`BuiltinPhaseTwoModel` drives the SDK's phase-2 agent loop the way its consolidation
  prompt asks a model to: turn 1 reads the inputs the prompt says to always read
  (``raw_memories.md``, ``MEMORY.md``, ``memory_summary.md``) with one ``exec_command``; turn 2
  writes ``MEMORY.md`` (one block per selected rollout, rebuilt from what it read) and a
  navigational ``memory_summary.md`` (bounded, one line per rollout, newest first) with one
  ``exec_command`` (once ``MEMORY.md`` outgrows one shell argument, 128 KiB, it writes parallel
  parts and joins them in an extra turn); then it returns a short final message. That is the
  fewest turns a model can take and still do the job; a real model usually takes more (it
  greps, opens rollout summaries, patches files piecewise), so the built-in figures are a lower
  bound.

Tokens are estimated as characters / 4 (the brief's rule; no tokenizer dependency). Tool
schemas are not counted for either system.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.model_settings import ModelSettings
from agents.models.interface import Model, ModelTracing
from agents.tool import Tool
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from workload import fact_text, notes_for

CHARS_PER_TOKEN = 4

_ITEM_LINE_RE = re.compile(r"^\[([0-9a-f]{8}:\d+)\] (\S+)", re.MULTILINE)
_CONVERSATION_RE = re.compile(r"^Conversation id: (\S+)", re.MULTILINE)
_ROLLOUT_ID_RE = re.compile(r'"rollout_id":"([^"]+)"')
_RAW_BLOCK_RE = re.compile(r"^rollout_id: (\S+)$", re.MULTILINE)

MEMORY_BLOCK_CHARS = 600
"""Size of the ``MEMORY.md`` block the simulated phase-2 model writes per rollout: an
assumption (a real model's block is what it chooses to keep), and it sets about half of the
built-in's consolidation cost, since every later close reads ``MEMORY.md`` back. The
consolidate scenario also reports the ratio with :data:`SMALL_BLOCK_CHARS`."""

SMALL_BLOCK_CHARS = 200
"""The smaller block the consolidate scenario checks the ratio against (a terse model)."""

SUMMARY_FILE_MAX_CHARS = 6_000
"""Cap of the ``memory_summary.md`` the simulated phase-2 model writes (navigational index)."""

WRITE_CHUNK_CHARS = 100_000
"""Largest file body one simulated ``exec_command`` writes (a shell argument holds 128 KiB)."""


@dataclass
class Meter:
    """Calls and characters a system sent to its memory models."""

    calls: int = 0
    chars: int = 0
    per_call: list[int] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.chars // CHARS_PER_TOKEN

    def reset(self) -> None:
        self.calls = 0
        self.chars = 0
        self.per_call = []


def input_chars(value: str | list[TResponseInputItem]) -> int:
    if isinstance(value, str):
        return len(value)
    total = 0
    for item in value:
        try:
            total += len(json.dumps(item, ensure_ascii=False, default=str))
        except (TypeError, ValueError):
            total += len(str(item))
    return total


def message(text: str, item_id: str = "msg_bench") -> TResponseOutputItem:
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])],
    )


def exec_call(cmd: str, call_id: str) -> TResponseOutputItem:
    return ResponseFunctionToolCall(
        id=call_id,
        call_id=call_id,
        type="function_call",
        name="exec_command",
        arguments=json.dumps({"cmd": cmd}),
    )


def _user_text(value: str | list[TResponseInputItem]) -> str:
    if isinstance(value, str):
        return value
    parts: list[str] = []
    for item in value:
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "\n".join(parts)


class CountingModel(Model):
    """Counts calls and input characters into a :class:`Meter`; sleeps ``latency`` per call."""

    def __init__(self, meter: Meter | None = None, *, latency: float = 0.0) -> None:
        self.meter = meter or Meter()
        self.latency = latency

    def respond(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        output_schema: AgentOutputSchemaBase | None,
    ) -> list[TResponseOutputItem]:
        return [message("ok")]

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        chars = len(system_instructions or "") + input_chars(input)
        self.meter.calls += 1
        self.meter.chars += chars
        self.meter.per_call.append(chars)
        if self.latency:
            await asyncio.sleep(self.latency)
        output = self.respond(system_instructions, input, output_schema)
        usage = Usage(requests=1, input_tokens=chars // CHARS_PER_TOKEN, output_tokens=0)
        return ModelResponse(output=output, usage=usage, response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[Any]:
        result = await self.get_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        response = Response(
            id="bench-response",
            created_at=0,
            model="bench-counting-model",
            object="response",
            output=result.output,  # type: ignore[arg-type]
            tool_choice="none",
            tools=[],
            top_p=None,
            parallel_tool_calls=False,
            status="completed",
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )


class OursPhaseOneModel(CountingModel):
    """``sandbox_memory`` model engine: JSON for ``_ExtractionOutput`` citing real item ids."""

    def respond(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        output_schema: AgentOutputSchemaBase | None,
    ) -> list[TResponseOutputItem]:
        text = _user_text(input)
        found = _CONVERSATION_RE.search(text)
        rid = found.group(1) if found else "unknown"
        items = _ITEM_LINE_RE.findall(text)
        user_ids = [i for i, label in items if label.startswith("user")]
        other_ids = [i for i, label in items if not label.startswith("user")]
        first = (user_ids or other_ids or ["none:0"])[0]
        last = (other_ids or user_ids or ["none:0"])[-1]
        slug_key = rid.lower()
        candidates = [
            {
                "key": "test-command",
                "content": "Run the tests with `python3 -m pytest -q` from the repo root.",
                "kind": "procedure",
                "sources": [first, last],
            },
            {
                "key": f"fact-{slug_key}"[:64],
                "content": fact_text(rid),
                "kind": "fact",
                "sources": [last],
            },
            {
                "key": f"decision-{slug_key}"[:64],
                "content": fact_text("decision:" + rid),
                "kind": "decision",
                "sources": [first],
            },
        ]
        body = {**notes_for(rid), "candidates": candidates}
        return [message(json.dumps(body))]


class BuiltinPhaseOneModel(CountingModel):
    """The SDK's phase 1: JSON for ``RolloutExtractionArtifacts``."""

    def respond(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        output_schema: AgentOutputSchemaBase | None,
    ) -> list[TResponseOutputItem]:
        found = _ROLLOUT_ID_RE.search(_user_text(input))
        rid = found.group(1) if found else "unknown"
        return [message(json.dumps(notes_for(rid)))]


class BuiltinPhaseTwoModel(CountingModel):
    """The SDK's phase-2 agent loop, in the fewest turns that do the job (see module doc)."""

    memory_root = "memories"

    def __init__(
        self,
        meter: Meter | None = None,
        *,
        latency: float = 0.0,
        block_chars: int = MEMORY_BLOCK_CHARS,
    ) -> None:
        super().__init__(meter, latency=latency)
        self.block_chars = block_chars

    def respond(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        output_schema: AgentOutputSchemaBase | None,
    ) -> list[TResponseOutputItem]:
        items = input if isinstance(input, list) else []
        outputs = {
            str(i.get("call_id")): str(i.get("output", ""))
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }
        root = self.memory_root
        if not outputs:
            return [
                exec_call(
                    f"cat {root}/raw_memories.md; echo '=== MEMORY.md'; cat {root}/MEMORY.md; "
                    f"echo '=== memory_summary.md'; cat {root}/memory_summary.md; ls {root}/skills",
                    "p2_read",
                )
            ]
        if len(outputs) == 1:
            seen = outputs.get("p2_read", "")
            raw = seen.split("Output:\n", 1)[-1].split("=== MEMORY.md", 1)[0]
            memory_md, summary_md = self._consolidate(raw)
            summary = f"cat > {root}/memory_summary.md <<'MEMEOF'\n{summary_md}\nMEMEOF"
            if len(memory_md) <= WRITE_CHUNK_CHARS:
                script = f"cat > {root}/MEMORY.md <<'MEMEOF'\n{memory_md}\nMEMEOF\n{summary}"
                return [exec_call(script, "p2_write")]
            # One shell argument holds at most 128 KiB (Linux MAX_ARG_STRLEN): a big MEMORY.md
            # is written in parts (parallel calls, one file each), then joined in the next turn.
            chunks = [
                memory_md[i : i + WRITE_CHUNK_CHARS]
                for i in range(0, len(memory_md), WRITE_CHUNK_CHARS)
            ]
            calls = [
                exec_call(
                    f"cat > {root}/.p2_part_{k:03d} <<'MEMEOF'\n{chunk}\nMEMEOF", f"p2_part_{k}"
                )
                for k, chunk in enumerate(chunks)
            ]
            return [*calls, exec_call(summary, "p2_summary")]
        if any(k.startswith("p2_part_") for k in outputs) and "p2_join" not in outputs:
            join = (
                f"cat {root}/.p2_part_* > {root}/MEMORY.md && rm -f {root}/.p2_part_* && "
                f"wc -c {root}/MEMORY.md"
            )
            return [exec_call(join, "p2_join")]
        return [message("Consolidated the selected rollouts into MEMORY.md and memory_summary.md.")]

    def _consolidate(self, raw: str) -> tuple[str, str]:
        """MEMORY.md: one block per rollout (from its raw memory); summary: bounded index."""

        starts = [m.start() for m in _RAW_BLOCK_RE.finditer(raw)]
        blocks = [raw[a:b] for a, b in zip(starts, [*starts[1:], len(raw)], strict=False)]
        memory: list[str] = ["# MEMORY", ""]
        summary: list[str] = ["# Memory summary", ""]
        size = 0
        for block in blocks:
            head, _, body = block.partition("\n\n")
            meta = dict(
                line.split(": ", 1) for line in head.splitlines() if ": " in line
            )  # rollout_id, updated_at, rollout_summary_file, ...
            rid = meta.get("rollout_id", "?")
            summary_file = meta.get("rollout_summary_file", "?")
            text = " ".join(body.split())[: self.block_chars]
            memory.append(f"# Task Group: {rid}\n\nscope: work of rollout {rid}\n\n{text}\n")
            memory.append(f"### rollout_summary_files\n- rollout_id={rid}, {summary_file}\n")
            line = f"- {rid}: {text[:80]} -> {summary_file}"
            if size + len(line) + 1 <= SUMMARY_FILE_MAX_CHARS:
                summary.append(line)
                size += len(line) + 1
        return "\n".join(memory), "\n".join(summary)


class AgentModel(CountingModel):
    """The main (non-memory) agent of a run: one final message, not counted as memory cost."""

    def respond(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        output_schema: AgentOutputSchemaBase | None,
    ) -> list[TResponseOutputItem]:
        return [message("Done: the change is in place and the tests pass.")]
