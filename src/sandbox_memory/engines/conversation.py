"""What people state in a run: who said it, what it says, and when it happened.

A user message may carry facts a later run needs that match no preference or decision pattern:
events ("I went to the support group yesterday"), plans ("we're going camping next month"),
possessions, relationships, results ("the migration finished, 40 GB moved"). This module picks
the sentences that state something, drops small talk and generic sentiment ("Wow, that's so
cool!", "I love it!", "Never give up!"), requests to the agent ("Fix the failing test") and
pasted code or logs, attributes each to its speaker, and resolves relative dates against the
run's date (:mod:`sandbox_memory.engines.dates`).

The speaker of a user message is the ``Name:`` label it starts with, when it has one (a chat
between several people fed as one run, an imported transcript), else the run's person, else
"the user". Everything is deterministic and linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

SPEAKER_LABEL_RE = re.compile(
    r"^\s*(?P<name>[A-Z][A-Za-z'.-]{0,30}(?: [A-Z][A-Za-z'.-]{0,30}){0,2}):[ \t]+(?=\S)"
)
"""``Name: text`` at the start of a message: one to three capitalised words and a colon."""

NOT_SPEAKERS = frozenset(
    """note notes error warning warn update task question answer summary example todo fix bug
    edit ps fyi step context output input result goal problem issue re subject hint tip important
    reminder info background details detail expected actual steps request feedback decision status
    plan description title reason solution command usage log traceback exception also user
    assistant system human ai bot agent developer tool q a n b nb caveat caution update done next
    why what how when where who file path test tests error code stdout stderr response reply
    follow up followup correction fixme hack see cc""".split()
)
"""Label words that introduce a kind of text rather than name a person."""

SMALL_TALK = frozenset(
    """wow cool awesome great amazing nice glad happy thanks thank thx cheers hey hi hello hiya yo
    congrats congratulations proud sounds sound totally agree sure yeah yep yup yes lol haha hahaha
    omg sweet beautiful wonderful fantastic incredible inspiring lovely good bad fun funny love
    loved lovin loving like likes liked awesome super pretty really truly definitely absolutely
    exactly indeed true right oh ah aw aww ooh gosh wish hope hoping hopefully feel feels feeling
    felt think thinks thought know knew mean means guess bet keep kept going gonna wanna gotta
    get gets got getting make makes made thing things stuff lot lots way much many more well even
    still always never ever back again bit kind sort kinda sorta see seen saw look looks looking
    say said tell told talk talking chat chatting catch soon later nice great glad cute dear buddy
    pal mate man dude girl guy guys everyone everybody anyone anybody someone something
    everything anything nothing one ones here there now then today time times day days glad
    appreciate appreciated help helps helped helping care cares matter matters
    important best better worth excited exciting interesting impressive incredible awesome blast
    hear heard happen happened happening sorry luck miss missed welcome enjoy enjoyed enjoying
    give up stay strong go goes went grateful thankful lucky joy joyful enjoyable fulfilled
    fulfilling passion passionate positive positively effort thoughtful special rewarding
    meaningful powerful touching heartwarming tough hard easy meet nice doing being out""".split()
)
"""Words that carry no fact: greetings, reactions, generic sentiment and generic verbs. A sentence
needs other words (what it is about) to be worth remembering."""

IMPERATIVE_OPENERS = frozenset(
    """fix add run make write update create implement remove delete change use analyze analyse
    find check look read open show tell list explain help refactor rename move build test install
    deploy try let give send put set get keep go do don't dont stop start review summarize
    summarise describe consider ensure replace merge commit push pull clone generate compute
    calculate plot draw translate please can could would will should verify confirm investigate
    debug document rewrite port migrate upgrade downgrade bump revert undo apply patch format lint
    clean drop skip ignore avoid include exclude handle support return print call wrap convert
    parse load save export import fetch download upload search compare sort filter count measure
    profile optimize optimise speed reduce increase split combine extract rerun retry re-run
    remember forget note mention answer reply respond prepare draft outline propose suggest
    recommend pick choose select tidy polish""".split()
)
"""First words of a request to the agent ("Fix the failing test ..."): the task, not a fact."""

INTERJECTIONS = frozenset(
    """oh ah wow hey hi hello well so and but also yeah yes no ok okay um uh hmm btw anyway
    actually honestly plus""".split()
)
"""Openers skipped before looking at a sentence's first real word."""

FIRST_PERSON = frozenset({"i", "im", "ive", "id", "ill", "me", "my", "mine", "myself"})
"""First-person singular words (apostrophes removed): a statement about the speaker."""

MIN_FACT_WORDS = 2
"""Fewest content words (not stopwords, not small talk) that make a sentence a fact."""

MIN_ANSWER_WORDS = 2
"""Fewest words in a stated fact ("Last Saturday." answers a question)."""

MAX_SENTENCE_WORDS = 80
"""Most words in one sentence taken as prose; longer runs are pasted material."""

MIN_LETTER_SHARE = 0.6
"""Share of a sentence's non-space characters that must be letters: below it, it is code, a
path list or a log line, not a statement."""

_LABEL_RE = re.compile(r"^[\w .'#-]{1,30}:\s+")
_WORD_RE = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_CODE_CHARS_RE = re.compile(r"[{}()\[\];=<>$|\\#]")
_STOPWORDS = frozenset(
    """a an the and or but if then so of to in on at by for with from into onto about as is are
    was were be been being it its this that these those there here i me my we our us you your he
    she they them their his her him can could would should will shall may might must do does did
    done have has had just also very really please kindly not no than too via per let lets s t d
    ll ve re m over im ive id ill youre youve thats its whats theres dont doesnt didnt isnt wasnt
    arent cant couldnt wouldnt shouldnt wont what who when where why how which all any some such
    own same other another each every both either neither only""".split()
)


@dataclass(frozen=True)
class Turn:
    """A user message split into who said it and what they said."""

    speaker: str | None
    """The ``Name:`` label the message starts with, if any."""
    text: str


_NAME_PREFIX_RE = re.compile(r"(?:Mc|Mac|O|D|De|Di|Da|Du|La|Le|Van|Von|St)[A-Z][a-z]")
"""A name part whose inner capital follows a surname prefix (McDonald, DeShawn, O'Brien)."""

_INNER_CAPITAL_RE = re.compile(r"[a-z][A-Z]")


def _code_identifier(word: str) -> bool:
    """Whether ``word`` is written as code (``IndexError``, ``TimeSeries``, ``OpenAI``): a
    capital inside a part of it, other than after a surname prefix."""

    return any(
        _INNER_CAPITAL_RE.search(part) and not _NAME_PREFIX_RE.match(part)
        for part in re.split(r"[-'.]", word)
    )


def split_speaker(text: str) -> Turn:
    """The message's ``Name:`` label (when it names a person) and the text after it.

    A label word that introduces a kind of text (:data:`NOT_SPEAKERS`: "Note:", "Error:") or
    is written as code (a bug report's "IndexError: tuple index out of range") names no one."""

    match = SPEAKER_LABEL_RE.match(text)
    if match:
        name = match.group("name").strip()
        words = name.split()
        if not any(w.lower().strip(".") in NOT_SPEAKERS or _code_identifier(w) for w in words):
            return Turn(speaker=name, text=text[match.end() :])
    return Turn(speaker=None, text=text)


def _plain_words(sentence: str) -> list[str]:
    low = sentence.lower().replace("\u2019", "'")
    return [w.replace("'", "") for w in _WORD_RE.findall(low)]


def content_words(sentence: str) -> list[str]:
    """Words of ``sentence`` that say what it is about (no stopwords, no small talk)."""

    seen: dict[str, None] = {}
    for word in _plain_words(sentence):
        if len(word) < 2 or word in _STOPWORDS or word in SMALL_TALK:
            continue
        seen.setdefault(word, None)
    return list(seen)


def looks_like_prose(sentence: str) -> bool:
    """Whether ``sentence`` reads as a sentence someone said (not code, a path list or a log)."""

    words = sentence.split()
    if not MIN_ANSWER_WORDS <= len(words) <= MAX_SENTENCE_WORDS:
        return False
    chars = [c for c in sentence if not c.isspace()]
    if not chars:
        return False
    letters = sum(c.isalpha() for c in chars)
    if letters / len(chars) < MIN_LETTER_SHARE:
        return False
    return len(_CODE_CHARS_RE.findall(sentence)) <= 2


def is_request(sentence: str) -> bool:
    """Whether ``sentence`` asks the agent to do something ("Fix ...", "Can you ...", "Step 2:
    run the checks")."""

    label = _LABEL_RE.match(sentence)
    if label and is_request(sentence[label.end() :]):
        return True
    for word in _plain_words(sentence):
        if word in INTERJECTIONS:
            continue
        return word in IMPERATIVE_OPENERS
    return False


def is_first_person(sentence: str) -> bool:
    return any(word in FIRST_PERSON for word in _plain_words(sentence))


def states_a_fact(
    sentence: str, *, min_words: int = MIN_FACT_WORDS, names: frozenset[str] = frozenset()
) -> bool:
    """A statement worth remembering: prose, not a question or a request, and about something
    (at least ``min_words`` content words; fewer are enough for the answer to a question).

    ``names`` are the people talking (lowercase): addressing one ("Hey Tim, nice to meet
    you!") says nothing about anything, so their names do not count as content."""

    stripped = sentence.strip()
    if not stripped or stripped.endswith("?"):
        return False
    if not looks_like_prose(stripped) or is_request(stripped):
        return False
    label = _LABEL_RE.match(stripped)
    body = stripped[label.end() :] if label else stripped
    named = [w for w in content_words(body) if not w.isdigit() and w not in names]
    return len(named) >= min_words


SECOND_PERSON = frozenset({"you", "your", "youre", "youve", "youd", "youll", "yours", "yourself"})
"""Words addressing the listener: "You'd be a great counselor!" is a reaction to them."""

SUGGESTING = frozenset(
    """could can should might try recommend suggest use using won't wont will""".split()
)
"""Words that make a sentence to the listener a suggestion, an offer or a prediction."""

_CLAUSE_SPLIT_RE = re.compile(
    r"\s+[-\u2013\u2014]+\s+|;\s+|,\s+(?=(?:and|but|so|though|which|and it|it's|that's)\b)"
    r"|\s+(?=(?:and|but)\s+(?:it|that|this|they|i|we|she|he)\b)"
)
"""Where a sentence splits into clauses: dashes, semicolons, and "and/but it ..." joins."""

_OPENER_RE = re.compile(
    r"^(?:(?:oh|ah|wow|hey|hi|hello|well|yeah|yes|yep|yup|no|ok|okay|so|and|but|also|thanks|"
    r"thank you|cool|great|awesome|aw+|haha|lol|omg|btw|anyway|honestly|actually)\b"
    r"(?:\s+[A-Z][a-z]+)?[,!.]*\s+)+",
    re.IGNORECASE,
)
"""Interjections and a vocative at a sentence's start ("Wow, ", "Yeah Mel, ", "Hey Jon, ")."""


def addresses_listener(sentence: str) -> bool:
    """Whether ``sentence`` talks about the listener rather than the speaker or the world
    ("You're doing an awesome job!"): second person, no first person, no name or number."""

    words = _plain_words(sentence)
    if not any(w in SECOND_PERSON for w in words) or any(w in FIRST_PERSON for w in words):
        return False
    body = _OPENER_RE.sub("", sentence.strip())
    if any(w in SUGGESTING for w in words):
        return False  # a suggestion or an offer ("you could try biking") says something
    return not re.search(r"\d|(?<=\s)[A-Z][a-z]+", body)


_PAST_RE = re.compile(
    r"\b(?:\w+ed|was|were|had|did|went|made|took|got|saw|came|gave|met|ran|bought|found|"
    r"told|said|felt|left|began|won|lost|wrote|read|sang|drew|built|sold|kept|brought|"
    r"taught|thought|caught|heard|became|spent|grew|knew|ate|drove|flew|swam|fell|held|led)\b"
    r"|\b(?:going to|gonna|'ll|will|next|tomorrow|tonight|soon|plan|planning)\b",
    re.IGNORECASE,
)
"""Words that tie a sentence to an occasion: a past event or a plan."""

_REMARK_RE = re.compile(
    r"^(?:that(?:'s|\u2019s| is| was| sounds| looks| must)|what an?|how|such an?)\b", re.IGNORECASE
)
"""A remark on what the other person just said or showed ("That sounds intense!", "What a
pic!"); "That page has dialogues on loss" describes the page."""

_SPECIFIC = frozenset(
    "it its it's itll they them their theirs theyre theyve he him his hes she her hers shes "
    "this these those there".replace("'", "").split()
)
"""Words pointing at a particular thing or person the speaker is talking about: a sentence
holding one describes it ("They're doing great", "It's about loss")."""

_GENERIC = frozenset("ourselves everyone everybody lifes".split())
"""Words of a maxim about everyone ("Taking care of ourselves is vital", "We can tackle
life's challenges together!")."""


def only_reacts(sentence: str, *, names: frozenset[str] = frozenset()) -> bool:
    """Whether ``sentence`` only reacts or moralises, tied to no one and no occasion: no first
    person singular, no one named (the people talking aside: "That race sounds great, Mel!"),
    no number, no past event or plan; a remark on what was just said or shown ("That bowl is
    gorgeous!") or a maxim ("Taking care of ourselves is vital.", "Family moments make life
    awesome."). What happened is said by whoever it happened to, in their own entry."""

    body = _OPENER_RE.sub("", sentence.strip())
    words = _plain_words(body)
    if any(w in FIRST_PERSON for w in words) or re.search(r"\d|\[", body):
        return False
    named = [
        m.group(0)
        for m in re.finditer(r"(?<=\s)[A-Z][a-z]+", " " + body[1:])
        if m.group(0).lower() not in names
    ]
    if named or _PAST_RE.search(body):
        return False
    if any(w in _SPECIFIC for w in words):
        return False  # "It's about loss and identity", "They eat insects": about their thing
    vocative = any(w in names for w in words) or any(w in SECOND_PERSON for w in words)
    generic = any(w in _GENERIC for w in words)
    return vocative or generic or bool(_REMARK_RE.match(body))


def condense(sentence: str) -> str:
    """``sentence`` without what carries no fact: openers and vocatives, and clauses made only
    of small talk ("... and it was so powerful"). Names, numbers, dates and every word of a
    clause that is kept stay exactly as said."""

    text = _OPENER_RE.sub("", sentence.strip()) or sentence.strip()
    parts = _CLAUSE_SPLIT_RE.split(text)
    if len(parts) > 1:
        kept = [p for p in parts if content_words(p)]
        if kept:
            text = ", ".join(p.strip().rstrip(",") for p in kept)
            if text[-1:] not in ".!?":
                text += sentence.strip()[-1:] if sentence.strip()[-1:] in ".!" else ""
    return text[:1].upper() + text[1:] if text else text


_FILLER_RE = re.compile(
    r"(?:^|,)\s*(?:you know|i mean|i guess|i think|i suppose)\s*(?:,|(?=[.!?]?$))"
    r"|\b(?P<det>\w+\s+)?(?:kind|sort) of\s+"
    r"|\b(?:kinda|sorta|really|very|just|totally|truly|actually|honestly|literally|basically)\b"
    r"(?:,(?=\s))?\s*",
    re.IGNORECASE,
)
"""Hedges and intensifiers: they say how something was said, not what happened ("I really
just started yoga" says "I started yoga")."""


_ATTACHMENT_RE = re.compile(
    r"\[(?P<verb>(?:shares?|shared|sends?|sent|posts?|posted|attache[sd])\s+)(?:an?\s+)?"
    r"(?:photo|picture|image|video|screenshot|drawing)s?:\s*"
    r"(?=(?:(?:an?|the)\s+)?(?:photo(?:graph(?:y)?)?|picture|image|video|screenshot|drawing)s?"
    r"\s+of\s)",
    re.IGNORECASE,
)
"""A note on something shared whose caption says again what it is ("[shares a photo: a photo
of a dog]"): the note says it once ("[shares a photo of a dog]"), the caption word for word."""

_DETERMINERS = frozenset("a an the this that what any some one every no".split())


def _unfilled(match: re.Match[str]) -> str:
    det = match.group("det")
    if det is not None:  # "a kind of bird" names a kind; "kind of scared" hedges
        return match.group(0) if det.strip().lower() in _DETERMINERS else det
    found = match.group(0)
    return " " if found.startswith(",") and found.rstrip().endswith(",") else ""


def tighten(text: str) -> str:
    """``text`` without hedges and intensifiers (:data:`_FILLER_RE`) and with a note on
    something shared said once (:data:`_ATTACHMENT_RE`), as a note-taker writes it; every other
    word, name, number and date stays as said. Text made only of filler is returned
    unchanged."""

    out = _ATTACHMENT_RE.sub(lambda m: f"[{m.group('verb')}", text)
    out = _FILLER_RE.sub(_unfilled, out)
    out = re.sub(r",\s*(?=[,.!?]|$)", "", out)
    out = re.sub(r"\s+([,.!?;:])", r"\1", re.sub(r"[ \t]{2,}", " ", out)).strip()
    if not out or not any(c.isalnum() for c in out):
        return text
    return out[:1].upper() + out[1:] if text[:1].isupper() else out


_ASIDE_RE = re.compile(r"\[[^\]]*\]|\([^)]*\)")


def top_words(texts: Iterable[str], count: int) -> list[str]:
    """The ``count`` most frequent content words of ``texts`` (ties: first seen first), asides
    in brackets (resolved dates, attachment notes) left out."""

    tally: dict[str, int] = {}
    for text in texts:
        for word in content_words(_ASIDE_RE.sub(" ", text)):
            tally[word] = tally.get(word, 0) + 1
    ranked = sorted(tally.items(), key=lambda kv: -kv[1])
    return [word for word, _ in ranked[:count]]


__all__ = [
    "Turn",
    "addresses_listener",
    "condense",
    "content_words",
    "is_first_person",
    "is_request",
    "looks_like_prose",
    "only_reacts",
    "split_speaker",
    "states_a_fact",
    "tighten",
    "top_words",
]
