"""Relative dates in what people say, resolved against the date the run happened.

"I went to the support group yesterday", said on 8 May 2023, is only useful to a later run if
memory says *when* that was: ``yesterday (7 May 2023)``. :func:`resolve_relative_dates` adds
the resolved date in brackets after each relative expression it knows, and never claims more
precision than was said: "last week" becomes "the week before 9 June 2023", "last month"
becomes "May 2023", "last Fri" names both the anchor and the day, "two weekends ago" and "a few
days ago" keep the count as said and add the day it points at ("a few days before 9 June 2023,
around 6 June 2023"), and so does an approximate count ("about a year ago": around June 2022).
A time that runs up to the day said gets its start: "I've had them for 3 years (since 2020)",
"seven years now (since 2016)"; a plain length of time ("we stayed for two weeks", "I finished
it in 3 weeks", "haven't talked in a few days") is no date and is left as said. A weekday with
"on" alone ("On Friday, I got great news") is the one before the day said when its sentence
tells of what was done, the one after when it tells of a plan, and left as said otherwise; a day
of the month alone ("on the 15th") is the nearest such date. The person's words stay; the
resolved date is added beside them.

Deterministic and linear: one regular-expression pass per text, no clock (the reference date is
an argument), no locale.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
"""Counts said as words. Vague counts ("a few", "a couple of", "several") are in
:data:`_VAGUE`: the resolved date is then said to be approximate."""

_VAGUE = {"a couple of": 2, "a couple": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3}

_SEASONS = ("spring", "summer", "fall", "autumn", "winter")

_DAY_ABBREVIATIONS = {
    "mon": 0,
    "tue": 1,
    "tues": 1,
    "wed": 2,
    "thu": 3,
    "thur": 3,
    "thurs": 3,
    "fri": 4,
    "sat": 5,
    "sun": 6,
}
"""Weekdays as people abbreviate them; only recognised after "last", "this", "next", ...,
where "sat" or "sun" cannot be a verb or a noun."""

_COUNT_WORDS = "|".join(
    sorted((*_NUMBER_WORDS, *_VAGUE), key=lambda w: (-len(w), w)),
)
_ONES = "one|two|three|four|five|six|seven|eight|nine"
_COUNT = rf"(?P<count>\d{{1,3}}|(?:{'|'.join(_TENS)})(?:[- ](?:{_ONES}))?|{_COUNT_WORDS})"
_UNIT = r"(?P<unit>days?|weeks?|weekends?|fortnights?|months?|years?)"
_DAY_NAMES = "|".join(WEEKDAYS).lower()
_DAY_ABBREVIATION_NAMES = "|".join(sorted(_DAY_ABBREVIATIONS, key=lambda w: (-len(w), w)))

_APPROXIMATELY = (
    r"about|around|almost|nearly|roughly|approximately|over|more than|less than|just over"
    r"|just under"
)
"""Words that make an exact count approximate ("about a year ago"): the date it points at is
then said to be approximate, at a finer step than the count's own unit where one is known
("around August 2022", not "2022")."""

_RELATIVE_RE = re.compile(
    r"(?<![\w-])(?:"
    r"(?P<simple>yesterday|today|tonight|tomorrow|last night|this morning|this afternoon"
    r"|this evening|the day before yesterday|the day after tomorrow)"
    r"|the\s+(?P<around>week|weekend|month|year)\s+(?P<beyond>before\s+last|after\s+next)"
    r"|(?P<other>the other day)"
    rf"|(?<=\bon )(?P<onday>{'|'.join(WEEKDAYS)})"
    r"|(?<=\bon )the\s+(?P<dom>[1-9]|[12]\d|3[01])(?:st|nd|rd|th)"
    r"(?=\s*(?:[.,;:!?)]|$|(?:and|after|before|when|at|with|but|so)\b))"
    r"|(?P<which>last|this|next|coming|past)\s+(?P<period>week|weekend|month|year"
    rf"|{_DAY_NAMES}|{'|'.join(_SEASONS)}|{_DAY_ABBREVIATION_NAMES})"
    rf"|(?:(?P<approx>{_APPROXIMATELY})\s+)?{_COUNT}\s+{_UNIT}\s+(?P<dir>ago|from now)"
    rf"|in\s+{_COUNT.replace('count', 'incount')}\s+{_UNIT.replace('unit', 'inunit')}"
    rf"|for\s+(?:the\s+(?:past|last)\s+)?{_COUNT.replace('count', 'forcount')}\s+"
    rf"{_UNIT.replace('unit', 'forunit')}(?:\s+(?P<fornow>now|already|so far))?"
    rf"|{_COUNT.replace('count', 'nowcount')}\s+{_UNIT.replace('unit', 'nowunit')}"
    r"\s+(?:now|already|so far)"
    r")(?!\w)",
    re.IGNORECASE,
)
"""One alternation over every form: a fixed day ("yesterday"), a period two steps away ("the
week before last"), "the other day", a period named from the day said ("last Fri", "next
month", "this summer"), a weekday or a day of the month after "on" ("on Friday", "on the
15th"), a count of units before or after it ("two weekends ago", "about a year ago", "in 3
weeks"), and a time up to the day said ("I've had them for 3 years", "seven years now"; see
:func:`_duration_start`). A count "later" or a period "before"/"after" with no "last"/"next"
("three days later", "the week before") counts from an event the text names, not from the day
said, and is left as said. A day of the month is taken only where a day is what it can be:
before a stop or a word that goes on the sentence ("on the 15th after my trip", not "on the
2nd floor")."""


def format_day(day: date) -> str:
    """``7 May 2023``: day, month name, year (no leading zero, no locale)."""

    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def _month(day: date) -> str:
    return f"{MONTHS[day.month - 1]} {day.year}"


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + (day.month - 1) + months
    return date(index // 12, index % 12 + 1, 1)


def _count(raw: str) -> tuple[int, bool]:
    """The number a count says, and whether it is vague ("a few")."""

    raw = " ".join(raw.lower().split())
    if raw.isdigit():
        return int(raw), False
    if raw in _VAGUE:
        return _VAGUE[raw], True
    tens, _, ones = raw.replace("-", " ").partition(" ")
    if tens in _TENS:
        return _TENS[tens] + _NUMBER_WORDS.get(ones, 0), False
    return _NUMBER_WORDS.get(raw, 1), False


def _season(name: str, year: int) -> str:
    return f"{'fall' if name == 'autumn' else name} {year}"


def _weekend_before(today: date, weeks: int = 1) -> date:
    """The Saturday of the ``weeks``-th weekend before ``today`` ("last weekend" is the first):
    said on a Saturday or a Sunday, the weekend under way is not "last weekend"."""

    back = (today.weekday() - 5) % 7
    if back <= 1:
        back += 7
    return today - timedelta(days=back + 7 * (weeks - 1))


def _weekday(period: str, which: str) -> int | None:
    """The weekday ``period`` names (0 is Monday), or None where it is no weekday here: an
    abbreviation after "this" only when capitalised ("this Sun", not "this sun")."""

    name = period.lower()
    if name.capitalize() in WEEKDAYS:
        return WEEKDAYS.index(name.capitalize())
    if name not in _DAY_ABBREVIATIONS:
        return None
    if which == "this" and not period[0].isupper():
        return None
    return _DAY_ABBREVIATIONS[name]


def _resolve_period(which: str, period: str, today: date) -> str | None:
    """A period named from ``today``: "last week", "next month", "this summer", "last Fri"."""

    which = which.lower()
    said = format_day(today)
    lowered = period.lower()
    if lowered == "week":
        if which in ("last", "past"):
            return f"the week before {said}"
        if which == "this":
            return f"the week of {said}"
        return f"the week after {said}"
    if lowered == "weekend":
        if which in ("last", "past"):
            return f"the weekend before {said}, {format_day(_weekend_before(today))}"
        if which == "this":
            return f"the weekend of {said}"
        return f"the weekend after {said}"
    shift = {"last": -1, "past": -1, "this": 0}.get(which, 1)
    if lowered == "month":
        return _month(_add_months(today, shift))
    if lowered == "year":
        return str(today.year + shift)
    if lowered in _SEASONS:
        return _season(lowered, today.year + shift)
    weekday = _weekday(period, which)
    if weekday is None:
        return None
    name = WEEKDAYS[weekday]
    if which in ("last", "past"):
        back = (today.weekday() - weekday) % 7 or 7
        return f"the {name} before {said}, {format_day(today - timedelta(days=back))}"
    ahead = (weekday - today.weekday()) % 7
    if which == "this":
        return f"{name} {format_day(today + timedelta(days=ahead))}"
    ahead = ahead or 7
    return f"the {name} after {said}, {format_day(today + timedelta(days=ahead))}"


def _resolve_count(
    count_raw: str, unit_raw: str, sign: int, today: date, *, approx: str = ""
) -> str:
    """A count of units from ``today``: "two weekends ago", "a few days ago", "in 3 weeks".
    An exact count of days or months or years is the day, month or year; a count of weeks,
    weekends or a vague count also says how far from the day said it is, as it was said.
    ``approx`` ("about", "almost"): the count was said to be approximate; a count of years is
    then placed at its month ("about a year ago": around August 2022)."""

    count, vague = _count(count_raw)
    unit = unit_raw.lower().rstrip("s")
    said = format_day(today)
    spoken = " ".join(f"{approx} {count_raw} {unit_raw}".split()).lower()
    if approx and not vague:
        vague = True
        if unit == "year":
            month = _month(_add_months(today, 12 * sign * count))
            return f"{spoken} {'before' if sign < 0 else 'after'} {said}, around {month}"
    relation = f"{spoken} {'before' if sign < 0 else 'after'} {said}"
    if unit == "fortnight":
        unit, count = "week", 2 * count
    if unit == "day":
        day = format_day(today + timedelta(days=sign * count))
        return f"{relation}, around {day}" if vague else day
    if unit == "week":
        return f"{relation}, around {format_day(today + timedelta(weeks=sign * count))}"
    if unit == "weekend":
        if sign < 0:
            saturday = _weekend_before(today, count)
        else:
            saturday = today + timedelta(days=(5 - today.weekday()) % 7 or 7)
            saturday += timedelta(weeks=count - 1)
        return f"{relation}, the weekend of {format_day(saturday)}"
    if unit == "month":
        month = _month(_add_months(today, sign * count))
        return f"{relation}, around {month}" if vague else month
    year = str(today.year + sign * count)
    return f"{relation}, around {year}" if vague else year


def _resolve(match: re.Match[str], today: date) -> str | None:
    simple = match.group("simple")
    if simple:
        word = " ".join(simple.lower().split())
        offset = {
            "yesterday": -1,
            "last night": -1,
            "the day before yesterday": -2,
            "tomorrow": 1,
            "the day after tomorrow": 2,
        }.get(word, 0)
        return format_day(today + timedelta(days=offset))
    if match.group("other"):
        return f"a few days before {format_day(today)}"
    if match.group("onday"):
        return _on_weekday(match, today)
    if match.group("dom"):
        return format_day(_nearest_day_of_month(int(match.group("dom")), today))
    around = match.group("around")
    if around:
        sign = -1 if match.group("beyond").lower().startswith("before") else 1
        return _resolve_count("two", f"{around}s", sign, today)
    which = match.group("which")
    if which:
        return _resolve_period(which, match.group("period"), today)
    if match.group("forcount") or match.group("nowcount"):
        return _duration_start(match, today)
    count_raw = match.group("count") or match.group("incount")
    unit_raw = match.group("unit") or match.group("inunit")
    if not count_raw or not unit_raw:
        return None
    if match.group("incount") and not _is_ahead(match):
        return None  # "haven't talked in a few days": how long, not when
    sign = -1 if (match.group("dir") or "").lower() == "ago" else 1
    approx = " ".join((match.group("approx") or "").lower().split())
    return _resolve_count(count_raw, unit_raw, sign, today, approx=approx)


_CLAUSE_START_RE = re.compile(r"[.!?;:]\s|\b(?:and|but|so|because)\s", re.IGNORECASE)

_FUTURE_RE = re.compile(
    r"\b(?:will|shall|going to|gonna|about to|plan(?:s|ning|ned)? to|hope to|can'?t wait"
    r"|(?:am|are|is)\s+\w+ing|\w+(?:'m|'re|'s)\s+\w+ing)\b|'ll\b",
    re.IGNORECASE,
)
"""What makes a clause speak of what is ahead: a future tense, a plan, a present progressive
("we're leaving in two days")."""

_BEHIND_RE = re.compile(
    r"n't\b|\b(?:not|never|was|were|had|did|has|have|'ve)\b|\b\w{3,}ed\b"
    r"|\b(?:built|made|got|took|ran|won|wrote|went|came|lost|found|did|done|learned|learnt)\b",
    re.IGNORECASE,
)
"""What makes "in <count> <unit>" a time taken or gone by, not a day ahead: a negation or a
past or perfect verb in its clause ("Rome wasn't built in a day", "haven't talked in a few
days", "I finished it in 3 weeks")."""

_PERFECT_RE = re.compile(r"\b(?:have|has|'ve|'s been|had|been|known|since)\b|'ve\b", re.IGNORECASE)
"""A perfect tense: "for <count> <unit>" then runs up to the day said ("I've had them for 3
years"), where after a plain past it does not ("he was with us for 10 years")."""


def _clause_before(match: re.Match[str]) -> str:
    """The text of ``match``'s clause before it (from the last sentence stop or conjunction)."""

    before = match.string[: match.start()]
    stops = list(_CLAUSE_START_RE.finditer(before))
    return before[stops[-1].end() :] if stops else before


def _clause_after(match: re.Match[str]) -> str:
    """The text of ``match``'s clause after it ("On Friday, I got great news": the news)."""

    after = match.string[match.end() :]
    stop = re.search(r"[.!?;]", after)
    return after[: stop.start()] if stop else after


def _is_ahead(match: re.Match[str]) -> bool:
    """Whether "in <count> <unit>" names a day ahead ("I leave in two days"): yes unless its
    clause says what was or was not done, and says nothing of what will be."""

    clause = _clause_before(match)
    return _FUTURE_RE.search(clause) is not None or _BEHIND_RE.search(clause) is None


def _on_weekday(match: re.Match[str], today: date) -> str | None:
    """ "on Friday", a weekday with no "last" or "next": the one before the day said when its
    sentence tells of what was done ("I won on Friday", "On Friday, I got great news"), the one after when it tells of what will
    be ("we're meeting on Friday"), and left as said when it tells neither."""

    weekday = WEEKDAYS.index(match.group("onday").capitalize())
    clause = _clause_before(match) + " " + _clause_after(match)
    if _FUTURE_RE.search(clause) is not None:
        return _resolve_period("next", WEEKDAYS[weekday], today)
    if _BEHIND_RE.search(clause) is not None:
        return _resolve_period("last", WEEKDAYS[weekday], today)
    return None


def _nearest_day_of_month(day: int, today: date) -> date:
    """ "on the 15th": the date of that day of the month nearest the day said (this month's,
    last month's or next month's), a month that has no such day skipped."""

    found: list[date] = []
    for shift in (-1, 0, 1):
        first = _add_months(today, shift)
        try:
            found.append(first.replace(day=day))
        except ValueError:
            continue
    return min(found, key=lambda d: (abs((d - today).days), d > today))


def _duration_start(match: re.Match[str], today: date) -> str | None:
    """When a time that runs up to the day said began: "for 3 years" after a perfect tense ("I've
    had them for 3 years": since 2020), or a count said to reach the day said ("seven years
    now", "for 5 years already"). A plain "for two weeks" ("we stayed for two weeks", "I'm going
    for two weeks") says how long, not since when, and is left as said."""

    count_raw = match.group("forcount") or match.group("nowcount")
    unit_raw = match.group("forunit") or match.group("nowunit")
    now = match.group("nowcount") is not None or match.group("fornow") is not None
    if not now and _PERFECT_RE.search(_clause_before(match)) is None:
        return None
    count, vague = _count(count_raw)
    unit = unit_raw.lower().rstrip("s")
    around = "around " if vague else ""
    if unit == "fortnight":
        unit, count = "week", 2 * count
    if unit == "year":
        return f"since {around}{today.year - count}"
    if unit == "month":
        return f"since {around}{_month(_add_months(today, -count))}"
    if unit in ("week", "weekend"):
        return f"since around {format_day(today - timedelta(weeks=count))}"
    return f"since {around}{format_day(today - timedelta(days=count))}"


def resolve_relative_dates(text: str, today: date | None) -> str:
    """``text`` with ``(resolved date)`` after each relative date expression it contains.

    Without a reference date the text is returned unchanged: a date is never guessed."""

    if today is None or not text:
        return text

    def replace(match: re.Match[str]) -> str:
        resolved = _resolve(match, today)
        return f"{match.group(0)} ({resolved})" if resolved else match.group(0)

    return _RELATIVE_RE.sub(replace, text)


def run_date(value: object) -> date | None:
    """The date of an ISO-8601 timestamp (a segment's ``updated_at``), or None."""

    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).date()
    except ValueError:
        return None


__all__ = ["format_day", "resolve_relative_dates", "run_date"]
