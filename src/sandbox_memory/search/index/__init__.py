"""Search: a ranked full-text index over everything memory holds, and its queries.

What is indexed (each a *document*):

- ``entry``: every active entry of layout memory and of each conversation memory;
- ``rollout_summary``: each rollout summary file under ``rollout_summaries/``;
- ``item``: every recorded item of ``sessions/<rollout-id>.jsonl`` (already redacted when it
  was recorded), except the ``memory_search`` tool's own calls and results.

The engine is SQLite FTS5 (in Python's standard library) with its BM25 ranking and the
``porter unicode61`` tokenizer: Unicode-aware word splitting, accents folded, English words
reduced to their stem ("painted" finds "painting"). Chinese, Japanese and Korean text has no
spaces between words, so each such character is indexed as its own token and a query's CJK run
is searched as overlapping two-character phrases.

The index is derived data, never the source of truth: ``<memories_dir>/store/search.sqlite``
can be deleted at any time and is rebuilt from the workspace by the next search or close.
It is brought up to date incrementally from watermarks it keeps itself:

- items: the byte offset of each rollout file already indexed (new bytes only);
- conversation entries: the byte offset of ``store/log.jsonl`` already read; every change to
  an entry is a log record naming its scope, and only the scopes named are compared again;
- layout entries: layout memory's change stamp last synced; the head names the keys each of
  its latest commits changed (a rebuild: all), and only those entries are compared again (all
  of them when the stamp is older than the commits named, or unknown);
- summaries: the rollout's progress (slug, extracted offset); a summary is read again only
  when its rollout was extracted again (or forgotten, which drops it).

A retracted entry leaves the index at the next sync, and every search syncs first, so it
never appears in a result; nor do the recorded items it rests on (its sources), as long as it
stays retracted: a search for a forgotten fact does not bring it back through the run it was
learned from. A direct Remember makes the entry active again, and its items with it. Hits carry a ``person`` filter: a private entry, and the items and
summary of a person's runs, are returned only to that person.

Over a local folder the SQLite file is used in place. Through any other sandbox backend (the
session API cannot host a live SQLite file) the runtime works on a local copy, fetched once,
and writes it back to the workspace at close, before the snapshot; if a process dies first,
the next one catches up from the watermarks in the copy it finds.

Usage: while items are indexed, a later run's use of memory is recorded: a tool call that
reads a rollout summary, raw memory or rollout file of a conversation; an entry line of
``MEMORY.md`` shown in a tool result; an entry key cited in an assistant message. Phase 2
reads these counts (:meth:`SearchIndex.usage`) when it selects which rollouts to keep.

The index is built of one room per job, each a class :class:`SearchIndex` inherits, all
standing on :class:`.base.IndexBase`. A room that calls another inherits it, so what each
uses of the others is in its class line and checked by the type checker; the one call from
the core to a room (the sync's ``_flags_taken_in``, from :meth:`~.base.IndexBase.save`) is
declared abstract in the base.

- :mod:`.base`       settings and state; the SQLite file opened in place or as a local copy,
  rebuilt when of another version or unreadable, written back, closed
- :mod:`.schema`     the tables, their version, which kind is in which FTS5 table, a row's
  packed text and sources
- :mod:`.text`       normal form, tokens, query expressions, word comparison
- :mod:`.documents`  what each document holds (an entry's subjects and stamp, an item's label
  and text, text without run stamps)
- :mod:`.sync`       kept in step with the workspace and the store (:meth:`SearchIndex.sync`)
- :mod:`.retracted`  what a Forget hides besides its entry
- :mod:`.rank`       BM25, each kind of document ranked among its own
- :mod:`.vectors`    embeddings, the cosine ranking and its fusion with BM25
- :mod:`.query`      the searches (:meth:`SearchIndex.search`, :meth:`SearchIndex.curated`)
- :mod:`.hits`       the hit, its text and excerpt, one hit per fact, the text form
- :mod:`.known`      the entries an extraction is shown as known
  (:meth:`SearchIndex.known_entries`)
- :mod:`.usage`      how often later runs used memory (:meth:`SearchIndex.usage`)
"""

from __future__ import annotations

from .base import RemoteIndex
from .documents import MAX_ITEM_CHARS, SEARCH_TOOL_NAME, settled_text, timestamp_ms
from .hits import (
    ENTRY_TEXT_CHARS,
    EXCERPT_CHARS,
    HIT_TEXT_CHARS,
    SCORE_SHOWN_MIN,
    EntryCopy,
    SearchHit,
    _window,
    distinct,
    excerpt_of,
    format_hits,
    hit_text_chars,
    one_per_key,
)
from .known import KNOWN_CANDIDATES, KNOWN_NEWEST, KnownLookup
from .query import CANDIDATES_PER_HIT, DEFAULT_LIMIT, MAX_LIMIT, IndexQueries
from .rank import KIND_ORDER, RRF_K
from .retracted import STATED_MIN_CHARS, states_any
from .schema import INDEX_FILE, TOKENIZER, HitKind, _sources_of, _unpack
from .text import (
    MAX_QUERY_PHRASES,
    QUERY_STOPWORDS,
    _fts_body,
    _plain,
    all_words,
    file_phrases,
    fts_query,
    known_terms,
    named_files,
    named_phrases,
    says_the_same,
    search_expression,
    words_said,
)
from .usage import UsageCounts


class SearchIndex(IndexQueries, KnownLookup, UsageCounts):
    """The search index of one layout: sync it with the workspace, query it, read usage."""


__all__ = [
    "CANDIDATES_PER_HIT",
    "DEFAULT_LIMIT",
    "ENTRY_TEXT_CHARS",
    "EXCERPT_CHARS",
    "HIT_TEXT_CHARS",
    "INDEX_FILE",
    "KIND_ORDER",
    "KNOWN_CANDIDATES",
    "KNOWN_NEWEST",
    "MAX_ITEM_CHARS",
    "MAX_LIMIT",
    "MAX_QUERY_PHRASES",
    "QUERY_STOPWORDS",
    "RRF_K",
    "SCORE_SHOWN_MIN",
    "SEARCH_TOOL_NAME",
    "STATED_MIN_CHARS",
    "TOKENIZER",
    "EntryCopy",
    "HitKind",
    "RemoteIndex",
    "SearchHit",
    "SearchIndex",
    "_fts_body",
    "_plain",
    "_sources_of",
    "_unpack",
    "_window",
    "all_words",
    "distinct",
    "excerpt_of",
    "file_phrases",
    "format_hits",
    "fts_query",
    "hit_text_chars",
    "known_terms",
    "named_files",
    "named_phrases",
    "one_per_key",
    "says_the_same",
    "search_expression",
    "settled_text",
    "states_any",
    "timestamp_ms",
    "words_said",
]
