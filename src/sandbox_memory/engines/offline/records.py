"""What the walk over a rollout collects: commands, patches, statements, what people said, and the
capped list of events; and how a speaker is named.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import date

from sandbox_memory.engines.base import Subjects
from sandbox_memory.engines.changes import FileChange
from sandbox_memory.engines.commands import READ_ONLY_GIT, READ_ONLY_PROGRAMS

from .shell import BENIGN_EXIT_ONE, CHECK_CATEGORIES


@dataclass
class Command:
    call_item_id: str
    cmd: str
    workdir: str | None
    position: int
    segment_index: int
    category: str | None
    signature: str
    program: str
    output_item_id: str | None = None
    output_position: int = -1
    exit_code: int | None = None
    error_line: str | None = None
    failure_words: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        if self.exit_code is None or self.exit_code == 0:
            return False
        return not (self.exit_code == 1 and self.program in BENIGN_EXIT_ONE)

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def kind(self) -> str:
        return self.category or self.signature

    def ids(self) -> list[str]:
        return [i for i in (self.call_item_id, self.output_item_id) if i]

    @property
    def may_change_state(self) -> bool:
        """Whether this command could be what fixed a failure (installs, scripts, migrations),
        as opposed to a check or a read-only look around."""

        if self.category in CHECK_CATEGORIES or self.program in READ_ONLY_PROGRAMS:
            return False
        if self.program == "git":
            words = self.signature.split()
            return len(words) > 1 and words[1] not in READ_ONLY_GIT
        return bool(self.program)


@dataclass
class Patch:
    call_item_id: str
    files: list[tuple[str, str]]
    """``(operation, path)`` with operation one of created, updated, deleted, moved."""
    position: int
    output_item_id: str | None = None
    ok: bool | None = None
    changes: dict[str, FileChange] = field(default_factory=dict)
    """What changed in each file, by path, when the call says it."""


@dataclass(frozen=True)
class Statement:
    item_id: str
    text: str
    kind: str
    """``preference``, ``decision`` or ``correction``."""
    speaker: str | None = None
    personal: bool = False


@dataclass(frozen=True)
class Said:
    """The informative sentences of one user message: a stated fact."""

    item_id: str
    speaker: str | None
    said_on: date | None
    text: str
    """The sentences, whole, relative dates resolved."""
    personal: bool
    """Whether the speaker talks about themselves (first person)."""
    from_task: bool = False
    """Said in the run's first request (in a task run, the problem the run works on)."""
    owned: bool = False
    """Says something about the speaker or their team (``I``, ``we``, ``our`` ...)."""
    asked: tuple[str, str, str] | None = None
    """``(who asked, question, its item id)`` this message answers: an answer is read with its
    question, and the fact cites the question's item too (it quotes it)."""


class Capped:
    """The first ``head`` and last ``tail`` lines added, and how many were dropped between."""

    def __init__(self, head: int, tail: int) -> None:
        self._head_cap = head
        self.head: list[str] = []
        self.tail: deque[str] = deque(maxlen=tail)
        self.total = 0

    def add(self, line: str) -> None:
        self.total += 1
        if len(self.head) < self._head_cap:
            self.head.append(line)
        else:
            self.tail.append(line)

    def lines(self) -> list[str]:
        dropped = self.total - len(self.head) - len(self.tail)
        middle = [f"- … {dropped} more events …"] if dropped > 0 else []
        return [*self.head, *middle, *self.tail]


def speaker_name(speaker: str | None) -> str:
    return speaker if speaker else "The user"


def speaker_subjects(speaker: str | None) -> Subjects | None:
    return Subjects(people=[speaker]) if speaker else None
