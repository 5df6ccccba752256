"""Relative dates in what people say, resolved against the date the run happened.

"I went to the support group yesterday", said on 8 May 2023, is only useful to a later run if
memory says *when* that was: ``yesterday (7 May 2023)``. :func:`resolve_relative_dates` adds
the resolved date in brackets after each relative expression it knows, and never claims more
precision than was said: "last week" becomes "the week before 9 June 2023", "last month"
becomes "May 2023", "last Friday" names both the anchor and the day.

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
    "couple of": 2,
    "a couple of": 2,
    "few": 3,
    "a few": 3,
}

_SEASONS = ("spring", "summer", "fall", "autumn", "winter")

_COUNT = r"(?P<count>\d{1,3}|a couple of|couple of|a few|few|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(?P<unit>days?|weeks?|months?|years?)"
_DAY_NAMES = "|".join(WEEKDAYS).lower()

_RELATIVE_RE = re.compile(
    r"\b(?:"
    r"(?P<simple>yesterday|today|tonight|tomorrow|last night|this morning|this afternoon"
    r"|this evening|the day before yesterday|the day after tomorrow)"
    r"|(?P<which>last|this|next|coming|past)\s+(?P<period>week|weekend|month|year"
    rf"|{_DAY_NAMES}|{'|'.join(_SEASONS)})"
    rf"|{_COUNT}\s+{_UNIT}\s+(?P<dir>ago|from now|later)"
    rf"|in\s+{_COUNT.replace('count', 'incount')}\s+{_UNIT.replace('unit', 'inunit')}"
    r")\b",
    re.IGNORECASE,
)


def format_day(day: date) -> str:
    """``7 May 2023``: day, month name, year (no leading zero, no locale)."""

    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def _month(day: date) -> str:
    return f"{MONTHS[day.month - 1]} {day.year}"


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + (day.month - 1) + months
    return date(index // 12, index % 12 + 1, 1)


def _count(raw: str) -> int:
    raw = raw.lower()
    if raw.isdigit():
        return int(raw)
    return _NUMBER_WORDS.get(raw, 1)


def _season(name: str, year: int) -> str:
    return f"{'fall' if name == 'autumn' else name} {year}"


def _resolve(match: re.Match[str], today: date) -> str | None:
    simple = match.group("simple")
    if simple:
        word = simple.lower()
        offset = {
            "yesterday": -1,
            "last night": -1,
            "the day before yesterday": -2,
            "tomorrow": 1,
            "the day after tomorrow": 2,
        }.get(word, 0)
        return format_day(today + timedelta(days=offset))
    which = match.group("which")
    if which:
        which = which.lower()
        period = match.group("period").lower()
        said = format_day(today)
        if period == "week":
            if which in ("last", "past"):
                return f"the week before {said}"
            if which == "this":
                return f"the week of {said}"
            return f"the week after {said}"
        if period == "weekend":
            if which in ("last", "past"):
                return f"the weekend before {said}"
            if which == "this":
                return f"the weekend of {said}"
            return f"the weekend after {said}"
        if period == "month":
            shift = {"last": -1, "past": -1, "this": 0}.get(which, 1)
            return _month(_add_months(today, shift))
        if period == "year":
            shift = {"last": -1, "past": -1, "this": 0}.get(which, 1)
            return str(today.year + shift)
        if period in _SEASONS:
            shift = {"last": -1, "past": -1, "this": 0}.get(which, 1)
            return _season(period, today.year + shift)
        weekday = WEEKDAYS.index(period.capitalize())
        name = WEEKDAYS[weekday]
        if which in ("last", "past"):
            back = (today.weekday() - weekday) % 7 or 7
            return f"the {name} before {said}, {format_day(today - timedelta(days=back))}"
        ahead = (weekday - today.weekday()) % 7
        if which == "this":
            return f"{name} {format_day(today + timedelta(days=ahead))}"
        ahead = ahead or 7
        return f"the {name} after {said}, {format_day(today + timedelta(days=ahead))}"
    count_raw = match.group("count") or match.group("incount")
    unit_raw = match.group("unit") or match.group("inunit")
    if not count_raw or not unit_raw:
        return None
    count = _count(count_raw)
    vague = "around " if "few" in count_raw.lower() or "couple" in count_raw.lower() else ""
    unit = unit_raw.lower().rstrip("s")
    sign = -1 if (match.group("dir") or "").lower() == "ago" else 1
    if unit == "day":
        return vague + format_day(today + timedelta(days=sign * count))
    if unit == "week":
        return f"around {format_day(today + timedelta(weeks=sign * count))}"
    if unit == "month":
        return vague + _month(_add_months(today, sign * count))
    return vague + str(today.year + sign * count)


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
