"""Privacy between people sharing one agent: what a person says about themselves stays theirs.

Real runs on a local sandbox for two people (``for_person``), the offline engine, and an engine
object at the model seam that quotes everything, to show the rule holds whatever the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Runner
from agents.testing import ScriptedModel, assistant_message

from faultlib import rc
from helpers import agent, bug_fix_script, layout_runtime, run_payload
from sandbox_memory import MemoryClient, for_person
from sandbox_memory.engines.base import Candidate, Extraction, ExtractionRequest
from sandbox_memory.privacy import self_statements, shared_text
from sandbox_memory.runtime import LayoutRuntime

ANA_TASK = "Fix the failing test in invoice.py. I prefer short answers with a list of changes."


def shared_files(root: Path) -> dict[str, str]:
    """Every memory file any run can read (the store's private records excluded)."""

    mem = root / "memories"
    files = {
        str(p.relative_to(root)): p.read_text()
        for p in mem.rglob("*")
        if p.is_file() and "store" not in p.relative_to(mem).parts
    }
    files["memories/store/registry.json"] = (mem / "store" / "registry.json").read_text()
    return files


async def test_a_persons_self_statements_never_reach_shared_files_or_anothers_prompt(
    client, manifest, workspace_root
) -> None:
    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        with for_person("ana"):
            await Runner.run(
                agent(ScriptedModel(bug_fix_script())), ANA_TASK, run_config=rc(sandbox, "ana-1")
            )
    bob = ScriptedModel([[assistant_message("ok")]])
    ana = ScriptedModel([[assistant_message("ok")]])
    resumed = await client.resume(sandbox.state)
    async with resumed:
        with for_person("bob"):
            await Runner.run(agent(bob), "Hello.", run_config=rc(resumed, "bob-1"))
        with for_person("ana"):
            await Runner.run(agent(ana), "Hello again.", run_config=rc(resumed, "ana-2"))

    files = shared_files(workspace_root)
    leaks = {name for name, text in files.items() if "prefer" in text.lower()}
    assert leaks == set(), leaks
    assert "short answers" not in (bob.calls[0].system_instructions or "")
    assert "short answers" in (ana.calls[0].system_instructions or "")  # hers, in her runs
    # The shared work is still shared.
    assert "invoice.py" in files["memories/MEMORY.md"]


class QuotingEngine:
    """An engine (at the model seam) that repeats the whole user message everywhere."""

    name = "quoting"

    async def extract(self, request: ExtractionRequest) -> Extraction:
        item = request.segments[-1]["input"][0]
        said = item["content"]
        cite = [item["memory_item_id"]]
        return Extraction(
            rollout_summary=f"The user asked: {said}\nThe test was fixed.",
            rollout_slug="fix-calc-prefer-short-answers",
            raw_memory=f"- task: {said}\n- allergy: I'm allergic to peanuts.\n- fixed calc.py",
            candidates=[
                Candidate(key="task-calc", content=f"Asked: {said}", kind="fact", sources=cite),
                Candidate(key="peanuts", content="I'm allergic to peanuts.", sources=cite),
                Candidate(
                    key="short-answers",
                    content="Prefers short answers with a list of changes.",
                    kind="preference",
                    sources=cite,
                ),
            ],
        )


def quoting_runtime(root: Path, engine: Any = None) -> LayoutRuntime:
    rt: LayoutRuntime = layout_runtime(root, engine=engine or QuotingEngine())
    return rt


async def test_shared_entries_and_files_lose_self_statements_whatever_the_engine(
    tmp_path: Path,
) -> None:
    rt = quoting_runtime(tmp_path)
    said = "Fix the failing test in calc.py. I prefer short answers with a list of changes. I'm allergic to peanuts."
    await rt.record(
        run_payload(said, reply=None, when=None),
        rollout_id="ana-1",
        person="ana",
    )
    await rt.close()
    entries = (await MemoryClient(tmp_path).view("ana-1")).entries
    assert entries["task-calc"].content == "Asked: Fix the failing test in calc.py."
    assert entries["task-calc"].person is None
    assert (entries["peanuts"].person, entries["short-answers"].person) == ("ana", "ana")
    files = shared_files(tmp_path)
    for name, text in files.items():
        assert "prefer" not in text.lower() and "peanut" not in text.lower(), name
    summary = next(t for n, t in files.items() if "rollout_summaries/" in n)
    assert "Fix the failing test in calc.py." in summary and "The test was fixed." in summary
    assert "- fixed calc.py" in files["memories/raw_memories/ana-1.md"]


async def test_without_a_person_nothing_is_held_back(tmp_path: Path) -> None:
    rt = quoting_runtime(tmp_path)
    said = "Fix calc.py. I prefer short answers with a list of changes."
    await rt.record(run_payload(said, reply=None, when=None), rollout_id="solo")
    await rt.close()
    assert (await MemoryClient(tmp_path).view("solo")).entries[
        "task-calc"
    ].content == f"Asked: {said}"


async def test_the_prompt_names_the_person_and_gives_the_privacy_rules_every_turn(
    client, manifest
) -> None:
    sandbox = await client.create(manifest=manifest)
    model = ScriptedModel([[assistant_message("one")], [assistant_message("two")]])
    solo = ScriptedModel([[assistant_message("ok")]])
    async with sandbox:
        with for_person("bob"):
            await Runner.run(agent(model), "Hello.", run_config=rc(sandbox, "bob-1"))
            await Runner.run(agent(model), "Again.", run_config=rc(sandbox, "bob-1"))
        await Runner.run(agent(solo), "Hello.", run_config=rc(sandbox, "solo"))
    for call in model.calls:  # memory is still empty: the rules come anyway
        text = call.system_instructions or ""
        assert "You are working with bob." in text
        assert "clearly belongs to the shared work" in text
        assert "another person's preferences" in text
    assert "You are working with" not in (solo.calls[0].system_instructions or "")


# ------------------------------------------------------- what is about the person

# (the person's message, what must stay in shared text, what must go)
ABOUT_THE_WORK_OR_THE_PERSON: list[tuple[str, list[str], list[str]]] = [
    # English: work in the first person stays
    ("I ran the tests and two of them fail on the parser.", ["I ran the tests and two"], []),
    (
        "I fixed the parser yesterday, but the lexer still breaks on tabs.",
        ["I fixed the parser", "lexer still breaks"],
        [],
    ),
    ("I think the bug is in utils.py.", ["I think the bug is in utils.py."], []),
    ("I tried that already.", ["I tried that already."], []),
    ("I saw a KeyError in `load_config` when the cache is cold.", ["I saw a KeyError"], []),
    ("My branch fails CI after the rebase.", ["My branch fails CI"], []),
    ("I'm getting a timeout from the staging server.", ["timeout from the staging server"], []),
    ("I reverted the last commit.", ["I reverted the last commit."], []),
    ("I'd like you to add a regression test.", ["I'd like you to add a regression test."], []),
    ("Why does my test fail on Windows?", ["Why does my test fail on Windows?"], []),
    # ... also with words that are personal elsewhere (parent, health, email, doctor, sleep)
    ("I killed the parent process and restarted it.", ["I killed the parent process"], []),
    ("I disabled the cache for the health check.", ["I disabled the cache"], []),
    ("I fixed the email template and the mobile layout.", ["I fixed the email template"], []),
    ("I added a sleep to the retry loop.", ["I added a sleep to the retry loop."], []),
    ("I ran brew doctor and it was clean.", ["I ran brew doctor and it was clean."], []),
    ("I added @pytest.fixture to the test.", ["I added @pytest.fixture to the test."], []),
    # English: what is about the person goes
    ("I prefer short answers with a list of changes.", [], ["prefer", "short answers"]),
    ("I'm allergic to peanuts.", [], ["allergic", "peanuts"]),
    ("My daughter starts school on Monday.", [], ["daughter", "school"]),
    ("My phone number is 555 0134, call me there.", [], ["phone", "555"]),
    ("I'm a vegetarian.", [], ["vegetarian"]),
    ("I live in Lisbon with two cats.", [], ["Lisbon", "cats"]),
    ("I'm on vacation next week.", [], ["vacation"]),
    ("I have a doctor's appointment on Friday.", [], ["doctor", "Friday"]),
    ("I'd rather get answers in Portuguese.", [], ["rather", "Portuguese"]),
    ("I'm tired today.", [], ["tired"]),
    ("I love hiking and camping.", [], ["hiking", "camping"]),
    ("I'm diabetic, what should I eat?", [], ["diabetic", "eat"]),
    ("Please remember that I'm allergic to peanuts.", [], ["allergic"]),
    ("I have health issues.", [], ["health"]),
    ("My zip code is 10115.", [], ["10115"]),
    ("Email me at ana@example.com.", [], ["ana@example.com"]),
    # English: one sentence with both keeps the work clause only
    ("I ran the tests, and I prefer short answers.", ["I ran the tests."], ["prefer", "short"]),
    (
        "I prefer tabs, but I fixed the indentation in main.py.",
        ["I fixed the indentation in main.py."],
        ["prefer", "tabs"],
    ),
    ("I fixed the parser while my kids were asleep.", ["I fixed the parser."], ["kids", "asleep"]),
    (
        "I'm allergic to nuts; the test for the menu page fails.",
        ["The test for the menu page fails."],
        ["allergic", "nuts"],
    ),
    (
        "Fix the failing test in calc.py, I'm allergic to latex by the way.",
        ["Fix the failing test in calc.py"],
        ["allergic", "latex"],
    ),
    # German
    ("Ich habe die Tests laufen lassen.", ["Ich habe die Tests laufen lassen."], []),
    ("Ich glaube, der Fehler liegt in der Datei parser.py.", ["Ich glaube, der Fehler liegt"], []),
    ("Ich habe den Fehler im Parser behoben.", ["Ich habe den Fehler im Parser behoben."], []),
    ("Ich bevorzuge kurze Antworten.", [], ["bevorzuge", "kurze Antworten"]),
    ("Ich bin allergisch gegen Erdnüsse.", [], ["allergisch", "Erdnüsse"]),
    ("Meine Tochter hat morgen Geburtstag.", [], ["Tochter", "Geburtstag"]),
    ("Ich wohne in Berlin.", [], ["Berlin"]),
    ("Ich habe die IP-Adresse des Servers geändert.", ["IP-Adresse des Servers"], []),
    (
        "Ich habe die Tests laufen lassen, aber ich mag lange Erklärungen nicht.",
        ["Ich habe die Tests laufen lassen."],
        ["Erklärungen"],
    ),
    # French
    ("J'ai corrigé le parseur.", ["J'ai corrigé le parseur."], []),
    (
        "Je pense que l'erreur vient du fichier config.py.",
        ["Je pense que l'erreur vient du fichier config.py."],
        [],
    ),
    ("Je préfère des réponses courtes.", [], ["préfère", "réponses courtes"]),
    ("Je suis allergique aux arachides.", [], ["allergique", "arachides"]),
    ("Je m'appelle Ana et j'habite à Porto.", [], ["appelle", "Porto"]),
    (
        "J'ai lancé les tests, mais je préfère des réponses courtes.",
        ["J'ai lancé les tests."],
        ["préfère", "courtes"],
    ),
    # Chinese
    ("我修复了解析器。", ["我修复了解析器。"], []),
    ("我跑了测试，两个失败了。", ["我跑了测试，两个失败了。"], []),
    ("我更喜欢简短的回答。", [], ["喜欢", "简短"]),
    ("我对花生过敏。", [], ["花生", "过敏"]),
    ("我女儿下周一开学。", [], ["女儿", "开学"]),
    ("我修改了服务器的IP地址。", ["我修改了服务器的IP地址。"], []),
    ("我跑了测试，但我更喜欢简短的回答。", ["我跑了测试。"], ["喜欢", "简短"]),
]


@pytest.mark.parametrize(("said", "kept", "cut"), ABOUT_THE_WORK_OR_THE_PERSON)
def test_what_is_about_the_person_is_cut_and_work_in_the_first_person_stays(
    said: str, kept: list[str], cut: list[str]
) -> None:
    segments = [{"person": "ana", "input": [{"role": "user", "content": said}]}]
    statements = self_statements(segments)
    # An engine quotes the message where everyone reads: a shared note line, a summary line.
    shared = shared_text(f"- task: {said} [ab12cd34:0]\nThe user said: {said}", statements)
    for words in kept:
        assert shared.count(words) == 2, (statements, shared)
    for words in cut:
        assert words.lower() not in shared.lower(), (statements, shared)
    if not cut:
        assert statements == [] and shared == f"- task: {said} [ab12cd34:0]\nThe user said: {said}"


class QuotingAll:
    """An engine (at the model seam) quoting the person's message in a shared fact, the
    summary and the notes, and keeping the work sentences it found as a fact of their own."""

    name = "quoting-all"

    def __init__(self, work: str) -> None:
        self.work = work

    async def extract(self, request: ExtractionRequest) -> Extraction:
        item = request.segments[-1]["input"][0]
        said, cite = item["content"], [item["memory_item_id"]]
        return Extraction(
            rollout_summary=f"Task: {said}\nOutcome: the lexer was fixed.",
            rollout_slug="lexer-tabs",
            raw_memory=f"- asked: {said}\n- lexer.py: tabs are now tokens",
            candidates=[
                Candidate(key="task-lexer", content=f"Asked: {said}", kind="fact", sources=cite),
                Candidate(key="what-was-tried", content=self.work, kind="fact", sources=cite),
            ],
        )


@pytest.mark.parametrize(
    ("said", "work", "private"),
    [
        (
            "I ran the tests and the lexer test fails on tabs. I prefer short answers, but I "
            "fixed the parser already. My daughter is sick today.",
            "I ran the tests and the lexer test fails on tabs.",
            ["prefer", "short answers", "daughter", "sick"],
        ),
        (
            "Ich habe die Tests laufen lassen, und der Lexer-Test scheitert an Tabs. Ich "
            "bevorzuge kurze Antworten, aber ich habe den Parser schon repariert.",
            "Ich habe die Tests laufen lassen, und der Lexer-Test scheitert an Tabs.",
            ["bevorzuge", "kurze Antworten"],
        ),
    ],
    ids=["english", "german"],
)
async def test_a_persons_run_keeps_first_person_work_in_shared_memory(
    tmp_path: Path, said: str, work: str, private: list[str]
) -> None:
    rt = quoting_runtime(tmp_path, QuotingAll(work))
    await rt.record(
        run_payload(said, reply=None, when=None),
        rollout_id="ana-1",
        person="ana",
    )
    await rt.close()
    entries = (await MemoryClient(tmp_path).view("ana-1")).entries
    assert entries["what-was-tried"].content == work and entries["what-was-tried"].person is None
    task = entries["task-lexer"].content
    assert task.startswith(f"Asked: {work}") and entries["task-lexer"].person is None
    files = shared_files(tmp_path)
    assert work in files["memories/MEMORY.md"]
    summary = next(t for n, t in files.items() if "rollout_summaries/" in n)
    assert work in summary and "the lexer was fixed" in summary
    assert work in files["memories/raw_memories/ana-1.md"]
    assert "parser" in task.lower()  # the work clause of the mixed sentence stayed
    for name, text in files.items():
        for words in private:
            assert words.lower() not in text.lower(), (name, words)


class ParaphrasingEngine:
    """An engine (at the model seam) whose slug is made of the person's private matters, in
    its own words."""

    name = "paraphrasing"

    async def extract(self, request: ExtractionRequest) -> Extraction:
        return Extraction(
            rollout_summary="The user talked about themselves.",
            rollout_slug="nut-allergy-divorce-short-answers",
            raw_memory="- the user talked about themselves",
            candidates=[],
        )


PRIVATE_WORDS = ("allerg", "peanut", "divorce", "prefer", "nut-", "short")


@pytest.mark.parametrize("engine", [None, ParaphrasingEngine()], ids=["offline", "paraphrase"])
async def test_a_summary_file_name_holds_no_private_word(tmp_path: Path, engine: Any) -> None:
    rt = layout_runtime(tmp_path, engine=engine)
    said = "I'm allergic to peanuts and I'm going through a divorce. I prefer short answers."
    await rt.record(
        run_payload(said, reply=None, when=None),
        rollout_id="team-thread",
        person="ann",
    )
    await rt.close()
    names = [str(p.relative_to(tmp_path)) for p in (tmp_path / "memories").rglob("*")]
    assert any("rollout_summaries/team-thread_" in n for n in names)
    for name in names:
        if "/store/" not in f"/{name}":
            assert not any(w in name.lower() for w in PRIVATE_WORDS), name
    for name, text in shared_files(tmp_path).items():
        assert not any(w in text.lower() for w in PRIVATE_WORDS), name


def test_a_shared_key_made_only_of_private_words_is_named_from_the_shared_content() -> None:
    from sandbox_memory.privacy import keep_private

    statements = ["I'm allergic to peanuts"]
    cand = Candidate(
        key="allergic-peanuts",
        content="Fixed the rounding in calc.py. I'm allergic to peanuts.",
        sources=["s:0"],
    )
    (kept,) = keep_private([cand], statements)
    assert kept.key == "fixed-the-rounding-in" and kept.content.startswith("Fixed the rounding")
