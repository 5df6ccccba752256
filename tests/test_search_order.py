"""Search order: the same work gives the same hits, each kind of document is ranked among its
own kind, and a query naming a file finds the entries about that file.

Real workspaces, the offline engine, runs recorded as the recorder writes them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from helpers import exec_items, run_payload
from sandbox_memory import MemoryClient, MemoryGenerateConfig
from sandbox_memory.engines.base import Subjects
from sandbox_memory.search.index import named_phrases, search_expression, settled_text

OFFLINE = MemoryGenerateConfig(engine="offline")


def tool_output(body: str, *, chunk: str, seconds: float) -> str:
    """A shell tool's output as the SDK formats it (a random chunk id, the wall time)."""

    return (
        f"Chunk ID: {chunk}\nWall time: {seconds:.4f} seconds\nProcess exited with code 0\n"
        f"Output:\n{body}"
    )


def fix_run(path: str, problem: str, *, chunk: str, seconds: float, when: str) -> dict[str, Any]:
    write = f"cat > {path} <<'EOF'\ndef normalize(value):\n    return value.strip()\nEOF"
    test = "python -m pytest -q tests/test_core.py"
    return run_payload(
        problem,
        reply=f"Fixed normalize in {path}.",
        when=when,
        items=[
            *exec_items(
                "c1",
                f"cat {path}",
                tool_output(
                    "def normalize(value):\n    return value\n", chunk=chunk, seconds=seconds
                ),
            ),
            *exec_items("c2", write, tool_output("", chunk=chunk[::-1], seconds=seconds / 2)),
            *exec_items(
                "c3",
                test,
                tool_output(f"3 passed in {seconds:.2f}s", chunk="abc123", seconds=seconds * 3),
            ),
        ],
        completed=True,
    )


PROBLEMS = [
    ("pkg/core/numbers.py", "Numbers keep trailing spaces after parsing a core value."),
    ("pkg/core/strings.py", "Strings in the core module keep trailing spaces, unlike numbers."),
    ("pkg/io/reader.py", "The reader drops the last core value of a file full of numbers."),
]


async def remember_fixes(root: Path, *, chunks: str, seconds: float, day: int) -> MemoryClient:
    root.mkdir(exist_ok=True)
    client = MemoryClient(root, generate=OFFLINE)
    for n, (path, problem) in enumerate(PROBLEMS):
        run = fix_run(
            path,
            problem,
            chunk=f"{chunks}{n}",
            seconds=seconds * (n + 1),
            when=f"2026-03-{day:02d}T1{n}:00:00+00:00",
        )
        await client.runtime.record(run, rollout_id=f"fix-{n}")
        # One close per task, as a coding agent's sandbox closes after each (rollouts closed
        # together are extracted concurrently, and their entries' times follow the scheduler).
        await client.runtime.close()
    return client


def order(hits: list[Any]) -> list[tuple[Any, ...]]:
    """The hits as compared: a measured duration is shown as it was, so it is left out."""

    def steady(text: str | None) -> str | None:
        return None if text is None else re.sub(r"\d+\.\d+s\b", "<duration>", text)

    return [
        (h.kind, h.conversation, h.key, h.score, steady(h.text), steady(h.excerpt)) for h in hits
    ]


async def test_the_same_work_recorded_twice_gives_the_same_hits(tmp_path: Path) -> None:
    # Chunk ids, wall times, durations and the clock differ from one recording to the next.
    one = await remember_fixes(tmp_path / "one", chunks="a1b2c", seconds=0.0115, day=1)
    two = await remember_fixes(tmp_path / "two", chunks="f9e8d", seconds=0.2871, day=9)
    for query in (
        "numbers keep trailing spaces in core 0.0115 3.1",
        "normalize value strip",
        "pytest passed 0 seconds",
    ):
        first = await one.search(query, limit=10)
        assert first
        assert order(first) == order(await two.search(query, limit=10)), query
        assert order(first) == order(await one.search(query, limit=10))  # and again


def test_what_differs_between_runs_is_neither_indexed_nor_shown() -> None:
    output = tool_output("1 passed", chunk="3fa1c2", seconds=0.0115)
    assert settled_text(output, "item") == "Process exited with code 0\nOutput:\n1 passed"
    summary = (
        "session_id: 636a7d9b-7e96-4847-a1cc-060ff68e3a42\n"
        "updated_at: 2026-12-05T23:30:44.813386+00:00\n"
        "rollout_path: sessions/fix.jsonl\nterminal_state: completed\n\n# fix\n\n"
        "conversation: fix\nrollout_path: sessions/fix.jsonl\n\n"
        "## Segment(s) up to 2026-12-05T23:30:44.813386+00:00\n"
        "<!-- segments from byte 0 -->\n\n## What happened\n"
        "- `python -m pytest -q` passed [28178a5d:5, 28178a5d:6]\n"
    )
    settled = settled_text(summary, "rollout_summary")
    assert "2026" not in settled and "636a7d9b" not in settled and "28178a5d" not in settled
    assert "- `python -m pytest -q` passed" in settled
    # The header lines naming the file and the conversation are the hit's path and
    # conversation, not its text (the summary named its file twice).
    assert "rollout_path" not in settled and "terminal_state" not in settled
    assert "conversation: fix" not in settled and settled.startswith("# fix")
    # An entry's text is its own.
    assert settled_text("Wall time: 3 seconds", "entry") == "Wall time: 3 seconds"


def test_a_path_is_searched_by_its_file_and_folder() -> None:
    link = "see https://github.com/o/r/blob/d47b9d04/src/_pytest/pastebin.py#L68 and Card._split"
    assert named_phrases(link) == ['"pytest pastebin py"', '"card split"']
    assert named_phrases("sympy/core/numbers.py") == ['"core numbers py"']
    assert search_expression("sympy/core/numbers.py").startswith('"core numbers py" OR "sympy"')


async def test_a_path_query_finds_the_fix_of_that_file_first(tmp_path: Path) -> None:
    client = await remember_fixes(tmp_path, chunks="a1b2c", seconds=0.01, day=1)
    for path, rid in (("pkg/core/numbers.py", "fix-0"), ("pkg/core/strings.py", "fix-1")):
        hits = await client.search(path, limit=5)
        assert hits[0].kind == "entry" and hits[0].conversation == rid, hits[0]
        assert path in hits[0].text
        # Also inside a longer task text that names the file by another path.
        task = f"Values in ./src/{path} still keep spaces; see the core numbers and strings."
        hits = await client.search(task, limit=3)
        assert any(h.kind == "entry" and h.conversation == rid for h in hits), hits


async def test_an_entry_is_found_by_the_files_it_is_about(tmp_path: Path) -> None:
    client = await remember_fixes(tmp_path, chunks="a1b2c", seconds=0.01, day=1)
    store = client.runtime.store
    memory = await store.load_conversation("fix-2")
    [fix] = [e for e in memory.entries.values() if e.subjects and e.subjects.files]
    # Its content no longer names the file; its subjects do.
    memory.entries[fix.key] = fix.model_copy(
        update={
            "content": "Made the reader keep every value.",
            "subjects": Subjects(files=["pkg/io/legacy_loader.py"]),
        }
    )
    await store.save_conversation(memory)
    client.runtime.search_index.mark_scope("conversation:fix-2")
    hits = await client.search("pkg/io/legacy_loader.py", limit=3)
    assert hits and hits[0].kind == "entry" and hits[0].key == fix.key
    assert "legacy_loader" not in hits[0].text  # found by its subjects, not its words


async def test_curated_hits_come_before_raw_items_and_scores_never_rise(tmp_path: Path) -> None:
    client = await remember_fixes(tmp_path, chunks="a1b2c", seconds=0.01, day=1)
    hits = await client.search("normalize value tests passed", limit=10)
    assert hits
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    kinds = [h.kind for h in hits]
    assert kinds[0] != "item"
    assert all("Chunk ID" not in h.text and "Wall time" not in h.text for h in hits)
