"""What kind of statement a sentence is, decided by what it says rather than its first word.

A person's sentence becomes a *procedure* when it says how a piece of work is done and names
the command or tool that does it ("Always run the tests with `make check`", "Run ruff before
committing", "We run the check with `python3 -c ...`"); a *decision* when a group (or the
speaker on its behalf) settles how things will be from now on ("We decided to tag releases as
vX.Y.Z", "Let's go with Postgres", "Releases ship on Tuesdays from now on, we agreed"); a
*preference* when the speaker says what they like or want done their way ("I prefer tabs",
"Never push directly to main", "Please use pnpm"); anything else is not a statement of these
three kinds (it may still be a fact, see :mod:`sandbox_memory.engines.conversation`).

Order matters only where two readings meet, and then meaning decides: a sentence naming a
command to run is a procedure even when it also says "always"; "we decided" is a decision even
when it also says "from now on"; a first-person feeling ("I prefer running `pytest -x`") is a
preference even when it names a command. Deterministic and linear in the sentence.
"""

from __future__ import annotations

import re
from typing import Literal

StatementKind = Literal["procedure", "decision", "preference"]

_CODE_SPAN_RE = re.compile(r"`([^`]+)`")

_FEELING_RE = re.compile(
    r"(?<!what )(?<!which )(?<!that )"
    r"\bi\s+(?:really\s+|strongly\s+|generally\s+|usually\s+|much\s+|do\s+|also\s+|still\s+)?"
    r"(?:prefer|like|love|enjoy|hate|dislike|don't like|do not like|can't stand|cannot stand)\b"
    r"(?!\s+(?:it|this|that|how|when|what|you|your|yours|the way|seeing|hearing)\b)"
    r"|\bmy\s+(?:preference|favou?rite)\b|\bi(?:'d| would) (?:rather|prefer)\b"
)
"""The speaker says how they feel about something in general: a preference whatever it names.
Not a reaction to what is in front of them ("I love it", "I love how you paint", "I love that
it teaches me ..."), not a relative clause ("... to do what I love"), not a request ("I'd like
you to ...")."""

_WORK_VERBS = (
    r"(?:deploy|release|ship|merge|push|commit|squash|rebase|tag|version|review|pin|vendor"
    r"|force-push|amend|bump|publish)"
    r"(?!\s+(?:(?:through|forward|ahead|along|up|it|out|yourself|ourselves|myself|each other"
    r"|to (?:it|each|one|you|me|us|this|that|him|her|them))\b|on\s*[!.,]?$))"
)
"""Verbs of a project's own work: "we never deploy on Fridays" and "don't force-push" settle
how the work is done; "we never go out" or "don't worry" do not."""

_SETTLED_RE = re.compile(
    r"\bwe(?:'ve| have)?\s+(?:all\s+)?(?:decided|agreed|chose|chosen|settled on|standardi[sz]ed"
    r"|opted (?:for|to))\b"
    r"|\b(?:it was|it's been|it has been|it is|it's)\s+(?:decided|agreed)\b"
    r"|\b(?:the|our)\s+(?:team|group)\s+(?:decided|agreed|chose)\b"
    r"|\bthe decision (?:is|was)\b|^decision:\s"
)
"""A group says it settled something ("we decided", "it was agreed"): a decision, even when
what was settled is how to run a command."""

_GROUP_SETTLED_RE = re.compile(
    r"\blet'?s\s+(?:go with|use|stick with|switch to|move to)\b"
    r"|\bwe(?:'ll| will| are going to|'re going to| shall)\s+"
    r"(?:use|go with|switch to|stick with|move to|adopt|standardi[sz]e on|keep(?!\s+\w+ing\b)"
    r"|" + _WORK_VERBS + r")\b"
    r"|\bwe\s+(?:always|never|only|don't|do not|no longer)\s+" + _WORK_VERBS + r"\b"
    r"|\bwe(?:'re| are)\s+going with\b"
    r"|\bwe\s+(?:now\s+|always\s+|still\s+|currently\s+|only\s+)?"
    r"(?:use|are using|standardi[sz]ed on|rely on)\b"
    r"|\bwe're\s+(?:now\s+|still\s+)?using\b"
)
"""A group settles how things are done: a decision (the speaker may say it for the team)."""

_RULE_RE = re.compile(
    r"\b(?:from now on|going forward|henceforth|from today|starting (?:today|now|next \w+))\b"
)
"""A rule for the future without a group verb ("Releases ship on Tuesdays from now on")."""

_NOT_A_VERB = (
    r"(?:had|has|have|been|was|were|is|are|did|got|thought|knew|saw|went|felt|here|there|a|an"
    r"|the|so|too|that|this|my|your|his|her|our|their|ever|in|on|at|for|with|\w+ed)\b"
)
"""What follows "always" or "never" in a statement about the past or a state ("Never had a
chance", "always here to help"), not an instruction ("Never push", "Always keep ...")."""

_WANT_RE = re.compile(
    r"^(?:please\s+)?(?:always|never)\b(?!\s+" + _NOT_A_VERB + r")"
    r"|\bplease\s+(?:always\s+|never\s+)?(?:use|avoid|prefer|stick (?:to|with)|keep using)\b"
    r"|^(?:please\s+)?(?:don't|do not)\s+(?:ever\s+)?(?:use|add|write|put|touch|"
    + _WORK_VERBS
    + r")\b"
    r"|^stick (?:to|with)\s+(?!it\b|that\b|this\b|them\b|your\b|what\b)"
)
"""The speaker tells how they want things done ("Always ...", "Never ...", "Please use ...")."""

_RUN_VERB_RE = re.compile(
    r"\b(?:run|runs|ran|running|execute|executes|invoke|invokes|call|calls)\s+"
    r"(?:the\s+|a\s+|our\s+|your\s+)?"
)
_HOW_VERBS = (
    r"(?:run|use|execute|invoke|type|call|install|build|deploy|test|lint|format|regenerate"
    r"|generate|start|activate|source|export|bump|type-check|typecheck|check)"
)

_INSTRUCTION_RE = re.compile(
    r"^(?:(?:please|always|never|first|then|also|and|just|now|make sure(?: to| you)?"
    r"|be sure(?: to)?|remember to|don't forget to|do not forget to)\s+|,\s*)*"
    r"(?:(?:to|before|after|prior to)\s+[^,]{1,60},\s*)?"
    r"(?:(?:please|always|first|then|just)\s+)*" + _HOW_VERBS + r"\b"
)
"""An instruction: the sentence starts with a verb of doing the work ("Run ruff before
committing", "Always run the tests with ...", "To deploy, run ...", "Before running the
tests, run ...")."""

_PRACTICE_RE = re.compile(
    r"\b(?:we|you|one)\s+(?:always\s+|usually\s+|normally\s+|typically\s+|just\s+|can\s+"
    r"|should\s+|must\s+|need to\s+|have to\s+)*" + _HOW_VERBS + r"\b"
    r"|\bi\s+(?:always|usually|normally|typically)\s+" + _HOW_VERBS + r"\b"
    r"|\b(?:runs|builds|installs|deploys|(?:is|are|should be|must be|need to be|have to be|gets?)"
    r"\s+(?:run|built|installed|deployed|checked|tested))\s+(?:with|via|using|by)\b"
    r"|^\S+\s+by\s+running\b"
)
"""A stated practice: how the project's people do it ("We run the migrations with ...",
"You can install it with ...", "The suite runs with ..."), not what someone tried or saw
("I'm trying to run ...", "when running ... it fails", "Running X will run Y")."""

_TOOL_WORD_RE = re.compile(
    r"^(?:\S*/)?(?:make|pytest|py\.test|tox|nox|ruff|black|flake8|pylint|mypy|pyright|tsc|eslint"
    r"|prettier|jest|vitest|mocha|cargo|go|npm|pnpm|yarn|bun|npx|uv|poetry|pip3?|pre-commit"
    r"|python[\d.]*|node|deno|gradle|gradlew|mvn|mvnw|dotnet|bundle|rake|rspec|phpunit|mix"
    r"|docker|kubectl|terraform|alembic|bazel|cmake|ctest|just|bash|sh|\./\S+)\b"
)
"""Programs whose name after "run" makes a sentence name a command ("run ruff before ...")."""


def _names_command(low: str, original: str) -> bool:
    """Whether the sentence names a command: a code span, or a program right after a run verb
    ("run ruff", "run `make check`", "execute ./deploy.sh")."""

    for span in _CODE_SPAN_RE.findall(original):
        words = span.split()
        if len(words) > 1 or (words and _TOOL_WORD_RE.match(words[0].lower())):
            return True
    for match in _RUN_VERB_RE.finditer(low):
        rest = low[match.end() :].lstrip()
        if _TOOL_WORD_RE.match(rest):
            return True
        # "run the tests with make check": the program follows "with" / "via" / "using"
        tail = re.search(r"\b(?:with|via|using)\s+(\S.*)$", rest)
        if tail and _TOOL_WORD_RE.match(tail.group(1).strip("'\"")):
            return True
    with_tool = re.search(r"\b(?:with|via|using)\s+(\S.*)$", low)
    return bool(
        with_tool
        and _TOOL_WORD_RE.match(with_tool.group(1).strip("'\""))
        and re.search(r"\b(?:tests?|checks?|lint|build|deploy|install|format)\b", low)
    )


def statement_kind(sentence: str) -> StatementKind | None:
    """``procedure``, ``decision`` or ``preference`` by what ``sentence`` says, else None.

    Questions state nothing. The sentence is read lowercased with curly quotes made plain and
    openers ("And", "Also", "No,", "Actually") ignored for the lead-word rules."""

    text = sentence.strip()
    if not text or text.endswith("?"):
        return None
    low = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    body = _OPENERS_RE.sub("", low)
    if _FEELING_RE.search(body):
        return "preference"
    if _SETTLED_RE.search(body):
        return "decision"
    if _names_command(body, text) and (_INSTRUCTION_RE.search(body) or _PRACTICE_RE.search(body)):
        return "procedure"
    if _GROUP_SETTLED_RE.search(body) or _RULE_RE.search(body) and _WE_RE.search(body):
        return "decision"
    if _WANT_RE.search(body) or _RULE_RE.search(body):
        return "preference" if _addresses_agent(body) else "decision"
    return None


_OPENERS_RE = re.compile(
    r"^(?:(?:and|also|but|so|oh|ok|okay|btw|by the way|generally|in general|hey|fyi|actually"
    r"|no|nope|instead|wait|rather|one more thing|oh and|note)\b[,:;.!-]?\s+)+"
)
_WE_RE = re.compile(r"\b(?:we|we're|we've|we'll|our|us|the team)\b")
_THIRD_PARTY_RULE_RE = re.compile(
    r"^(?:[a-z][\w-]*\s+){0,3}(?:ship|ships|are|is|go|goes|happen|happens|run|runs|get|gets"
    r"|must|should|will|need|needs|require|requires|stay|stays|live|lives|follow|follows)\b"
)


def _addresses_agent(body: str) -> bool:
    """A want about how the agent works ("never push to main", "from now on, write docstrings
    ...") is a preference; a rule about the project's own things ("releases ship on Tuesdays
    from now on") is a decision."""

    stripped = _RULE_RE.sub("", body).strip(" ,;:-")
    stripped = re.sub(r"^(?:please\s+)?(?:always|never)\s+", "", stripped)
    return not _THIRD_PARTY_RULE_RE.match(stripped) or bool(
        re.match(r"^(?:please\s+)?(?:always|never|don't|do not)\b", body)
    )


__all__ = ["StatementKind", "statement_kind"]
