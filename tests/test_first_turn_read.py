"""The first turn's read at scale: the rollout summaries of the section "relevant to this task"
are ranked in the whole index's statistics without scoring every document of the index
(``search/bm25.py``), and the section is the one the ranking over all documents gives.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from helpers import run_payload, sealed_store
from sandbox_memory import MemoryClient, MemoryGenerateConfig
from sandbox_memory.render.relevant import QUERY_TERMS, task_terms
from sandbox_memory.search.bm25 import rank_few
from sandbox_memory.search.index import TOKENIZER, SearchIndex
from sandbox_memory.stores.records import Entry, LayoutMemory, Source

WORDS = ["parser", "parsing", "deploy", "ferry", "naxos", "port", "6543", "café", "cafe"]
PATH = "src foo py"
CJK = "数据库"


def _doc(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(1, 40))]
    for _ in range(rng.randint(0, 2)):
        words.insert(rng.randint(0, len(words)), rng.choice([PATH, "foo src py", " ".join(CJK)]))
    return " ".join(words)


def _tables(rng: random.Random, rows: int, every: int) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    for table in ("big", "few"):
        db.execute(
            f"CREATE VIRTUAL TABLE {table} USING fts5(body, content='', tokenize='{TOKENIZER}')"
        )
    for rowid in range(1, rows + 1):
        body = _doc(rng)
        db.execute("INSERT INTO big(rowid, body) VALUES (?, ?)", (rowid, body))
        if rowid % every == 0:
            db.execute("INSERT INTO few(rowid, body) VALUES (?, ?)", (rowid, body))
    return db


def _fts5_scores(db: sqlite3.Connection, query: list[str]) -> dict[int, float]:
    """``bm25(big)`` of each row of ``few`` matching ``query``, as SQLite ranks it in ``big``."""

    few = {r for (r,) in db.execute("SELECT rowid FROM few_docsize")}
    return {
        int(rowid): float(score)
        for rowid, score in db.execute(
            "SELECT rowid, bm25(big) FROM big WHERE big MATCH ?", (" OR ".join(query),)
        )
        if rowid in few
    }


QUERIES = [
    ['"parser"'],
    ['"parser"', '"deploy"', '"ferry"'],
    ['"src foo py"', '"port"'],  # a path: a phrase of three tokens
    ['"数 据"', '"据 库"', '"naxos"'],  # a CJK run as its two-character phrases
    ['"café"', '"cafe"', '"parsing"'],  # the same token twice after stemming and diacritics
    ['"ferry"', '"ferry"'],  # a phrase given twice counts twice, as FTS5 counts it
    ['"nowhere"', '"6543"'],  # a word no row holds
    ['"nowhere"'],
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: " OR ".join(q))
def test_a_few_rows_score_as_fts5_scores_them_among_all_rows(query: list[str]) -> None:
    db = _tables(random.Random(7), rows=600, every=9)
    expected = _fts5_scores(db, query)

    got = rank_few(db, query, table="big", few="few", tokenizer=TOKENIZER)

    assert got == expected  # the same floats: the order and the ties are SQLite's
    assert (not expected) == (query == ['"nowhere"'])


def test_tables_of_no_rows_score_nothing() -> None:
    db = _tables(random.Random(3), rows=0, every=2)
    assert (
        rank_few(db, ['"src foo py"', '"parser"'], table="big", few="few", tokenizer=TOKENIZER)
        == {}
    )


async def test_a_task_naming_a_file_reads_a_new_empty_index(tmp_path: Path) -> None:
    index = MemoryClient(tmp_path, generate=OFFLINE).runtime.search_index
    phrases, words = task_terms("Fix the crash in src/foo.py")
    assert phrases  # searched as a phrase whatever the index holds

    assert await index.curated(phrases, words, person=None, limit=40, max_terms=QUERY_TERMS) == []


def test_a_phrase_not_in_quotes_is_refused_with_its_value() -> None:
    db = _tables(random.Random(3), rows=20, every=2)
    with pytest.raises(ValueError, match="double quotes, got 'parser OR deploy'"):
        rank_few(db, ["parser OR deploy"], table="big", few="few", tokenizer=TOKENIZER)


def test_rows_deleted_from_both_tables_leave_the_scores_as_fts5_gives_them() -> None:
    rng = random.Random(11)
    bodies = {rowid: _doc(rng) for rowid in range(1, 301)}
    db = sqlite3.connect(":memory:")
    for table in ("big", "few"):
        db.execute(
            f"CREATE VIRTUAL TABLE {table} USING fts5(body, content='', tokenize='{TOKENIZER}')"
        )
    for rowid, body in bodies.items():
        db.execute("INSERT INTO big(rowid, body) VALUES (?, ?)", (rowid, body))
        if rowid % 5 == 0:
            db.execute("INSERT INTO few(rowid, body) VALUES (?, ?)", (rowid, body))
    # A third of the rows deleted (a contentless table deletes a row given the text it
    # indexed): the totals, sizes and vocabulary read are those after the deletes.
    for rowid in range(3, 301, 3):
        db.execute(
            "INSERT INTO big(big, rowid, body) VALUES ('delete', ?, ?)", (rowid, bodies[rowid])
        )
        if rowid % 5 == 0:
            db.execute(
                "INSERT INTO few(few, rowid, body) VALUES ('delete', ?, ?)", (rowid, bodies[rowid])
            )
    query = ['"parser"', '"src foo py"', '"deploy"']
    expected = _fts5_scores(db, query)

    assert db.execute("SELECT count(*) FROM few_docsize").fetchone()[0] == 40 and expected
    assert rank_few(db, query, table="big", few="few", tokenizer=TOKENIZER) == expected


OFFLINE = MemoryGenerateConfig(engine="offline")


TALKS = [
    (
        "trip",
        "We booked the ferry to Naxos for Tuesday; the ferry leaves at 7.",
        "Noted the ferry.",
    ),
    (
        "work",
        "The staging database is on port 6543; run pytest in src/foo.py first.",
        "Understood.",
    ),
    ("deploy", "Deploy with make deploy after the parser tests pass.", "Will do."),
    ("parser", "The parser fails on empty input in src/foo.py; fix parser.parse_line.", "Fixed."),
    ("cafe", "Meet at the café near the port; the ferry café opens at 8.", "Noted."),
]


async def test_the_summaries_shown_are_the_ones_the_ranking_over_all_documents_gives(
    tmp_path: Path,
) -> None:
    client = MemoryClient(tmp_path, generate=OFFLINE)
    for rid, user, reply in TALKS:
        await client.runtime.record(run_payload(user, reply=reply), rollout_id=rid)
    await client.runtime.close()
    index = client.runtime.search_index
    await index.sync()
    db = await index._open()
    db.execute("CREATE VIRTUAL TABLE temp.held USING fts5vocab(main, summary_fts, instance)")
    assert db.execute("SELECT count(DISTINCT doc) FROM temp.held").fetchone()[0] == len(TALKS)

    ranked = 0
    for task in [
        "Why does the parser fail in src/foo.py?",
        "When does the ferry to Naxos leave, and which café?",
        "staging database port deploy pytest",
        "nothing of this is in memory",
    ]:
        phrases, words = task_terms(task)
        terms = [*phrases, *words][:QUERY_TERMS]
        for limit in (1, 2, 40):
            over_all = SearchIndex._ranked(
                db,
                " OR ".join(terms),
                query="",
                person=None,
                conversation=None,
                kinds=("rollout_summary",),
                limit=limit,
                whole=True,
                table="fts",
            )
            few = SearchIndex._ranked_few(
                db, terms, kind="rollout_summary", person=None, limit=limit
            )
            assert few == over_all, (task, limit)
            # As the section calls it: with the words' counts read for choosing the terms.
            held = SearchIndex._held(db, words)
            assert few == SearchIndex._ranked_few(
                db, terms, kind="rollout_summary", person=None, limit=limit, held=held
            )
            ranked += len(few) > 1
    assert ranked


@pytest.mark.parametrize("bounded_from", [1, 1_000])  # the bounded sort first, or never
async def test_the_entries_shown_are_the_ones_the_ranking_of_every_entry_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bounded_from: int
) -> None:
    from sandbox_memory.search.index import rank

    monkeypatch.setattr(rank, "BOUNDED_SORT_MIN_TERMS", bounded_from)
    # Entries of three people and shared ones, many tied (the same words, the same length):
    # a person's best are often another's, so the read of the best few must look further.
    rng = random.Random(5)
    entries = {}
    for i in range(300):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.choice([3, 3, 6, 12])))
        entries[f"fact-{i:03d}"] = Entry(
            key=f"fact-{i:03d}",
            content=f"The {words} note.",
            kind="fact",
            person=[None, "ana", "bob", "cy"][i % 4 if i < 200 else 1],
            sources=[Source(conversation="c", item=f"s:{i}")],
            updated_at=1_000 + i % 7,
        )
    await sealed_store(tmp_path).save_layout(LayoutMemory(version=1, entries=entries))
    index = MemoryClient(tmp_path, generate=OFFLINE).runtime.search_index
    await index.sync()
    db = await index._open()

    compared = 0
    for words in (['"parser"'], ['"ferry"', '"naxos"'], ['"cafe"', '"6543"', '"deploy"']):
        for person in (None, "ana", "bob", "dee"):
            for limit in (1, 2, 5, 40, 400):
                every = SearchIndex._ranked(
                    db,
                    " OR ".join(words),
                    query="",
                    person=person,
                    conversation=None,
                    kinds=("entry",),
                    limit=limit,
                    whole=True,
                    table="entry_fts",
                )
                best = SearchIndex._ranked_own(
                    db, " OR ".join(words), kind="entry", person=person, limit=limit
                )
                assert best == every, (words, person, limit)
                compared += len(best) >= limit
    assert compared
