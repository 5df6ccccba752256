"""Rendering: ``MEMORY.md``, ``memory_summary.md``, ``skills/`` and the injected prompt.

Everything here is derived from the structured store; nothing is parsed back except the
live-update lines of ``MEMORY.md`` (see :func:`parse_registry`).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import hashlib
import itertools
import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from operator import itemgetter
from pathlib import Path

from pydantic import BaseModel, ValidationError

from .. import bounded
from ..stores.records import Entry, RolloutProgress, Source
from ..workspace.records import LocalRecords

PROMPTS_DIR = Path(__file__).parents[1] / "prompts"

ENTRY_LINE_RE = re.compile(
    r"^- \*\*(?P<key>[^*]+)\*\* \((?P<kind>[a-z]+)\): (?P<content>.*?)(?:  <!-- .*-->)?\s*$"
)
"""One registry line: ``- **key** (kind): content  <!-- sources ... -->``."""

KIND_TITLES = {
    "preference": "Preferences",
    "procedure": "Procedures",
    "decision": "Decisions",
    "fact": "Facts",
    "hypothesis": "Hypotheses",
}

RECENT_ROLLOUTS_IN_SUMMARY = 10
"""Rollouts listed at the end of memory_summary.md: enough to point at recent work."""


@functools.cache
def load_prompt(name: str) -> str:
    return (PROMPTS_DIR / name).read_text("utf-8")


def _one_line(text: str) -> str:
    return " ".join(text.split())


LINE_SOURCES = 6
"""Sources cited on an entry's registry line: enough to find the run and its turns; the entry
keeps them all (``memory-cli show <key>``)."""


def cited(sources: Iterable[Source]) -> str:
    """Sources as a registry line cites them: ``conversation#item``, and an item of the same
    segment right after it by its number alone (``run-1#3f20710c:3,7``, for ``3f20710c:3`` and
    ``3f20710c:7``): a segment's prefix is written once, not once per item."""

    refs: list[str] = []
    last: tuple[str, str] | None = None
    for source in sources:
        segment, colon, number = source.item.rpartition(":")
        here = (source.conversation, segment)
        if colon and segment and number.isdigit() and here == last:
            refs[-1] += f",{number}"
            continue
        refs.append(f"{source.conversation}#{source.item}")
        last = here if colon and segment and number.isdigit() else None
    return ", ".join(refs)


def entry_line(entry: Entry, *, with_sources: bool = True) -> str:
    line = f"- **{entry.key}** ({entry.kind}): {_one_line(entry.content)}"
    if with_sources:
        line += f"  <!-- sources: {cited(entry.sources[:LINE_SOURCES])} -->"
    return line


def visible(entry: Entry, person: str | None) -> bool:
    """Active, and shared or belonging to ``person``."""

    return entry.status == "active" and entry.exists_for(person)


def newest_first(entries: Iterable[Entry]) -> list[Entry]:
    return sorted(entries, key=lambda e: (e.updated_at, e.key), reverse=True)


def budgeted_lines(entries: Iterable[Entry], budget: int) -> tuple[list[str], int]:
    """Whole entry lines, newest first, stopping before the first that does not fit.

    Returns the lines and how many entries were left out.
    """

    ordered = newest_first(entries)
    lines: list[str] = []
    used = 0
    for i, entry in enumerate(ordered):
        line = entry_line(entry, with_sources=False)
        cost = len(line) + 1
        if used + cost > budget:
            return lines, len(ordered) - i
        lines.append(line)
        used += cost
    return lines, 0


def render_summary_text(
    *,
    layout_entries: Iterable[Entry],
    conversation_entries: Iterable[Entry],
    person: str | None,
    budget: int,
) -> str:
    """The memory text injected at run start: never more than ``budget`` characters."""

    conv = [e for e in conversation_entries if visible(e, person)]
    conv_keys = {e.key for e in conv}
    lay = [e for e in layout_entries if visible(e, person) and e.key not in conv_keys]
    header_conv = "### This conversation\n"
    header_lay = "### Learned in earlier conversations\n"
    parts: list[str] = []
    remaining = budget
    if conv:
        lines, _ = budgeted_lines(conv, remaining - len(header_conv))
        if lines:
            block = header_conv + "\n".join(lines) + "\n"
            parts.append(block)
            remaining -= len(block) + 1
    if lay and remaining > len(header_lay) + 20:
        lines, _ = budgeted_lines(lay, remaining - len(header_lay))
        if lines:
            parts.append(header_lay + "\n".join(lines) + "\n")
    return "\n".join(parts).strip()


_PLACEHOLDER_RE = re.compile(r"\{([a-z_]+)\}")

RELEVANT_BEGIN = "========= RELEVANT_TO_THIS_TASK BEGINS ========="
RELEVANT_END = "========= RELEVANT_TO_THIS_TASK ENDS ========="


def render_read_prompt(
    *,
    memory_dir: str,
    summary: str,
    live_update: bool,
    person: str | None = None,
    relevant: str = "",
) -> str:
    """The memory prompt: who the agent works with and the privacy rules (when a person is
    known), then how to use memory, the summary and the section relevant to this task (when
    there is one; see ``render/relevant.py``)."""

    parts: list[str] = []
    if person:
        parts.append(
            load_prompt("person.md")
            .replace("{person}", " ".join(person.split()))
            .replace("{memory_dir}", memory_dir)
            .strip()
        )
    if summary or relevant:
        update = load_prompt("live_update.md" if live_update else "read_only.md")
        block = f"\n\n{RELEVANT_BEGIN}\n{relevant}\n{RELEVANT_END}" if relevant else ""
        values = {
            "update_instructions": update.strip().replace("{memory_dir}", memory_dir),
            "memory_dir": memory_dir,
            "relevant": block,
            "summary": summary,
        }
        # One pass: memory text that happens to hold "{summary}" is not a placeholder.
        parts.append(
            _PLACEHOLDER_RE.sub(
                lambda m: values.get(m[1], m[0]), load_prompt("memory_read.md")
            ).strip()
        )
    return "\n\n".join(parts)


@dataclass
class RolloutRef:
    rollout_id: str
    progress: RolloutProgress

    @property
    def summary_file(self) -> str:
        return f"rollout_summaries/{self.rollout_id}_{self.progress.slug}.md"


def render_memory_md(entries: Iterable[Entry], rollouts: list[RolloutRef]) -> str:
    """The searchable registry: every active entry by kind, with sources, then the files
    lessons are about (each file's lessons), then rollouts."""

    # Shared entries only: a person's private entries never land in a file every run can read.
    active = [e for e in entries if e.status == "active" and e.person is None]
    out = list(MEMORY_MD_HEADER)
    for kind, title in KIND_TITLES.items():
        group = newest_first(e for e in active if e.kind == kind)
        if not group:
            continue
        out.append(f"## {title}")
        out.append("")
        out.extend(entry_line(entry) for entry in group)
        out.append("")
    out.extend(files_lines((e.updated_at, e.key, entry_files(e)) for e in active))
    out.extend(rollout_lines(rollouts))
    return "\n".join(out)


FILE_LESSONS_LISTED = 20
"""Lessons named on one file's line of ``MEMORY.md``'s ``## Files`` (the newest): a file
every task touches stays one readable line; the others are found by grepping its path."""


def entry_files(entry: Entry) -> tuple[str, ...]:
    """The files ``entry`` is about (:attr:`Entry.subjects`), as rendered in ``## Files``."""

    return tuple(entry.subjects.files) if entry.subjects is not None else ()


def files_lines(shown: Iterable[tuple[int, str, Sequence[str]]]) -> list[str]:
    """The ``## Files`` section of ``MEMORY.md`` from ``(updated_at, key, files)`` of each shown
    entry: one line per file, by path, naming the lessons about it newest first, so a file's
    history of fixes is one grep of its path away. Empty when no entry names a file."""

    by_file: dict[str, list[tuple[int, str]]] = {}
    for updated_at, key, files in shown:
        for path in file_paths(files):
            by_file.setdefault(path, []).append((updated_at, key))
    if not by_file:
        return []
    out = ["## Files", ""]
    for path in sorted(by_file):
        out.append(file_line(path, sorted(by_file[path], reverse=True)))
    out.append("")
    return out


def file_paths(files: Iterable[str]) -> list[str]:
    """An entry's files as ``## Files`` names them: on one line, without backquotes, once."""

    found = dict.fromkeys(" ".join(f.split()) for f in files)
    return [path.replace("`", "'") for path in found if path]


def file_line(path: str, lessons: Sequence[tuple[int, str]]) -> str:
    """One line of ``## Files``: ``path`` and its lessons (``(updated_at, key)``, newest
    first), the newest :data:`FILE_LESSONS_LISTED` by key and a count of the others."""

    keys = ", ".join(key for _, key in lessons[:FILE_LESSONS_LISTED])
    more = len(lessons) - FILE_LESSONS_LISTED
    return f"- `{path}`: {keys}" + (f" and {more} older" if more > 0 else "")


def render_summary_file(entries: Iterable[Entry], rollouts: list[RolloutRef], budget: int) -> str:
    """``memory_summary.md``: shared entries within the budget plus recent rollouts."""

    shared = [e for e in entries if e.status == "active" and e.person is None]
    lines, left_out = budgeted_lines(shared, budget)
    return summary_tail(lines, left_out, rollouts)


SKILL_MIN_STEPS = 2
"""Steps (commands, numbered lines, or a command and a step it must come before or after) that
make a procedure a skill: one command is its entry's line in ``MEMORY.md`` already."""

_SKILL_SPAN_RE = re.compile(r"`([^`\n]+)`")
_SKILL_LIST_RE = re.compile(r"^\s*(?:\d+[.)]|[-*])\s+\S", re.MULTILINE)
_SKILL_ORDER_RE = re.compile(r"\b(?:then|before|after|first|once|followed by|until)\b", re.I)


def procedure_steps(content: str) -> int:
    """How many steps a procedure's text names: its distinct commands (code spans) or list
    lines, one more when it orders a command against another step ("Run `make gen` before the
    tests")."""

    spans = {" ".join(s.split()) for s in _SKILL_SPAN_RE.findall(content)}
    steps = max(len(spans), len(_SKILL_LIST_RE.findall(content)))
    return steps + 1 if len(spans) == 1 and _SKILL_ORDER_RE.search(content) else steps


def is_skill(entry: Entry) -> bool:
    """Whether a layout entry gets a ``skills/<key>/SKILL.md``: a shared procedure of several
    steps; a single command stays a line of ``MEMORY.md``. Decided by what the procedure says,
    never by its citations: which of several equal statements an entry cites is a tie that a
    close interrupted and run again may settle differently."""

    if entry.kind != "procedure" or entry.person is not None:
        return False
    return procedure_steps(entry.content) >= SKILL_MIN_STEPS


def render_skill(entry: Entry) -> str:
    refs = ", ".join(f"{s.conversation}#{s.item}" for s in entry.sources)
    return (
        f"---\nname: {entry.key}\ndescription: {_one_line(entry.content)[:200]}\n---\n\n"
        f"# {entry.key}\n\n{entry.content.strip()}\n\nLearned from: {refs}\n"
    )


def skill_digest(entry: Entry) -> str:
    """SHA-256 of the ``SKILL.md`` rendered for ``entry``."""

    return hashlib.sha256(render_skill(entry).encode("utf-8")).hexdigest()


def parse_registry(text: str) -> dict[str, tuple[str, str]]:
    """Entry lines of a ``MEMORY.md`` (key -> (kind, content)), for live-update intake."""

    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        match = ENTRY_LINE_RE.match(line.rstrip())
        if match:
            found[match.group("key").strip()] = (
                match.group("kind"),
                match.group("content").strip(),
            )
    return found


def format_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


MEMORY_MD_HEADER = (
    "# MEMORY",
    "",
    "Registry of what earlier runs learned. Search it with grep; each line cites the",
    "conversation#item it rests on (more items of one segment by number: `run#3f20710c:3,7`).",
    "Then each changed file with its lessons (grep a path for its history of fixes) and the",
    "rollout summaries.",
    "",
)


def rollout_lines(rollouts: list[RolloutRef]) -> list[str]:
    """The ``## Rollouts`` section of ``MEMORY.md``."""

    if not rollouts:
        return []
    out = ["## Rollouts", ""]
    for ref in rollouts:
        out.append(
            f"- {ref.progress.updated_at[:19]} `{ref.rollout_id}` "
            f"({ref.progress.slug}): {ref.summary_file}"
        )
    out.append("")
    return out


def summary_tail(lines: list[str], left_out: int, rollouts: list[RolloutRef]) -> str:
    """``memory_summary.md`` from its entry lines, what they left out, and the rollouts."""

    out = ["# Memory summary", ""]
    out.extend(lines or ["(no memory yet)"])
    if left_out:
        out.append(f"\n({left_out} older entries are in MEMORY.md)")
    if rollouts:
        out.append("")
        out.append("Recent rollouts:")
        for ref in rollouts[:RECENT_ROLLOUTS_IN_SUMMARY]:
            out.append(f"- {ref.progress.slug} -> {ref.summary_file}")
    return "\n".join(out) + "\n"


_Stamp = tuple[int, str]


_Own = tuple[int, str, str | None, str, int, Sequence[str]]
"""What the rendering keeps of an active layout entry: ``updated_at``, kind, person, its line
(:func:`entry_line`; a private entry's without sources), the length of that line without
sources and the files it is about (:func:`entry_files`). Not the entry: the rendering holds a
line per entry, not every parsed entry."""


def _own_row(entry: Entry) -> _Own | None:
    if entry.status != "active":
        return None
    short = entry_line(entry, with_sources=False)
    line = short if entry.person is not None else entry_line(entry)
    return (entry.updated_at, entry.kind, entry.person, line, len(short), entry_files(entry))


_Won = tuple[Entry, str, str, int]
"""A key shown from a registry entry: the entry, its conversation, its ``MEMORY.md`` line and
the length of that line without sources."""


class SavedRows(BaseModel):
    """A :class:`LayoutRendering` as saved between processes (:meth:`LayoutRendering.saved`):
    per active layout entry, in parallel lists, what the rendering keeps of it."""

    keys: list[str]
    updated_at: list[int]
    kinds: list[str]
    persons: list[str | None]
    lines: list[str]
    short: list[int]
    """Length of each line without its sources."""
    files: list[tuple[str, ...]]
    """The files each entry is about (tuples: the rows hold them as they are parsed)."""
    skill_keys: list[str]
    skill_digests: list[str]


class LayoutRendering:
    """What memory shows, kept up to date entry by entry: the rendered files come out
    byte-identical to rendering every entry again (:func:`render_memory_md`,
    :func:`render_summary_file`, the prompt index), at the cost of the entries that changed.

    :meth:`rebuild` takes in every layout entry (streamed: each is reduced to its line and
    sort key, and not kept); :meth:`update` only the entries of the keys that changed. The
    registry is given whole to both (it is small) and compared by identity with the last one.
    Each output is then joined from cached lines.
    """

    def __init__(self) -> None:
        self._own: dict[str, _Own] = {}
        """Active layout entries, by key (see :data:`_Own`)."""
        self._registry: dict[str, list[tuple[Entry, str]]] = {}
        self._from_registry: dict[str, _Won] = {}
        """Keys whose shown entry (newest active shared) is a registry entry, not the layout's
        row (see :data:`_Won`). Every other shown key is shown from its row of :attr:`_own`
        (shared, active): the rendering keeps no second table of every shown entry."""
        self.skills: dict[str, str] = {}
        """Layout procedures rendered as ``skills/<key>/SKILL.md``: key -> the SHA-256 of
        that file's text (:func:`render_skill`)."""
        self._by_kind: dict[str, list[_Stamp]] = {kind: [] for kind in KIND_TITLES}
        self._shared: list[_Stamp] = []
        self._by_person: dict[str, list[_Stamp]] = {}
        self._files: dict[str, Sequence[str]] = {}
        """Shown key -> the files it is about, when it names any (``## Files``)."""
        self._next: tuple[dict[str, _Own], dict[str, str]] = ({}, {})
        """A rebuild's entries taken in so far."""

    # ------------------------------------------------------------ updates

    def rebuild(
        self, layout_entries: Iterable[Entry], registry_groups: Mapping[str, list[Entry]]
    ) -> set[str]:
        """Take in every layout entry and the registry as they are now, forgetting what was
        taken in before; returns the keys whose entry (shown, private or skill) may have
        changed (every key, before and now). The entries may be handed over in parts
        instead: :meth:`start_rebuild`, :meth:`take` each part, :meth:`finish_rebuild`."""

        self.start_rebuild()
        self.take(layout_entries)
        return self.finish_rebuild(registry_groups)

    def start_rebuild(self) -> None:
        self._next = ({}, {})

    def take(self, layout_entries: Iterable[Entry]) -> None:
        """Take in some layout entries of a rebuild (each reduced to its line at once)."""

        own, skills = self._next
        for entry in layout_entries:
            row = _own_row(entry)
            if row is not None:
                own[entry.key] = row
                if is_skill(entry):
                    skills[entry.key] = skill_digest(entry)

    def finish_rebuild(self, registry_groups: Mapping[str, list[Entry]]) -> set[str]:
        before = {*self._own, *self._from_registry, *self.skills}
        own, skills = self._next
        self._own, self.skills = own, skills
        self._next = ({}, {})
        self._registry = _registry_candidates(registry_groups)
        self._from_registry, self._files = {}, {}
        self._shared, self._by_person = [], {}
        self._by_kind = {kind: [] for kind in KIND_TITLES}
        keys = {*own, *self._registry}
        for key in keys:
            self._show(key, insort=False)
        self._shared.sort()
        for group in (*self._by_kind.values(), *self._by_person.values()):
            group.sort()
        return before | keys

    # ------------------------------------------------------------ saved state

    @property
    def size(self) -> int:
        """Active layout entries taken in."""

        return len(self._own)

    def saved(self) -> SavedRows:
        """What :meth:`restore` needs to hold this rendering again in another process: every
        active layout entry's row (see :data:`_Own`) and the skills' digests, as flat lists
        (parsed back without a Python step per entry). The registry is not in it: it is small
        and read whole at every render."""

        return self.saved_of(self._own)

    def saved_of(self, keys: Iterable[str]) -> SavedRows:
        """The rows of ``keys`` alone (those active now; the others are not in it), as
        :meth:`saved` gives every row: what changed since a saved rendering, for
        :meth:`restore`'s ``delta``."""

        own, skills = self._own, self.skills
        # Oldest first, the order :meth:`restore` sorts them in (a sort of sorted rows is a
        # pass over them).
        held = sorted((k for k in keys if k in own), key=lambda k: (own[k][0], k))
        rows = [own[k] for k in held]
        skill_keys = [k for k in held if k in skills]
        # Built here from the rendering's own rows: not validated again (at 20,000 entries
        # validating the lists cost about as much as writing them).
        return SavedRows.model_construct(
            keys=held,
            updated_at=[r[0] for r in rows],
            kinds=[r[1] for r in rows],
            persons=[r[2] for r in rows],
            lines=[r[3] for r in rows],
            short=[r[4] for r in rows],
            files=[tuple(r[5]) for r in rows],
            skill_keys=skill_keys,
            skill_digests=[skills[k] for k in skill_keys],
        )

    def restore(
        self,
        rows: SavedRows,
        registry_groups: Mapping[str, list[Entry]],
        *,
        delta: tuple[Iterable[str], SavedRows] | None = None,
    ) -> None:
        """Hold the rendering :meth:`saved` gave, with the registry as it is now: the state
        :meth:`rebuild` reaches from the entries the rows were made of, without parsing one.
        ``delta``: keys changed since ``rows`` were saved and their rows now (:meth:`saved_of`;
        a key without a row is no longer active), taken in over ``rows``.
        Raises ``ValueError`` for lists of different lengths."""

        with collection_paused():
            self._restore(rows, registry_groups, delta)

    def _restore(
        self,
        rows: SavedRows,
        registry_groups: Mapping[str, list[Entry]],
        delta: tuple[Iterable[str], SavedRows] | None,
    ) -> None:
        own, skills = _saved_tables(rows)
        if delta is not None:
            changed, now = delta
            for key in changed:
                own.pop(key, None)
                skills.pop(key, None)
            own_now, skills_now = _saved_tables(now)
            own.update(own_now)
            skills.update(skills_now)
        self._own = own
        self.skills = skills
        self._next = ({}, {})
        # The rows are the table, indexed by date, kind and person, with no second copy of
        # each. The registry's shown entries over the layout's (as :meth:`finish_rebuild`
        # decides) are found first: the rows they hide are left out as the indexes are built
        # (taking each out of a built index moved 15,000 stamps a time).
        self._registry = _registry_candidates(registry_groups)
        won: dict[str, _Won] = {}
        for key in self._registry:
            held = self._held(key)
            if held is not None and isinstance(held[1], Entry):
                entry, owner = held[1], held[2]
                assert owner is not None
                short = len(entry_line(entry, with_sources=False))
                won[key] = (entry, owner, entry_line(entry), short)
        self._from_registry = won
        # Indexed a column at a time (few Python steps per row: 15,000 rows at 20,000 entries).
        keys, rows_ = list(own), list(own.values())
        persons = list(map(itemgetter(2), rows_))
        shown = list(map(operator.is_, itertools.repeat(None), persons))  # shared rows
        if won:
            shown = [s and k not in won for s, k in zip(shown, keys, strict=True)]
        files = list(map(itemgetter(5), rows_))
        with_files = map(all, zip(shown, files, strict=True))  # shown and naming a file
        self._files = dict(itertools.compress(zip(keys, files, strict=True), with_files))
        dates = map(itemgetter(0), rows_)
        stamps = list(itertools.compress(zip(dates, keys, strict=True), shown))
        for key, (entry, _, _, _) in won.items():
            stamps.append((entry.updated_at, key))
            about = entry_files(entry)
            if about:
                self._files[key] = about
        stamps.sort()
        self._shared = stamps
        self._by_kind = {kind: [] for kind in KIND_TITLES}
        for stamp in stamps:
            key = stamp[1]
            group = self._by_kind.get(won[key][0].kind if key in won else own[key][1])
            if group is not None:
                group.append(stamp)
        self._by_person = {}
        for key, person in zip(keys, persons, strict=True):
            if person is not None:
                self._by_person.setdefault(person, []).append((own[key][0], key))
        for group in self._by_person.values():
            group.sort()

    def update(
        self,
        changed: Mapping[str, Entry | None],
        registry_groups: Mapping[str, list[Entry]],
    ) -> set[str]:
        """Take in the layout entries of the keys that changed (``None``: removed) and the
        registry as it is now; returns the keys whose entry (shown, private or skill) may have
        changed."""

        keys = set(changed)
        candidates = _registry_candidates(registry_groups)
        before = self._registry
        for key in {*before, *candidates}:
            was, now = before.get(key, []), candidates.get(key, [])
            if len(was) != len(now) or any(
                a[0] is not b[0] or a[1] != b[1] for a, b in zip(was, now, strict=True)
            ):
                keys.add(key)
        # Each key's place taken out as the tables hold it now, then put back as it is after.
        for key in keys:
            self._unshow(key)
        for key, entry in changed.items():
            row = None if entry is None else _own_row(entry)
            if row is None:
                self._own.pop(key, None)
            else:
                self._own[key] = row
            if entry is not None and row is not None and is_skill(entry):
                self.skills[key] = skill_digest(entry)
            else:
                self.skills.pop(key, None)
        self._registry = candidates
        for key in keys:
            self._show(key)
        return keys

    def _held(self, key: str) -> tuple[int, object, str | None] | None:
        """What memory shows for ``key``: ``(updated_at, source, owner)``, the newest active
        shared entry of the registry groups (the first on a tie) and the layout's when it is
        newer still (as :func:`~sandbox_memory.consolidate.selection.shown_entries` decides)."""

        held: tuple[int, object, str | None] | None = None
        for entry, rid in self._registry.get(key, []):
            if held is None or held[0] < entry.updated_at:
                held = (entry.updated_at, entry, rid)
        own = self._own.get(key)
        if own is not None and own[2] is None and (held is None or held[0] < own[0]):
            held = (own[0], own, None)
        return held

    def _unshow(self, key: str) -> None:
        """Take ``key`` out of the indexes as the tables show it now (its layout row and
        :attr:`_from_registry` as they are): shown, private, or neither."""

        won = self._from_registry.pop(key, None)
        own = self._own.get(key)
        stamp: _Stamp | None = None
        kind: str = ""
        if won is not None:
            stamp, kind = (won[0].updated_at, key), won[0].kind
        elif own is not None and own[2] is None:
            stamp, kind = (own[0], key), own[1]
        if stamp is not None:
            _remove(self._shared, stamp)
            if kind in self._by_kind:
                _remove(self._by_kind[kind], stamp)
            self._files.pop(key, None)
        if own is not None and own[2] is not None:
            _remove(self._by_person[own[2]], (own[0], key))

    def _show(self, key: str, *, insort: bool = True) -> None:
        """Put ``key`` in the indexes as its layout row and the registry say now (see
        :meth:`_held`); ``insort=False`` appends (the caller sorts)."""

        def put(group: list[_Stamp], stamp: _Stamp) -> None:
            if insort:
                bisect.insort(group, stamp)
            else:
                group.append(stamp)

        held = self._held(key)
        if held is not None:
            updated_at, source, owner = held
            kind: str
            files: Sequence[str]
            if isinstance(source, Entry):
                assert owner is not None
                short = entry_line(source, with_sources=False)
                self._from_registry[key] = (source, owner, entry_line(source), len(short))
                kind, files = source.kind, entry_files(source)
            else:
                row: _Own = source  # type: ignore[assignment]
                kind, files = row[1], row[5]
            if files:
                self._files[key] = files
            stamp = (updated_at, key)
            put(self._shared, stamp)
            if kind in self._by_kind:
                put(self._by_kind[kind], stamp)
        own = self._own.get(key)
        if own is not None and own[2] is not None:
            put(self._by_person.setdefault(own[2], []), (own[0], key))

    def _line(self, key: str) -> tuple[str, int]:
        """A shown key's ``MEMORY.md`` line and the length of that line without sources."""

        won = self._from_registry.get(key)
        if won is not None:
            return won[2], won[3]
        row = self._own[key]
        return row[3], row[4]

    def _updated_at(self, key: str) -> int:
        """A shown key's ``updated_at``."""

        won = self._from_registry.get(key)
        return won[0].updated_at if won is not None else self._own[key][0]

    # ------------------------------------------------------------ outputs

    def _short(self, key: str) -> str:
        line, length = self._line(key)
        return line[:length]

    def memory_md(self, rollouts: list[RolloutRef]) -> str:
        """``MEMORY.md``, as :func:`render_memory_md` renders it."""

        own, registry = self._own, self._from_registry
        out = list(MEMORY_MD_HEADER)
        for kind, title in KIND_TITLES.items():
            group = self._by_kind[kind]
            if group:
                out.extend((f"## {title}", ""))
                out.extend(
                    won[2] if (won := registry.get(key)) is not None else own[key][3]
                    for _, key in reversed(group)
                )
                out.append("")
        out.extend(files_lines((self._updated_at(k), k, f) for k, f in self._files.items()))
        out.extend(rollout_lines(rollouts))
        return "\n".join(out)

    def summary_file(self, rollouts: list[RolloutRef], budget: int) -> str:
        """``memory_summary.md``, as :func:`render_summary_file` renders it."""

        lines: list[str] = []
        used = 0
        left_out = 0
        for i, (_, key) in enumerate(reversed(self._shared)):
            line = self._short(key)
            if used + len(line) + 1 > budget:
                left_out = len(self._shared) - i
                break
            lines.append(line)
            used += len(line) + 1
        return summary_tail(lines, left_out, rollouts)

    def _prompt_cut(self, budget: int) -> tuple[list[str], dict[str, list[str]]]:
        shared = _cut(self._shared, lambda k: self._line(k)[1], budget)
        firsts = sorted(
            ((group[-1], person) for person, group in self._by_person.items() if group),
            reverse=True,
        )
        private = {
            person: _cut(self._by_person[person], lambda k: self._own[k][4], budget)
            for _, person in firsts
        }
        return shared, private

    def prompt_keys(self, budget: int) -> set[str]:
        """The layout entries :meth:`prompt_index` needs (the rendering keeps lines, not
        entries): the shown and private ones within the cut."""

        shared, private = self._prompt_cut(budget)
        keys = {k for k in shared if k not in self._from_registry}
        for group in private.values():
            keys.update(group)
        return keys

    def prompt_parts(
        self, budget: int, layout: Mapping[str, Entry]
    ) -> tuple[list[tuple[str, str]], dict[str, list[str]], str]:
        """What :meth:`prompt_index` joins: the shared entries of the cut (key and
        :func:`prompt_entry_json`), the keys of each person's cut, and the JSON of the private
        lists."""

        shared, private = self._prompt_cut(budget)

        def entry_of(key: str) -> Entry:
            won = self._from_registry.get(key)
            return won[0] if won is not None else layout[key]

        parts = [(k, prompt_entry_json(entry_of(k))) for k in shared]
        doc = {p: [layout[k].model_dump(mode="json") for k in keys] for p, keys in private.items()}
        return parts, private, json.dumps(doc, separators=(",", ":"))

    def prompt_index(self, budget: int, layout: Mapping[str, Entry]) -> str:
        """``store/prompt.json``: active entries newest first, shared ones and each person's,
        each list cut once its lines pass ``budget`` characters (what a run's first turn
        reads instead of every entry). ``layout``: the entries of :meth:`prompt_keys`."""

        parts, _, private = self.prompt_parts(budget, layout)
        return prompt_text(budget, [text for _, text in parts], private)

    def newest_shown(self, budget: int, margin: int) -> list[tuple[int, str, str, str]]:
        """The shown entries newest first as far as the prompt's cut at ``budget`` and
        ``margin`` more: ``(updated_at, key, kind, line without sources)`` each (what a patch
        of the rendered files needs of them, :mod:`.patch`)."""

        rows: list[tuple[int, str, str, str]] = []
        used = 0
        past = 0
        for updated_at, key in reversed(self._shared):
            if used > budget:
                past += 1
                if past > margin:
                    break
            won = self._from_registry.get(key)
            kind = won[0].kind if won is not None else self._own[key][1]
            short = self._short(key)
            used += len(short) + 1
            rows.append((updated_at, key, kind, short))
        return rows

    @property
    def shown_count(self) -> int:
        """Shown (shared, active) entries."""

        return len(self._shared)

    def crowded_files(self) -> dict[str, list[tuple[int, str]]]:
        """The files of ``## Files`` that name more lessons than it lists
        (:data:`FILE_LESSONS_LISTED`), each with every lesson about it, newest first."""

        by_file: dict[str, list[tuple[int, str]]] = {}
        for key, files in self._files.items():
            updated_at = self._updated_at(key)
            for path in file_paths(files):
                by_file.setdefault(path, []).append((updated_at, key))
        return {
            path: sorted(lessons, reverse=True)
            for path, lessons in by_file.items()
            if len(lessons) > FILE_LESSONS_LISTED
        }


def prompt_entry_json(entry: Entry) -> str:
    """One entry of ``store/prompt.json``, as :func:`prompt_text` joins it."""

    return json.dumps(entry.model_dump(mode="json"), separators=(",", ":"))


async def read_prompt_entries(
    local: LocalRecords, *, person: str | None, budget: int
) -> list[Entry] | None:
    """Layout entries the read prompt may show ``person``, from ``store/prompt.json`` (this
    workspace's record, written by phase 2's render, newest first, cut at twice the budget it
    rendered with): a run's first turn reads a few kilobytes, not every entry. ``None`` when
    that file is missing, unreadable or cut below ``budget`` (then the caller reads the whole
    store)."""

    raw = await local.read_state(local.path("prompt.json"))
    if raw is None:
        return None
    try:
        doc = bounded.loads(raw, limit=bounded.MAX_STATE_BYTES, what="store/prompt.json")
        if int(doc["budget"]) < budget:
            return None
        found = list(doc["shared"])
        if person is not None:
            found += doc["private"].get(person, [])
        return [Entry.model_validate(e) for e in found]
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError):
        return None


def prompt_text(budget: int, shared: Iterable[str], private: str) -> str:
    """``store/prompt.json`` from its shared entries (:func:`prompt_entry_json`) and the JSON
    of its private lists: the bytes ``json.dumps`` gives the whole document."""

    return f'{{"budget":{budget},"shared":[{",".join(shared)}],"private":{private}}}'


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """The garbage collector paused while a saved rendering is parsed and taken up: every
    object made then lives as long as the rendering (none is in a cycle, so none waits for a
    collection to be freed), and a collection while they are made only walks them again. In
    a process holding many objects already (a client beside a runtime) the collections set
    off by parsing 3.2 MB of rows cost more than the parse itself."""

    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _saved_tables(rows: SavedRows) -> tuple[dict[str, _Own], dict[str, str]]:
    """Saved rows as the rendering's tables (key -> row, skill key -> digest); raises
    ``ValueError`` for lists of different lengths."""

    # Each row's files a tuple as parsed (:attr:`SavedRows.files`), as :func:`entry_files`
    # gives them: a row then holds no list, so the collector stops tracking it and what holds
    # it (three objects an entry less for every full collection of the process to walk).
    lists = (rows.updated_at, rows.kinds, rows.persons, rows.lines, rows.short, rows.files)
    if any(len(x) != len(rows.keys) for x in lists) or len(rows.skill_keys) != len(
        rows.skill_digests
    ):
        raise ValueError("its lists are not of one length")
    own: dict[str, _Own] = dict(zip(rows.keys, zip(*lists, strict=True), strict=True))
    return own, dict(zip(rows.skill_keys, rows.skill_digests, strict=True))


def _registry_candidates(
    registry_groups: Mapping[str, list[Entry]],
) -> dict[str, list[tuple[Entry, str]]]:
    candidates: dict[str, list[tuple[Entry, str]]] = {}
    for rid, group in registry_groups.items():
        for entry in group:
            if entry.status == "active" and entry.person is None:
                candidates.setdefault(entry.key, []).append((entry, rid))
    return candidates


def _cut(group: list[_Stamp], length: Callable[[str], int], budget: int) -> list[str]:
    """Keys newest first while the lines taken so far (of ``length``) are within ``budget``."""

    keys: list[str] = []
    used = 0
    for _, key in reversed(group):
        if used > budget:
            break
        used += length(key) + 1
        keys.append(key)
    return keys


def _remove(group: list[_Stamp], stamp: _Stamp) -> None:
    i = bisect.bisect_left(group, stamp)
    if i < len(group) and group[i] == stamp:
        del group[i]
