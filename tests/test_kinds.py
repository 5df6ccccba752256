"""Kinds by meaning: a table of real phrasings, each with the kind a careful reader assigns.

Phrasings come from the LoCoMo dev conversations (people talking about their lives), from the
problem statements of the SWE-Bench-CL dev sequences (bug reports), from the issue that asked
for this (the misfiled release and check sentences) and from how developers instruct an agent.
``None`` means none of procedure, decision or preference: a fact, a request or small talk.
"""

from __future__ import annotations

import pytest

from sandbox_memory.engines.kinds import statement_kind
from test_offline_engine import Seg, extract

TABLE: list[tuple[str, str | None]] = [
    # --- the issue's own misfiled sentences
    ("We decided to tag releases as vX.Y.Z from now on.", "decision"),
    ("We decided that releases ship on Tuesdays.", "decision"),
    ("Always run the tests with `make check`", "procedure"),
    ("We always run the check with `python3 -c 'import acme; acme.selfcheck()'`.", "procedure"),
    # --- procedures: how a piece of work is done, naming the command or tool
    ("Run ruff before committing.", "procedure"),
    ("Always run ruff before committing.", "procedure"),
    ("To run the tests, use `uv run pytest -q`.", "procedure"),
    ("Before running the tests, run `make generate`.", "procedure"),
    ("The test suite runs with `tox -e py311`.", "procedure"),
    ("After changing this, run `tox -e linting,py37`, pass all the tests.", "procedure"),
    ("Run the tests with make check.", "procedure"),
    ("We run the migrations with `alembic upgrade head` after every pull.", "procedure"),
    ("Use `npm run build` to build the frontend.", "procedure"),
    ("You can install the development version with `pip install -e .`.", "procedure"),
    ("First run `./scripts/bootstrap.sh`, then start the server.", "procedure"),
    ("Deploy by running `kubectl apply -f deploy/`.", "procedure"),
    ("Type-check with `mypy --strict src`.", "procedure"),
    ("Tests should be run with `make check`.", "procedure"),
    ("I always run the tests with `make check`.", "procedure"),
    ("Make sure to run `npm run lint` before committing.", "procedure"),
    ("Remember to run `npm run lint` before you commit.", "procedure"),
    ("Don't forget to run `python tools/gen.py` before the tests.", "procedure"),
    # --- decisions: settled for the project or the group
    ("We decided to use Postgres 16 for storage.", "decision"),
    ("Let's go with the blue theme for the landing page.", "decision"),
    ("We agreed to freeze the API until the 2.0 release.", "decision"),
    ("We use pnpm for this repository.", "decision"),
    ("We're going to switch to GitHub Actions next sprint.", "decision"),
    ("The decision is to drop Python 3.8 support.", "decision"),
    ("We've standardized on ISO dates in every report.", "decision"),
    ("Releases ship on Tuesdays from now on.", "decision"),
    ("Going forward, we will use semantic versioning.", "decision"),
    ("The team decided that invoices are rounded per line.", "decision"),
    ("It was agreed that the old endpoint stays until March.", "decision"),
    ("Let's stick with SQLite for the prototype.", "decision"),
    ("We'll keep the config in TOML.", "decision"),
    ("We'll tag releases as vX.Y.Z.", "decision"),
    ("We never deploy on Fridays.", "decision"),
    ("We always squash commits before merging.", "decision"),
    ("We opted for Postgres over MySQL.", "decision"),
    ("Going forward, all new modules need type hints.", "decision"),
    ("We decided to go camping next month.", "decision"),
    # --- preferences: what the speaker likes or wants done their way
    ("I prefer tabs over spaces.", "preference"),
    ("Never push directly to main.", "preference"),
    ("Please use pnpm, not npm.", "preference"),
    ("I like short commit messages.", "preference"),
    ("From now on, write docstrings in Google style.", "preference"),
    ("Please always answer in French.", "preference"),
    ("Don't add emojis to commit messages.", "preference"),
    ("I'd rather have one small PR per fix.", "preference"),
    ("I prefer running the tests with `pytest -x`.", "preference"),
    ("My preference is dark mode in every editor.", "preference"),
    ("I hate long meetings in the morning.", "preference"),
    ("I love all dances, but contemporary is my top pick.", "preference"),
    ("I really like painting landscapes with bright colors.", "preference"),
    ("Always keep the changelog sorted by date.", "preference"),
    ("Please don't deploy on Fridays.", "preference"),
    ("Don't force-push to shared branches.", "preference"),
    ("Stick to the standard library for this project.", "preference"),
    ("I enjoy hiking with my family.", "preference"),
    ("Besides writing, I also enjoy reading, watching movies, and exploring nature.", "preference"),
    # --- facts, requests, small talk: none of the three
    ("I went to a LGBTQ support group yesterday and it was so powerful.", None),
    ("Researching adoption agencies — it's been a dream to have a family.", None),
    ("I chose them 'cause they help LGBTQ+ folks with adoption.", None),
    ("5 years already! Time flies.", None),
    ("This necklace is a gift from my grandma in my home country, Sweden.", None),
    ("We explored nature, roasted marshmallows around the campfire and went on a hike.", None),
    ("Last Friday, I went to an LGBTQ+ counseling workshop.", None),
    ("I lost my job as a banker yesterday, so I'm starting my own dance studio.", None),
    ("I'm always here to support you!", None),
    ("What's your fave?", None),
    ("Wow, nice spot!", None),
    ("Its `write()` method raises an exception when passed `bytes`.", None),
    ("The call goes through fine if `lexer` is changed from `python3` to `text`.", None),
    ("hist() no longer respects range=... when density=True.", None),
    ("Note that this bug doesn't happen if density=False.", None),
    ("This is the underlying cause for the problems mentioned in #5764.", None),
    ("The invoice total adds the tax rate instead of applying it.", None),
    ("Fix the failing invoice test in the billing package.", None),
    ("Can you always check the logs?", None),
    ("I'd like you to fix the login bug.", None),
    ("The migration finished, 40 GB moved.", None),
    ("Thanks, that works.", None),
    ("Never had a chance to visit it.", None),
    ("Let's keep motivating and helping each other out as we journey through life.", None),
    ("I love how you use it to tell your stories and teach people about trans folks.", None),
    ("Losing my job was tough but it gave me the push I needed to do what I love.", None),
    ("You're right, I love it and that'll keep my confidence up.", None),
    ("Always here to help.", None),
    ("We'll push through this together!", None),
    ("Stick with it!", None),
    ("Don't worry about it.", None),
    ("I really enjoy it.", None),
    ("We pushed the release yesterday.", None),
    ("I always run in the morning.", None),
    # --- bug reports name commands without saying how the project does its work
    ("Running `pytest --pdb` will run the `tearDown()` of `unittest.TestCase` classes.", None),
    ("I'm trying to run pytest with a test file that contains patch.", None),
    ("But when run with xdist (`-n auto`), it just displays the last one.", None),
    ("Here is a minimal example using tox that reproduces the problem.", None),
    ("With `pytest==5.4.1`, test was also skipped with `--pdb`.", None),
    ("When running `python3 -bb -m pytest --setup-show` it fails.", None),
    ("We should replace it with `return s`.", None),
]


PHRASINGS: list[tuple[str, list[str]]] = [
    (
        "decision",
        [
            "We decided to tag releases as vX.Y.Z from now on.",
            "From now on we tag releases as vX.Y.Z.",
            "We'll tag releases as vX.Y.Z.",
            "Releases are tagged vX.Y.Z from now on.",
        ],
    ),
    (
        "procedure",
        [
            "Always run the tests with `make check`",
            "Run the tests with `make check`.",
            "We run the tests with `make check`.",
            "I always run the tests with `make check`.",
            "Tests should be run with `make check`.",
            "Use `make check` to run the tests.",
            "Make sure to run the tests with `make check`.",
        ],
    ),
    (
        "decision",
        [
            "We never deploy on Fridays.",
            "We agreed: no deploys on Fridays.",
            "We decided not to deploy on Fridays.",
        ],
    ),
    (
        "preference",
        ["Never push directly to main.", "Don't push to main.", "Please don't push to main."],
    ),
]
"""One meaning said several ways: each way gets the same kind."""


@pytest.mark.parametrize(("kind", "phrasings"), PHRASINGS)
def test_one_meaning_one_kind_whatever_the_phrasing(kind: str, phrasings: list[str]) -> None:
    assert {p: statement_kind(p) for p in phrasings} == dict.fromkeys(phrasings, kind)


def test_the_table_is_large_enough() -> None:
    assert len(TABLE) >= 60
    assert len({s for s, _ in TABLE}) == len(TABLE)


@pytest.mark.parametrize(("sentence", "kind"), TABLE)
def test_kind_by_meaning(sentence: str, kind: str | None) -> None:
    assert statement_kind(sentence) == kind


async def test_a_stated_command_inside_a_longer_message_is_a_procedure() -> None:
    seg = Seg()
    user_id = seg.user(
        "Thanks for the fix yesterday. We always run the check with "
        "`python3 -c 'import acme; acme.selfcheck()'`. Please keep that in mind."
    )

    result = await extract([seg.build()])

    procedures = [c for c in result.candidates if c.kind == "procedure"]
    assert len(procedures) == 1, result.candidates
    assert procedures[0].sources == [user_id]
    assert "python3 -c 'import acme; acme.selfcheck()'" in procedures[0].content


async def test_a_stated_test_command_is_the_test_command_entry() -> None:
    seg = Seg()
    seg.user("Always run the tests with `make check`.")

    result = await extract([seg.build()])

    [procedure] = [c for c in result.candidates if c.kind == "procedure"]
    assert procedure.key == "test-command"
    assert "`make check`" in procedure.content


async def test_two_phrasings_of_a_decision_file_alike() -> None:
    seg = Seg()
    seg.user("We decided to tag releases as vX.Y.Z from now on.")
    seg.user("We decided that releases ship on Tuesdays.")

    result = await extract([seg.build()])

    assert sorted(c.kind for c in result.candidates) == ["decision", "decision"]


@pytest.mark.parametrize(
    ("message", "speaker"),
    [
        ("Caroline: I went to the LGBTQ support group yesterday.", "Caroline"),
        ("Mary Ann: We ship on Tuesdays.", "Mary Ann"),
        ("Ana-Lucia: I prefer tabs.", "Ana-Lucia"),
        ("McDonald: The build is green.", "McDonald"),
        ("DeShawn: Let's meet at noon.", "DeShawn"),
        ("O'Brien: I moved to Dublin.", "O'Brien"),
        ("IndexError: tuple index out of range in identify_format (io.registry)", None),
        ("TimeSeries: misleading exception when required column check fails", None),
        ("SkyCoord: subclassed attribute access gives a misleading message", None),
        ("OpenAI: the client times out", None),
        ("Note: the tests are slow.", None),
        ("Error: file not found", None),
    ],
)
def test_a_label_names_a_speaker_only_when_it_is_written_as_a_name(
    message: str, speaker: str | None
) -> None:
    from sandbox_memory.engines.conversation import split_speaker

    turn = split_speaker(message)
    assert turn.speaker == speaker
    assert turn.text.strip() in message
