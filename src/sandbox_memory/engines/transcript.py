"""Rollout segments as compact text, plus typed access to their items.

A segment is one recorded ``Runner.run`` (see ``stores/segments.py``): ``input`` and ``generated_items``
hold Responses-API input items, each carrying ``memory_item_id``. This module knows the shapes of
those items as SDK 0.24 writes them (messages, ``function_call``/``function_call_output`` for the
sandbox ``exec_command``/``write_stdin`` tools, ``custom_tool_call`` for the sandbox
``apply_patch`` tool, the hosted ``shell_call``/``apply_patch_call``/``local_shell_call`` items,
``mcp_call``, ``web_search_call`` ...) and turns them into text a model can read, where every item
line starts with the ``[memory_item_id]`` that memory entries cite.

Everything here is linear in the input and clips long texts early, so a 5 MB tool output or
10,000 segments cost little time and memory.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sandbox_memory.engines.base import ITEM_ID_FIELD

from .. import bounded

REPLAYED_ITEM_TYPE = "memory_replayed_item"
"""Type of the reference that stands for an input item the conversation already recorded (a
history replayed with ``result.to_input_list()``, see ``stores.segments.EncodedSegment.mark_replayed``): it keeps
the item's original ``memory_item_id`` and nothing else, so the item is neither stored again
nor re-extracted, and never cited under a new id."""

HEAD_FRACTION = 0.4
"""Share of a clipped text kept from its start; the rest is kept from its end.

The start of a transcript holds the task and the start of a tool output holds the command's
header; the end holds the errors, the test summary and the final answer, which matter more, so
the tail gets the larger share (40% head / 60% tail)."""

ITEM_CHAR_CAP = 4_000
"""Most characters of one item's text kept in a transcript (clipped head + tail).

About 1,000 tokens: enough for a command, a test summary or a traceback, while fifty tool calls
still fit in the default 200,000-character extraction budget. A 5 MB output costs 4 KB."""

TRANSCRIPT_MARKER_RESERVE = 160
"""Characters set aside for the line that says how much of the middle was omitted.

The marker is under 100 characters even for huge counts; the rest is slack for line snapping."""

LINE_SNAP_CHARS = 200
"""How far a middle cut may move to land on a line boundary.

Cutting at a newline keeps the head's last line and the tail's first line whole (so the tail
still starts with ``[item id]``); two hundred characters is about two transcript lines."""

EXEC_HEADER_SCAN_CHARS = 1_000
"""Characters of an ``exec_command`` output searched for its header.

The SDK's header (``Chunk ID``, ``Wall time``, exit code, session id, token count, ``Output:``)
is under 200 characters; scanning only the start keeps parsing a 5 MB output constant-time."""

TERMINAL_DETAIL_CHARS = 300
"""Characters of an exception type and message shown with a terminal state: one line."""

WHITESPACE_SLACK = 4
""":func:`one_line` reads at most this many times its budget of raw text: collapsing runs of
whitespace shrinks text, and indented code or logs rarely shrink by more than 4x."""

LOCAL_SANDBOX_TOOLS: frozenset[str] = frozenset(
    {"exec_command", "write_stdin", "apply_patch", "view_image", "load_skill"}
)
"""Tools the SDK's sandbox capabilities provide: their results come from the agent's own
workspace, not from outside."""

EXTERNAL_ITEM_TYPES: frozenset[str] = frozenset(
    {
        "mcp_call",
        "mcp_list_tools",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "computer_call_output",
        "tool_search_output",
    }
)
"""Item types whose content comes from outside the sandbox (MCP servers, the web, hosted tools):
data to distrust, never a source of memory on its own."""

CALL_TYPES: frozenset[str] = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "shell_call",
        "local_shell_call",
        "apply_patch_call",
        "computer_call",
        "tool_search_call",
        "program",
    }
)
"""Item types that are a tool call made by the model (they carry ``call_id``)."""

OUTPUT_TYPES: frozenset[str] = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "shell_call_output",
        "local_shell_call_output",
        "apply_patch_call_output",
        "computer_call_output",
        "tool_search_output",
        "program_output",
    }
)
"""Item types that are the result of a tool call (matched to their call by ``call_id``)."""

_FIXED_TOOL_NAMES: dict[str, str] = {
    "shell_call": "shell",
    "local_shell_call": "local_shell",
    "apply_patch_call": "apply_patch",
    "computer_call": "computer",
    "tool_search_call": "tool_search",
    "program": "program",
}

_EXIT_RE = re.compile(r"^Process exited with code (-?\d+)\s*$", re.MULTILINE)
_SESSION_RE = re.compile(r"^Process running with session ID (\d+)\s*$", re.MULTILINE)
_OUTPUT_HEADER = "\nOutput:\n"


# --------------------------------------------------------------------------- clipping


def clip_middle(
    text: str, max_chars: int, *, head_fraction: float = HEAD_FRACTION, start: int = 0
) -> str:
    """Return ``text[start:]`` cut in the middle to at most ``max_chars`` characters.

    Keeps ``head_fraction`` of the budget from the start and the rest from the end, joined by a
    marker saying how many characters were omitted. Costs O(max_chars), whatever ``len(text)``:
    ``start`` lets a caller skip a prefix without copying a huge string first.
    """

    if max_chars <= 0:
        return ""
    length = len(text) - start
    if length <= max_chars:
        return text[start:] if start else text
    marker = f"\n… [{length - max_chars} chars omitted] …\n"
    budget = max_chars - len(marker)
    if budget < 2:
        return text[start : start + max_chars]
    head = int(budget * head_fraction)
    tail = budget - head
    marker = f"\n… [{length - head - tail} chars omitted] …\n"
    clipped = text[start : start + head] + marker + (text[len(text) - tail :] if tail else "")
    return clipped[:max_chars] if len(clipped) > max_chars else clipped


def one_line(text: str, max_chars: int) -> str:
    """``text`` with whitespace collapsed to single spaces, clipped at the end with ``…``.

    Only the first ``WHITESPACE_SLACK * max_chars`` characters are read: bounded cost."""

    if max_chars <= 0:
        return ""
    flat = " ".join(text[: max_chars * WHITESPACE_SLACK].split())
    if len(flat) <= max_chars:
        return flat
    return flat[: max_chars - 1].rstrip() + "…"


# --------------------------------------------------------------------------- items


def segment_id_of(segment: Mapping[str, Any], index: int) -> str:
    """The segment's id, or ``segment-<index>`` for a segment recorded without one."""

    value = segment.get("segment_id")
    return value if isinstance(value, str) and value else f"segment-{index}"


def segment_items(segment: Mapping[str, Any], seg_id: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(item_id, item)`` for one segment: ``input`` items, then ``generated_items``.

    A string ``input`` is one user message. An item without ``memory_item_id`` gets
    ``<seg_id>:<position>``, the recorder's own scheme. Non-dict items are skipped.
    """

    position = 0
    for field_name in ("input", "generated_items"):
        raw = segment.get(field_name)
        items: Iterable[Any]
        if isinstance(raw, str):
            items = ({"role": "user", "content": raw},)
        elif isinstance(raw, list):
            items = raw
        else:
            items = ()
        for item in items:
            if isinstance(item, dict) and item.get("type") == REPLAYED_ITEM_TYPE:
                position += 1  # recorded (and extracted) in an earlier segment: not new here
                continue
            if isinstance(item, dict):
                item_id = item.get(ITEM_ID_FIELD)
                if not isinstance(item_id, str) or not item_id:
                    item_id = f"{seg_id}:{position}"
                yield item_id, item
            position += 1


def iter_items(
    segments: Iterable[Mapping[str, Any]],
) -> Iterator[tuple[str, dict[str, Any], Mapping[str, Any]]]:
    """Yield ``(item_id, item, segment)`` for every item of every segment, in recorded order.

    See :func:`segment_items` for the order and for items recorded without an id. Non-dict
    segments are skipped.
    """

    for seg_index, segment in enumerate(segments):
        if not isinstance(segment, Mapping):
            continue
        for item_id, item in segment_items(segment, segment_id_of(segment, seg_index)):
            yield item_id, item, segment


def _call_name(item: Mapping[str, Any]) -> str | None:
    item_type = item.get("type")
    if item_type in ("function_call", "custom_tool_call"):
        name = item.get("name")
        return name if isinstance(name, str) and name else None
    if isinstance(item_type, str):
        return _FIXED_TOOL_NAMES.get(item_type)
    return None


def tool_names_by_call_id(segments: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Map every tool call's ``call_id`` to the tool's name, across all segments (and their
    pending ``interruptions``), so a result can be labelled with the tool that produced it."""

    names: dict[str, str] = {}

    def note(item: Mapping[str, Any]) -> None:
        if item.get("type") in CALL_TYPES:
            call_id = item.get("call_id")
            name = _call_name(item)
            if isinstance(call_id, str) and name:
                names[call_id] = name

    for seg_index, segment in enumerate(segments):
        if not isinstance(segment, Mapping):
            continue
        for _, item in segment_items(segment, segment_id_of(segment, seg_index)):
            note(item)
        for pending in _interruptions(segment):
            note(pending)
    return names


def output_call_id(item: Mapping[str, Any]) -> str | None:
    """The ``call_id`` a tool result answers (``local_shell_call_output`` may carry it as
    ``id``)."""

    call_id = item.get("call_id")
    if isinstance(call_id, str) and call_id:
        return call_id
    if item.get("type") == "local_shell_call_output":
        alt = item.get("id")
        if isinstance(alt, str) and alt:
            return alt
    return None


def is_external_item(
    item: Mapping[str, Any],
    external_tools: frozenset[str] = frozenset(),
    *,
    tool_names: Mapping[str, str] | None = None,
) -> bool:
    """Whether the item's content comes from outside the sandbox.

    True for MCP, web-search, file-search and other hosted-tool items. A ``function_call_output``
    or ``custom_tool_call_output`` is external only when its tool is named in ``external_tools``:
    the tool is looked up by ``call_id`` in ``tool_names`` (see :func:`tool_names_by_call_id`),
    or from a ``name`` field on the item itself. Sandbox tool results are not external.
    """

    item_type = item.get("type")
    if item_type in EXTERNAL_ITEM_TYPES:
        return True
    if external_tools and item_type in ("function_call_output", "custom_tool_call_output"):
        name = item.get("name")
        if not isinstance(name, str) or not name:
            call_id = output_call_id(item)
            name = tool_names.get(call_id) if (tool_names and call_id) else None
        return name is not None and name in external_tools
    return False


def _text_of(value: Any, cap: int | None) -> str:
    """Plain text of a content value: a string, a list of content parts, or anything else."""

    if value is None:
        return ""
    if isinstance(value, str):
        return clip_middle(value, cap) if cap is not None else value
    if isinstance(value, list):
        parts: list[str] = []
        for part in value:
            if isinstance(part, Mapping):
                parts.append(_part_text(part, cap))
            elif part is not None:
                parts.append(_text_of(part, cap))
        joined = "\n".join(p for p in parts if p)
        return clip_middle(joined, cap) if cap is not None else joined
    if isinstance(value, Mapping):
        if isinstance(value.get("text"), str) or "type" in value:
            return _part_text(value, cap)
    return _compact_json(value, cap)


def _part_text(part: Mapping[str, Any], cap: int | None) -> str:
    part_type = part.get("type")
    text = part.get("text")
    if isinstance(text, str):
        return clip_middle(text, cap) if cap is not None else text
    if part_type == "refusal":
        return "[refusal] " + _text_of(part.get("refusal"), cap)
    if part_type in ("input_image", "image", "output_image"):
        return "[image]"
    if part_type in ("input_file", "file"):
        name = part.get("filename") or part.get("file_id") or ""
        return f"[file {name}]".replace(" ]", "]")
    if part_type == "input_audio":
        return "[audio]"
    if part_type == "logs":
        return _text_of(part.get("logs"), cap)
    return _compact_json(part, cap)


def _compact_json(value: Any, cap: int | None) -> str:
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return clip_middle(text, cap) if cap is not None else text


def _without_id(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != ITEM_ID_FIELD}


def _shell_output_text(item: Mapping[str, Any], cap: int | None) -> str:
    entries = item.get("output")
    if not isinstance(entries, list):
        return _text_of(entries, cap)
    chunks: list[str] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        for stream in ("stdout", "stderr"):
            text = entry.get(stream)
            if isinstance(text, str) and text:
                chunks.append(clip_middle(text, cap) if cap is not None else text)
    joined = "\n".join(chunks)
    return clip_middle(joined, cap) if cap is not None else joined


def shell_commands(item: Mapping[str, Any]) -> list[str]:
    """The command lines of a ``shell_call`` (``action.commands``) or ``local_shell_call``
    (``action.command``, an argv list)."""

    action = item.get("action")
    if not isinstance(action, Mapping):
        return []
    if item.get("type") == "local_shell_call":
        argv = action.get("command")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            if len(argv) >= 3 and argv[1] in ("-c", "-lc") and argv[0].endswith("sh"):
                return [argv[2]]
            return [shlex.join(argv)]
        return [argv] if isinstance(argv, str) else []
    commands = action.get("commands")
    if isinstance(commands, list):
        return [c for c in commands if isinstance(c, str)]
    return []


def function_arguments(item: Mapping[str, Any]) -> dict[str, Any]:
    """A ``function_call``'s ``arguments`` parsed as a JSON object (``{}`` when it is not one)."""

    raw = item.get("arguments")
    if isinstance(raw, Mapping):
        return dict(raw)
    if not isinstance(raw, str) or not raw.lstrip().startswith("{"):
        return {}
    try:
        parsed = bounded.loads(raw, limit=bounded.MAX_LINE_BYTES, what="tool arguments")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _web_search_text(item: Mapping[str, Any]) -> str:
    action = item.get("action")
    if not isinstance(action, Mapping):
        return ""
    kind = action.get("type")
    if kind == "open_page":
        return f"open page {action.get('url') or ''}".strip()
    if kind == "find_in_page":
        return f"find {action.get('pattern') or ''!s} in {action.get('url') or ''}"
    queries = action.get("queries")
    query = action.get("query")
    words = [q for q in (queries if isinstance(queries, list) else []) if isinstance(q, str)]
    if isinstance(query, str) and query and query not in words:
        words.insert(0, query)
    text = "search " + " | ".join(words)
    sources = action.get("sources")
    if isinstance(sources, list):
        urls = [s.get("url") for s in sources if isinstance(s, Mapping) and s.get("url")]
        if urls:
            text += "\nsources: " + " ".join(str(u) for u in urls)
    return text


def item_text(item: Mapping[str, Any], *, max_chars: int | None = None) -> str:
    """The plain text of any item: message text, a call's command or arguments, a result's
    output. With ``max_chars`` every piece is clipped head + tail first, so the cost stays
    bounded on huge outputs."""

    cap = max_chars
    item_type = item.get("type")
    role = item.get("role")
    text: str
    if item_type in (None, "message") and role is not None:
        text = _text_of(item.get("content"), cap)
    elif item_type == "function_call":
        args = function_arguments(item)
        cmd = args.get("cmd")
        text = cmd if isinstance(cmd, str) else _text_of(item.get("arguments"), cap)
    elif item_type == "custom_tool_call":
        text = _text_of(item.get("input"), cap)
    elif item_type in ("shell_call", "local_shell_call"):
        text = "\n".join(shell_commands(item))
    elif item_type == "shell_call_output":
        text = _shell_output_text(item, cap)
    elif item_type == "apply_patch_call":
        op = item.get("operation")
        if isinstance(op, Mapping):
            head = f"{op.get('type') or 'patch'} {op.get('path') or ''}".strip()
            diff = op.get("diff")
            text = head + ("\n" + _text_of(diff, cap) if isinstance(diff, str) and diff else "")
        else:
            text = ""
    elif item_type in ("function_call_output", "custom_tool_call_output", "computer_call_output"):
        text = _text_of(item.get("output"), cap)
    elif item_type in ("local_shell_call_output", "apply_patch_call_output"):
        text = _text_of(item.get("output"), cap)
    elif item_type == "mcp_call":
        pieces = [_text_of(item.get("arguments"), cap)]
        if item.get("output") is not None:
            pieces.append(_text_of(item.get("output"), cap))
        if item.get("error") is not None:
            pieces.append("error: " + _text_of(item.get("error"), cap))
        text = "\n".join(p for p in pieces if p)
    elif item_type == "mcp_list_tools":
        tools = item.get("tools")
        names = (
            [t.get("name") for t in tools if isinstance(t, Mapping)]
            if isinstance(tools, list)
            else []
        )
        text = " ".join(str(n) for n in names if n)
    elif item_type in ("mcp_approval_request",):
        text = f"{item.get('name') or ''} {_text_of(item.get('arguments'), cap)}".strip()
    elif item_type == "mcp_approval_response":
        text = ("approved" if item.get("approve") else "denied") + (
            f": {item['reason']}" if isinstance(item.get("reason"), str) else ""
        )
    elif item_type == "web_search_call":
        text = _web_search_text(item)
    elif item_type == "file_search_call":
        queries = item.get("queries")
        text = (
            " | ".join(q for q in queries if isinstance(q, str))
            if isinstance(queries, list)
            else ""
        )
        results = item.get("results")
        if isinstance(results, list):
            found = [_text_of(r.get("text"), cap) for r in results if isinstance(r, Mapping)]
            text += "\n" + "\n".join(f for f in found if f)
    elif item_type == "code_interpreter_call":
        text = _text_of(item.get("code"), cap)
        outputs = item.get("outputs")
        if isinstance(outputs, list) and outputs:
            text += "\n" + _text_of(outputs, cap)
    elif item_type == "computer_call":
        action = item.get("action")
        text = _compact_json(action, cap) if action is not None else ""
    elif item_type == "tool_search_call":
        text = _compact_json(item.get("arguments"), cap)
    elif item_type == "tool_search_output":
        text = _compact_json(item.get("tools"), cap)
    elif item_type == "program":
        text = _text_of(item.get("code"), cap)
    elif item_type == "program_output":
        text = _text_of(item.get("result"), cap)
    elif item_type == "reasoning":
        text = _text_of(item.get("summary"), cap)
    elif item_type == "memory_edit":
        text = _compact_json(item.get("command"), cap)
    elif item_type == "unknown" and "value" in item:
        text = _text_of(item.get("value"), cap)
    else:
        text = _compact_json(_without_id(item), cap)
    text = text.strip()
    return clip_middle(text, cap) if cap is not None else text


# --------------------------------------------------------------------------- exit codes


@dataclass(frozen=True)
class ExecOutput:
    """An ``exec_command`` / ``write_stdin`` result split into its header and its output."""

    exit_code: int | None
    """``Process exited with code N``; None while running, on timeout or when absent."""
    session_id: int | None
    """``Process running with session ID N``: the command is still running."""
    body: str
    """The command's own output (after the SDK's ``Output:`` line), clipped if asked."""


def parse_exec_output(text: str, *, max_body_chars: int | None = None) -> ExecOutput:
    """Split the SDK's exec-tool result (``Chunk ID`` / ``Wall time`` / ``Process exited with
    code N`` / ``Output:`` / output). Text without that header is returned whole as ``body``.

    With ``max_body_chars`` the body is clipped head + tail without copying the whole text.
    """

    head = text[:EXEC_HEADER_SCAN_CHARS]
    cut = head.find(_OUTPUT_HEADER)
    has_header = head.startswith("Chunk ID:") and cut >= 0
    start = cut + len(_OUTPUT_HEADER) if has_header else 0
    if max_body_chars is not None:
        body = clip_middle(text, max_body_chars, start=start)
    else:
        body = text[start:] if start else text
    if not has_header:
        return ExecOutput(exit_code=None, session_id=None, body=body)
    header = head[:cut]
    exit_match = _EXIT_RE.search(header)
    session_match = _SESSION_RE.search(header)
    return ExecOutput(
        exit_code=int(exit_match.group(1)) if exit_match else None,
        session_id=int(session_match.group(1)) if session_match else None,
        body=body,
    )


def output_exit_code(item: Mapping[str, Any]) -> int | None:
    """The exit code a tool result reports, when it reports one.

    ``shell_call_output``: the first non-zero ``outcome.exit_code`` (else 0; None on timeout).
    ``function_call_output`` / ``custom_tool_call_output``: parsed from the exec-tool header.
    """

    item_type = item.get("type")
    if item_type == "shell_call_output":
        entries = item.get("output")
        if not isinstance(entries, list):
            return None
        codes: list[int] = []
        for entry in entries:
            outcome = entry.get("outcome") if isinstance(entry, Mapping) else None
            if isinstance(outcome, Mapping):
                if outcome.get("type") == "timeout":
                    return None
                code = outcome.get("exit_code")
                if isinstance(code, int):
                    codes.append(code)
        nonzero = [c for c in codes if c != 0]
        if nonzero:
            return nonzero[0]
        return 0 if codes else None
    if item_type in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        if isinstance(output, str):
            return parse_exec_output(output).exit_code
    return None


# --------------------------------------------------------------------------- rendering


def _interruptions(segment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = segment.get("interruptions")
    if not isinstance(raw, list):
        return []
    return [i for i in raw if isinstance(i, Mapping)]


def _indent(text: str) -> str:
    # Continuation lines are indented so only real item lines start with "[": text from a tool
    # cannot forge a line that looks like another item.
    return text.replace("\n", "\n    ")


def _label(
    item: Mapping[str, Any],
    tool_names: Mapping[str, str],
    external_tools: frozenset[str],
) -> tuple[str, str]:
    """Return ``(label, text)`` for one item, text already clipped to the per-item cap."""

    cap = ITEM_CHAR_CAP
    item_type = item.get("type")
    role = item.get("role")
    external = is_external_item(item, external_tools, tool_names=tool_names)
    tag = " (external)" if external else ""
    if item_type in (None, "message") and isinstance(role, str):
        return role, item_text(item, max_chars=cap)
    if item_type == "function_call":
        name = str(item.get("name") or "?")
        args = function_arguments(item)
        if name == "exec_command" and isinstance(args.get("cmd"), str):
            text = "$ " + clip_middle(str(args["cmd"]), cap)
            workdir = args.get("workdir")
            if isinstance(workdir, str) and workdir:
                text += f"  (in {workdir})"
            return f"call {name}", text
        if name == "write_stdin" and "session_id" in args:
            chars = args.get("chars")
            shown = json.dumps(chars if isinstance(chars, str) else "", ensure_ascii=False)
            return f"call {name} session {args['session_id']}", clip_middle(shown, cap)
        return f"call {name}", _text_of(item.get("arguments"), cap)
    if item_type in ("function_call_output", "custom_tool_call_output"):
        call_id = output_call_id(item)
        name = tool_names.get(call_id, "?") if call_id else "?"
        output = item.get("output")
        if isinstance(output, str) and output.startswith("Chunk ID:"):
            parsed = parse_exec_output(output, max_body_chars=cap)
            if parsed.exit_code is not None:
                status = f" (exit {parsed.exit_code})"
            elif parsed.session_id is not None:
                status = f" (running, session {parsed.session_id})"
            else:
                status = ""
            return f"output {name}{status}{tag}", parsed.body.strip()
        return f"output {name}{tag}", item_text(item, max_chars=cap)
    if item_type == "custom_tool_call":
        return f"call {item.get('name') or '?'}", item_text(item, max_chars=cap)
    if item_type in ("shell_call", "local_shell_call"):
        commands = shell_commands(item)
        label = "call shell" if item_type == "shell_call" else "call local_shell"
        return label, clip_middle("\n".join("$ " + c for c in commands), cap)
    if item_type == "shell_call_output":
        code = output_exit_code(item)
        status = f" (exit {code})" if code is not None else ""
        return f"output shell{status}", item_text(item, max_chars=cap)
    if item_type == "local_shell_call_output":
        return "output local_shell", item_text(item, max_chars=cap)
    if item_type == "apply_patch_call":
        return "call apply_patch", item_text(item, max_chars=cap)
    if item_type == "apply_patch_call_output":
        patch_status = item.get("status")
        suffix = f" ({patch_status})" if isinstance(patch_status, str) else ""
        return f"output apply_patch{suffix}", item_text(item, max_chars=cap)
    if item_type == "mcp_call":
        server = item.get("server_label") or "?"
        status = " (failed)" if item.get("error") is not None else ""
        return f"mcp {server}.{item.get('name') or '?'}{status}{tag}", item_text(
            item, max_chars=cap
        )
    if item_type == "web_search_call":
        return f"web search{tag}", item_text(item, max_chars=cap)
    if item_type == "memory_edit":
        return "memory edit by the person", item_text(item, max_chars=cap)
    if item_type == "reasoning":
        return "reasoning", item_text(item, max_chars=cap)
    label = str(item_type or "item").replace("_", " ")
    return f"{label}{tag}", item_text(item, max_chars=cap)


def _outcome_text(segment: Mapping[str, Any]) -> str:
    meta = segment.get("terminal_metadata")
    if not isinstance(meta, Mapping):
        return ""
    state = str(meta.get("terminal_state") or "unknown")
    exc_type = meta.get("exception_type")
    exc_msg = meta.get("exception_message")
    if exc_type or exc_msg:
        detail = ": ".join(str(x) for x in (exc_type, exc_msg) if x)
        state += f" ({one_line(detail, TERMINAL_DETAIL_CHARS)})"
    return state


def final_output_text(segment: Mapping[str, Any], max_chars: int) -> str:
    """The segment's ``final_output`` as text (structured outputs as compact JSON), clipped."""

    value = segment.get("final_output")
    if value is None:
        return ""
    if isinstance(value, str):
        return clip_middle(value.strip(), max_chars)
    return _compact_json(value, max_chars)


def _transcript_pieces(
    segments: Sequence[Mapping[str, Any]],
    external_tools: frozenset[str],
) -> Iterator[str]:
    tool_names = tool_names_by_call_id(segments)
    for seg_index, segment in enumerate(segments):
        if not isinstance(segment, Mapping):
            continue
        seg_id = segment_id_of(segment, seg_index)
        when = segment.get("updated_at")
        yield f"--- segment {seg_id}" + (f" ({when})" if isinstance(when, str) else "") + " ---\n"
        last_assistant: tuple[str, str] | None = None
        for item_id, item in segment_items(segment, seg_id):
            label, text = _label(item, tool_names, external_tools)
            if item.get("role") == "assistant":
                last_assistant = (item_id, text)
            line = f"[{item_id}] {label}"
            yield (line + ": " + _indent(text) if text else line) + "\n"
        for pending in _interruptions(segment):
            pid = pending.get(ITEM_ID_FIELD)
            label, text = _label(pending, tool_names, external_tools)
            ref = pid if isinstance(pid, str) and pid else seg_id
            yield f"[{ref}] awaiting approval, {label}: {_indent(text)}\n"
        outcome = _outcome_text(segment)
        if outcome:
            yield f"[{seg_id}] terminal state: {outcome}\n"
        final = final_output_text(segment, ITEM_CHAR_CAP)
        if final:
            if last_assistant is not None and last_assistant[1].strip() == final:
                yield f"[{seg_id}] final output: (same as [{last_assistant[0]}])\n"
            else:
                yield f"[{seg_id}] final output: {_indent(final)}\n"


def _snap_head(text: str) -> str:
    cut = text.rfind("\n", max(0, len(text) - LINE_SNAP_CHARS))
    return text[: cut + 1] if cut >= 0 else text


def _snap_tail(text: str) -> str:
    cut = text.find("\n", 0, LINE_SNAP_CHARS)
    return text[cut + 1 :] if cut >= 0 else text


def _keep_head_and_tail(pieces: Iterable[str], max_chars: int) -> str:
    """Join ``pieces``; when the result would exceed ``max_chars``, keep its head and tail.

    Streams: never holds more than about ``max_chars`` plus one piece, whatever the input size.
    """

    reserve = min(TRANSCRIPT_MARKER_RESERVE, max_chars // 2)
    head_budget = int((max_chars - reserve) * HEAD_FRACTION)
    tail_keep = max_chars - head_budget  # enough to return everything when it all fits
    head: list[str] = []
    head_len = 0
    tail: deque[str] = deque()
    tail_len = 0
    total = 0
    for piece in pieces:
        total += len(piece)
        if head_len < head_budget:
            take = piece[: head_budget - head_len]
            head.append(take)
            head_len += len(take)
            piece = piece[len(take) :]
            if not piece:
                continue
        tail.append(piece)
        tail_len += len(piece)
        while tail and tail_len - len(tail[0]) >= tail_keep:
            tail_len -= len(tail.popleft())
    head_text = "".join(head)
    tail_text = "".join(tail)
    if total <= max_chars:
        return head_text + tail_text
    tail_budget = max(0, max_chars - reserve - head_budget)
    tail_text = tail_text[len(tail_text) - tail_budget :] if tail_budget else ""
    head_text = _snap_head(head_text)
    tail_text = _snap_tail(tail_text)
    omitted = total - len(head_text) - len(tail_text)
    if head_text and not head_text.endswith("\n"):
        head_text += "\n"
    marker = (
        f"[... {omitted} characters omitted from the middle of this transcript; "
        "what follows is its end ...]\n"
    )
    result = head_text + marker + tail_text
    return result[:max_chars] if len(result) > max_chars else result


def render_transcript(
    segments: Sequence[Mapping[str, Any]],
    *,
    max_chars: int,
    external_tools: frozenset[str] = frozenset(),
) -> str:
    """Render segments as compact text, one line per item, each starting ``[memory_item_id]``.

    Lines name the role or tool (``user``, ``assistant``, ``call exec_command: $ cmd``,
    ``output exec_command (exit 1): ...``, ``mcp server.tool (external): ...``); each segment
    ends with its terminal state and final output. Every item's text is clipped head + tail to
    :data:`ITEM_CHAR_CAP` first; if the whole still exceeds ``max_chars`` its middle is replaced
    by one marker line saying how many characters were omitted (about 40% head, 60% tail).
    Results of tools named in ``external_tools`` are tagged ``(external)`` like MCP/web items.
    """

    if max_chars <= 0:
        return ""
    return _keep_head_and_tail(_transcript_pieces(segments, external_tools), max_chars)
