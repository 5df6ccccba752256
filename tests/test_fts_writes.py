"""The index's FTS5 writes of one transaction are made in rowid order (``FtsWrites``)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from helpers import run_payload
from sandbox_memory import MemoryClient
from sandbox_memory.search.index import sync
from sandbox_memory.search.index.fts_writes import FTS_PENDING_CHARS, FtsWrites
from sandbox_memory.search.index.schema import TOKENIZER

WORDS = [f"w{i}" for i in range(60)]


def _table(bodies: dict[int, str]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(body, content='', tokenize='{TOKENIZER}')")
    db.execute("BEGIN")
    db.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)", sorted(bodies.items()))
    db.execute("COMMIT")
    return db


def _segments(db: sqlite3.Connection) -> int:
    (rows,) = db.execute("SELECT count(*) FROM t_data").fetchone()
    return int(rows)


def _matching(db: sqlite3.Connection, word: str) -> set[int]:
    return {int(r) for (r,) in db.execute("SELECT rowid FROM t WHERE t MATCH ?", (word,))}


def test_scattered_deletes_and_replacements_write_one_segment() -> None:
    rng = random.Random(7)
    bodies = {i: " ".join(rng.choices(WORDS, k=12)) for i in range(1, 401)}
    db = _table(bodies)
    before = _segments(db)
    writes = FtsWrites()
    db.execute("BEGIN")
    # Dropped in set order, and documents replaced (old rowid deleted, a new one inserted):
    # the order a sync takes them in, rowids going down and up.
    dropped = rng.sample(sorted(bodies), 60)
    for rowid in dropped:
        writes.delete("t", rowid, bodies.pop(rowid))
    for new, old in enumerate(rng.sample(sorted(bodies), 40), start=1000):
        writes.delete("t", old, bodies.pop(old))
        bodies[new] = " ".join(rng.choices(WORDS, k=12))
        writes.insert("t", new, bodies[new])
    writes.flush(db)
    db.execute("COMMIT")
    # One segment for the transaction (each write out of order used to flush one of its own:
    # 15 new rows of t_data for the 60 deletes alone).
    assert _segments(db) - before <= 2
    for word in WORDS:
        assert _matching(db, word) == {r for r, b in bodies.items() if word in b.split()}


def test_a_rowid_inserted_then_dropped_in_one_transaction_is_never_written() -> None:
    db = _table({1: "alpha beta", 2: "gamma"})
    writes = FtsWrites()
    db.execute("BEGIN")
    writes.delete("t", 2, "gamma")  # the row rowid 2 held before
    writes.insert("t", 2, "delta")  # rowid 2 reused by a new document
    writes.delete("t", 2, "delta")  # which is dropped again in the same transaction
    writes.insert("t", 3, "epsilon")
    writes.flush(db)
    db.execute("COMMIT")
    assert _matching(db, "gamma") == set()
    assert _matching(db, "delta") == set()
    assert _matching(db, "epsilon") == {3}
    assert _matching(db, "alpha") == {1}
    assert writes.chars == 0


async def test_writes_made_on_the_way_in_a_big_sync_search_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync holding more than ``FTS_PENDING_CHARS`` makes its writes on the way (here after
    every document): the index answers as one whose writes were all made at the commit."""

    found: list[list[tuple[str, str]]] = []
    for limit in (FTS_PENDING_CHARS, 1):
        monkeypatch.setattr(sync, "FTS_PENDING_CHARS", limit)
        root = tmp_path / f"limit-{limit}"
        root.mkdir()
        mc = MemoryClient(root)
        for n, topic in enumerate(["invoices", "parsers", "deploys", "invoices again"]):
            payload = run_payload(f"We decided that {topic} ship via deploy-{n} on Tuesdays.")
            await mc.runtime.record(payload, rollout_id=f"run-{n}")
        await mc.runtime.close()
        hits = await mc.search("deploy invoices Tuesdays", limit=20)
        found.append([(h.kind, h.text) for h in hits])
        assert hits
    assert found[0] == found[1]
