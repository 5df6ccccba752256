"""Rendering: ``MEMORY.md``, ``memory_summary.md``, ``skills/`` and the injected prompt.

Everything here is derived from the structured store; nothing is parsed back except the
live-update lines of ``MEMORY.md`` (see :func:`parse_registry`).
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .store import Entry, RolloutProgress

PROMPTS_DIR = Path(__file__).parent / "prompts"

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


def entry_line(entry: Entry, *, with_sources: bool = True) -> str:
    line = f"- **{entry.key}** ({entry.kind}): {_one_line(entry.content)}"
    if with_sources:
        refs = ", ".join(f"{s.conversation}#{s.item}" for s in entry.sources[:6])
        line += f"  <!-- sources: {refs} -->"
    return line


def visible(entry: Entry, person: str | None) -> bool:
    """Active, and shared or belonging to ``person``."""

    return entry.status == "active" and (entry.person is None or entry.person == person)


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


def render_read_prompt(
    *, memory_dir: str, summary: str, live_update: bool, person: str | None = None
) -> str:
    """The memory prompt: who the agent works with and the privacy rules (when a person is
    known), then how to use memory and the summary (when there is one)."""

    parts: list[str] = []
    if person:
        parts.append(
            load_prompt("person.md")
            .replace("{person}", " ".join(person.split()))
            .replace("{memory_dir}", memory_dir)
            .strip()
        )
    if summary:
        update = load_prompt("live_update.md" if live_update else "read_only.md")
        parts.append(
            load_prompt("memory_read.md")
            .replace("{update_instructions}", update.strip())
            .replace("{summary}", summary)
            .replace("{memory_dir}", memory_dir)
            .strip()
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
    """The searchable registry: every active entry by kind, with sources, then rollouts."""

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
    out.extend(rollout_lines(rollouts))
    return "\n".join(out)


def render_summary_file(entries: Iterable[Entry], rollouts: list[RolloutRef], budget: int) -> str:
    """``memory_summary.md``: shared entries within the budget plus recent rollouts."""

    shared = [e for e in entries if e.status == "active" and e.person is None]
    lines, left_out = budgeted_lines(shared, budget)
    return summary_tail(lines, left_out, rollouts)


def render_skill(entry: Entry) -> str:
    refs = ", ".join(f"{s.conversation}#{s.item}" for s in entry.sources)
    return (
        f"---\nname: {entry.key}\ndescription: {_one_line(entry.content)[:200]}\n---\n\n"
        f"# {entry.key}\n\n{entry.content.strip()}\n\nLearned from: {refs}\n"
    )


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
    "conversation#item it rests on. Rollout summaries are listed at the end.",
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


class LayoutRendering:
    """What memory shows, kept up to date entry by entry: the rendered files come out
    byte-identical to rendering every entry again (:func:`render_memory_md`,
    :func:`render_summary_file`, the prompt index), at the cost of the entries that changed.

    :meth:`update` takes the layout entries and the registry as they are now. Entries are
    compared by identity with the last ones (the store hands out the same objects for
    entries that did not change), so an update costs one pass over keys plus the changed
    entries' lines; each output is then joined from cached lines.
    """

    def __init__(self) -> None:
        self.layout: Mapping[str, Entry] = {}
        self._registry: dict[str, list[tuple[Entry, str]]] = {}
        self.winners: dict[str, tuple[Entry, str | None]] = {}
        """Key -> the entry memory shows for it (newest active shared), with its owner
        conversation (``None``: layout memory)."""
        self.private: dict[str, Entry] = {}
        """Active private layout entries (shown only to their person), by key."""
        self.skills: dict[str, Entry] = {}
        """Layout procedures rendered as ``skills/<key>/SKILL.md``."""
        self._by_kind: dict[str, list[_Stamp]] = {kind: [] for kind in KIND_TITLES}
        self._shared: list[_Stamp] = []
        self._by_person: dict[str, list[_Stamp]] = {}
        self._line: dict[str, str] = {}
        self._short: dict[str, str] = {}
        self._private_short: dict[str, str] = {}
        self._blocks: dict[str, str] = {}
        self._dirty_kinds: set[str] = set(KIND_TITLES)

    # ------------------------------------------------------------ updates

    def update(
        self,
        layout: Mapping[str, Entry],
        registry_groups: Mapping[str, list[Entry]],
        *,
        changed_keys: Iterable[str] | None = None,
    ) -> set[str]:
        """Take in the layout entries and registry groups as they are now; returns the keys
        whose entry (shown, private or skill) may have changed.

        ``changed_keys``: the layout keys changed since the last update, when the caller
        knows them (the store's own commits); otherwise the entries are compared by identity.
        """

        changed: set[str] = set()
        old = self.layout
        if changed_keys is not None:
            changed.update(changed_keys)
            self.layout = layout
        elif layout is not old:
            for key, entry in layout.items():
                if old.get(key) is not entry:
                    changed.add(key)
            changed.update(k for k in old if k not in layout)
            self.layout = layout
        candidates: dict[str, list[tuple[Entry, str]]] = {}
        for rid, group in registry_groups.items():
            for entry in group:
                if entry.status == "active" and entry.person is None:
                    candidates.setdefault(entry.key, []).append((entry, rid))
        before = self._registry
        for key in {*before, *candidates}:
            was, now = before.get(key, []), candidates.get(key, [])
            if len(was) != len(now) or any(
                a[0] is not b[0] or a[1] != b[1] for a, b in zip(was, now, strict=True)
            ):
                changed.add(key)
        self._registry = candidates
        for key in changed:
            self._refresh(key)
        return changed

    def _refresh(self, key: str) -> None:
        held: tuple[Entry, str | None] | None = None
        for entry, rid in self._registry.get(key, []):
            if held is None or held[0].updated_at < entry.updated_at:
                held = (entry, rid)
        own = self.layout.get(key)
        if own is not None and own.status == "active" and own.person is None:
            if held is None or held[0].updated_at < own.updated_at:
                held = (own, None)
        was = self.winners.get(key)
        if was is None or held is None or was[0] is not held[0] or was[1] != held[1]:
            if was is not None:
                self._unshow(key, was[0])
            if held is not None:
                self._show(key, held)
        # Private entries: the layout's, shown only to their person.
        gone = self.private.pop(key, None)
        if gone is not None and gone.person is not None:
            _remove(self._by_person[gone.person], (gone.updated_at, key))
            self._private_short.pop(key, None)
        if own is not None and own.person is not None and own.status == "active":
            self.private[key] = own
            bisect.insort(self._by_person.setdefault(own.person, []), (own.updated_at, key))
            self._private_short[key] = entry_line(own, with_sources=False)
        if (
            own is not None
            and own.kind == "procedure"
            and own.status == "active"
            and (own.person is None)
        ):
            self.skills[key] = own
        else:
            self.skills.pop(key, None)

    def _unshow(self, key: str, entry: Entry) -> None:
        del self.winners[key]
        stamp = (entry.updated_at, key)
        _remove(self._shared, stamp)
        if entry.kind in self._by_kind:
            _remove(self._by_kind[entry.kind], stamp)
            self._dirty_kinds.add(entry.kind)
        self._line.pop(key, None)
        self._short.pop(key, None)

    def _show(self, key: str, held: tuple[Entry, str | None]) -> None:
        entry = held[0]
        self.winners[key] = held
        stamp = (entry.updated_at, key)
        bisect.insort(self._shared, stamp)
        if entry.kind in self._by_kind:
            bisect.insort(self._by_kind[entry.kind], stamp)
            self._dirty_kinds.add(entry.kind)
        self._line[key] = entry_line(entry)
        self._short[key] = entry_line(entry, with_sources=False)

    # ------------------------------------------------------------ outputs

    def shown(self) -> list[Entry]:
        """What :func:`~sandbox_memory.phase_two.displayed_entries` lists (order aside)."""

        return [e for e, _ in self.winners.values()] + list(self.private.values())

    def memory_md(self, rollouts: list[RolloutRef]) -> str:
        """``MEMORY.md``, as :func:`render_memory_md` renders it."""

        for kind in self._dirty_kinds:
            group = self._by_kind[kind]
            if group:
                lines = [self._line[key] for _, key in reversed(group)]
                self._blocks[kind] = "\n".join([f"## {KIND_TITLES[kind]}", "", *lines, ""])
            else:
                self._blocks.pop(kind, None)
        self._dirty_kinds = set()
        out = list(MEMORY_MD_HEADER)
        out.extend(self._blocks[kind] for kind in KIND_TITLES if kind in self._blocks)
        out.extend(rollout_lines(rollouts))
        return "\n".join(out)

    def summary_file(self, rollouts: list[RolloutRef], budget: int) -> str:
        """``memory_summary.md``, as :func:`render_summary_file` renders it."""

        lines: list[str] = []
        used = 0
        left_out = 0
        for i, (_, key) in enumerate(reversed(self._shared)):
            line = self._short[key]
            if used + len(line) + 1 > budget:
                left_out = len(self._shared) - i
                break
            lines.append(line)
            used += len(line) + 1
        return summary_tail(lines, left_out, rollouts)

    def prompt_index(self, budget: int) -> str:
        """``store/prompt.json``: active entries newest first, shared ones and each person's,
        each list cut once its lines pass ``budget`` characters (what a run's first turn
        reads instead of every entry)."""

        shared = _cut(self._shared, self._short, budget)
        firsts = sorted(
            ((group[-1], person) for person, group in self._by_person.items() if group),
            reverse=True,
        )
        private = {
            person: _cut(self._by_person[person], self._private_short, budget)
            for _, person in firsts
        }
        doc = {
            "budget": budget,
            "shared": [self.winners[k][0].model_dump(mode="json") for k in shared],
            "private": {
                p: [self.private[k].model_dump(mode="json") for k in keys]
                for p, keys in private.items()
            },
        }
        return json.dumps(doc, separators=(",", ":"))


def _cut(group: list[_Stamp], lines: Mapping[str, str], budget: int) -> list[str]:
    """Keys newest first while the lines taken so far are within ``budget``."""

    keys: list[str] = []
    used = 0
    for _, key in reversed(group):
        if used > budget:
            break
        used += len(lines[key]) + 1
        keys.append(key)
    return keys


def _remove(group: list[_Stamp], stamp: _Stamp) -> None:
    i = bisect.bisect_left(group, stamp)
    if i < len(group) and group[i] == stamp:
        del group[i]
