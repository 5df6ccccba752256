"""What an extraction engine receives and returns (the phase-1 seam).

Both engines (model-backed and offline) take an :class:`ExtractionRequest` built from the new
segments of one rollout and return an :class:`Extraction`. Code, not the engine, enforces the
memory rules afterwards (see ``rules.py``): an engine only proposes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

EntryKind = Literal["fact", "decision", "preference", "procedure", "hypothesis"]
"""The five kinds of entry named by the specification."""

ENTRY_KINDS: tuple[str, ...] = ("fact", "decision", "preference", "procedure", "hypothesis")

ITEM_ID_FIELD = "memory_item_id"
"""Key added to every recorded item: the stable id that memory entries cite as their source."""


class ExtractionRequest(BaseModel):
    """The new material of one rollout, ready for extraction.

    ``segments`` are rollout lines (the SDK payload shape plus ``segment_id``) already redacted;
    every item in ``input`` and ``generated_items`` carries ``memory_item_id``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    rollout_id: str
    segments: list[dict[str, Any]]
    previous_summary: str | None = None
    known_entries: list[KnownEntry] = Field(default_factory=list)
    extra_prompt: str | None = None
    max_input_chars: int = 200_000
    """Rollout text longer than this is cut in the middle, keeping head and tail."""
    external_tools: tuple[str, ...] = ()
    """Function tools whose results are external data: marked ``(external)`` for the model."""
    feedback: str | None = None
    """Why the engine's previous answer for these segments was rejected (one retry)."""
    deadline: float | None = None
    """``time.monotonic()`` by which the extraction must end (the close's time budget)."""
    continues_rollout: bool = False
    """Whether earlier segments of this rollout were extracted before: only then can the first
    new message answer (or correct) something the agent did."""


class Subjects(BaseModel):
    """What an entry is about, as fields rather than only words in its text: a file's history
    of fixes is found by its path, a command's entry by the command."""

    files: list[str] = Field(default_factory=list)
    """Paths the lesson is about (files changed, not files only read)."""
    commands: list[str] = Field(default_factory=list)
    """Command lines it names (the failing and the verifying run, a procedure's command)."""
    tests: list[str] = Field(default_factory=list)
    """Test ids it names (the failing test)."""
    people: list[str] = Field(default_factory=list)
    """Who said it or whom it is about."""
    tools: list[str] = Field(default_factory=list)
    """Programs or tools it is about (``pytest``, ``ruff``)."""

    def empty(self) -> bool:
        return not (self.files or self.commands or self.tests or self.people or self.tools)


class KnownEntry(BaseModel):
    """An entry already in memory, shown to the engine so it reuses keys for the same fact."""

    key: str
    kind: EntryKind
    content: str
    subjects: Subjects | None = None
    """What it is about (see :class:`Subjects`): new evidence about the same files, tests or
    command updates this entry rather than starting a second one."""


class Candidate(BaseModel):
    """One proposed change to memory, citing the items it rests on."""

    key: str
    """Stable name of the fact (reuse the same key for the same fact)."""
    content: str = ""
    """The fact in plain text (empty for ``forget``)."""
    kind: EntryKind = "fact"
    sources: list[str] = Field(default_factory=list)
    """``memory_item_id`` values of the items this change rests on."""
    action: Literal["remember", "forget"] = "remember"
    keywords: list[str] = Field(default_factory=list)
    personal: bool = False
    """What the run's person said about themselves: kept as that person's entry, never shared
    (when the run has no person, there is no one to keep it private for)."""
    subjects: Subjects | None = None
    """What it is about (files, commands, tests, people, tools), as fields."""


class Extraction(BaseModel):
    """What phase 1 produces for one rollout's new segments."""

    rollout_summary: str
    """Markdown recap of the new segments (appended to the rollout summary file)."""
    rollout_slug: str
    """Short lowercase words joined by ``-`` naming the rollout's task."""
    raw_memory: str
    """Compact markdown notes for phase 2."""
    candidates: list[Candidate] = Field(default_factory=list)


@runtime_checkable
class ExtractionEngine(Protocol):
    """Anything that turns an :class:`ExtractionRequest` into an :class:`Extraction`.

    An engine may also say what it can do, as class attributes (read by :func:`traits`; an
    engine that says nothing is taken for one that calls a model, the cautious reading):

    - ``spends_model_calls``: each extraction costs model calls and tokens, so the close's
      budgets apply to it;
    - ``continues_from_notes``: given the rollout's earlier notes, it writes the next ones as
      their continuation (:attr:`ExtractionRequest.previous_summary`);
    - ``takes_feedback``: when every candidate it proposed was rejected, a second request
      saying why can do better.
    """

    name: str

    async def extract(self, request: ExtractionRequest) -> Extraction: ...


@dataclass(frozen=True)
class EngineTraits:
    """What an engine can do (see :class:`ExtractionEngine`)."""

    spends_model_calls: bool = True
    continues_from_notes: bool = True
    takes_feedback: bool = True


def traits(engine: ExtractionEngine) -> EngineTraits:
    """The traits ``engine`` declares; those it leaves out are a model engine's."""

    default = EngineTraits()
    return EngineTraits(
        **{
            name: bool(getattr(engine, name, getattr(default, name)))
            for name in ("spends_model_calls", "continues_from_notes", "takes_feedback")
        }
    )


_INSTRUCTION_RE = re.compile(
    r"\b(?:important|note to (?:the )?(?:ai|assistant|agent|model)|system prompt|"
    r"ignore (?:all |any |the |your )?(?:previous |prior |above )?instructions|"
    r"(?:always |must |please )?remember (?:that|to)|from now on|you (?:must|should|are to)|"
    r"do not tell|disregard|new instructions?|(?:system|assistant|developer)\s*:)",
    re.IGNORECASE,
)


def tool_text_as_data(text: str) -> str | None:
    """Text a tool printed, fit to be quoted to a later run: ``None`` when it addresses the
    agent ("IMPORTANT: remember that ...", "ignore your instructions"), since memory must not
    carry a tool's instructions into a prompt; else the text with backticks made quotes, so it
    stays inside the quote it is shown in."""

    if _INSTRUCTION_RE.search(text):
        return None
    return text.replace("`", "'")
