"""An entry hit shows, beside the fact, the best-matching excerpt of the recorded item it cites:
the same from Python, the CLI, the agent tool and the MCP server; bounded; never from an item
that Forget hides or another person's run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner

from sandbox_memory import Forget, Remember
from sandbox_memory.cli import main
from sandbox_memory.search.index import (
    ENTRY_TEXT_CHARS,
    EXCERPT_CHARS,
    HIT_TEXT_CHARS,
    excerpt_of,
    format_hits,
)
from test_search import client_for, payload, record

TURN = (
    "I finally decided on the night ferry to Naxos for the trip! My sister Lena is coming "
    "along, she found the tickets at the harbour office. It leaves at 23:40 from pier 7, and "
    "the tickets were 38 EUR each. Remember that I prefer window seats on long rides."
)
QUERY = "window seats on the Naxos ferry from pier 7"


async def _trip(root: Path, person: str | None = None) -> None:
    c = client_for(root)
    for n in range(8):  # a long conversation: its entry holds many turns
        day = f"Day {n}: we walked the old town, ate grilled octopus at tavern {n}, swam."
        await c.runtime.record(payload(day, "Lovely."), rollout_id="trip", person=person)
    await c.runtime.record(payload(TURN, "Noted."), rollout_id="trip", person=person)
    for n in range(4):
        await record(c, f"other{n}", f"The museum timetable page {n} is open.", "Ok.")
    await c.runtime.close()


async def test_an_entry_hit_shows_the_matching_words_of_the_item_it_cites(tmp_path: Path) -> None:
    await _trip(tmp_path)
    hits = await client_for(tmp_path).search(QUERY)
    entry = next(h for h in hits if h.kind == "entry")
    assert "window seats" not in entry.text  # the entry left that sentence out
    assert entry.excerpt is not None and "window seats" in entry.excerpt
    assert entry.excerpt_source in entry.sources
    text = format_hits(hits)
    source = entry.excerpt_source
    assert source is not None
    assert f"from {source.conversation}#{source.item}: " in text and "window seats" in text


def test_the_cli_shows_the_excerpt_in_text_and_json(tmp_path: Path) -> None:
    asyncio.run(_trip(tmp_path))
    out = CliRunner().invoke(main, ["--root", str(tmp_path), "search", QUERY, "--json"])
    assert out.exit_code == 0, out.output
    entry = next(h for h in json.loads(out.output) if h["kind"] == "entry")
    assert "window seats" in entry["excerpt"] and entry["excerpt_source"]["conversation"] == "trip"
    out = CliRunner().invoke(main, ["--root", str(tmp_path), "search", QUERY])
    assert out.exit_code == 0 and "  from trip#" in out.output


async def test_a_forgotten_entrys_item_is_never_an_excerpt(tmp_path: Path) -> None:
    await _trip(tmp_path)
    c = client_for(tmp_path)
    entry = next(h for h in await c.search(QUERY) if h.kind == "entry")
    assert entry.key is not None and entry.excerpt is not None
    view = await c.view("trip")
    await c.apply(Forget(key=entry.key), expected=view.version, conversation="trip")
    hits = await client_for(tmp_path).search(QUERY)
    assert not any("window seats" in (h.excerpt or "") for h in hits)


async def test_another_persons_run_is_never_an_excerpt(tmp_path: Path) -> None:
    await _trip(tmp_path, "ann")
    assert any(h.excerpt for h in await client_for(tmp_path).search(QUERY, person="ann"))
    for person in (None, "bob"):
        hits = await client_for(tmp_path).search(QUERY, person=person)
        assert not any("window seats" in (h.excerpt or "") + h.text for h in hits)


def test_an_excerpt_is_bounded_and_cut_around_the_query_words() -> None:
    text = "filler " * 200 + "the ferry leaves from pier 7 at 23:40 " + "more " * 200
    cut = excerpt_of(text, "ferry pier")
    assert len(cut) <= EXCERPT_CHARS + 2 and "ferry leaves from pier 7" in cut
    assert cut.startswith("…") and cut.endswith("…")
    assert excerpt_of("short text", "ferry") == "short text"


async def test_a_long_hit_shows_the_part_holding_the_query_words_not_the_first_function_word(
    tmp_path: Path,
) -> None:
    c = client_for(tmp_path)
    chatter = " ".join(f"the walk number {n} went on and on along the coast." for n in range(40))
    await record(c, "trip", chatter + " The night ferry to Naxos leaves from pier 7.", "Ok.")
    hit = (await c.search("when does the ferry to Naxos leave from the pier", limit=1))[0]
    assert "ferry to Naxos leaves from pier 7" in hit.text


def test_an_excerpt_matches_where_words_start_not_inside_other_words() -> None:
    # "art" and "class" inside "started", "classic": not the words asked about.
    early = "We started with classic starters and a smart classical quartet. " * 3
    text = (
        early + "filler " * 150 + "Her art class meets on Tuesdays at the library. " + "more " * 150
    )
    cut = excerpt_of(text, "art class")
    assert "Her art class meets on Tuesdays" in cut
    assert "started" not in cut


def test_of_windows_holding_every_word_the_one_holding_them_most_is_shown() -> None:
    once = "The ferry left; much later, at the pier, nobody waited. "
    dense = "Ferry times: the ferry leaves pier 7 at 23:40, the late ferry leaves pier 2. "
    text = once + "filler " * 150 + dense + "more " * 150
    cut = excerpt_of(text, "ferry pier")
    assert "ferry leaves pier 7 at 23:40" in cut and "nobody waited" not in cut


def test_a_question_asking_when_is_shown_the_part_with_a_date() -> None:
    undated = "We went camping by the lake with the kids and loved the camping trip. "
    dated = "Next month (June 2023) we are off camping again. "
    text = undated + "filler " * 150 + dated + "more " * 150
    assert "June 2023" in excerpt_of(text, "When is Melanie going camping?")
    # Asked what, not when: the window with the most matches of the words asked about.
    assert "June 2023" not in excerpt_of(text, "What did Melanie love about camping?")


def test_a_window_never_cuts_a_resolved_date_in_half() -> None:
    said = "we leave next week (the week after 9 June 2023) "
    text = "ferry " + "word " * 52 + said + "more " * 200
    assert text.index("(") < EXCERPT_CHARS < text.index(")")  # the window's end falls inside
    assert "(the week after 9 June 2023)" in excerpt_of(text, "ferry")


async def test_an_entry_is_cut_only_when_long_and_less_tightly_than_a_recorded_item(
    tmp_path: Path,
) -> None:
    # An entry of about 1,000 characters is shown whole (cut, it would hide a fact of the
    # same subject); a recorded message as long is cut to the window around the query.
    c = client_for(tmp_path)
    facts = " ".join(f"Harbour note {n}: pier {n} serves the island line {n}." for n in range(20))
    content = facts + " The night ferry to Naxos leaves from pier 7."
    assert HIT_TEXT_CHARS < len(content) <= ENTRY_TEXT_CHARS
    await record(c, "trip", content.replace("Harbour note", "Walk note"), "Ok.")
    view = await c.view(None)
    await c.apply(
        Remember(key="harbour-piers", content=content, kind="fact"), expected=view.version
    )
    hits = await c.search("when does the night ferry to Naxos leave", limit=5)
    entry = next(h for h in hits if h.kind == "entry")
    assert entry.text.endswith(content)
    item = next(h for h in hits if h.kind == "item")
    assert "ferry to Naxos leaves from pier 7" in item.text
    assert len(item.text) <= HIT_TEXT_CHARS + 2 < len(content)  # a window, with its "…"
