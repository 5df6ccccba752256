"""Helpers shared by the tests: the bug-fix workspace and scripted agent turns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.testing import assistant_message, function_call

BUGGY_INVOICE = """def invoice_total(lines, discount=0.0):
    subtotal = sum(qty * price for qty, price in lines)
    return subtotal
"""

FIXED_INVOICE = """def invoice_total(lines, discount=0.0):
    subtotal = sum(qty * price for qty, price in lines)
    return round(subtotal * (1 - discount), 2)
"""

INVOICE_TEST = """import unittest
from invoice import invoice_total


class InvoiceTest(unittest.TestCase):
    def test_discount_applied(self):
        self.assertEqual(invoice_total([(2, 50.0)], discount=0.1), 90.0)


if __name__ == "__main__":
    unittest.main()
"""

TEST_COMMAND = "python3 -m unittest -q test_invoice"


def shell(cmd: str, call_id: str) -> Any:
    return function_call("exec_command", {"cmd": cmd}, call_id=call_id)


def write_file(path: str, content: str, call_id: str) -> Any:
    script = f"cat > {path} <<'PYEOF'\n{content}PYEOF"
    return function_call("exec_command", {"cmd": script}, call_id=call_id)


def exec_items(call_id: str, cmd: str, output: str) -> list[dict[str, Any]]:
    """The items one shell command leaves in a recorded run: the agent's ``exec_command``
    call of ``cmd`` and its ``output``."""

    return [
        {
            "type": "function_call",
            "name": "exec_command",
            "call_id": call_id,
            "arguments": json.dumps({"cmd": cmd}),
        },
        {"type": "function_call_output", "call_id": call_id, "output": output},
    ]


def bug_fix_script() -> list[Any]:
    """Run 1 of the two-run example: find the failing test, fix invoice.py, rerun the tests."""

    return [
        [shell(TEST_COMMAND, "c1")],
        [write_file("invoice.py", FIXED_INVOICE, "c2")],
        [shell(TEST_COMMAND, "c3")],
        [
            assistant_message(
                "Fixed invoice_total in invoice.py: it ignored the discount, so "
                "test_discount_applied failed with 100.0 != 90.0. It now applies the discount; "
                f"`{TEST_COMMAND}` passes."
            )
        ],
    ]


def agent(
    model: Any, memory: Any = None, *, name: str = "reviewer", tools: list[Any] | None = None
) -> Any:
    """A sandbox agent working in the workspace (files and a shell) with ``memory`` (a
    ``Memory`` with the offline engine unless given) and ``tools``."""

    from agents.sandbox import SandboxAgent
    from agents.sandbox.capabilities import Filesystem, Shell

    from sandbox_memory import Memory, MemoryGenerateConfig

    return SandboxAgent(
        name=name,
        instructions="Work in the workspace.",
        model=model,
        tools=tools or [],
        capabilities=[
            memory or Memory(generate=MemoryGenerateConfig(engine="offline")),
            Filesystem(),
            Shell(),
        ],
    )


_DEFAULT: Any = object()


def layout_runtime(
    where: Path | str | Any,
    *,
    engine: Any = None,
    store: Any = None,
    layout: Any = None,
    read: Any = _DEFAULT,
    mkdir: bool = False,
    backend: Any = None,
    **generate: Any,
) -> Any:
    """The layout runtime the SDK bridge builds: one layout's steps over ``where`` (a folder,
    or a :class:`~sandbox_memory.workspace.Workspace` a test wraps), with the default layout
    and read settings unless given (``read=None``: a layout that reads nothing, as
    ``Memory(read=None)``) and ``generate``'s settings.

    ``engine`` is the engine setting (``"offline"``, the default here, or ``"model"``) or an
    engine object to use instead of the one the setting picks (the setting then says what the
    object is: ``"model"`` for a :class:`~sandbox_memory.engines.model.ModelEngine`);
    ``store`` a shared store (the layout then works through its working copy); ``backend``
    the store memory is kept in instead of the workspace files (any ``MemoryStore``)."""

    from sandbox_memory.config import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
    from sandbox_memory.runtime import LayoutRuntime
    from sandbox_memory.workspace import LocalWorkspace, Workspace

    if isinstance(where, Workspace):
        workspace = where
    else:
        if mkdir:
            Path(where).mkdir(parents=True, exist_ok=True)
        workspace = LocalWorkspace(str(where))
    from sandbox_memory.engines.model import ModelEngine

    if isinstance(engine, str):
        generate["engine"], engine = engine, None
    generate.setdefault("engine", "model" if isinstance(engine, ModelEngine) else "offline")
    return LayoutRuntime(
        workspace,
        layout=layout or MemoryLayoutConfig(),
        generate=MemoryGenerateConfig(**generate),
        read=MemoryReadConfig() if read is _DEFAULT else read,
        engine=engine,
        store=store,
        backend=backend,
    )


def run_payload(
    text: str,
    *,
    reply: str | None = "ok",
    when: str | None = "2026-01-01T00:00:00+00:00",
    items: list[dict[str, Any]] | None = None,
    completed: bool = False,
    history: list[dict[str, Any]] | None = None,
    final_output: str | None = None,
) -> dict[str, Any]:
    """One run as the bridge records it: the user's ``text``, then ``items`` (the agent's tool
    calls and outputs) and the assistant's ``reply`` (None: no reply); ``when`` stamps it
    (None: no stamp); ``completed`` adds the terminal state of a run that finished.

    ``history`` is what the run's input holds before ``text`` (earlier messages, or a replay
    of an earlier run: :func:`replay_of`); ``final_output`` the run's final output (None:
    none)."""

    generated = list(items or [])
    if reply is not None:
        generated.append(
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply}],
            }
        )
    said = {"role": "user", "content": text}
    payload: dict[str, Any] = {"input": [*(history or []), said]}
    payload["generated_items"] = generated
    if when is not None:
        payload = {"updated_at": when, **payload}
    if completed:
        payload["terminal_metadata"] = {"terminal_state": "completed", "has_final_output": True}
    if final_output is not None:
        payload["final_output"] = final_output
    return payload


def replay_of(run: dict[str, Any], text: str) -> dict[str, Any]:
    """A later run of ``run``'s conversation, as the SDK hands over a run given its history:
    the input replays ``run`` (its input, then what it generated) before the user's ``text``;
    no reply, no stamp."""

    return run_payload(
        text, reply=None, when=None, history=[*run["input"], *run["generated_items"]]
    )


def sealed(line: bytes | str, rollout_id: str) -> bytes:
    """``line`` (one JSON object) sealed as memory seals what it records: a line a test writes
    as if memory had recorded it."""

    from sandbox_memory.integrity import SegmentSeal, host_keys

    raw = line.encode("utf-8") if isinstance(line, str) else line
    return SegmentSeal(host_keys()).seal(raw.rstrip(b"\n") + b"\n", rollout_id)


def read_progress(root: Path, memories_dir: str = "memories") -> dict[str, Any]:
    """Every live progress record of a layout (``store/progress/<rollout-id>.json``)."""

    folder = root / memories_dir / "store" / "progress"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def read_layout(root: Path, memories_dir: str = "memories") -> dict[str, Any]:
    """Layout memory as stored, read from its files: ``{"version": n, "entries": {...}}``.

    The records of ``store/layout/`` (head and shards, without the keys the head names as
    removed, a pending commit counted as applied),
    or the old single ``store/layout.json`` when it was not split yet.
    """

    store = root / memories_dir / "store"
    legacy = store / "layout.json"
    folder = store / "layout"
    if not (folder / "head.json").exists() and legacy.exists():
        doc: dict[str, Any] = json.loads(legacy.read_text())
        return doc
    entries: dict[str, Any] = {}
    for shard in sorted(folder.glob("shard-*.json")):
        entries.update(json.loads(shard.read_text())["entries"])
    head = json.loads((folder / "head.json").read_text()) if (folder / "head.json").exists() else {}
    version = int(head.get("version", 0))
    for keys in head.get("removed", {}).values():  # removed, their shards not rewritten yet
        for key in keys:
            entries.pop(key, None)
    commit = folder / "commit.json"
    if commit.exists():
        pending = json.loads(commit.read_text())
        entries.update(pending["put"])
        for key in pending["delete"]:
            entries.pop(key, None)
        version = int(pending["version"])
    return {"version": version, "entries": dict(sorted(entries.items()))}


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def extraction_reply(
    candidates: list[dict[str, Any]] | None = None,
    *,
    summary: str = "Worked on the task.",
    slug: str = "task",
    raw: str = "- did the task",
) -> Any:
    """A scripted phase-1 model reply in the model engine's structured-output shape."""

    body = {
        "rollout_summary": summary,
        "rollout_slug": slug,
        "raw_memory": raw,
        "candidates": candidates or [],
    }
    return [assistant_message(json.dumps(body))]


def read_segments(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def index_entry_rows(root: Path, memories_dir: str = "memories") -> dict[str, Any]:
    """The search index's entry documents (name -> change stamp, sources, text) and hidden
    sources (the retracted table), read from ``store/search.sqlite``."""

    import sqlite3
    import zlib

    db = sqlite3.connect(root / memories_dir / "store" / "search.sqlite")
    try:
        docs = {
            doc: [stamp, sources, zlib.decompress(text).decode("utf-8")]
            for doc, stamp, sources, text in db.execute(
                "SELECT doc, stamp, sources, text FROM docs WHERE kind = 'entry'"
            )
        }
        hidden = sorted(db.execute("SELECT * FROM retracted").fetchall())
    finally:
        db.close()
    return {"docs": docs, "retracted": [list(row) for row in hidden]}


async def rebuilt_index_rows(root: Path, scratch: Path) -> dict[str, Any]:
    """:func:`index_entry_rows` of an index built afresh from a copy of the workspace."""

    import shutil

    from sandbox_memory import MemoryClient

    shutil.copytree(root, scratch, symlinks=True)
    for found in (scratch / "memories" / "store").glob("search.sqlite*"):
        found.unlink()
    client = MemoryClient(scratch)
    await client.runtime.search_index.sync()
    client.runtime.search_index.close()
    return index_entry_rows(scratch)


async def adopt_store(root: Path) -> dict[str, int]:
    """A person vouches for a store written by hand (or by a build before records were sealed):
    ``sandbox-memory adopt`` seals its records with this host's key."""

    from sandbox_memory import MemoryClient

    return await MemoryClient(root).adopt()


def fact(key: str, content: str, at: int) -> Any:
    """A fact entry updated at ``at``, citing one item of conversation ``task-<at>``: for tests
    that seed memory directly (see :func:`sealed_store`)."""

    from sandbox_memory.stores.records import Entry, Source

    return Entry(
        key=key,
        content=content,
        kind="fact",
        sources=[Source(conversation=f"task-{at}", item="a1b2c3d4:1")],
        updated_at=at,
    )


def sealed_store(root: Path, memories_dir: str = "memories") -> Any:
    """A store on ``root`` that seals what it writes with the host's key, as a runtime's store
    does (memory refuses a record without the seal): for tests that seed memory directly."""

    from sandbox_memory.integrity import SegmentSeal, host_keys
    from sandbox_memory.stores.files import Store
    from sandbox_memory.workspace import LocalWorkspace

    store = Store(LocalWorkspace(root), memories_dir)
    seal = SegmentSeal(host_keys())
    store.record_seal = lambda: seal
    return store
