"""Search ranking: curated text above the raw items it stands for, one hit per fact, scores
never rising down the list.

``distinct`` on hand-made hits for each rule, and a real workspace (offline engine) where a
long tool output and the entry learned from the same fix compete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import exec_items, fact, run_payload, sealed_store
from sandbox_memory import MemoryClient, MemoryGenerateConfig
from sandbox_memory.search.index import SearchHit, distinct
from sandbox_memory.stores.records import Entry, LayoutMemory, Source

OFFLINE = MemoryGenerateConfig(engine="offline")


def hit(kind: str, text: str, score: float, conv: str, *items: str, key: str | None = None) -> Any:
    return SearchHit(
        kind=kind,  # type: ignore[arg-type]
        text=text,
        score=score,
        updated_at=1,
        conversation=conv,
        sources=[Source(conversation=conv, item=i) for i in items],
        key=key,
        path="p",
    )


def test_an_entry_takes_its_items_place_and_score_so_scores_never_rise() -> None:
    ranked = [
        hit("item", "Run python -m pytest: 3 failed in test_parser.py", 5.0, "c", "s:1"),
        hit("item", "The header has five fields.", 3.0, "c", "s:2"),
        hit(
            "entry",
            "The parser tests fail until parse_header is fixed.",
            1.0,
            "c",
            "s:1",
            "s:9",
            key="parser-tests",
        ),
    ]
    out = distinct(ranked, 10)
    assert [h.kind for h in out] == ["entry", "item"]
    assert out[0].score == 5.0
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)


def test_a_summary_stands_for_the_item_whose_words_it_holds() -> None:
    ranked = [
        hit("item", "user: The invoice total is wrong when tax applies.", 4.0, "c", "s:0"),
        hit(
            "rollout_summary",
            "# invoice\n- user: The invoice total is wrong when tax applies. [s:0]\n"
            "- completed: fixed invoice_total",
            2.0,
            "c",
            "s:0",
            "s:7",
        ),
        hit("item", "user: The invoice total is wrong when tax applies.", 1.5, "other", "t:0"),
    ]
    out = distinct(ranked, 10)
    assert [(h.kind, h.conversation) for h in out] == [("rollout_summary", "c"), ("item", "other")]
    assert out[0].score == 4.0


def test_two_entries_saying_the_same_take_one_place() -> None:
    ranked = [
        hit(
            "entry", "Run the tests with python -m pytest -q.", 3.0, "a", "a:1", key="test-command"
        ),
        hit("entry", "Run the tests with `python -m pytest -q`", 2.0, "b", "b:1", key="tests-run"),
        hit("entry", "The staging database listens on port 6543.", 1.0, "b", "b:2", key="db-port"),
    ]
    out = distinct(ranked, 10)
    assert [h.key for h in out] == ["test-command", "db-port"]


def test_a_summary_the_entries_shown_restate_gives_its_place_to_the_next_hit() -> None:
    said = "- Ann: I adopted a dog named Rex. [s:0]\n- Bob: We went hiking at the lake. [s:1]"
    ranked = [
        hit("entry", "Ann (3 May): I adopted a dog named Rex.", 5.0, "c", "s:0", key="ann-3-may"),
        hit("rollout_summary", said, 4.0, "c", "s:0", "s:1"),
        hit("entry", "Bob (3 May): We went hiking at the lake.", 3.0, "c", "s:1", key="bob-3-may"),
        hit("entry", "Ann (9 May): Rex learned to fetch.", 2.0, "c", "s:5", key="ann-9-may"),
    ]
    out = distinct(ranked, 3)
    # The two entries together say every line of the summary: the third entry takes its place.
    assert [h.key for h in out] == ["ann-3-may", "bob-3-may", "ann-9-may"]
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)
    # Within a limit of 2 only Ann's entry is shown with it: the summary still adds Bob's line.
    assert [h.kind for h in distinct(ranked, 2)] == ["entry", "rollout_summary"]


def test_a_summary_saying_more_than_the_entries_or_of_another_conversation_stays() -> None:
    ranked = [
        hit("entry", "Ann (3 May): I adopted a dog named Rex.", 5.0, "c", "s:0", key="ann-3-may"),
        hit(
            "rollout_summary",
            "- Ann: I adopted a dog named Rex. [s:0]\n- completed: fixed invoice_total in "
            "billing/tax.py, python -m pytest -q tests/test_tax.py passes",
            4.0,
            "c",
            "s:0",
        ),
        hit("rollout_summary", "- Ann: I adopted a dog named Rex. [t:0]", 3.0, "d", "t:0"),
    ]
    out = distinct(ranked, 10)
    assert [(h.kind, h.conversation) for h in out] == [
        ("entry", "c"),
        ("rollout_summary", "c"),
        ("rollout_summary", "d"),
    ]


async def test_raw_tool_output_never_outranks_the_entry_for_the_same_fix(tmp_path: Path) -> None:
    noise = "\n".join(f"tests/test_parser.py::test_field_{i} PASSED" for i in range(60))
    failed = (
        "Chunk ID: 4f2a9c\nWall time: 0.8123 seconds\nProcess exited with code 1\nOutput:\n"
        + noise
        + "\nFAILED tests/test_parser.py::test_last_field - parse_header dropped the last "
        "header field\n1 failed, 60 passed"
    )
    passed = (
        "Chunk ID: 5b3c1d\nWall time: 0.7 seconds\nProcess exited with code 0\nOutput:\n61 passed"
    )
    write = "cat > acme/parser.py <<'EOF'\ndef parse_header(line):\n    return line.split(',')\nEOF"
    items = [
        *exec_items("c1", "python -m pytest -q tests/test_parser.py", failed),
        *exec_items(
            "c2", write, "Chunk ID: 1\nWall time: 0.01 seconds\nProcess exited with code 0\n"
        ),
        *exec_items("c3", "python -m pytest -q tests/test_parser.py", passed),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Fixed parse_header in acme/parser.py."}],
        },
    ]
    client = MemoryClient(tmp_path, generate=OFFLINE)
    await client.runtime.record(
        run_payload(
            "The header parser drops the last field.",
            reply=None,
            when="2026-03-01T10:00:00+00:00",
            items=items,
            completed=True,
        ),
        rollout_id="fix-parser",
    )
    await client.runtime.close()
    # Words of the tool output only: the entry learned from it shares none of them.
    hits = await client.search("Chunk Wall PASSED test_field_7", limit=3)
    assert hits
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].kind == "entry" and hits[0].key == "parser-last-field"
    assert all("test_field_7" not in h.text for h in hits)  # the raw output it stands for


TRACEBACK_TASK = (
    "ax.bar raises StopIteration for all-nan data in bar charts\n"
    "File ~/envs/py310/lib/python3.10/site-packages/plotlib/axes/_axes.py:2182, in Axes.bar\n"
    "StopIteration: the bar chart with nan data raises; nan data, bar chart, raises again"
)
"""A task whose text names a file only inside a traceback's installed path."""


def naming_memory() -> list[Entry]:
    """An old fix naming the file the task's traceback names; newer entries sharing many more
    of the task's words (``Axes.bar`` included) but naming no file, or another one; and
    entries about other things, so that the shared words weigh."""

    return [
        fact("fix-axes-bar", "Fixed `lib/plotlib/axes/_axes.py`: an empty first value.", 1_000),
        fact(
            "bar-chart-nan",
            "Axes.bar raises StopIteration for all-nan data: bar charts with nan data raise.",
            2_000,
        ),
        fact(
            "nan-data-bars",
            "In bar charts, Axes.bar with all-nan data raises StopIteration again.",
            3_000,
        ),
        fact(
            "bar-colors",
            "Bar charts: Axes.bar raises StopIteration for nan data in `lib/plotlib/colors.py`.",
            4_000,
        ),
        *(
            fact(f"rule-{i}", f"Invoice rounding rule {i} keeps two decimals.", 5_000 + i)
            for i in range(20)
        ),
    ]


async def test_a_document_naming_a_file_the_query_names_comes_first_among_its_kind(
    tmp_path: Path,
) -> None:
    # The task names `axes/_axes.py` only through an installed path; the old fix names it from
    # the repository's root. The other entries share more of the task's words.
    await sealed_store(tmp_path).save_layout(
        LayoutMemory(version=1, entries={e.key: e for e in naming_memory()})
    )
    found = await MemoryClient(tmp_path, generate=OFFLINE).search(TRACEBACK_TASK)
    entries = [h.key for h in found if h.kind == "entry"]
    assert entries[0] == "fix-axes-bar"
    assert {"bar-chart-nan", "nan-data-bars", "bar-colors"} <= set(entries[1:])
    assert [h.score for h in found] == sorted((h.score for h in found), reverse=True)
