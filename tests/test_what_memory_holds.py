"""What the offline engine keeps: whole entries, no filler, changes read from the tool calls,
the run's conclusion, the general test command, and what people say (speaker, dates, no key
collisions, no small talk)."""

from __future__ import annotations

import json
import re
from typing import Any

from agents import Runner
from agents.testing import ScriptedModel, assistant_message

from faultlib import rc
from helpers import agent, exec_items, run_payload
from sandbox_memory import for_person
from sandbox_memory.engines.base import KnownEntry, Subjects
from test_offline_engine import PATCH, Seg, extract
from test_sandbox_memory import memory_text

SPAN_RE = re.compile(r"`([^`]*)`")


def _words_whole(content: str, source_text: str) -> None:
    """Every word of ``content`` that also starts a word of the source is whole there: a cut
    word (``dis…``) would be a prefix of a longer source word and end with the ellipsis."""

    assert not re.search(r"\w…", content), content


# --------------------------------------------------------------------- never cut


async def test_a_long_test_command_is_quoted_whole_or_not_at_all() -> None:
    long_cmd = (
        "cd /repo && PYTHONPATH=src:tests:vendor/lib python3 -m unittest discover -s tests "
        "-p 'test_*.py' -t . --locals --buffer --failfast --verbose --catch "
        "&& echo all-tests-finished-successfully-on-this-machine-and-ready-for-review"
    )
    assert len(long_cmd) > 200
    seg = Seg()
    seg.user("Run the whole test suite")
    seg.exec(long_cmd, 0, "Ran 120 tests\nOK")

    result = await extract([seg.build()])

    for candidate in result.candidates:
        _words_whole(candidate.content, long_cmd)
        for span in SPAN_RE.findall(candidate.content):
            assert span in long_cmd, (span, candidate.content)
    procedure = next(c for c in result.candidates if c.key == "test-command")
    assert procedure.content == (
        "Run the tests with `PYTHONPATH=src:tests:vendor/lib python3 -m unittest discover -s "
        "tests -p 'test_*.py' -t . --locals --buffer --failfast --verbose --catch`."
    )


async def test_long_statements_and_reports_end_on_a_whole_word() -> None:
    seg = Seg()
    preference = (
        "I prefer commit messages that explain the reason for the change in the first line, "
        "then list every file that changed with one short sentence each, then mention the "
        "tests that cover it, then any follow-up work, then the ticket number, then the "
        "reviewer, and finally the date of the release that will carry the change to users."
    )
    assert len(preference) > 300
    seg.user(f"Tidy the changelog. {preference}")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_log.py::test_order - AssertionError")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    report = "Reordered the entries so the newest comes first. " + "The test suite passes " * 30
    seg.assistant(report)
    seg.final_output = report

    result = await extract([seg.build()])

    assert result.candidates
    for candidate in result.candidates:
        _words_whole(candidate.content, preference + report)
        assert candidate.content.count("`") % 2 == 0, candidate.content
    pref = next(c for c in result.candidates if c.kind == "preference")
    assert pref.content.endswith((".", " …")), pref.content


def test_shorten_never_stops_inside_a_code_span_or_a_word() -> None:
    from sandbox_memory.engines.text import shorten

    text = "Run the tests with `python3 -m unittest discover -s tests -v` before each commit."
    for limit in range(5, len(text)):
        short = shorten(text, limit)
        assert len(short) <= limit
        assert short.count("`") % 2 == 0, short
        assert not re.search(r"\w…", short), short
        if short:
            assert text.startswith(short.removesuffix(" …").rstrip(".")), short


# --------------------------------------------------------------------- no filler


async def test_generic_sentiment_is_no_preference() -> None:
    seg = Seg()
    seg.user(
        "I love it! Never give up! Always here to help. Wow, that's so cool! "
        "It was awesome being out there, doing what I love."
    )

    result = await extract([seg.build()])

    assert result.candidates == []


async def test_a_terse_final_answer_is_not_quoted_and_the_change_is_not_the_task() -> None:
    seg = Seg()
    task = "Fix the failing invoice test in the billing package please"
    seg.user(task)
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    seg.assistant("Done.")
    seg.final_output = "Done."

    result = await extract([seg.build()])

    for candidate in result.candidates:
        assert "reported: Done" not in candidate.content, candidate.content
        assert task not in candidate.content, candidate.content
        assert candidate.content != "Result: Done."


def _investigation() -> Seg:
    """A run that only looked: it read the invoice module, ran the tests, changed nothing."""

    seg = Seg()
    seg.user("Why do the invoice tests fail on the staging branch?")
    seg.exec("cat acme_billing/invoice.py", 0, "def invoice_total(subtotal, tax_rate): ...")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - KeyError: 'EUR'")
    answer = (
        "The staging config has no EUR rate, so invoice_total raises KeyError for EUR invoices."
    )
    seg.assistant(answer)
    seg.final_output = answer
    return seg


async def test_a_run_that_only_looked_is_named_by_the_file_it_read_and_what_it_was_asked() -> None:
    result = await extract([_investigation().build()])

    [finding] = [c for c in result.candidates if c.content.startswith("Result: ")]
    assert finding.key == "invoice-tests-fail"  # the file, then what the request asks about
    assert "EUR rate" in finding.content


async def test_a_later_look_at_a_fixed_file_does_not_take_the_fix_s_key() -> None:
    fix = KnownEntry(
        key="invoice-tests-fail",
        kind="fact",
        content="Symptom: KeyError. Fix: updated `acme_billing/invoice.py`.",
        subjects=Subjects(files=["acme_billing/invoice.py"]),
    )

    result = await extract([_investigation().build()], [fix])

    [finding] = [c for c in result.candidates if c.content.startswith("Result: ")]
    assert finding.key == "invoice-tests-fail-findings"


# --------------------------------------------------------------------- the change itself


async def test_terse_answer_loses_nothing_the_patch_says() -> None:
    seg = Seg()
    seg.user("Fix the invoice total")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    seg.final_output = "Done."

    result = await extract([seg.build()])

    [fix] = [c for c in result.candidates if c.kind == "fact"]
    assert fix.key == "invoice-total"  # the file it changed and the test that failed there
    assert "`src/invoice.py` in `total`" in fix.content
    assert "`return sum(i.price for i in items)`" in fix.content
    assert "`return sum(i.price * (1 - i.discount) for i in items)`" in fix.content


UNIFIED = """diff --git a/pkg/parse.py b/pkg/parse.py
--- a/pkg/parse.py
+++ b/pkg/parse.py
@@ -10,3 +10,3 @@ def parse_date(text):
     text = text.strip()
-    return datetime.strptime(text, "%d/%m/%Y")
+    return datetime.strptime(text, "%Y-%m-%d")
--- a/pkg/cli.py
+++ b/pkg/cli.py
@@ -1,2 +1,3 @@ def main():
+    configure_logging()
--- /dev/null
+++ b/docs/dates.md
@@ -0,0 +1 @@
+Dates are ISO 8601.
"""


async def test_heredoc_git_apply_is_read_as_a_change_of_every_file_it_touches() -> None:
    seg = Seg()
    seg.user("Make the date parser accept ISO dates")
    call, _ = seg.exec(f"cd /repo && git apply <<'EOF'\n{UNIFIED}EOF", 0, "")

    result = await extract([seg.build()])

    changes = next(c for c in result.candidates if c.content.startswith(("Changed:", "Added:")))
    assert call in changes.sources
    for path in ("pkg/parse.py", "pkg/cli.py", "docs/dates.md"):
        assert f"`{path}`" in changes.content, changes.content
    assert "`parse_date`" in changes.content
    assert '`return datetime.strptime(text, "%Y-%m-%d")`' in changes.content
    assert "Added: `docs/dates.md`" in changes.content
    assert "pkg/cli.py" in result.rollout_summary and "docs/dates.md" in result.rollout_summary


async def test_patch_file_written_then_applied_with_patch_p1() -> None:
    seg = Seg()
    seg.user("Apply the date fix")
    seg.exec(f"cat > /tmp/fix.patch <<'EOF'\n{UNIFIED}EOF", 0, "")
    apply_call, _ = seg.exec("patch -p1 < /tmp/fix.patch", 0, "patching file pkg/parse.py")

    result = await extract([seg.build()])

    changes = next(c for c in result.candidates if c.content.startswith(("Changed:", "Added:")))
    assert apply_call in changes.sources
    assert "`pkg/parse.py`" in changes.content and "`pkg/cli.py`" in changes.content
    assert "fix.patch" not in changes.content


async def test_whole_file_rewrite_is_compared_with_what_the_run_read() -> None:
    seg = Seg()
    seg.user("Round the invoice total")
    old = "def invoice_total(lines):\n    subtotal = sum(lines)\n    return subtotal\n"
    new = "def invoice_total(lines):\n    subtotal = sum(lines)\n    return round(subtotal, 2)\n"
    seg.exec("cat invoice.py", 0, old)
    seg.exec(f"cat > invoice.py <<'PYEOF'\n{new}PYEOF", 0, "")
    seg.final_output = "Done."

    result = await extract([seg.build()])

    changes = next(c for c in result.candidates if c.content.startswith(("Changed:", "Added:")))
    assert "`return subtotal` → `return round(subtotal, 2)`" in changes.content
    assert "`invoice_total`" in changes.content


async def test_sdk_apply_patch_operations_with_diffs_are_described() -> None:
    seg = Seg()
    seg.user("Rename the helper")
    operation = {
        "type": "update_file",
        "path": "src/util.py",
        "diff": "@@ def helper():\n-    return 1\n+    return 2\n",
    }
    seg.tool("apply_patch", {"operation": operation}, "Updated src/util.py")

    result = await extract([seg.build()])

    changes = next(c for c in result.candidates if c.content.startswith(("Changed:", "Added:")))
    assert "`src/util.py` in `helper`: `return 1` → `return 2`" in changes.content


# --------------------------------------------------------------------- conclusions


async def test_the_conclusion_a_run_reaches_is_a_fact() -> None:
    seg = Seg()
    seg.user("Analyze data/leads.csv and find one promising segment.")
    seg.exec("awk -F, '{print $2}' data/leads.csv", 0, "healthcare\nretail")
    finding = (
        "Promising segment: healthcare. It leads on monthly spend (21900) with 292 seats and "
        "120 trial events."
    )
    answer_id = seg.assistant(finding)
    seg.final_output = finding

    result = await extract([seg.build()])

    facts = [c for c in result.candidates if c.kind == "fact" and "healthcare" in c.content]
    assert len(facts) == 1
    assert "292 seats" in facts[0].content
    assert facts[0].sources == [answer_id]


# --------------------------------------------------------------------- the test command


async def test_a_single_test_id_does_not_replace_the_general_test_command() -> None:
    seg = Seg()
    seg.user("Fix issue 11880 in the forms fields")
    narrow = "python -m pytest tests/forms/test_fields.py::test_issue_11880"
    seg.exec(narrow, 1, "FAILED tests/forms/test_fields.py::test_issue_11880 - AssertionError")
    seg.patch(PATCH.replace("src/invoice.py", "forms/fields.py"), "Updated forms/fields.py")
    seg.exec(narrow, 0, "1 passed")
    known = [
        KnownEntry(
            key="test-command", kind="procedure", content="Run the tests with `python -m pytest`."
        )
    ]

    result = await extract([seg.build()], known)

    assert not [c for c in result.candidates if c.kind == "procedure"]
    fix = next(c for c in result.candidates if c.content.startswith("Symptom:"))
    assert "test_issue_11880" in fix.content  # which test covered which fix


async def test_general_test_command_survives_a_later_single_test_run(
    client, manifest, workspace_root
) -> None:
    from helpers import shell

    (workspace_root / "test_ok.py").write_text(
        "import unittest\n\n\nclass OkTest(unittest.TestCase):\n"
        "    def test_one(self):\n        self.assertTrue(True)\n"
    )
    sandbox = await client.create(manifest=manifest)
    general = "python3 -m unittest -q test_ok"
    narrow = "python3 -m unittest -q test_ok.OkTest.test_one"
    async with sandbox:
        await Runner.run(
            agent(ScriptedModel([[shell(general, "c1")], [assistant_message("Tests ran.")]])),
            "Run the tests.",
            run_config=rc(sandbox, group_id="first"),
        )
    resumed = await client.resume(sandbox.state)
    async with resumed:
        await Runner.run(
            agent(ScriptedModel([[shell(narrow, "c2")], [assistant_message("One test ran.")]])),
            "Run only the discount test.",
            run_config=rc(resumed, group_id="second"),
        )
    resumed = await client.resume(resumed.state)
    model = ScriptedModel([[assistant_message("ok")]])
    async with resumed:
        await Runner.run(agent(model), "What next?", run_config=rc(resumed, group_id="third"))
    assert f"Run the tests with `{general}`." in memory_text(model)
    assert "test_one`" not in memory_text(model)


# --------------------------------------------------------------------- what people say


def _chat(lines: list[str], *, when: str = "2023-05-08T13:56:00+00:00") -> tuple[Any, list[str]]:
    seg = Seg()
    ids = [seg.user(line) for line in lines]
    seg.assistant("Noted.")
    seg.final_output = "Noted."
    built = seg.build()
    built["updated_at"] = when
    return built, ids


async def test_statements_keep_the_speaker_and_resolve_relative_dates() -> None:
    segment, ids = _chat(
        [
            "Caroline: Hey Mel! Good to see you! How have you been?",
            "Melanie: Hey Caroline! I'm swamped with the kids & work.",
            "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
            "Melanie: We're going camping next month. I ran a charity race last Saturday.",
            "Caroline: Last week I researched adoption agencies.",
        ]
    )

    result = await extract([segment])

    facts = {i: c for c in result.candidates if c.kind == "fact" for i in c.sources}
    said = " ".join(c.content for c in result.candidates)
    assert "Good to see you" not in said  # small talk and a question
    went = facts[ids[2]]
    assert went.content.startswith("Caroline (8 May 2023): ")
    assert "yesterday (7 May 2023)" in went.content
    camping = facts[ids[3]]
    assert camping.content.startswith("Melanie (8 May 2023): ")
    assert "next month (June 2023)" in camping.content
    assert "last Saturday (the Saturday before 8 May 2023, 6 May 2023)" in camping.content
    assert "the week before 8 May 2023" in facts[ids[4]].content
    assert "Caroline" in result.rollout_summary and "Melanie" in result.rollout_summary


def test_dates_resolve_against_the_given_day_only() -> None:
    from datetime import date

    from sandbox_memory.engines.dates import resolve_relative_dates

    day = date(2023, 6, 9)  # a Friday
    assert resolve_relative_dates("I moved 4 years ago", day) == "I moved 4 years ago (2019)"
    assert "(8 June 2023)" in resolve_relative_dates("We met yesterday", day)
    assert "(the Friday before 9 June 2023, 2 June 2023)" in resolve_relative_dates(
        "last Friday", day
    )
    assert "(16 June 2023)" in resolve_relative_dates("this Friday, no: in 7 days", day)
    assert resolve_relative_dates("yesterday", None) == "yesterday"


async def test_what_one_person_said_on_a_day_is_one_entry_named_for_them() -> None:
    segment, ids = _chat(
        [
            "Jon: My dance studio opened downtown in March.",
            "Jon: My dance studio opened a second room for kids.",
            "Jon: My dance studio opened downtown in March.",
        ]
    )
    known = [KnownEntry(key="jon-dance-studio-opened", kind="fact", content="Jon: studio.")]

    result = await extract([segment], known)

    [fact] = [c for c in result.candidates if c.kind == "fact"]
    assert fact.key == "jon-8-may-2023"  # a name, no hash; the known entry is not replaced
    assert fact.content == (
        "Jon (8 May 2023): My dance studio opened downtown in March. "
        "My dance studio opened a second room for kids."
    )
    assert fact.sources == [ids[0], ids[1]]


async def test_a_later_run_on_the_same_day_adds_an_entry_rather_than_replacing_one() -> None:
    segment, _ = _chat(["Jon: My dance studio opened a second room for kids."])
    known = [
        KnownEntry(
            key="jon-8-may-2023",
            kind="fact",
            content="Jon (8 May 2023): My dance studio opened downtown in March.",
        )
    ]

    result = await extract([segment], known)

    assert [c.key for c in result.candidates if c.kind == "fact"] == ["jon-8-may-2023-2"]


async def test_hedges_and_intensifiers_are_left_out_of_what_a_person_said() -> None:
    segment, _ = _chat(
        [
            "Jon: Honestly, I really just started kundalini yoga, you know, at a studio.",
            "Jon: I think about my sister Ana in Lisbon. It is a kind of dance I was kind of scared of.",
        ]
    )

    result = await extract([segment])

    [fact] = [c for c in result.candidates if c.kind == "fact"]
    assert fact.content == (
        "Jon (8 May 2023): I started kundalini yoga at a studio. "
        "I think about my sister Ana in Lisbon. It is a kind of dance I was scared of."
    )


async def test_a_note_on_a_shared_photo_says_once_that_it_is_a_photo() -> None:
    """The caption stays word for word; only the note's own "a photo:" that the caption
    repeats goes (a caption that does not say what it is keeps the note whole)."""

    segment, _ = _chat(
        [
            "Jon: My studio opened! [shares a photo: a photo of a dance floor with 12 mirrors]",
            "Jon: Ana painted it. [sent an image: a painting of a sunset over Lisbon]",
        ]
    )

    result = await extract([segment])

    [fact] = [c for c in result.candidates if c.kind == "fact"]
    assert fact.content == (
        "Jon (8 May 2023): My studio opened! [shares a photo of a dance floor with 12 mirrors] "
        "Ana painted it. [sent an image: a painting of a sunset over Lisbon]"
    )


async def test_small_talk_and_requests_are_not_facts() -> None:
    segment, _ = _chat(
        [
            "Gina: Wow, that's so cool! Thanks so much!",
            "Jon: Totally agree, you're awesome. Good to see you!",
            "Gina: Can you remind me what we talked about?",
            "Jon: Please write a summary of the meeting.",
            "Gina: Hey Jon, nice to meet you!",
        ]
    )

    result = await extract([segment])

    assert [c for c in result.candidates if c.kind == "fact"] == []


async def test_remarks_and_maxims_tied_to_no_one_are_not_facts() -> None:
    segment, _ = _chat(
        [
            "Mel: I ran a charity race for mental health last Saturday.",
            "Caroline: That charity race sounds great, Mel! Taking care of ourselves is vital. "
            "What an inspiring cause to run for!",
            "Mel: They gave every runner a medal. It was my first race in 5 years.",
        ]
    )

    result = await extract([segment])

    said = " ".join(c.content for c in result.candidates if c.kind == "fact")
    assert "charity race for mental health" in said and "They gave every runner a medal" in said
    assert "sounds great" not in said and "ourselves" not in said and "inspiring" not in said


def test_a_remark_is_told_from_a_description() -> None:
    from sandbox_memory.engines.conversation import only_reacts

    names = frozenset({"mel", "caroline"})
    assert only_reacts("That sounds like an intense game!", names=names)
    assert only_reacts("Wow, Caroline, family love and support is the best!", names=names)
    assert not only_reacts("That page has dialogues exploring loss and forgiveness.", names=names)
    assert not only_reacts("They're doing great, learning commands.", names=names)
    assert not only_reacts("We love having movie marathons with our friends.", names=names)
    assert not only_reacts("Barcelona is a must-see, John.", names=names)


async def test_what_a_person_says_about_themselves_stays_theirs(client, manifest) -> None:
    sandbox = await client.create(manifest=manifest)
    ana = ScriptedModel([[assistant_message("ok")], [assistant_message("ok")]])
    bob = ScriptedModel([[assistant_message("ok")]])
    async with sandbox:
        with for_person("ana"):
            await Runner.run(
                agent(ana),
                "I moved to Lisbon last year and my daughter starts school in September.",
                run_config=rc(sandbox, group_id="ana-1"),
            )
    resumed = await client.resume(sandbox.state)
    async with resumed:
        with for_person("bob"):
            await Runner.run(agent(bob), "Hello.", run_config=rc(resumed, group_id="ana-1"))
        with for_person("ana"):
            await Runner.run(agent(ana), "Hi again.", run_config=rc(resumed, group_id="ana-1"))
    assert "Lisbon" not in memory_text(bob)
    assert "Lisbon" in memory_text(ana, 1)


async def test_a_long_chat_summary_is_a_summary_not_the_transcript() -> None:
    lines = []
    for n in range(200):
        lines.append(f"Tim: I practiced basketball drill number {n} at the court near school.")
        lines.append("John: Wow, that's awesome!")
    segment, _ = _chat(lines)

    result = await extract([segment])

    transcript = sum(len(line) for line in lines)
    assert len(result.rollout_summary) < transcript / 4
    assert "awesome" not in result.rollout_summary
    assert json.dumps(result.rollout_summary).count("Tim:") <= 30


async def test_the_summary_file_of_a_long_conversation_stays_bounded(workspace_root) -> None:
    from faultlib import runtime
    from sandbox_memory.extract.rollout import SUMMARY_FILE_MAX_CHARS

    rt = runtime(workspace_root, engine="offline")
    for run in range(20):
        lines = [
            f"Nate: In week {run} I adopted turtle number {n} and named it Shell{run}x{n}, "
            "after the green shell it had when I found it by the lake behind the old mill."
            for n in range(12)
        ]
        await rt.record(
            {"input": [{"role": "user", "content": line} for line in lines], "final_output": "ok"},
            rollout_id="long-chat",
        )
        await rt.close()
    (summary,) = (workspace_root / "memories" / "rollout_summaries").glob("long-chat_*.md")
    text = summary.read_text()
    assert len(text) <= SUMMARY_FILE_MAX_CHARS
    assert "Shell19x11" in text  # the newest part is there
    assert "Shell0x0" not in text
    assert "earlier part(s) of this conversation dropped" in text


async def test_a_gotcha_met_before_the_final_fix_is_kept() -> None:
    seg = Seg()
    seg.user("The tests fail. Fix calc.add.")
    test = "python3 -m unittest discover -s tests -t ."
    _, first_out = seg.exec(
        test,
        1,
        "ImportError: Failed to import test module: test_ops\n"
        "ModuleNotFoundError: No module named 'calc.generated'\n",
    )
    gen_call, _ = seg.exec("python3 tools/gen.py", 0, "")
    seg.exec(test, 1, "FAIL: test_add (tests.test_ops.OpsTest.test_add)\nAssertionError: -1 != 5")
    seg.patch(PATCH.replace("src/invoice.py", "calc/ops.py"), "Updated calc/ops.py")
    seg.exec(test, 0, "OK")
    seg.final_output = "Done."

    result = await extract([seg.build()])

    fixes = [c for c in result.candidates if c.content.startswith("Symptom:")]
    gotcha = next(c for c in fixes if "calc.generated" in c.content)
    assert "`python3 tools/gen.py`" in gotcha.content
    assert gen_call in gotcha.sources and first_out in gotcha.sources
    final = next(c for c in fixes if "AssertionError: -1 != 5" in c.content)
    assert "calc/ops.py" in final.content


async def test_a_no_between_two_people_is_not_a_correction_of_the_agent() -> None:
    segment, _ = _chat(
        [
            "Melanie: We went camping in the mountains with the kids.",
            "Caroline: Oh nice, at the lake again?",
            "Melanie: No, not the lake; we took the kids to the mountains this time.",
        ]
    )

    result = await extract([segment])

    assert not any(c.key.startswith("correction") for c in result.candidates)
    assert any("mountains this time" in c.content for c in result.candidates)


async def test_an_answer_is_kept_with_the_question_it_answers() -> None:
    segment, ids = _chat(
        [
            "Jon: How did the race go? When was it?",
            "Gina: Last Saturday, at the harbour.",
        ]
    )

    result = await extract([segment])

    (fact,) = [c for c in result.candidates if c.sources[0] == ids[1]]
    assert fact.sources == [ids[1], ids[0]]  # it quotes the question: it rests on it too
    assert fact.content.startswith("Gina (8 May 2023): Last Saturday")
    assert fact.content.endswith('(answering Jon\'s "When was it?")')
    assert "(the Saturday before 8 May 2023, 6 May 2023)" in fact.content


# --------------------------------------------------------------------- teaches nothing


async def test_an_acknowledgement_of_what_the_user_said_is_no_result() -> None:
    seg = Seg()
    seg.user("Releases are tagged vX.Y.Z, please keep that in mind for the changelog work.")
    seg.assistant("Noted: releases are tagged vX.Y.Z.")
    seg.final_output = "Noted: releases are tagged vX.Y.Z."

    result = await extract([seg.build()])

    assert [c for c in result.candidates if c.content.startswith("Result:")] == []


async def test_reading_memory_is_no_project_command_and_no_result() -> None:
    seg = Seg()
    seg.user("Run the check the way this project runs it.")
    seg.exec("grep -n -i 'test' memories/MEMORY.md", 0, "12:- **test-command** ...")
    seg.assistant("Ran the check the way memory says, all of it passes.")
    seg.final_output = "Ran the check the way memory says, all of it passes."

    result = await extract([seg.build()])

    assert result.candidates == []


async def test_reading_memory_is_not_listed_among_the_runs_commands() -> None:
    seg = Seg()
    seg.user("Add a regression test, then run the suite the way this project runs it.")
    seg.exec("grep -n -i 'test' memories/MEMORY.md", 0, "12:- **test-command** ...")
    seg.exec("cat memories/memory_summary.md | head -20", 0, "# Memory summary")
    seg.exec("python3 -m unittest discover -s tests -v", 0, "OK")

    result = await extract([seg.build()])

    assert "memories/" not in result.rollout_summary, result.rollout_summary
    assert "memories/" not in result.raw_memory, result.raw_memory
    assert "`python3 -m unittest discover -s tests -v`" in result.rollout_summary


def test_a_memory_read_is_evidence_of_nothing() -> None:
    from sandbox_memory.engines.base import Candidate
    from sandbox_memory.redact import Redactor
    from sandbox_memory.rules import ItemIndex, check_candidates

    seg = Seg()
    seg.user("Run the suite the way this project runs it.")
    call, out = seg.exec("grep -n -i 'test' memories/MEMORY.md", 0, "- **tc**: `make check`")
    index = ItemIndex.from_segments([seg.build()])
    learned = Candidate(key="tc", kind="procedure", content="Run `make check`.", sources=[call])
    seen = Candidate(key="tc2", kind="fact", content="The suite is `make check`.", sources=[out])

    accepted, rejected = check_candidates(
        [learned, seen], index=index, existing={}, redactor=Redactor(), log=False
    )

    assert accepted == []
    assert [r.key for r in rejected] == ["tc", "tc2"]


def test_which_commands_only_read_memory() -> None:
    from sandbox_memory.engines.commands import reads_memory

    assert reads_memory("grep -n -i 'test' memories/MEMORY.md")
    assert reads_memory("cat memories/rollout_summaries/fix-1_invoice.md")
    assert reads_memory("cd /work && sed -n 1,40p memories/memory_summary.md | head")
    assert reads_memory("ls memories/skills && cat memories/skills/test-command/SKILL.md")
    assert not reads_memory("echo '- **x**: y' >> memories/MEMORY.md")  # a live edit
    assert not reads_memory("sed -i '/x/d' memories/MEMORY.md")
    assert not reads_memory("grep -n test memories/MEMORY.md && python -m pytest -q")
    assert not reads_memory("cat src/invoice.py")


async def test_the_agents_account_of_a_fix_is_quoted_only_for_what_the_fix_does_not_say() -> None:
    seg = Seg()
    seg.user("The invoice tests fail. Find and fix the bug.")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    seg.assistant(
        "Fixed the bug in src/invoice.py: total() ignored each item's discount when summing "
        "prices; it now returns sum(i.price * (1 - i.discount) for i in items). "
        "`python -m pytest -q` failed before the fix and passes now."
    )

    result = await extract([seg.build()])

    [fix] = [c for c in result.candidates if c.content.startswith("Symptom:")]
    cause = fix.content.split("Cause (the agent's account): ", 1)[1]
    assert cause == "total() ignored each item's discount when summing prices.", fix.content


async def test_an_account_that_only_retells_the_fix_is_not_quoted() -> None:
    seg = Seg()
    seg.user("The invoice tests fail. Find and fix the bug.")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    seg.final_output = "Fixed src/invoice.py; `python -m pytest -q` passes now."

    result = await extract([seg.build()])

    [fact] = [c for c in result.candidates if c.kind == "fact"]
    assert "Cause" not in fact.content and "Result:" not in fact.content, fact.content


async def test_one_fix_run_yields_one_fact_with_its_result() -> None:
    seg = Seg()
    seg.user("The invoice tests fail. Find and fix the bug.")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.exec("cat src/invoice.py", 0, "def total(items): ...")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    seg.patch(
        "*** Begin Patch\n*** Add File: notes/repro.py\n+print(1)\n*** End Patch\n",
        "Created notes/repro.py",
    )
    seg.final_output = "Fixed the discount in total(): it was ignored; all tests pass now."

    result = await extract([seg.build()])

    facts = [c for c in result.candidates if c.kind == "fact"]
    assert len(facts) == 1, [c.key for c in facts]
    assert "src/invoice.py" in facts[0].content
    assert "Added: `notes/repro.py`" in facts[0].content
    assert "Changed: created" not in facts[0].content


# --------------------------------------------------------------------- one lesson, updated


def test_a_new_version_of_an_entry_keeps_the_sources_of_the_old_one() -> None:
    from sandbox_memory.engines.base import Candidate
    from sandbox_memory.rules import apply_to_conversation
    from sandbox_memory.stores.records import ConversationMemory, Source

    memory = ConversationMemory(rollout_id="conv")
    first = Candidate(
        key="test-command", content="Run the tests with `make test`.", sources=["a:1"]
    )
    apply_to_conversation(memory, [first.model_copy(update={"kind": "procedure"})], person=None)
    newer = Candidate(
        key="test-command", content="Run the tests with `make check`.", sources=["b:4"]
    )
    changed = apply_to_conversation(
        memory, [newer.model_copy(update={"kind": "procedure"})], person=None
    )

    assert changed == ["test-command"]
    entry = memory.entries["test-command"]
    assert entry.content == "Run the tests with `make check`."
    assert entry.sources == [
        Source(conversation="conv", item="a:1"),
        Source(conversation="conv", item="b:4"),
    ]
    assert memory.version == 2


def test_a_candidate_saying_what_a_known_entry_says_updates_it() -> None:
    from sandbox_memory.engines.base import Candidate
    from sandbox_memory.rules import one_entry_per_subject

    known = [
        KnownEntry(key="test-command", kind="procedure", content="Run the tests with `make check`.")
    ]
    proposed = Candidate(
        key="how-to-run-tests",
        kind="procedure",
        content="Run the tests with `make check` always.",
        sources=["s:2"],
    )

    [kept] = one_entry_per_subject([proposed], known)

    assert kept.key == "test-command"


def test_a_candidate_about_a_known_entrys_files_and_test_updates_it_whatever_it_says() -> None:
    from sandbox_memory.engines.base import Candidate, Subjects
    from sandbox_memory.rules import one_entry_per_subject

    about = Subjects(files=["acme/invoice.py"], tests=["tests/test_invoice.py::test_tax"])
    known = [
        KnownEntry(
            key="invoice-tax-rounding",
            kind="fact",
            content="Tax was added, not applied; fixed in invoice_total.",
            subjects=about,
        )
    ]
    # What a model might propose: other words, no path in the text, the same subject as fields.
    proposed = Candidate(
        key="tax-rate-bug",
        kind="fact",
        content="The rate is now multiplied in; rounding happens once at the end.",
        sources=["s:4"],
        subjects=about,
    )
    elsewhere = proposed.model_copy(
        update={
            "key": "tax-rate-other",
            "content": "Quotes round each line before the sum.",
            "subjects": Subjects(files=["acme/quote.py"]),
        }
    )

    kept = one_entry_per_subject([proposed, elsewhere], known)

    assert [c.key for c in kept] == ["invoice-tax-rounding", "tax-rate-other"]


def test_two_candidates_saying_the_same_become_one_and_two_facts_of_one_item_stay_two() -> None:
    from sandbox_memory.engines.base import Candidate
    from sandbox_memory.rules import one_entry_per_subject

    fix = Candidate(
        key="fix-invoice-tax", content="Fixed the invoice tax in `invoice.py`.", sources=["s:4"]
    )
    again = Candidate(
        key="invoice-tax-fix", content="Fixed the invoice tax in `invoice.py`!", sources=["s:5"]
    )
    other = Candidate(key="ci-runner", content="CI runs on runner-1.", sources=["s:4"])
    decision = Candidate(
        key="tag-releases", kind="decision", content="Fixed the invoice tax.", sources=["s:4"]
    )

    kept = one_entry_per_subject([fix, again, other, decision], [])

    assert [(c.key, c.kind) for c in kept] == [
        ("fix-invoice-tax", "fact"),
        ("ci-runner", "fact"),
        ("tag-releases", "decision"),
    ]
    assert kept[0].sources == ["s:4", "s:5"]


async def test_a_long_bug_report_is_summarised_into_the_lesson_not_quoted() -> None:
    report = (
        "Modeling's `separability_matrix` does not compute separability correctly for nested "
        "CompoundModels\n\nConsider the following model:\n\n```python\nfrom astropy.modeling "
        "import models as m\ncm = m.Linear1D(10) & m.Linear1D(5)\n```\n\nI would expect the "
        "outputs to stay separable, but when I nest it the matrix says otherwise. This is with "
        "v5.3 and was also mentioned in #5764. " + "Here is more of what I tried. " * 20
    )
    seg = Seg()
    user = seg.user(report)
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_separable.py::test_nested - assert")
    seg.patch(PATCH.replace("src/invoice.py", "astropy/modeling/separable.py"))
    seg.exec("python -m pytest -q", 0, "3 passed")

    result = await extract([seg.build()])

    facts = [c for c in result.candidates if c.kind == "fact"]
    assert len(facts) == 1, [c.content for c in facts]
    lesson = facts[0].content
    assert "astropy/modeling/separable.py" in lesson
    assert (
        "Reported by the user: Modeling's `separability_matrix` does not compute separability "
        "correctly for nested CompoundModels"
    ) in lesson
    for name in ("`v5.3`", "`#5764`"):
        assert name in lesson
    assert "Here is more of what I tried" not in lesson
    assert user in facts[0].sources


async def test_every_changed_file_is_named_before_any_detail() -> None:
    long_line = "    return " + " + ".join(f"value_{n} * weight_{n}" for n in range(12))
    paths = [f"pkg/module_{n}/implementation_{n}.py" for n in range(6)]
    patch = "*** Begin Patch\n" + "".join(
        f"*** Update File: {p}\n@@ def compute():\n-    return 0\n+{long_line}\n" for p in paths
    )
    patch += "*** End Patch\n"
    seg = Seg()
    seg.user("Make compute weigh its values")
    seg.patch(patch, "Updated files")

    result = await extract([seg.build()])

    [changes] = [c for c in result.candidates if c.kind == "fact"]
    for path in paths:
        assert f"`{path}`" in changes.content, changes.content


async def test_the_test_command_is_the_whole_suite_even_when_only_one_test_was_run() -> None:
    seg = Seg()
    seg.user("Fix the polytools bug")
    seg.exec("python -m pytest -q tests/polys/test_polytools.py::test_issue_13757", 0, "1 passed")

    result = await extract([seg.build()])

    [procedure] = [c for c in result.candidates if c.key == "test-command"]
    assert procedure.content.startswith("Run the tests with `python -m pytest -q` (add test ids")


async def test_a_command_run_again_in_a_later_conversation_is_no_new_entry(
    tmp_path: Any,
) -> None:
    from faultlib import runtime

    def run(task: str, call: str) -> dict[str, Any]:
        return run_payload(
            task,
            reply=None,
            when=None,
            items=exec_items(
                call,
                "python3 -m pytest -q",
                "Chunk ID: 1\nWall time: 0.1 seconds\n"
                "Process exited with code 0\nOutput:\n3 passed\n",
            ),
        )

    rt = runtime(tmp_path, engine="offline")
    await rt.record(run("Check the parser", "c1"), rollout_id="first")
    await rt.close()
    rt = runtime(tmp_path, engine="offline")
    await rt.record(run("Check the lexer", "c2"), rollout_id="second")
    await rt.close()

    first = json.loads((tmp_path / "memories/store/conversations/first.json").read_text())
    second = json.loads((tmp_path / "memories/store/conversations/second.json").read_text())
    assert "test-command" in first["entries"]
    assert "test-command" not in second["entries"]
    assert (
        "Run the tests with `python3 -m pytest -q`."
        in (tmp_path / "memories/MEMORY.md").read_text()
    )


async def test_a_fix_carries_its_files_commands_and_test_as_fields() -> None:
    seg = Seg()
    seg.user("Fix the invoice total")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.exec("cat src/invoice.py", 0, "def total(items): ...")
    seg.patch(PATCH)
    seg.patch(
        "*** Begin Patch\n*** Add File: tests/test_discount.py\n+def test_d(): ...\n*** End Patch\n",
        "Created tests/test_discount.py",
    )
    seg.exec("python -m pytest -q", 0, "4 passed")

    result = await extract([seg.build()])

    [fix] = [c for c in result.candidates if c.kind == "fact"]
    assert fix.subjects is not None
    assert fix.subjects.files == ["src/invoice.py"]  # not the file only read, nor one created
    assert fix.subjects.commands == ["python -m pytest -q"]
    assert fix.subjects.tests == ["tests/test_invoice.py::test_total"]
    [procedure] = [c for c in result.candidates if c.kind == "procedure"]
    assert procedure.subjects is not None and procedure.subjects.commands == ["python -m pytest -q"]


async def test_the_first_message_of_a_conversation_corrects_nothing() -> None:
    from sandbox_memory.engines.base import ExtractionRequest
    from sandbox_memory.engines.offline import extract_offline

    seg = Seg()
    seg.user("[Bug]: the offset text is colored by tick.color instead of tick.labelcolor")
    segment = seg.build()
    reply = Seg("e5f6a7b8")
    reply.user("Use the labelcolor setting instead.")

    new = extract_offline(ExtractionRequest(rollout_id="r", segments=[segment]))
    later = extract_offline(
        ExtractionRequest(rollout_id="r", segments=[reply.build()], continues_rollout=True)
    )

    assert "correction" not in new.raw_memory
    assert "user correction: Use the labelcolor setting instead." in later.raw_memory
    assert "tick.labelcolor" not in "".join(
        line for line in later.raw_memory.splitlines() if "correction" in line
    )


async def test_a_change_to_many_files_names_every_path() -> None:
    paths = [f"sympy/polys/domains/module_number_{n}.py" for n in range(18)]
    patch = "*** Begin Patch\n" + "".join(
        f"*** Update File: {p}\n@@ def f():\n-    return False\n+    return NotImplemented\n"
        for p in paths
    )
    seg = Seg()
    seg.user("Return NotImplemented, not False, upon rich comparison with unknown type")
    seg.patch(patch + "*** End Patch\n", "Updated files")

    result = await extract([seg.build()])

    [changes] = [c for c in result.candidates if c.kind == "fact"]
    for path in paths:
        assert f"`{path}`" in changes.content, path


async def test_a_decision_that_corrects_the_agent_is_one_decision() -> None:
    first = Seg("seg00001")
    first.user("Set up the package manager")
    first.exec("npm install", 0, "added 3 packages")
    second = Seg("seg00002")
    second.user("No, we decided to use pnpm instead.")

    result = await extract([first.build(), second.build()])

    decisions = [c for c in result.candidates if c.kind == "decision"]
    assert len(decisions) == 1, decisions


async def test_commands_named_in_a_bug_report_are_not_the_projects_procedures() -> None:
    report = (
        "`pytest --pdb` runs tearDown of skipped classes\n\n"
        "Running `pytest --pdb` will run the `tearDown()` of `unittest.TestCase` classes that "
        "are skipped. I'm trying to run pytest with a test file, for example:\n\n```python\n"
        "import unittest\n```\n\nAfter changing this, run `tox -e linting,py37`, pass all the "
        "tests and resolve this issue. " + "More details of the environment follow. " * 12
    )
    seg = Seg()
    seg.user(report)
    seg.exec("python -m pytest -q testing/test_unittest.py::test_pdb", 0, "1 passed")

    result = await extract([seg.build()])

    [procedure] = [c for c in result.candidates if c.kind == "procedure"]
    assert procedure.key == "test-command"
    assert procedure.content.startswith("Run the tests with `python -m pytest -q`")


async def test_two_preferences_in_one_message_are_one_entry() -> None:
    segment, ids = _chat(["Audrey: I love cooking! My favorite recipe is Chicken Pot Pie."])

    result = await extract([segment])

    [preference] = [c for c in result.candidates if c.kind == "preference"]
    assert preference.content == (
        "Audrey's preference: I love cooking! My favorite recipe is Chicken Pot Pie."
    )
    assert preference.sources == [ids[0]]


async def test_a_report_the_result_already_names_is_not_repeated() -> None:
    report = "The invoice total ignores the discount\n\n" + "Steps and details follow. " * 12
    seg = Seg()
    seg.user(report)
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    seg.assistant("Fixed: the invoice total ignores the discount; `total` applies it now.")
    seg.final_output = "Fixed: the invoice total ignores the discount; `total` applies it now."

    result = await extract([seg.build()])

    [lesson] = [c for c in result.candidates if c.kind == "fact"]
    assert lesson.content.lower().count("the invoice total ignores the discount") == 1, lesson


async def test_a_new_version_that_says_otherwise_supersedes_the_old_one_in_the_log(
    tmp_path: Any,
) -> None:
    from faultlib import runtime

    def run(cmd: str, call: str) -> dict[str, Any]:
        return run_payload(
            "Run the checks",
            reply=None,
            when=None,
            items=exec_items(
                call,
                cmd,
                "Chunk ID: 1\nWall time: 0.1 seconds\n"
                "Process exited with code 0\nOutput:\n3 passed\n",
            ),
        )

    rt = runtime(tmp_path, engine="offline")
    await rt.record(run("make test", "c1"), rollout_id="ops")
    await rt.close()
    rt = runtime(tmp_path, engine="offline")
    await rt.record(run("make check", "c2"), rollout_id="ops")
    await rt.close()

    log = [json.loads(line) for line in (tmp_path / "memories/store/log.jsonl").open()]
    [line] = [r for r in log if r["detail"] and "superseded" in r["detail"]]
    assert line["keys"] == ["test-command"] and line["scope"] == "conversation:ops"
    assert "test-command superseded (was: Run the tests with `make test`.)" in line["detail"]
    entry = json.loads((tmp_path / "memories/store/conversations/ops.json").read_text())["entries"][
        "test-command"
    ]
    assert entry["content"] == "Run the tests with `make check`."
    assert len(entry["sources"]) == 4  # both runs' call and output


# --------------------------------------------------------------------- keys and subjects


async def test_a_fix_is_named_for_its_file_and_failure_and_changes_for_their_files() -> None:
    seg = Seg()
    seg.user("Please look into the ticket about totals being off for customers")
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    other = Seg(segment_id="b2c3d4e5")
    other.user("Add a regression test for the ticket about totals")
    other.patch(
        "*** Begin Patch\n*** Add File: tests/test_total_regression.py\n+def test_r(): ...\n"
        "*** End Patch\n",
        "Created tests/test_total_regression.py",
    )

    fixed = await extract([seg.build()])
    added = await extract([other.build()])

    [fix] = [c for c in fixed.candidates if c.kind == "fact"]
    assert fix.key == "invoice-total"  # src/invoice.py, test_total: no word of the task
    [changes] = [c for c in added.candidates if c.kind == "fact"]
    assert changes.key == "test-total-regression"
    assert "ticket" not in fix.key + changes.key


def test_keys_come_from_file_names_and_failures() -> None:
    from sandbox_memory.engines.offline.keys import changes_key, file_name_words, fix_key

    assert file_name_words("acme_billing/invoice.py") == ["invoice"]
    assert file_name_words("pkg/billing/__init__.py") == ["billing"]
    assert file_name_words("src/TaxRate.ts") == ["tax", "rate"]
    # The module, not its test, names a fix that changed both.
    assert fix_key(["tests/test_parser.py", "lib/parser.py"], ["parser", "empty", "line"]) == (
        "parser-empty-line"
    )
    assert fix_key([], ["module", "not", "found"]) == "module-not-found"  # a command fixed it
    assert fix_key(["lib/parser.py"], []) == "parser-fix"
    assert changes_key(["docs/usage.md", "src/cli.py"]) == "usage-cli"


async def _fix_of_test_total(task: str, known: list[KnownEntry]) -> str:
    """The key the offline engine gives a run fixing ``tests/test_invoice.py::test_total`` by
    a patch of ``src/invoice.py``, with ``known`` entries in memory."""

    seg = Seg()
    seg.user(task)
    seg.exec("python -m pytest -q", 1, "FAILED tests/test_invoice.py::test_total - AssertionError")
    seg.patch(PATCH)
    seg.exec("python -m pytest -q", 0, "3 passed")
    result = await extract([seg.build()], known)
    [fix] = [c for c in result.candidates if c.kind == "fact"]
    return fix.key


async def test_new_evidence_about_a_known_subject_updates_its_entry_whatever_its_key() -> None:
    from sandbox_memory.engines.base import Subjects

    known = [
        KnownEntry(
            key="fix-totals-were-wrong",
            kind="fact",
            content="Symptom: the total test failed. Fix: changed src/invoice.py.",
            subjects=Subjects(
                files=["src/invoice.py"], tests=["tests/test_invoice.py::test_total"]
            ),
        )
    ]
    # The same test failing in the same file, whatever the words of the task.
    assert await _fix_of_test_total("The totals are wrong again", known) == "fix-totals-were-wrong"


async def test_a_file_of_the_same_name_in_another_folder_is_another_subject() -> None:
    from sandbox_memory.engines.base import Subjects

    known = [
        KnownEntry(
            key="invoice-total",
            kind="fact",
            content="Symptom: `lib/invoice.py` total was off.",
            subjects=Subjects(files=["lib/invoice.py"], tests=["tests/test_lib.py::test_sum"]),
        )
    ]
    assert await _fix_of_test_total("Fix the invoice total", known) == "src-invoice-total"


def _fix_run(test: str, error: str, function: str, patch_line: str, call: str) -> dict[str, Any]:
    """A recorded run: ``test`` fails with ``error``, ``function`` of ``src/invoice.py`` is
    patched, the tests pass."""

    def output(code: int, text: str) -> str:
        return (
            f"Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code {code}\nOutput:\n{text}"
        )

    patch = (
        f"*** Begin Patch\n*** Update File: src/invoice.py\n@@ def {function}(items):\n"
        f"-    return 0\n+    {patch_line}\n*** End Patch\n"
    )
    return run_payload(
        "The invoice tests fail; fix them.",
        reply=None,
        when=None,
        items=[
            *exec_items(
                f"{call}-1",
                "python -m pytest -q",
                output(1, f"FAILED tests/test_invoice.py::{test} - {error}"),
            ),
            {"type": "custom_tool_call", "name": "apply_patch", "input": patch, "call_id": call},
            {
                "type": "custom_tool_call_output",
                "call_id": call,
                "output": "Updated src/invoice.py",
            },
            *exec_items(f"{call}-2", "python -m pytest -q", output(0, "3 passed")),
        ],
    )


async def test_a_files_history_of_fixes_is_one_entry_per_fix_findable_by_path(
    tmp_path: Any,
) -> None:
    from faultlib import runtime
    from sandbox_memory import MemoryClient

    runs = [
        ("first", "test_total", "AssertionError: 0 != 30", "total", "return sum(prices)"),
        (
            "second",
            "test_discount",
            "TypeError: unsupported operand type(s) for *: 'NoneType' and 'float'",
            "discounted",
            "rate = customer.rate or 0.0",
        ),
        (
            "third",
            "test_total",
            "AssertionError: 30.000000004 != 30.0",
            "total",
            "return round(x, 2)",
        ),
    ]
    for name, test, error, function, line in runs:
        rt = runtime(tmp_path, engine="offline")
        await rt.record(_fix_run(test, error, function, line, f"c-{name}"), rollout_id=name)
        await rt.close()

    md = (tmp_path / "memories/MEMORY.md").read_text()
    fixes = {
        m.group(1): m.group(2) for m in re.finditer(r"^- \*\*([^*]+)\*\* \(fact\): (.*)$", md, re.M)
    }
    # The third run's failure is the first's subject: an update of that entry, not a third one.
    assert sorted(fixes) == ["invoice-discount", "invoice-total"]
    assert "round(" in fixes["invoice-total"]
    assert "## Files\n\n- `src/invoice.py`: invoice-total, invoice-discount\n" in md
    hits = await MemoryClient(tmp_path).search("src/invoice.py", limit=10)
    assert {"invoice-total", "invoice-discount"} <= {h.key for h in hits if h.kind == "entry"}


def test_the_model_is_shown_what_each_known_entry_is_about() -> None:
    from sandbox_memory.engines.base import ExtractionRequest, Subjects
    from sandbox_memory.engines.model import build_user_message

    seg = Seg()
    seg.user("The invoice totals are off again")
    about = Subjects(files=["src/invoice.py"], tests=["tests/test_invoice.py::test_total"])
    known = [
        KnownEntry(key="invoice-total", kind="fact", content="Total fixed.", subjects=about),
        KnownEntry(key="test-command", kind="procedure", content="Run `make check`."),
    ]

    message = build_user_message(
        ExtractionRequest(rollout_id="conv-1", segments=[seg.build()], known_entries=known)
    )

    listed = json.loads(message.split("Known entries", 1)[1].split(":\n", 1)[1].split("\n\n")[0])
    by_key = {item["key"]: item for item in listed}
    assert by_key["invoice-total"]["subjects"] == {
        "files": ["src/invoice.py"],
        "tests": ["tests/test_invoice.py::test_total"],
    }
    assert "subjects" not in by_key["test-command"]  # nothing to say: no noise
