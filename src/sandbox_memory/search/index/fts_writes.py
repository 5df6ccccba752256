"""The FTS5 writes of one transaction of the index, made together in rowid order."""

from __future__ import annotations

import sqlite3

FTS_PENDING_CHARS = 2_000_000
"""Characters of FTS5 writes held for one transaction (:class:`FtsWrites`) before they are
made (in rowid order) on the way: a rebuild's bodies are not all held in memory at once (a
close holds far fewer: at 10,000 stored conversations, the entries of the 30 that leave the
selection and the 30 new ones' documents)."""


class FtsWrites:
    """The FTS5 writes of one transaction, made together in rowid order (:meth:`flush`).

    FTS5 keeps a transaction's new postings in memory in rowid order and writes them out as a
    segment of its own each time a write comes with a rowid lower than the last one (SQLite's
    ``fts5_index.c``): dropped documents taken in set order, or a document replaced (its old
    rowid deleted after the previous document's new rowid was inserted), wrote a segment per
    document, and their merges followed. Measured on an index of 20,000 entries: 60 entries'
    deletes in random order 17 ms, the same in rowid order 0.6 ms. Here each table's deletes
    are made first, then its inserts, each in rowid order; a document inserted and dropped
    within the transaction is never written."""

    def __init__(self) -> None:
        self._deletes: dict[str, dict[int, str]] = {}
        self._inserts: dict[str, dict[int, str]] = {}
        self.chars = 0

    def insert(self, table: str, rowid: int, body: str) -> None:
        self._inserts.setdefault(table, {})[rowid] = body
        self.chars += len(body)

    def delete(self, table: str, rowid: int, body: str) -> None:
        # A rowid inserted in this transaction was not in the table before it: its insert is
        # taken back (a delete held for the same rowid is the row it replaced, and stays).
        if self._inserts.get(table, {}).pop(rowid, None) is None:
            self._deletes.setdefault(table, {})[rowid] = body
            self.chars += len(body)

    def flush(self, db: sqlite3.Connection) -> None:
        """Make the writes held (the caller's transaction is open)."""

        for table in sorted({*self._deletes, *self._inserts}):
            deletes = self._deletes.get(table, {})
            db.executemany(
                f"INSERT INTO {table}({table}, rowid, body) VALUES ('delete', ?, ?)",
                sorted(deletes.items()),
            )
            db.executemany(
                f"INSERT INTO {table}(rowid, body) VALUES (?, ?)",
                sorted(self._inserts.get(table, {}).items()),
            )
        self.clear()

    def clear(self) -> None:
        self._deletes.clear()
        self._inserts.clear()
        self.chars = 0
