"""Rendering: ``MEMORY.md``, ``memory_summary.md``, ``skills/`` and the injected prompt.

Everything here is derived from the structured store; nothing is parsed back except the
live-update lines of ``MEMORY.md`` (see :func:`parse_registry`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
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
    out = [
        "# MEMORY",
        "",
        "Registry of what earlier runs learned. Search it with grep; each line cites the",
        "conversation#item it rests on. Rollout summaries are listed at the end.",
        "",
    ]
    for kind, title in KIND_TITLES.items():
        group = newest_first(e for e in active if e.kind == kind)
        if not group:
            continue
        out.append(f"## {title}")
        out.append("")
        out.extend(entry_line(entry) for entry in group)
        out.append("")
    if rollouts:
        out.append("## Rollouts")
        out.append("")
        for ref in rollouts:
            out.append(
                f"- {ref.progress.updated_at[:19]} `{ref.rollout_id}` "
                f"({ref.progress.slug}): {ref.summary_file}"
            )
        out.append("")
    return "\n".join(out)


def render_summary_file(entries: Iterable[Entry], rollouts: list[RolloutRef], budget: int) -> str:
    """``memory_summary.md``: shared entries within the budget plus recent rollouts."""

    shared = [e for e in entries if e.status == "active" and e.person is None]
    lines, left_out = budgeted_lines(shared, budget)
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
