"""One pass over the items of a rollout's new segments, collecting what extraction needs
(:class:`Rollout`): requests and statements, commands and their outputs, patches and writes,
outcomes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

from sandbox_memory.engines.base import tool_text_as_data
from sandbox_memory.engines.changes import (
    FileChange,
    applies_patch,
    describe_write,
    heredocs,
    parse_patch,
    patch_file_argument,
    write_target,
)
from sandbox_memory.engines.commands import (
    COMMAND_SCAN_CHARS,
    SHELL_TOOL_NAMES,
    command_segments,
    reads_memory,
    strip_heredocs,
)
from sandbox_memory.engines.conversation import (
    MIN_FACT_WORDS,
    addresses_listener,
    condense,
    is_first_person,
    only_reacts,
    split_speaker,
    states_a_fact,
    tighten,
)
from sandbox_memory.engines.dates import format_day, resolve_relative_dates, run_date
from sandbox_memory.engines.kinds import statement_kind
from sandbox_memory.engines.text import shorten
from sandbox_memory.engines.transcript import (
    final_output_text,
    function_arguments,
    item_text,
    one_line,
    output_call_id,
    output_exit_code,
    parse_exec_output,
    segment_id_of,
    segment_items,
    shell_commands,
)

from .failures import error_line, failure_subject
from .limits import (
    ERROR_LINE_CHARS,
    MAX_FILES_NAMED,
    SAID_SUMMARY_CHARS,
    TASK_CHARS,
    USER_SCAN_CHARS,
)
from .patches import (
    operation_changes,
    operation_files,
    patch_files,
    patch_input_changes,
    patch_input_files,
)
from .records import Capped, Command, Patch, Said, Statement, speaker_name
from .shell import command_category, program_of, quote_cmd, shell_written_files, signature_of
from .words import informative, is_we, sentences

OUTPUT_SCAN_CHARS = 64_000
"""Characters of a failing tool output searched for its error line (head + tail).

Test runners print their failure summary at the end and tracebacks are short; 64 KB of head
and tail covers both while a 5 MB output still costs only a bounded scan."""

ASSISTANT_TEXT_CHARS = 2_000
"""Characters kept of a segment's last assistant message (used to describe a fix)."""

STATEMENT_CHARS = 300
"""Characters of a user sentence quoted in a preference, decision or correction."""

FINAL_OUTPUT_CHARS = 500
"""Characters of the final output quoted in the summary's outcome."""

PATCH_RESULT_CHARS = 400
"""Characters of an ``apply_patch`` result read to tell success from failure."""

CONVERSATION_MIN_MESSAGES = 3
"""User messages without any tool call that make a run a conversation rather than a task:
its summary then lists what was said instead of a task and its commands."""

REPORT_MESSAGE_CHARS = 800
"""A user message longer than this (or holding a fenced block) is a report or pasted material:
the sentences in it ("After changing this, run `tox -e linting`", a template's checklist) are
not the user's preferences, decisions or procedures for this project."""

MAX_READ_CHARS = 200_000
"""Characters of a file the run printed (``cat f``) kept to compare with a later rewrite."""

MAX_EVENTS_HEAD = 15
"""Events kept from the start of the rollout for the summary's "What happened"."""

MAX_EVENTS_TAIL = 25
"""Events kept from the end of the rollout for "What happened" (the end matters more)."""

QUESTION_CHARS = 120
"""Characters of the question a statement answers read for its topic (whole words)."""


_CAT_READ_RE = re.compile(r"^cat\s+(?:--\s+)?([^\s;&|<>*?]+)\s*$")


_LEAD_WORDS_RE = re.compile(
    r"^(?:(?:and|also|but|so|oh|ok|okay|btw|by the way|generally|in general|hey|fyi|actually"
    r"|no|nope|instead|wait|rather)\b[,:;.!-]?\s+)+"
)


_CORRECTION_RE = re.compile(
    r"^no(?:pe)?\s*[,.!:;-]|^no\s+(?:that|this|it|you|we|don't|not|use|wait|stop)\b"
    r"|^actually\b|^(?:don't|do not|dont)\b|\binstead\b(?!\s+of\b)|^not\s+(?:that|this|quite)\b"
    r"|^(?:that's|that is|this is|it's|it is)\s+(?:wrong|not right|incorrect|not what)\b"
    r"|^(?:wrong|incorrect)\b|^(?:stop|undo|revert)\b|\bi (?:said|meant|told you)\b"
)
"""User sentences correcting the agent ("no, ...", "actually ...", "don't ...", "instead ...")."""


def _question_of(text: str, who: str, item_id: str) -> tuple[str, str, str] | None:
    """``(who, last sentence, item id)`` when a message ends with a question, else None."""

    last = ""
    for sentence in sentences(text[-ASSISTANT_TEXT_CHARS:]):
        last = sentence
    if not last.endswith("?"):
        return None
    question = shorten(split_speaker(last).text, QUESTION_CHARS)
    return (who, question, item_id) if question else None


def _normalize_for_match(sentence: str) -> tuple[str, str]:
    """``(lowercased sentence, same without openers like "and", "actually", "no,")``: a
    correction is recognised by its opener, a preference or decision by what follows it."""

    low = sentence.lower().replace("\u2019", "'").replace("\u2018", "'")
    return low, _LEAD_WORDS_RE.sub("", low)


class Rollout:
    """One pass over the items of the new segments, collecting what extraction needs."""

    def __init__(self, segments: Sequence[Mapping[str, Any]], *, continues: bool = False) -> None:
        self.segment_ids: list[str] = []
        self.item_count = 0
        self.task: tuple[str, str] | None = None
        self.task_text: str | None = None
        """The first request, as scanned (a bug report, a task), for its summary."""
        self.follow_ups: list[tuple[str, str]] = []
        self.statements: list[Statement] = []
        self.commands: list[Command] = []
        self.finished: list[Command] = []
        self.patches: list[Patch] = []
        self.events = Capped(MAX_EVENTS_HEAD, MAX_EVENTS_TAIL)
        self.last_assistant: dict[int, tuple[int, str, str]] = {}
        self.outcomes: list[tuple[str, str, str]] = []
        """``(segment id, terminal state text, final output)`` per segment."""
        self.final_outputs: dict[int, str] = {}
        self.people: dict[str, None] = {}
        self.said: list[Said] = []
        self.speakers: dict[str, None] = {}
        self.user_messages = 0
        self.requests: dict[int, tuple[str, str]] = {}
        """Last user message of each segment: ``(item id, text)``, the request it answers."""
        self.dates: dict[str, None] = {}
        self.reads: dict[str, str] = {}
        """Files the run printed whole (``cat f``), by path: the old text of a later rewrite."""
        self.written: dict[str, str] = {}
        """Text the run wrote to files through heredocs, by path (a patch file applied later)."""
        self._date: date | None = None
        self._person: str | None = None
        self._after_agent = False
        """Whether the agent spoke or acted since the last user message: only then can a user
        message correct it ("No, ..." between two people in a chat is no correction)."""
        self._asked: tuple[str, str, str] | None = None
        """``(who asked, question, item id)`` of the last message when it ended with one."""
        self._by_call: dict[str, Command | Patch] = {}
        self._stdin_sessions: dict[str, int] = {}
        self._sessions: dict[int, Command] = {}
        self._seen_user_texts: set[str] = set()
        self._seen_statements: set[tuple[str, str]] = set()
        self._continues = continues
        self._walk(segments)

    # ---- walking

    def _walk(self, segments: Sequence[Mapping[str, Any]]) -> None:
        position = -1
        for seg_index, segment in enumerate(segments):
            if not isinstance(segment, Mapping):
                continue
            seg_id = segment_id_of(segment, seg_index)
            self.segment_ids.append(seg_id)
            person = segment.get("person")
            self._person = person if isinstance(person, str) and person else None
            if self._person:
                self.people.setdefault(self._person, None)
            self._date = run_date(segment.get("updated_at"))
            # A run's first message follows the agent's last reply, unless nothing came before
            # it: the first message of a conversation corrects nothing.
            self._after_agent = seg_index > 0 or self._continues
            if self._date is not None:
                self.dates.setdefault(format_day(self._date), None)
            for item_id, item in segment_items(segment, seg_id):
                position += 1
                self.item_count += 1
                self._item(item_id, item, seg_index, position)
            self._outcome(segment, seg_id, seg_index)

    def _item(self, item_id: str, item: dict[str, Any], seg_index: int, position: int) -> None:
        item_type = item.get("type")
        role = item.get("role")
        if role != "user" and item_type not in (None, "message", "reasoning"):
            self._after_agent = True  # a tool call or result: the agent has acted
        if item_type == "memory_edit":
            return  # the person's own Remember/Forget: applied by code, not re-extracted
        if item_type in (None, "message") and isinstance(role, str):
            if role == "user":
                self._user(item_id, item, seg_index)
            elif role == "assistant":
                text = item_text(item, max_chars=ASSISTANT_TEXT_CHARS)
                if text:
                    self.last_assistant[seg_index] = (position, item_id, text)
                    self._asked = _question_of(text, "the agent", item_id)
                    self._after_agent = True
            return
        if item_type == "function_call":
            self._function_call(item_id, item, seg_index, position)
        elif item_type == "custom_tool_call":
            raw = item.get("input")
            if item.get("name") == "apply_patch" and isinstance(raw, str):
                self._patch(
                    item_id, item, patch_input_files(raw), position, patch_input_changes(raw)
                )
        elif item_type in ("shell_call", "local_shell_call"):
            commands = shell_commands(item)
            action = item.get("action")
            workdir = action.get("working_directory") if isinstance(action, Mapping) else None
            if commands:
                self._command(
                    item_id,
                    item,
                    " && ".join(commands),
                    workdir if isinstance(workdir, str) else None,
                    seg_index,
                    position,
                )
        elif item_type == "apply_patch_call":
            operation = item.get("operation")
            self._patch(
                item_id,
                item,
                operation_files(operation),
                position,
                operation_changes(operation),
            )
        elif item_type in (
            "function_call_output",
            "custom_tool_call_output",
            "shell_call_output",
            "local_shell_call_output",
            "apply_patch_call_output",
        ):
            self._output(item_id, item, position)

    def _user(self, item_id: str, item: Mapping[str, Any], seg_index: int) -> None:
        raw_text = item_text(item, max_chars=USER_SCAN_CHARS)
        if not raw_text:
            return
        line = one_line(raw_text, TASK_CHARS)
        if line in self._seen_user_texts:
            return  # history repeated in a later segment's input
        self._seen_user_texts.add(line)
        self.user_messages += 1
        self.requests[seg_index] = (item_id, raw_text)
        turn = split_speaker(raw_text)
        speaker = turn.speaker or self._person
        if turn.speaker:
            self.speakers.setdefault(turn.speaker, None)
        text = turn.text
        # A report or pasted material (an issue with its template, a log): what it says is
        # summarised with the work, not filed as the user's own preferences or procedures.
        reported = len(text) > REPORT_MESSAGE_CHARS or "```" in text
        if self.task is None:
            self.task = (item_id, line)
            self.task_text = raw_text
        else:
            self.follow_ups.append((item_id, line))
        who = "user" if speaker is None else speaker
        asked = self._asked if self._asked and self._asked[0] != speaker_name(speaker) else None
        self._asked = _question_of(text, speaker_name(speaker), item_id)
        minimum = 1 if asked else MIN_FACT_WORDS  # an answer may be short: its question says
        may_correct = self._after_agent
        self._after_agent = False
        stated: list[str] = []
        owned = False
        noted = False
        for sentence in sentences(text):
            if sentence.endswith("?"):
                continue  # a question states nothing
            low, _body = _normalize_for_match(sentence)
            quoted = shorten(resolve_relative_dates(sentence, self._date), STATEMENT_CHARS)
            if not quoted:
                continue
            kinds: list[str] = []
            stated_kind = None if reported else statement_kind(sentence)
            if stated_kind is not None:
                kinds.append(stated_kind)
            if (
                may_correct
                and not reported
                and _CORRECTION_RE.search(low)
                and stated_kind != "decision"
            ):
                kinds.append("correction")  # (a decision that corrects is one decision)
            for kind in kinds:
                if (kind, quoted) in self._seen_statements:
                    continue
                self._seen_statements.add((kind, quoted))
                self.statements.append(
                    Statement(
                        item_id=item_id,
                        text=quoted,
                        kind=kind,
                        speaker=speaker,
                        personal=is_first_person(sentence),
                    )
                )
                self.events.add(f"- {who} {kind}: {quoted} [{item_id}]")
                noted = True
            names = frozenset(w.lower() for n in self.speakers for w in n.split())
            if (
                not kinds
                and states_a_fact(sentence, min_words=minimum, names=names)
                and not addresses_listener(sentence)
                and not only_reacts(sentence, names=names)
            ):
                stated.append(resolve_relative_dates(tighten(condense(sentence)), self._date))
                owned = owned or is_first_person(sentence) or is_we(sentence)
        if stated:
            said = Said(
                item_id=item_id,
                speaker=speaker,
                said_on=self._date,
                text=" ".join(stated),
                personal=any(is_first_person(s) for s in stated),
                from_task=self.task[0] == item_id,
                owned=owned,
                asked=(
                    (asked[0], resolve_relative_dates(asked[1], self._date), asked[2])
                    if asked
                    else None
                ),
            )
            self.said.append(said)
            if not noted:
                self.events.add(f"- {who}: {shorten(said.text, SAID_SUMMARY_CHARS)} [{item_id}]")
        elif not noted and self.task[0] != item_id and informative(text, MIN_FACT_WORDS):
            self.events.add(f"- {who}: {shorten(line, SAID_SUMMARY_CHARS)} [{item_id}]")

    def _function_call(
        self, item_id: str, item: Mapping[str, Any], seg_index: int, position: int
    ) -> None:
        name = item.get("name")
        args = function_arguments(item)
        if name in SHELL_TOOL_NAMES:
            cmd = args.get("cmd", args.get("command"))
            if isinstance(cmd, list) and all(isinstance(c, str) for c in cmd):
                cmd = shlex.join(cmd)
            if isinstance(cmd, str) and cmd.strip():
                workdir = args.get("workdir", args.get("cwd"))
                workdir = workdir if isinstance(workdir, str) and workdir else None
                self._command(item_id, item, cmd, workdir, seg_index, position)
        elif name == "write_stdin":
            call_id = item.get("call_id")
            session = args.get("session_id")
            if isinstance(call_id, str) and isinstance(session, int):
                self._stdin_sessions[call_id] = session
        elif name == "apply_patch":
            ops = args.get("operations", args.get("operation"))
            files = operation_files(ops)
            changes = operation_changes(ops)
            for key in ("input", "patch", "diff"):
                value = args.get(key)
                if not files and isinstance(value, str):
                    files = patch_input_files(value)
                    changes = patch_input_changes(value)
            if not files and isinstance(item.get("arguments"), str):
                files = patch_files(str(item["arguments"]))
                changes = parse_patch(str(item["arguments"]))
            self._patch(item_id, item, files, position, changes)

    def _command(
        self,
        item_id: str,
        item: Mapping[str, Any],
        cmd: str,
        workdir: str | None,
        seg_index: int,
        position: int,
    ) -> None:
        if reads_memory(cmd):
            return  # the agent consulting memory: not one of the run's commands, nor evidence
        segments = command_segments(cmd)
        command = Command(
            call_item_id=item_id,
            cmd=cmd,
            workdir=workdir,
            position=position,
            segment_index=seg_index,
            category=command_category(cmd),
            signature=signature_of(segments, cmd),
            program=program_of(segments),
        )
        self.commands.append(command)
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            self._by_call[call_id] = command
        files, changes = self._shell_changes(cmd)
        if files:
            patch = Patch(item_id, files, position, changes=changes)
            self.patches.append(patch)
            if isinstance(call_id, str):
                self._by_call[f"shell-write:{call_id}"] = patch

    def _shell_changes(self, cmd: str) -> tuple[list[tuple[str, str]], dict[str, FileChange]]:
        """Files a shell command changes and how: patches it applies (a heredoc diff, or a
        patch file the run wrote), files it writes whole from a heredoc, ``sed -i`` ..."""

        changes: dict[str, FileChange] = {}
        applied_files: set[str] = set()
        for head, body in heredocs(cmd):
            if applies_patch(head):
                for change in parse_patch(body):
                    changes.setdefault(change.path, change)
                continue
            target = write_target(head)
            if target:
                self.written[target] = body[:MAX_READ_CHARS]
                changes[target] = describe_write(target, body, self.reads.get(target))
                self.reads[target] = body[:MAX_READ_CHARS]
        for line in strip_heredocs(cmd[:COMMAND_SCAN_CHARS]).split("\n"):
            if not applies_patch(line):
                continue
            argument = patch_file_argument(line)
            if argument and argument in self.written:
                applied_files.add(argument)
                for earlier in self.patches:  # the patch file itself was scratch, not a change
                    earlier.files = [(op, p) for op, p in earlier.files if p != argument]
                    earlier.changes.pop(argument, None)
                for change in parse_patch(self.written[argument]):
                    changes.setdefault(change.path, change)
        files = [("updated", f) for f in shell_written_files(cmd) if f not in changes]
        files += [(change.op, path) for path, change in changes.items()]
        files = [(op, path) for op, path in files if path not in applied_files]
        if applied_files:
            changes = {p: c for p, c in changes.items() if p not in applied_files}
        return list(dict.fromkeys(files)), changes

    def _patch(
        self,
        item_id: str,
        item: Mapping[str, Any],
        files: list[tuple[str, str]],
        position: int,
        changes: Sequence[FileChange] = (),
    ) -> None:
        patch = Patch(item_id, files, position, changes={c.path: c for c in changes})
        self.patches.append(patch)
        call_id = item.get("call_id")
        if isinstance(call_id, str):
            self._by_call[call_id] = patch

    def _output(self, item_id: str, item: Mapping[str, Any], position: int) -> None:
        call_id = output_call_id(item)
        if call_id is None:
            return
        target = self._by_call.get(call_id)
        if isinstance(target, Patch):
            self._patch_result(target, item_id, item)
            return
        output = item.get("output")
        exit_code = output_exit_code(item)
        session: int | None = None
        if isinstance(output, str):
            session = parse_exec_output(output).session_id
        if target is None and call_id in self._stdin_sessions:
            if exit_code is None:
                return  # the command is still running: wait for the output that ends it
            target = self._sessions.pop(self._stdin_sessions[call_id], None)
            if target is None:
                return
        if not isinstance(target, Command):
            return
        if session is not None and exit_code is None:
            self._sessions[session] = target
            target.output_item_id = item_id
            target.output_position = position
            return
        target.output_item_id = item_id
        target.output_position = position
        target.exit_code = exit_code
        if exit_code is None:
            return
        self.finished.append(target)
        shell_write = self._by_call.get(f"shell-write:{call_id}")
        if isinstance(shell_write, Patch):
            shell_write.ok = exit_code == 0
            shell_write.output_item_id = item_id
        if target.passed and target.program == "cat":
            read = _CAT_READ_RE.match(target.cmd.strip())
            if read:
                if isinstance(output, str):
                    body = parse_exec_output(output).body
                else:
                    body = item_text(item, max_chars=MAX_READ_CHARS)
                self.reads[read.group(1)] = body[:MAX_READ_CHARS]
        if target.failed:
            if isinstance(output, str):
                text = parse_exec_output(output, max_body_chars=OUTPUT_SCAN_CHARS).body
            else:
                text = item_text(item, max_chars=OUTPUT_SCAN_CHARS)
            # Tool output: shown to later runs only as data, never when it addresses the agent.
            found = error_line(text)
            target.error_line = tool_text_as_data(found) if found else None
            target.failure_words = failure_subject(text, target.error_line)
            detail = f": {target.error_line}" if target.error_line else ""
            ids = ", ".join(target.ids())
            self.events.add(f"- {quote_cmd(target.cmd)} failed (exit {exit_code}){detail} [{ids}]")
        elif target.passed and target.category:
            ids = ", ".join(target.ids())
            self.events.add(f"- {quote_cmd(target.cmd)} passed [{ids}]")

    def _patch_result(self, patch: Patch, item_id: str, item: Mapping[str, Any]) -> None:
        patch.output_item_id = item_id
        status = item.get("status")
        text = item_text(item, max_chars=PATCH_RESULT_CHARS)
        if status == "failed":
            patch.ok = False
        elif status == "completed":
            patch.ok = True
        else:
            low = text.lower()
            ok_words = ("updated ", "created ", "deleted ", "moved ", "success", "applied", "done")
            bad_words = ("error", "invalid", "failed", "not found", "could not", "cannot")
            patch.ok = low.startswith(ok_words) or not any(w in low for w in bad_words)
        files = ", ".join(path for _, path in patch.files[:MAX_FILES_NAMED]) or "files"
        if patch.ok:
            self.events.add(f"- changed {files} [{patch.call_item_id}]")
        else:
            self.events.add(
                f"- change to {files} failed: {one_line(text, ERROR_LINE_CHARS)} "
                f"[{patch.call_item_id}, {item_id}]"
            )

    def _outcome(self, segment: Mapping[str, Any], seg_id: str, seg_index: int) -> None:
        meta = segment.get("terminal_metadata")
        state = "unknown"
        if isinstance(meta, Mapping):
            state = str(meta.get("terminal_state") or "unknown")
            detail = ": ".join(
                str(meta[k]) for k in ("exception_type", "exception_message") if meta.get(k)
            )
            if detail:
                state += f" ({one_line(detail, ERROR_LINE_CHARS)})"
        final = final_output_text(segment, FINAL_OUTPUT_CHARS)
        if final:
            self.final_outputs[seg_index] = final
        self.outcomes.append((seg_id, state, one_line(final, FINAL_OUTPUT_CHARS)))
        if not state.startswith("completed"):
            self.events.add(f"- run ended {state} [{seg_id}]")


def is_conversation(rollout: Rollout) -> bool:
    """A chat (people talking, no tools used), summarised by what was said."""

    return (
        not rollout.commands
        and not rollout.patches
        and rollout.user_messages >= CONVERSATION_MIN_MESSAGES
    )
