"""Relative dates resolved against the day they were said: a table of the forms people write."""

from __future__ import annotations

from datetime import date

import pytest

from sandbox_memory.engines.dates import resolve_relative_dates

FRIDAY = date(2023, 6, 9)
SUNDAY = date(2023, 7, 16)
MONDAY = date(2024, 1, 1)

# (said on, text, what the text becomes): the person's words kept, the date added beside them.
TABLE = [
    (FRIDAY, "I went yesterday.", "I went yesterday (8 June 2023)."),
    (FRIDAY, "Last Fri I ran", "Last Fri (the Friday before 9 June 2023, 2 June 2023) I ran"),
    (FRIDAY, "last Sat.", "last Sat (the Saturday before 9 June 2023, 3 June 2023)."),
    (FRIDAY, "last Thurs,", "last Thurs (the Thursday before 9 June 2023, 8 June 2023),"),
    (FRIDAY, "next Tue", "next Tue (the Tuesday after 9 June 2023, 13 June 2023)"),
    (FRIDAY, "this Sun", "this Sun (Sunday 11 June 2023)"),
    (
        FRIDAY,
        "last weekend",
        "last weekend (the weekend before 9 June 2023, 3 June 2023)",
    ),
    (
        SUNDAY,  # the weekend under way is not "last weekend"
        "last weekend",
        "last weekend (the weekend before 16 July 2023, 8 July 2023)",
    ),
    (
        SUNDAY,
        "two weekends ago",
        "two weekends ago (two weekends before 16 July 2023, the weekend of 1 July 2023)",
    ),
    (
        FRIDAY,
        "in two weekends",
        "in two weekends (two weekends after 9 June 2023, the weekend of 17 June 2023)",
    ),
    (
        FRIDAY,
        "a few days ago",
        "a few days ago (a few days before 9 June 2023, around 6 June 2023)",
    ),
    (
        FRIDAY,
        "a couple days ago",
        "a couple days ago (a couple days before 9 June 2023, around 7 June 2023)",
    ),
    (FRIDAY, "three days ago", "three days ago (6 June 2023)"),
    (FRIDAY, "Three Days Ago", "Three Days Ago (6 June 2023)"),
    (
        FRIDAY,
        "two weeks ago",
        "two weeks ago (two weeks before 9 June 2023, around 26 May 2023)",
    ),
    (
        FRIDAY,
        "a fortnight ago",
        "a fortnight ago (a fortnight before 9 June 2023, around 26 May 2023)",
    ),
    (
        FRIDAY,
        "the week before last",
        "the week before last (two weeks before 9 June 2023, around 26 May 2023)",
    ),
    (
        FRIDAY,
        "the weekend before last",
        "the weekend before last (two weekends before 9 June 2023, the weekend of 27 May 2023)",
    ),
    (FRIDAY, "the month after next", "the month after next (August 2023)"),
    (FRIDAY, "the year before last", "the year before last (2021)"),
    (FRIDAY, "the other day", "the other day (a few days before 9 June 2023)"),
    (FRIDAY, "two months ago", "two months ago (April 2023)"),
    (
        FRIDAY,
        "several months ago",
        "several months ago (several months before 9 June 2023, around March 2023)",
    ),
    (FRIDAY, "eighteen years ago", "eighteen years ago (2005)"),
    (FRIDAY, "twenty-five years ago", "twenty-five years ago (1998)"),
    (FRIDAY, "twenty five years ago", "twenty five years ago (1998)"),
    (FRIDAY, "earlier this month", "earlier this month (June 2023)"),
    (FRIDAY, "at the end of last month", "at the end of last month (May 2023)"),
    (FRIDAY, "earlier today", "earlier today (9 June 2023)"),
    (FRIDAY, "last summer", "last summer (summer 2022)"),
    (MONDAY, "last month", "last month (December 2023)"),
    (MONDAY, "last year", "last year (2023)"),
    (MONDAY, "yesterday", "yesterday (31 December 2023)"),
    (MONDAY, "last Mon", "last Mon (the Monday before 1 January 2024, 25 December 2023)"),
    # An approximate count: the day it points at is said to be approximate (a year at its month).
    (
        FRIDAY,
        "about a year ago",
        "about a year ago (about a year before 9 June 2023, around June 2022)",
    ),
    (
        FRIDAY,
        "almost two weeks ago",
        "almost two weeks ago (almost two weeks before 9 June 2023, around 26 May 2023)",
    ),
    (
        FRIDAY,
        "over a month ago",
        "over a month ago (over a month before 9 June 2023, around May 2023)",
    ),
    # A time up to the day said: since when.
    (FRIDAY, "I've had them for 3 years!", "I've had them for 3 years (since 2020)!"),
    (FRIDAY, "Seven years now, and", "Seven years now (since 2016), and"),
    (FRIDAY, "5 years already!", "5 years already (since 2018)!"),
    (
        FRIDAY,
        "I've been painting for the past six months",
        "I've been painting for the past six months (since December 2022)",
    ),
    (
        FRIDAY,
        "We've lived here for a few years now",
        "We've lived here for a few years now (since around 2020)",
    ),
    # How long, not since when or when: left as said.
    (FRIDAY, "He was with us for 10 years.", "He was with us for 10 years."),
    (FRIDAY, "We stayed for two weeks.", "We stayed for two weeks."),
    (FRIDAY, "Rome wasn't built in a day.", "Rome wasn't built in a day."),
    (FRIDAY, "We haven't talked in a few days.", "We haven't talked in a few days."),
    (FRIDAY, "I finished the draft in 3 weeks.", "I finished the draft in 3 weeks."),
    # "in" a count, ahead: a plan, a future, a present progressive.
    (FRIDAY, "I'm leaving in 3 days.", "I'm leaving in 3 days (12 June 2023)."),
    (
        FRIDAY,
        "We will finish it in two weeks.",
        "We will finish it in two weeks (two weeks after 9 June 2023, around 23 June 2023).",
    ),
    # A weekday with "on" alone: before the day said for what was done, after it for a plan.
    (
        FRIDAY,
        "On Monday, I got great news.",
        "On Monday (the Monday before 9 June 2023, 5 June 2023), I got great news.",
    ),
    (
        FRIDAY,
        "We're meeting on Tuesday.",
        "We're meeting on Tuesday (the Tuesday after 9 June 2023, 13 June 2023).",
    ),
    (FRIDAY, "See you on Monday.", "See you on Monday."),
    # A day of the month alone: the nearest such date.
    (
        FRIDAY,
        "I met them on the 7th after my trip.",
        "I met them on the 7th (7 June 2023) after my trip.",
    ),
    (FRIDAY, "The party is on the 30th.", "The party is on the 30th (30 May 2023)."),
    (FRIDAY, "We live on the 2nd floor.", "We live on the 2nd floor."),
    # Counted from an event the text names, not from the day said: left as said.
    (FRIDAY, "three days later she left", "three days later she left"),
    (FRIDAY, "the week before the wedding", "the week before the wedding"),
    (FRIDAY, "the month after", "the month after"),
    # Not dates.
    (FRIDAY, "this sun is lovely", "this sun is lovely"),
    (FRIDAY, "last weekday", "last weekday"),
    (FRIDAY, "the last satellite", "the last satellite"),
    (FRIDAY, "Sunday was fine", "Sunday was fine"),
]


@pytest.mark.parametrize(("said_on", "text", "expected"), TABLE)
def test_relative_dates_resolve_against_the_day_said(
    said_on: date, text: str, expected: str
) -> None:
    assert resolve_relative_dates(text, said_on) == expected


def test_several_forms_in_one_text_each_get_their_date() -> None:
    text = "We met last Fri and again two weekends ago; the other day she called."

    resolved = resolve_relative_dates(text, FRIDAY)

    assert resolved == (
        "We met last Fri (the Friday before 9 June 2023, 2 June 2023) and again two weekends "
        "ago (two weekends before 9 June 2023, the weekend of 27 May 2023); the other day "
        "(a few days before 9 June 2023) she called."
    )


def test_without_a_day_said_nothing_is_guessed() -> None:
    assert resolve_relative_dates("last Fri, two weekends ago", None) == (
        "last Fri, two weekends ago"
    )
