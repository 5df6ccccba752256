"""What the read budget bounds, exactly as README says it."""

from __future__ import annotations

import re
from pathlib import Path

from sandbox_memory.render.files import render_read_prompt, render_summary_text
from sandbox_memory.stores.records import Entry

README = Path(__file__).resolve().parents[1] / "README.md"


def entries(n: int) -> list[Entry]:
    return [
        Entry(
            key=f"fact-{i}",
            content=f"Fact number {i} about the work " * 3,
            kind="fact",
            updated_at=i,
        )
        for i in range(n)
    ]


def test_the_budget_bounds_the_summary_and_the_fixed_text_around_it_is_as_documented() -> None:
    budget = 8_000
    summary = render_summary_text(
        layout_entries=entries(2_000), conversation_entries=[], person=None, budget=budget
    )
    assert 7_000 < len(summary) <= budget
    with_update = render_read_prompt(memory_dir="memories", summary=summary, live_update=True)
    read_only = render_read_prompt(memory_dir="memories", summary=summary, live_update=False)
    person = render_read_prompt(
        memory_dir="memories", summary=summary, live_update=True, person="ana"
    )
    fixed = (len(with_update) - len(summary), len(read_only) - len(summary))
    rules = len(person) - len(with_update) - 2  # the blank line between the parts
    text = " ".join(README.read_text().split())
    numbers = re.search(
        r"the how-to \(([\d,]+) characters with live update, ([\d,]+) without\).*?privacy rules "
        r"\(([\d,]+)\)",
        text,
    )
    assert numbers is not None, "README no longer says what the memory section adds"
    documented = tuple(int(n.replace(",", "")) for n in numbers.groups())
    assert documented == (*fixed, rules)
