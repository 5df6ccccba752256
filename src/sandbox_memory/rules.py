"""The memory rules enforced in code, the same for every engine and every door.

An engine only proposes candidates. :func:`check_candidates` decides which become changes:

- every change cites at least one of the items being processed;
- one change per key per consolidation (two proposals to remember one key as one kind pass
  the check each and are then folded into one change by :func:`one_entry_per_subject`);
- a retracted entry stays retracted (only a direct ``Remember`` revives it);
- what an entry may rest on depends on its kind (:data:`SUPPORT`): a preference and a decision
  on what the user said, a procedure on what the user said or a command the agent ran (not on
  tool output alone), a fact on any item that is not an external tool result; a preference,
  and any entry that also cites items which may not support it, must be supported by the
  cited items that may (:func:`supports`: at least half of its words are theirs), not merely
  accompanied by one of them;
- passwords, keys and links that grant access are never stored;
- an entry resting only on external tool results (MCP, web, hosted or user-marked tools)
  is never stored; the agent's own reads of memory (``grep test memories/MEMORY.md`` and what
  it printed) are evidence of nothing;
- keys are safe slugs (``a/b`` or ``../../etc/passwd`` are refused).

Rejected changes are logged at WARNING with the reason; the rest apply to the latest memory.
Phase 1 (:mod:`.extract.rollout`), phase 2 (:mod:`.consolidate.selection`) and the edit
commands (:mod:`.commands`) all apply these rules.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .engines.base import Candidate, KnownEntry, Subjects
from .engines.commands import MemoryReads
from .engines.transcript import (
    is_external_item,
    item_text,
    segment_id_of,
    segment_items,
    tool_names_by_call_id,
)
from .stores.records import KEY_RE, MAX_CONTENT_CHARS, ConversationMemory, Entry, Source, now_ms

if TYPE_CHECKING:
    from .redact import Redactor  # built by the runtime, on first use

logger = logging.getLogger("sandbox_memory")

ACCESS_LINK_RE = re.compile(
    r"https?://[^\s]*(?:[?&](?:token|access_token|api_key|apikey|key|sig|signature|code|auth|"
    r"password|secret|X-Amz-Signature|X-Amz-Credential)=|://[^/\s:@]+:[^/\s@]+@)[^\s]*",
    re.IGNORECASE,
)
"""Links that grant access by themselves: credentials in the URL or a token in the query."""

REDACTION_TRACE = "[REDACTED:"


@dataclass
class ItemInfo:
    role: str | None
    type: str | None
    external: bool
    text: str = ""
    reads_memory: bool = False
    """The agent reading memory's own files, or what that read printed (see
    :mod:`.engines.commands`)."""

    @property
    def origin(self) -> str:
        """Who an item speaks for: ``user``, ``assistant``, ``command`` (a call the agent made),
        ``tool`` (a tool's output), ``external`` (MCP, web, hosted or user-marked tools) or
        ``memory`` (memory read back: evidence of nothing new)."""
        if self.external:
            return "external"
        if self.reads_memory:
            return "memory"
        if self.type in (None, "message"):
            return "user" if self.role == "user" else "assistant"
        if self.type is not None and self.type.endswith("_call"):
            return "command"
        return "tool"


SUPPORT: dict[str, frozenset[str]] = {
    "preference": frozenset({"user"}),
    "decision": frozenset({"user"}),
    "procedure": frozenset({"user", "command"}),
    "fact": frozenset({"user", "assistant", "command", "tool"}),
}
"""The origins of the items each kind of entry may rest on. A preference or a decision is the
user's to make; a procedure is what the user said to do or what the agent ran, never text a
tool printed (a README, a web page, an injected instruction); external results and memory
read back support nothing."""

SUPPORT_SHARE = 0.5
"""The share of an entry's words that the items allowed to support it must contain."""

_WORD_RE = re.compile(r"[^\W_]+")
_CJK_RE = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
_FILLER = frozenset(
    "the a an and or of to in on for with is are was be by at as it this that from user "
    "prefers preference prefer likes wants decision decided stated use uses used should "
    "always never run runs agent we our they their its when then than not no task goal note "
    "fact says said asked asks wants want needs need told mentioned here there".split()
)


def _words(text: str) -> set[str]:
    """Comparable words: lowercased, cut to 5 letters (``cleaning`` ~ ``clean``), single CJK
    characters."""
    out: set[str] = set()
    for word in _WORD_RE.findall(text.lower()):
        if _CJK_RE.search(word):
            out.update(c for c in word if _CJK_RE.match(c))
        elif word not in _FILLER and len(word) >= 2:
            out.add(word[:5])
    return out


def supports(content: str, texts: Iterable[str]) -> bool:
    """Do ``texts`` say what ``content`` says: at least :data:`SUPPORT_SHARE` of its words?"""
    wanted = _words(content)
    if not wanted:
        return False
    have: set[str] = set()
    for text in texts:
        have |= _words(text)
    return len(wanted & have) >= SUPPORT_SHARE * len(wanted)


@dataclass
class ItemIndex:
    """What the rules need to know about the items being processed."""

    items: dict[str, ItemInfo] = field(default_factory=dict)

    @classmethod
    def from_segments(
        cls, segments: list[dict[str, Any]], *, external_tools: Iterable[str] = ()
    ) -> ItemIndex:
        names = tool_names_by_call_id(segments)
        ext = frozenset(external_tools)
        index = cls()
        reads = MemoryReads()
        # The engines' own item ids (segment_items): lines recorded without memory_item_id,
        # such as rollouts the SDK's Memory wrote, get the same fallback ids the engine cites.
        for position, seg in enumerate(segments):
            for item_id, item in segment_items(seg, segment_id_of(seg, position)):
                external = is_external_item(item, external_tools=ext)
                if not external and item.get("type") == "function_call_output":
                    external = names.get(str(item.get("call_id"))) in ext
                index.items[item_id] = ItemInfo(
                    role=item.get("role") if isinstance(item.get("role"), str) else None,
                    type=item.get("type") if isinstance(item.get("type"), str) else None,
                    external=external,
                    text=item_text(item, max_chars=_SUPPORT_TEXT_CHARS),
                    reads_memory=reads.is_read(item),
                )
        return index

    def is_user(self, item_id: str) -> bool:
        info = self.items.get(item_id)
        return info is not None and info.role == "user" and info.type in (None, "message")


@dataclass
class Rejection:
    key: str
    reason: str


def secret_problem(text: str, redactor: Redactor) -> str | None:
    """Why ``text`` may not be stored (a secret or an access link), or ``None``."""

    if REDACTION_TRACE in text:
        return "it refers to a redacted secret"
    found = redactor.find(text)
    if found:
        return f"it contains a secret ({found[0][0]})"
    if ACCESS_LINK_RE.search(text):
        return "it contains a link that grants access"
    return None


_SUPPORT_TEXT_CHARS = 8_000
_ALLOWED_WORDS = {
    "preference": "an explicit statement by the user",
    "decision": "an explicit statement by the user",
    "procedure": "a statement by the user or a command the agent ran",
    "fact": "an item that is neither an external tool result nor memory read back",
}


def _support_problem(kind: str, content: str, cited: list[str], index: ItemIndex) -> str | None:
    allowed = SUPPORT.get(kind, SUPPORT["fact"])
    supporting = [index.items[s] for s in cited if index.items[s].origin in allowed]
    if not supporting and all(index.items[s].external for s in cited) and kind == "fact":
        return "it rests only on external tool results"
    if not supporting:
        return f"a {kind} needs {_ALLOWED_WORDS.get(kind, 'a source')} among its sources"
    # Words are compared where they decide: a preference must be said by the user, and an
    # entry that also cites items which may not support it (a tool's output beside the user's
    # unrelated task) must rest on the ones that may. An entry citing only allowed items may
    # word what they say freely.
    if (kind == "preference" or len(supporting) < len(cited)) and not supports(
        content, (info.text for info in supporting)
    ):
        return (
            f"its content is not supported by the cited items that may support a {kind} "
            f"({_ALLOWED_WORDS.get(kind, 'its sources')})"
        )
    return None


KEY_IGNORED_KINDS = frozenset({"truncated-token"})
"""Forms that do not apply to a key. A truncated token is a vendor prefix and a few characters
at the end of a text (an output cut short); a key always ends there, so ``npm-v10-lockfile``
read as ``npm_v10_lockfile`` would be one. A whole token in a key is still found: by its
vendor format, and by the parts that mix letters and digits (below)."""


def key_problem(key: str, redactor: Redactor) -> str | None:
    """A key is shown and promoted like content: it may not carry (a trace of) a secret.

    The key is read as written, with its dashes as spaces, and with its dashes as underscores
    (a vendor prefix such as ``ghp_`` spelled ``ghp-``), each for the forms that apply to a
    key (see :data:`KEY_IGNORED_KINDS`)."""
    words = key.replace("-", " ")
    if "redacted" in words.split():
        return "its key is made from a redacted secret"
    variants = (key, words, key.replace("-", "_"))
    parts = re.split(r"[-_.]", key)
    after_noun = [
        part for before, part in zip(parts, parts[1:], strict=False) if before in _CREDENTIAL_NOUNS
    ]
    if (
        any(kind not in KEY_IGNORED_KINDS for v in variants for kind, _ in redactor.find(v))
        or any(_mixed(part, _KEY_TOKEN_CHARS, _KEY_TOKEN_SWITCHES) for part in parts)
        # "password-hunter2xyz": what follows a credential's name is its value
        or any(_mixed(part, 6) for part in after_noun)
    ):
        return "its key holds what looks like a credential"
    return None


_CREDENTIAL_NOUNS = frozenset(
    {"password", "passwd", "pass", "pw", "pwd", "secret", "token", "passphrase", "apikey"}
)


def _mixed(part: str, chars: int, switches: int = 1) -> bool:
    """``part`` has ``chars`` characters or more, letters and digits, and switches between
    them at least ``switches`` times or has a run of consonants no word has (random text)."""
    if len(part) < chars or not any(c.isalpha() for c in part):
        return False
    kinds = [c.isdigit() for c in part if c.isalnum()]
    seen = sum(a != b for a, b in zip(kinds, kinds[1:], strict=False))
    return seen >= 1 and (seen >= switches or _CONSONANT_RUN_RE.search(part) is not None)


_CONSONANT_RUN_RE = re.compile(r"[bcdfghjklmnpqrstvwxz]{6,}", re.IGNORECASE)
"""Six consonants in a row: no English word has them ("strengths" has five), random text
often does."""


_KEY_TOKEN_CHARS = 16
"""A key part (between dashes, underscores and dots) this long mixing letters and digits is a
token, not a word (``npm_v10_lockfile`` is three words)."""

_KEY_TOKEN_SWITCHES = 4
"""How often such a part switches between letters and digits to be a token: a random token
of 16 base62 characters does about 6 times, a name with a date or a number
(``agentidentitydata20251127``, ``1771technologies``, ``python3dateutil``) once or twice."""


def check_candidates(
    candidates: list[Candidate],
    *,
    index: ItemIndex,
    existing: Mapping[str, Entry],
    redactor: Redactor,
    person: str | None = None,
    log: bool = True,
) -> tuple[list[Candidate], list[Rejection]]:
    """Split candidates into accepted and rejected (each rejection logged unless ``log`` is
    false: a preview before deciding whether to ask the model again). ``person``: whom the
    run was for; another person's private entry does not exist for it (see
    :meth:`Entry.exists_for <sandbox_memory.stores.files.Entry.exists_for>`)."""

    accepted: list[Candidate] = []
    rejected: list[Rejection] = []
    seen: dict[str, tuple[str, str]] = {}
    """Key -> (action, kind) of its first accepted change."""
    for cand in candidates:
        key = cand.key.strip() if isinstance(cand.key, str) else ""
        # A key may hold a secret (it is what a credential check refuses): shown redacted in
        # the rejection, the log line and the store.
        shown = redactor.redact_text(str(cand.key))
        if key_problem(str(cand.key), redactor):
            shown = "[REDACTED:key]"
        reason: str | None = None
        cited = [s for s in cand.sources if s in index.items]
        if not KEY_RE.fullmatch(key) or ".." in key:
            reason = f"key {shown!r} is not a safe slug"
        elif (
            key in seen
            and seen[key] != ("remember", cand.kind)
            or (key in seen and cand.action != "remember")
        ):
            reason = "a second change to the same key in one consolidation"
        elif not cited:
            reason = f"it cites none of the items being processed (sources={cand.sources!r})"
        elif existing.get(key) is not None and not existing[key].exists_for(person):
            reason = "its key is another person's private entry, which this run cannot change"
        elif cand.action == "forget":
            if key not in existing:
                reason = "forget of a key that is not in memory"
        elif existing.get(key) is not None and existing[key].status == "retracted":
            reason = "the entry was retracted; only a direct Remember can revive it"
        elif not cand.content.strip():
            reason = "empty content"
        elif len(cand.content) > MAX_CONTENT_CHARS:
            reason = f"content longer than {MAX_CONTENT_CHARS} characters"
        else:
            reason = (
                secret_problem(cand.content, redactor)
                or key_problem(key, redactor)
                or _support_problem(cand.kind, cand.content, cited, index)
            )
        if reason is not None:
            rejected.append(Rejection(key=shown, reason=reason))
            if log:
                logger.warning("memory change to %r rejected: %s", shown, reason)
            continue
        seen.setdefault(key, (cand.action, cand.kind))
        accepted.append(cand.model_copy(update={"key": key, "sources": cited}))
    return accepted, rejected


SAME_SUBJECT_SHARE = 0.8
"""Share of their comparable words (Jaccard) above which two entries of one kind, one saying
all the other says, say the same thing: "Run the tests with `make check`." and "Run the tests
with `make check` first." are one entry; two fixes of one file in different functions share
far less."""


def _same_words(a: AbstractSet[str], b: AbstractSet[str]) -> bool:
    """One says all the other says, and little more: "deploy alpha with make deploy-alpha" and
    "deploy gamma ..." differ in the word that names their subject, so they are two."""

    return bool(a and b) and (a <= b or b <= a) and len(a & b) >= SAME_SUBJECT_SHARE * len(a | b)


def says_nothing_new(current: Entry | None, cand: Candidate, *, person: str | None) -> bool:
    """Whether ``cand`` would only repeat an active entry word for word (the test command
    every task runs again): a shared entry needs no copy in each conversation that met it
    again."""

    return (
        cand.action == "remember"
        and current is not None
        and current.status == "active"
        and current.kind == cand.kind
        and current.content == cand.content.strip()
        and current.person == (person if cand.kind == "preference" or cand.personal else None)
    )


def merged_subjects(a: Subjects | None, b: Subjects | None) -> Subjects | None:
    """The subjects of two folded candidates: each field's values of both, once, in order."""

    if a is None or b is None:
        return a or b
    return Subjects(
        **{
            name: list(dict.fromkeys([*getattr(a, name), *getattr(b, name)]))
            for name in Subjects.model_fields
        }
    )


def _joined(older: str, newer: str) -> str:
    """One wording of two that are folded: the one that says all the other says, else both
    (the newer alone when both would not fit)."""

    old_words, new_words = _words(older), _words(newer)
    if old_words <= new_words:
        return newer
    if new_words <= old_words:
        return older
    both = f"{older.strip()} {newer.strip()}"
    return both if len(both) <= MAX_CONTENT_CHARS else newer


_CODE_SPAN_RE = re.compile(r"`([^`\n]+)`")
_PATH_RE = re.compile(r"(?<![\w./-])(?:[\w.-]+/)+[\w.-]+\.\w{1,5}(?:::[\w\[\].-]+)*")

SUBJECT_MIN_NAMES: dict[str, int] = {"procedure": 1}
"""Names (code spans, paths, test ids) two entries of a kind must share, all of them, to be
about one subject: a procedure is its command (`make check`, however it is worded); another
kind needs two ("`tests/test_invoice.py::test_tax` failed in `acme/invoice.py`"), since one
file alone is the subject of many lessons."""

SUBJECT_DEFAULT_MIN_NAMES = 2


def subject_names(content: str, subjects: Subjects | None = None) -> frozenset[str]:
    """What an entry names, as one set: its subjects' files, tests and commands when it
    carries them, else the code spans and paths of its text (whitespace made single)."""

    if subjects is not None and (subjects.files or subjects.tests):
        named = [*subjects.files, *subjects.tests]
    else:
        spans = _CODE_SPAN_RE.findall(content)
        named = [*spans, *_PATH_RE.findall(_CODE_SPAN_RE.sub(" ", content))]
    return frozenset(" ".join(n.split()) for n in named if n.strip())


def _same_subject(kind: str, a: frozenset[str], b: frozenset[str]) -> bool:
    return a == b and len(a) >= SUBJECT_MIN_NAMES.get(kind, SUBJECT_DEFAULT_MIN_NAMES)


KNOWN_TRAITS_CACHED = 4_096
"""Known entries' contents whose words are kept between extractions (a close's extractions
are shown mostly the same ones)."""


@functools.lru_cache(maxsize=KNOWN_TRAITS_CACHED)
def _known_traits(content: str) -> tuple[frozenset[str], frozenset[str]]:
    """A known entry's words and what it names: the same few hundred known entries are met by
    every extraction of a close."""

    return frozenset(_words(content)), subject_names(content)


def one_entry_per_subject(
    candidates: list[Candidate],
    known: Iterable[KnownEntry],
    *,
    folds: list[str] | None = None,
) -> list[Candidate]:
    """Candidates with duplicates folded, whichever engine proposed them: a candidate saying
    what a known entry of its kind says, or naming exactly what it names (the same command,
    the same failing test in the same file: :func:`subject_names`), becomes an update of that
    entry (its key); two candidates of one kind that say the same words, name the same
    things or share a key become one (both wordings unless one says all the other does,
    every source and keyword). Two facts taken from one message ("Staging moved to host-b;
    CI runs on runner-1") cite the same item and stay two. A ``forget`` is left as it is.

    Each fold is logged (INFO) and, when ``folds`` is given, said there for the change log."""

    known_seen = [
        (k, words, named if k.subjects is None else subject_names(k.content, k.subjects))
        for k in known
        for words, named in [_known_traits(k.content)]
    ]
    out: list[Candidate] = []
    at: dict[str, int] = {}
    for cand in candidates:
        if cand.action != "remember":
            at.setdefault(cand.key, len(out))
            out.append(cand)
            continue
        words = _words(cand.content)
        names = subject_names(cand.content, cand.subjects)
        key = cand.key
        if not any(k.key == key for k, _, _ in known_seen):
            for entry, their, named in known_seen:
                if entry.kind == cand.kind and (
                    _same_words(words, their) or _same_subject(cand.kind, names, named)
                ):
                    key = entry.key
                    break
        if key not in at:
            for other in out:
                if (
                    other.action == "remember"
                    and other.kind == cand.kind
                    and other.personal == cand.personal
                    and (
                        _same_words(words, _words(other.content))
                        or _same_subject(
                            cand.kind, names, subject_names(other.content, other.subjects)
                        )
                    )
                ):
                    key = other.key
                    break
        if key != cand.key and key in at and out[at[key]].action != "remember":
            key = cand.key  # never fold into a key this consolidation forgets
        index = at.get(key)
        held = out[index] if index is not None else None
        if key != cand.key or (
            held is not None and (held.action, held.kind) == ("remember", cand.kind)
        ):
            note = (
                f"{cand.key} folded into {key} (same subject)"
                if key != cand.key
                else f"{key}: two changes proposed, merged into one"
            )
            logger.info("memory change %s", note)
            if folds is not None:
                folds.append(note)
        if index is None:
            at[key] = len(out)
            out.append(cand.model_copy(update={"key": key}))
        elif out[index].action == "remember" and out[index].kind == cand.kind:
            held = out[index]
            out[index] = cand.model_copy(
                update={
                    "key": key,
                    "content": _joined(held.content, cand.content),
                    "sources": list(dict.fromkeys([*held.sources, *cand.sources])),
                    "keywords": list(dict.fromkeys([*held.keywords, *cand.keywords])),
                    "subjects": merged_subjects(held.subjects, cand.subjects),
                }
            )
        else:
            out.append(cand)  # check_candidates judges it: one change per key
    return out


def apply_to_conversation(
    memory: ConversationMemory,
    accepted: list[Candidate],
    *,
    person: str | None,
) -> list[str]:
    """Apply checked candidates to the latest conversation memory; return changed keys."""

    changed: list[str] = []
    stamp = now_ms()
    for cand in accepted:
        sources = [Source(conversation=memory.rollout_id, item=s) for s in cand.sources]
        if cand.action == "forget":
            entry = memory.entries.get(cand.key)
            if entry is None or entry.status == "retracted":
                continue
            retract(entry, sources, stamp)
        else:
            entry = Entry(
                key=cand.key,
                content=cand.content.strip(),
                kind=cand.kind,
                sources=merged_sources(memory.entries.get(cand.key), sources),
                updated_at=stamp,
                person=person if cand.kind == "preference" or cand.personal else None,
                keywords=cand.keywords,
                subjects=cand.subjects,
            )
            if same_entry(memory.entries.get(cand.key), entry):
                continue  # the same items extracted again (a redone extraction): no change
            memory.entries[cand.key] = entry
        changed.append(cand.key)
    if changed:
        memory.version += 1
    return changed


MAX_ENTRY_SOURCES = 32
"""Most sources an entry keeps as later runs update it (the newest): enough to trace a lesson
to the runs that taught and confirmed it, bounded so an entry every run touches stays small."""


def merged_sources(old: Entry | None, new: list[Source]) -> list[Source]:
    """The sources of a new version of an entry: what the active entry it updates rested on,
    then the new evidence (one lesson, updated as evidence arrives, keeps all of it)."""

    if old is None or old.status != "active":
        return new
    merged = list(old.sources) + [s for s in new if s not in old.sources]
    return merged[-MAX_ENTRY_SOURCES:]


def same_fact(a: Entry, b: Entry) -> bool:
    """Whether ``a`` and ``b`` are copies of one entry (promoted, or copied back): they share a
    source. Entries of one key learned apart share none."""

    return a.key == b.key and any(source in b.sources for source in a.sources)


def retract(entry: Entry, sources: list[Source], stamp: int | None = None) -> None:
    """Mark ``entry`` retracted, citing what retracted it (a Forget, a live edit, a run)."""

    entry.status = "retracted"
    entry.updated_at = now_ms() if stamp is None else stamp
    entry.sources = [*entry.sources, *sources]


MAX_CLOCK_AHEAD_MS = 10 * 60 * 1000
"""How far ahead of this clock a stamp read from disk may be and still rank by it."""


def plausible_ms(stamp: int) -> int:
    """``stamp`` for ranking "newer wins": a time further ahead than another machine's clock
    can plausibly be (a bad write, a clock years off) ranks as the oldest, so it never
    outranks a correction made now."""

    return stamp if stamp <= now_ms() + MAX_CLOCK_AHEAD_MS else 0


def same_entry(old: Entry | None, new: Entry) -> bool:
    """Whether ``new`` is what ``old`` already says, active (a redone extraction)."""
    return (
        old is not None
        and old.status == "active"
        and (old.kind, old.content, old.sources, old.person)
        == (new.kind, new.content, new.sources, new.person)
    )
