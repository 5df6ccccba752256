"""Limits shared by the rooms of the offline engine."""

from __future__ import annotations

USER_SCAN_CHARS = 20_000
"""Characters of one user message scanned for preferences, decisions and corrections.

People state preferences in a few short sentences; a longer message is pasted material (a log,
a file), so only its head and tail are read. Keeps a pasted 5 MB log cheap."""

TASK_CHARS = 300
"""Characters of a user message quoted as the task or a follow-up: one readable line."""

ERROR_LINE_CHARS = 200
"""Characters of an error line quoted in a fix fact or the notes: one terminal line."""

COMMAND_CHARS = 200
"""Characters of a command quoted in a procedure or the notes."""

CONTENT_CHARS = 500
"""Longest candidate content: one or two sentences, as the memory format asks."""

LESSON_CHARS = 800
"""Longest content of a fixed failure: four short parts (symptom, fix, how it was verified,
the cause as the agent told it), each whole; the cause is the part a later run needs most and
the first to be left out when the others are long."""

KEY_MAX_CHARS = 64
"""Longest key: the key rule is ``[a-z0-9][a-z0-9-]{0,63}``."""

KEY_SUBJECT_WORDS = 4
"""Words of a subject kept in a key: enough to tell facts apart, short enough to stay stable
when the same thing is said with a few more words."""

FAILURE_SUBJECT_WORDS = KEY_SUBJECT_WORDS - 1
"""Words naming what failed (the failing test's file and name, or the error's words)."""

SIGNATURE_WORDS = 3
"""Words of a command that identify its kind (``python -m pytest``, ``npm run build``) when a
failure is paired with a later passing run of an uncategorised command."""

SLUG_MAX_WORDS = 6
"""Most words in a rollout slug (the slug rule is 2-6 words)."""

SAID_SUMMARY_CHARS = 200
"""Characters of a stated fact quoted in the rollout summary (shortened at a word)."""

MAX_SOURCES = 12
"""Most item ids cited by one candidate: enough to trace it, bounded for merged repeats."""

MAX_KEYWORDS = 8
"""Most keywords on one candidate."""

MAX_FILES_NAMED = 12
"""Most file names written into one fact or summary list (the rest are counted)."""
