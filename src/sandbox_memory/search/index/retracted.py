"""What a Forget hides from search besides its entry: the items it rests on, and text stating it.

A retracted entry leaves the index; the items it rests on stay indexed but are hidden while it
stays retracted (table ``retracted``, kept by the sync), and so is any item or rollout summary
with a line stating it (:func:`states_any`: its content, or the text of an item it rests on).
"""

from __future__ import annotations

import sqlite3

from .base import IndexBase
from .schema import _unpack
from .text import _plain

STATED_MIN_CHARS = 12
"""Shortest statement (letters and digits, words joined by one space) matched in a summary."""


STATED_PROBE_CHARS = 60
"""Characters of a retracted statement looked for in a summary line (summaries shorten quotes)."""


def states_any(text: str, probes: list[str]) -> bool:
    """Whether a line of ``text`` states one of ``probes`` (plain statements, see
    :func:`_plain`): it holds a probe's first :data:`STATED_PROBE_CHARS` characters, or is
    part of one (summaries and replies quote statements, often shortened)."""

    if not probes:
        return False
    for line in text.splitlines():
        plain = _plain(line)
        if len(plain) < STATED_MIN_CHARS:
            continue
        for probe in probes:
            if probe[:STATED_PROBE_CHARS] in plain or plain in probe:
                return True
    return False


class RetractedItems(IndexBase):
    """Reads the ``retracted`` table: what the entries retracted while resting on a rollout
    said, to hide the items and summary lines that state it."""

    @staticmethod
    def _retracted_probes(db: sqlite3.Connection, rid: str) -> list[str]:
        """What the entries retracted while resting on ``rid``'s items said: their content and
        the text of the items they rest on (plain words, long enough to be a statement)."""

        probes: list[str] = []
        for item, content in db.execute(
            "SELECT DISTINCT item, content FROM retracted WHERE conversation = ?", (rid,)
        ):
            probes.append(_plain(str(content)))
            found = db.execute(
                "SELECT text FROM docs WHERE doc = ?", (f"item:{rid}:{item}",)
            ).fetchone()
            if found is not None:
                probes.append(_plain(_unpack(found[0])))
        return [p for p in dict.fromkeys(probes) if len(p) >= STATED_MIN_CHARS]

    @classmethod
    def _states_retracted(cls, db: sqlite3.Connection, rid: str, text: str) -> bool:
        """Whether a line of ``rid``'s summary states an entry retracted while it rests on
        ``rid``'s items: its content, or the text of an item it rests on (a summary quotes
        statements, often shortened). Such a summary is not searchable while the entry stays
        retracted: a Forget makes the fact unfindable, not only its entry."""

        return states_any(text, cls._retracted_probes(db, rid))
