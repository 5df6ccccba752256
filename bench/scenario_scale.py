"""scale: the store after months of use, built synthetically, against issue 12's targets.

Large stores are written directly in each system's own file format (fast: no model, no
sandbox), then each system's real code runs on them:

- **close, 10,000 conversations stored, 30 new**: per system, a fresh process starts a real
  ``UnixLocalSandboxClient`` session on a workspace holding 10,000 conversations as that system
  keeps them, hands 30 new runs (30 new conversations) to the manager the SDK runtime uses, and
  closes the sandbox; wall time from the first run to the end of the close, and peak RSS minus
  the resident size before the first run. Zero-latency counting models.
- **close, 3,000 conversations stored, 30 new**: the same at 3,000 (6,000 entries), where the
  built-in's work is smaller and ours' fixed costs show.
- **close with N pending**: N recorded, never extracted conversations, then one close; the time
  per pending rollout at the larger N over the smaller (linear: about 1).
- **batches of pending conversations**: B new conversations recorded, then a close, again and
  again on one store (each close extracts what its model-call budget allows and defers the
  rest); the CPU time of the last batch over the second, the first further one (flat: about 1).
- **each operation at 2,000 and at 20,000 entries** (1,000 and 10,000 conversations): record a
  run, close with one new conversation, ``Remember``, ``Forget`` (through one client that stays
  open, and as a user calls them: a fresh ``MemoryClient`` on the folder, its ``view()`` for
  the version, then ``apply``), phase 2 with nothing new and the first-turn read prompt; the
  row is the cost at the large store over the small one.
- **read prompt, first turn, 20,000 entries**: ours against the built-in holding a
  ``memory_summary.md`` of the same 20,000 lines (as in the read scenario).
- **state on disk when conversations are forgotten**: bytes under ``memories/`` of a store of
  1,000 selected conversations, and after phase 2 forgets 900 of them.
- **pending check through the session API**: sandbox execs of the close's check for pending
  work, 1,000 conversations stored and one new run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Progress, Row, make_memory, manager_for, median, sandbox, temp_root  # noqa: E402
from workload import conversation_id, entry_text, notes_for, segment_payload  # noqa: E402

from sandbox_memory import Forget, MemoryClient, Remember  # noqa: E402
from sandbox_memory.integrity import SegmentSeal, host_keys  # noqa: E402
from sandbox_memory.stores.files import _thread_data
from sandbox_memory.stores.records import (
    ConversationMemory,
    Entry,
    LayoutMemory,
    Registry,
    RolloutProgress,
    Source,
)
from sandbox_memory.stores.segments import history_fingerprint  # noqa: E402

SELECTED = 256
"""Rollouts phase 2 keeps (``max_raw_memories_for_consolidation``, both systems' default)."""

NEW_RUNS = 30
KINDS = ("fact", "decision", "procedure", "fact", "hypothesis")
BASE_MS = 1_700_000_000_000


def _iso(k: int) -> str:
    return f"2025-{1 + k // 40_000 % 12:02d}-01T00:00:{k % 60:02d}.{k:06d}+00:00"


def _tiny_line(rid: str, k: int, *, ours: bool) -> str:
    """One short recorded run (what is stored matters, not its length, for these rows)."""

    seg: dict[str, Any] = {
        "updated_at": _iso(k),
        "rollout_id": rid,
        "input": [{"role": "user", "content": f"Task {k}: look at the parser."}],
        "generated_items": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Looked at it."}],
            }
        ],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
    }
    if ours:
        seg["segment_id"] = f"{k:08x}"
        seg["person"] = None
        seg["input"][0]["memory_item_id"] = f"{k:08x}:0"
        seg["generated_items"][0]["memory_item_id"] = f"{k:08x}:1"
    return json.dumps(seg, separators=(",", ":")) + "\n"


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _sealer() -> Any:
    """The host's seal, as a runtime on this machine seals what it writes: memory refuses a
    recorded line or a store record without it (set aside, read as missing)."""

    return SegmentSeal(host_keys())


def _write_record(seal: Any, store: Path, name: str, text: str) -> None:
    """One of the store's own records (``name`` under ``store/``), sealed for its place."""

    (store / name).write_bytes(seal.seal(text.encode(), f"store:{name}"))


def build_ours(root: Path, *, conversations: int, entries: int, selected: int = SELECTED) -> None:
    """A store as ours keeps it after ``conversations`` conversations, ``entries`` entries.

    The newest ``selected`` conversations are live (progress, notes, registry facts); the rest
    were forgotten (pruned progress). Layout entries cite the selected conversations.
    """

    sessions = root / "sessions"
    mem = root / "memories"
    store = mem / "store"
    for folder in (
        sessions,
        store / "conversations",
        store / "progress",
        store / "forgotten",
        store / "threads",
        mem / "raw_memories",
        mem / "rollout_summaries",
    ):
        folder.mkdir(parents=True, exist_ok=True)
    seal = _sealer()
    registry = Registry()
    live = [conversation_id(k) for k in range(conversations - selected, conversations)]
    conv_entries = max(0, entries - entries * 3 // 4)
    for k in range(conversations):
        rid = conversation_id(k)
        line = seal.seal(_tiny_line(rid, k, ours=True).encode(), rid)
        (sessions / f"{rid}.jsonl").write_bytes(line)
        size = len(line)
        fact = Entry(
            key=f"fact-{k:05d}",
            content=entry_text(k),
            kind="fact",
            sources=[Source(conversation=rid, item=f"{k:08x}:0")],
            updated_at=BASE_MS + k * 1000,
        )
        memory = ConversationMemory(rollout_id=rid, version=1, entries={fact.key: fact})
        _write_record(seal, store, f"conversations/{rid}.json", memory.model_dump_json())
        fp = history_fingerprint(
            [
                {"role": "user", "content": f"Task {k}: look at the parser."},
                {"role": "assistant", "content": "Looked at it."},
            ]
        )
        thread_seal = seal.sign("thread", _thread_data(str(fp), rid))
        _write(store / "threads" / str(fp), f"{rid} {thread_seal}")
        if k >= conversations - selected:
            slug = notes_for(rid)["rollout_slug"]
            prog = RolloutProgress(offset=size, updated_at=_iso(k), slug=slug, consolidated=True)
            _write(store / "progress" / f"{rid}.json", prog.model_dump_json())
            _write(
                mem / "raw_memories" / f"{rid}.md",
                f"rollout_id: {rid}\nupdated_at: {_iso(k)}\n\n{notes_for(rid)['raw_memory']}\n",
            )
            _write(
                mem / "rollout_summaries" / f"{rid}_{slug}.md",
                f"# {slug}\n\n{notes_for(rid)['rollout_summary']}\n",
            )
            registry.conversations[rid] = [fact]
        else:
            kept = {"offset": size, "updated_at": _iso(k)}
            _write(store / "forgotten" / f"{rid}.json", json.dumps(kept))
    layout = LayoutMemory(version=1)
    for i in range(entries - conv_entries):
        rid = live[i % len(live)] if live else "conv-00000"
        layout.entries[f"entry-{i:05d}"] = Entry(
            key=f"entry-{i:05d}",
            content=entry_text(i),
            kind=KINDS[i % len(KINDS)],  # type: ignore[arg-type]
            sources=[Source(conversation=rid, item=f"{i:08x}:1")],
            updated_at=BASE_MS + i * 1000,
        )
    _write_record(seal, store, "layout.json", layout.model_dump_json(indent=1))
    _write_record(seal, store, "registry.json", registry.model_dump_json(indent=1))


def build_builtin(root: Path, *, conversations: int, selected: int = SELECTED) -> None:
    """The same history as the SDK's memory keeps it: every rollout's raw memory and summary
    stay, plus the consolidated files of the last phase 2."""

    sessions = root / "sessions"
    mem = root / "memories"
    for folder in (sessions, mem / "raw_memories", mem / "rollout_summaries", mem / "skills"):
        folder.mkdir(parents=True, exist_ok=True)
    blocks: list[str] = []
    summary: list[str] = ["# Memory summary", ""]
    chosen: list[dict[str, str]] = []
    for k in range(conversations):
        rid = conversation_id(k)
        notes = notes_for(rid)
        slug = notes["rollout_slug"]
        summary_file = f"rollout_summaries/{rid}_{slug}.md"
        _write(sessions / f"{rid}.jsonl", _tiny_line(rid, k, ours=False))
        _write(
            mem / "raw_memories" / f"{rid}.md",
            f"rollout_id: {rid}\nupdated_at: {_iso(k)}\nrollout_path: sessions/{rid}.jsonl\n"
            f"rollout_summary_file: {summary_file}\nterminal_state: completed\n\n"
            f"{notes['raw_memory']}\n",
        )
        _write(
            mem / summary_file,
            f"session_id: bench\nupdated_at: {_iso(k)}\nrollout_path: sessions/{rid}.jsonl\n"
            f"terminal_state: completed\n\n{notes['rollout_summary']}\n",
        )
        if k >= conversations - selected:
            text = " ".join(notes["raw_memory"].split())[:600]
            blocks.append(f"# Task Group: {rid}\n\nscope: work of rollout {rid}\n\n{text}\n")
            summary.append(f"- {rid}: {text[:80]} -> {summary_file}")
            chosen.append(
                {
                    "rollout_id": rid,
                    "updated_at": _iso(k),
                    "rollout_path": f"sessions/{rid}.jsonl",
                    "rollout_summary_file": summary_file,
                    "terminal_state": "completed",
                }
            )
    _write(mem / "MEMORY.md", "# MEMORY\n\n" + "\n".join(reversed(blocks)))
    _write(mem / "memory_summary.md", "\n".join(summary)[:6000] + "\n")
    _write(mem / "raw_memories.md", "")
    _write(
        mem / "phase_two_selection.json",
        json.dumps({"version": 1, "updated_at": _iso(0), "selected": chosen[::-1]}),
    )


# ----------------------------------------------------------- close, 10,000 stored


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


async def _close_child(system: str, root: Path, stored: int) -> dict[str, Any]:
    memories = make_memory(system)
    async with sandbox(root) as session:
        before = _status_kb("VmRSS") / 1024
        start = time.perf_counter()
        manager = manager_for(session, memories)
        for k in range(NEW_RUNS):
            await manager.enqueue_rollout_payload(
                segment_payload(stored + k, 0), rollout_id=conversation_id(stored + k)
            )
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "growth_mb": _status_kb("VmHWM") / 1024 - before,
        "calls": memories.calls,
    }


def _child(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scale child {args} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def close_stored(
    stored: int, ours_store: Path, progress: Progress
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for system in ("ours", "builtin"):
        with temp_root(f"scale-close-{system}") as root:
            start = time.perf_counter()
            if system == "ours":
                shutil.copytree(ours_store, root, dirs_exist_ok=True)
            else:
                build_builtin(root, conversations=stored)
            built = time.perf_counter() - start
            out[system] = await asyncio.to_thread(_child, ["close", system, str(root), str(stored)])
            progress(
                f"scale: close with {stored:,} stored, {system}: {out[system]['seconds']:.2f}s, "
                f"+{out[system]['growth_mb']:.0f} MB (store built in {built:.1f}s)"
            )
    return out


# ------------------------------------------------------------- close with N pending


async def close_pending(counts: list[int], progress: Progress) -> dict[int, float]:
    seconds: dict[int, float] = {}
    for n in counts:
        with temp_root("scale-pending") as root:
            memories = make_memory("ours")
            client = MemoryClient(root, generate=memories.capability.generate)
            rt = client.runtime
            for k in range(n):
                await rt.record(segment_payload(k, 0), rollout_id=conversation_id(k))
            start = time.perf_counter()
            await rt.close()
            seconds[n] = time.perf_counter() - start
        progress(f"scale: close with {n:,} pending: {seconds[n]:.2f}s")
    return seconds


async def pending_batches(batch: int, batches: int, progress: Progress) -> list[float]:
    """CPU seconds of each batch: ``batch`` new conversations recorded, then a close, on one
    store that keeps what the earlier batches left (their deferred rollouts included)."""

    cpu: list[float] = []
    with temp_root("scale-batches") as root:
        memories = make_memory("ours")
        rt = MemoryClient(root, generate=memories.capability.generate).runtime
        k = 0
        for b in range(batches):
            start = time.process_time()
            for _ in range(batch):
                await rt.record(segment_payload(k, 0), rollout_id=conversation_id(k))
                k += 1
            await rt.close()
            cpu.append(time.process_time() - start)
            progress(f"scale: batch {b + 1} of {batch:,} pending: {cpu[-1]:.2f} s CPU")
    return cpu


# ------------------------------------------------------ each operation, small and large


async def _timed(samples: int, op: Any) -> float:
    values = []
    for i in range(samples):
        start = time.perf_counter()
        await op(i)
        values.append(time.perf_counter() - start)
    return median(values) * 1e3


async def prepared_store(root: Path, *, conversations: int, entries: int) -> float:
    """``build_ours`` plus one phase 2 (the rendered files and the search index, as the last
    close left them); returns the seconds it took."""

    start = time.perf_counter()
    build_ours(root, conversations=conversations, entries=entries)
    memories = make_memory("ours")
    rt = MemoryClient(root, generate=memories.capability.generate).runtime
    async with rt.write_lock():
        await rt.consolidate_layout()
    return time.perf_counter() - start


class _Store:
    """A prepared store the operations run on: one open client and runtime."""

    def __init__(self, root: Path, conversations: int) -> None:
        self.root = root
        self.conversations = conversations
        self.client = MemoryClient(root, generate=make_memory("ours").capability.generate)
        self.rt = self.client.runtime
        self.live = conversation_id(conversations - 1)


async def operations(stores: list[tuple[Path, int]], samples: int) -> list[dict[str, float]]:
    """Milliseconds of each operation on each prepared store (ours, local folder), the stores
    taking turns sample by sample (the order turning each round): a growth ratio compares two
    stores under the same load and the same disk state, not one measured minutes after the
    other (the record row read 1.68x that way; side by side it is about 1.07x)."""

    opened = [_Store(root, conversations) for root, conversations in stores]
    out: list[dict[str, float]] = [{} for _ in opened]

    async def each(name: str, count: int, op: Any) -> None:
        """``op(store, i)`` ``count`` times on each store in turn: the median of its wall time,
        or of the milliseconds it returns when it times itself."""

        values: list[list[float]] = [[] for _ in opened]
        for i in range(count):
            order = list(range(len(opened)))
            if i % 2:
                order.reverse()
            for k in order:
                start = time.perf_counter()
                took = await op(opened[k], i)
                values[k].append(took if took is not None else (time.perf_counter() - start) * 1e3)
        for k, v in enumerate(values):
            out[k][name] = median(v)

    async def record(s: _Store, i: int) -> None:
        await s.rt.record(segment_payload(s.conversations - 1, 100 + i), rollout_id=s.live)

    await each("record", samples * 3, record)
    for s in opened:
        await s.rt.close()

    async def close_one(s: _Store, i: int) -> None:
        rid = conversation_id(s.conversations + i)
        await s.rt.record(segment_payload(s.conversations + i, 0), rollout_id=rid)
        await s.rt.close()

    await each("close", samples, close_one)

    async def remember(s: _Store, i: int) -> None:
        view = await s.client.view(None)
        await s.client.apply(
            Remember(key=f"bench-{i}", content=f"Bench fact {i}.", kind="fact"),
            expected=view.version,
        )

    await each("remember", samples, remember)

    async def forget(s: _Store, i: int) -> None:
        view = await s.client.view(None)
        await s.client.apply(Forget(key=f"bench-{i}"), expected=view.version)

    await each("forget", samples, forget)

    async def remember_user(s: _Store, i: int) -> None:
        user = MemoryClient(s.root)
        view = await user.view(None)
        await user.apply(
            Remember(key=f"user-{i}", content=f"User fact {i}.", kind="fact"),
            expected=view.version,
        )

    await each("remember_user", samples, remember_user)

    async def forget_user(s: _Store, i: int) -> None:
        user = MemoryClient(s.root)
        view = await user.view(None)
        await user.apply(Forget(key=f"user-{i}"), expected=view.version)

    await each("forget_user", samples, forget_user)

    async def idle(s: _Store, i: int) -> None:
        async with s.rt.write_lock():
            await s.rt.consolidate_layout()

    await each("phase2_idle", samples, idle)

    # The reads time themselves (``instructions()`` alone), each in a fresh sandbox.
    for name, options in _reads().items():

        async def read(s: _Store, i: int, options: dict[str, Any] = options) -> float:
            return await read_first_turn("ours", s.root, 1, **options)

        await each(name, samples, read)
    return out


LONG_TASK_CHARS = 6_000
"""A long first message (a pasted issue or log), all in the workload's words, so that every
word of it is in thousands of entries: the relevant section's costliest lookup."""


def _reads() -> dict[str, dict[str, Any]]:
    """The first-turn reads measured (options of :func:`read_first_turn`): as a run starts;
    without the section "relevant to this task" (the summary only: the read path before it);
    with it for the short task message of :data:`READ_INPUT` and for a
    :data:`LONG_TASK_CHARS`-character one."""

    long_input = [{"role": "user", "content": "Task 0: " + entry_text(7, LONG_TASK_CHARS)}]
    return {
        "read_first_turn": {},
        "read_summary_only": {"relevant": False},
        "read_relevant_short": {},
        "read_relevant_long": {"history": long_input},
    }


READ_INPUT = [
    {"role": "user", "content": "Task {k}: look at the parser."},
    {"role": "assistant", "content": "Looked at it."},
]


async def read_first_turn(
    system: str,
    root: Path,
    samples: int,
    *,
    relevant: bool = True,
    history: list[dict[str, Any]] | None = None,
) -> float:
    """Milliseconds of ``instructions()`` on the first turn of a run (fresh clone and bind);
    ours with or without the section "relevant to this task"."""

    memories = make_memory(system)
    if history is None:
        history = [dict(i) for i in READ_INPUT]
        history[0]["content"] = history[0]["content"].replace("{k}", "0")
    async with sandbox(root) as session:
        manifest = session.state.manifest
        base = memories.capability
        if system == "ours":
            base.read = dataclasses.replace(base.read, relevant=relevant)
        values = []
        for _ in range(samples):
            capability = base.clone()
            capability.bind(session)
            capability.process_context(list(history))
            start = time.perf_counter()
            await capability.instructions(manifest)
            values.append(time.perf_counter() - start)
        manager = manager_for(session, memories)
        if system == "builtin":
            manager._stopped = True  # read only: no close work
    return median(values) * 1e3


async def read_builtin(entries: int, samples: int) -> float:
    from scenario_read import _populate_builtin

    with temp_root("scale-read-builtin") as root:
        all_entries = [
            Entry(
                key=f"entry-{i:05d}",
                content=entry_text(i),
                kind=KINDS[i % len(KINDS)],  # type: ignore[arg-type]
                sources=[Source(conversation="c", item=f"{i:08x}:1")],
                updated_at=BASE_MS + i * 1000,
            )
            for i in range(entries)
        ]
        _populate_builtin(root, all_entries)
        return await read_first_turn("builtin", root, samples)


# ------------------------------------------------------------------ state shrinks


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


async def state_when_forgotten(conversations: int, keep: int) -> tuple[int, int]:
    with temp_root("scale-forget") as root:
        build_ours(root, conversations=conversations, entries=conversations, selected=conversations)
        memories = make_memory("ours")
        client = MemoryClient(root, generate=memories.capability.generate)
        async with client.runtime.write_lock():
            await client.runtime.consolidate_layout()  # rendered, and the search index built
        before = _bytes(root / "memories")
        config = dataclasses.replace(
            memories.capability.generate, max_raw_memories_for_consolidation=keep
        )
        rt = MemoryClient(root, generate=config).runtime
        async with rt.write_lock():
            await rt.consolidate_layout()
        return before, _bytes(root / "memories")


# ------------------------------------------------------ pending check, session API


async def pending_check_execs(conversations: int) -> tuple[int, float]:
    from sandbox_memory.runtime import LayoutRuntime
    from sandbox_memory.workspace import SessionWorkspace

    with temp_root("scale-pending-session") as root:
        build_ours(root, conversations=conversations, entries=SELECTED)
        memories = make_memory("ours")
        async with sandbox(root) as session:
            cap = memories.capability
            rt = LayoutRuntime(
                SessionWorkspace(session), layout=cap.layout, generate=cap.generate, read=cap.read
            )
            rid = conversation_id(conversations - 1)
            await rt.record(segment_payload(conversations - 1, 50), rollout_id=rid)
            calls = 0
            real = session.exec

            async def counting(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                return await real(*args, **kwargs)

            session.exec = counting  # type: ignore[method-assign]
            start = time.perf_counter()
            pending = await rt.pending_rollouts()
            seconds = time.perf_counter() - start
            session.exec = real  # type: ignore[method-assign]
            assert pending == [rid], pending
    return calls, seconds


# --------------------------------------------------------------------------- rows


async def run(sizes: dict[str, Any], progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []
    extra: dict[str, Any] = {}
    stored = sizes["stored"]
    small, large = sizes["ops"]
    samples = sizes["samples"]
    with temp_root("scale-small") as small_root, temp_root("scale-large") as large_root:
        built_small = await prepared_store(small_root, conversations=small // 2, entries=small)
        built_large = await prepared_store(large_root, conversations=large // 2, entries=large)
        progress(
            f"scale: stores built ({small:,} entries in {built_small:.0f}s, {large:,} in "
            f"{built_large:.0f}s, rendered files and search index included)"
        )
        closes = await close_stored(stored, large_root, progress)
        few = sizes["stored_few"]
        with temp_root("scale-few") as few_root:
            await prepared_store(few_root, conversations=few, entries=2 * few)
            closes_few = await close_stored(few, few_root, progress)
        ops_small, ops_large = await operations(
            [(small_root, small // 2), (large_root, large // 2)], samples
        )
        progress(f"scale: operations at {small:,} entries: {ops_small}")
        progress(f"scale: operations at {large:,} entries: {ops_large}")
    read_b = await read_builtin(large, samples)
    o, b = closes["ours"], closes["builtin"]
    extra["close_stored"] = closes
    rows.append(
        Row(
            name="scale.close_10k.wall",
            metric=(
                f"close with {stored:,} conversations stored ({large:,} entries) and {NEW_RUNS} "
                "new: wall time"
            ),
            unit="s",
            ours=o["seconds"],
            builtin=b["seconds"],
            target="ours <= 0.5x built-in",
            met=o["seconds"] <= 0.5 * b["seconds"],
            note=f"model calls: ours {o['calls']}, built-in {b['calls']}",
        )
    )
    o3, b3 = closes_few["ours"], closes_few["builtin"]
    extra["close_stored_few"] = closes_few
    rows.append(
        Row(
            name="scale.close_3k.wall",
            metric=(
                f"close with {few:,} conversations stored ({2 * few:,} entries) and {NEW_RUNS} "
                "new: wall time"
            ),
            unit="s",
            ours=o3["seconds"],
            builtin=b3["seconds"],
            target="ours <= 0.5x built-in",
            met=o3["seconds"] <= 0.5 * b3["seconds"],
            note=f"model calls: ours {o3['calls']}, built-in {b3['calls']}",
        )
    )
    rows.append(
        Row(
            name="scale.close_10k.memory",
            metric=f"close with {stored:,} conversations stored and {NEW_RUNS} new: peak RSS growth",
            unit="MB",
            ours=o["growth_mb"],
            builtin=b["growth_mb"],
            target="ours <= 2x built-in",
            met=o["growth_mb"] <= 2 * max(b["growth_mb"], 1.0),
        )
    )
    extra["operations"] = {"small": ops_small, "large": ops_large}
    labels = {
        "record": "record a run",
        "close": "close with one new conversation",
        "remember": "Remember of one layout fact",
        "forget": "Forget of one layout fact",
        "remember_user": "Remember of one layout fact through a fresh MemoryClient (view, apply)",
        "forget_user": "Forget of one layout fact through a fresh MemoryClient (view, apply)",
        "phase2_idle": "phase 2 with nothing new",
        "read_first_turn": "first-turn read prompt",
    }
    for op, label in labels.items():
        ratio = ops_large[op] / ops_small[op]
        rows.append(
            Row(
                name=f"scale.{op}.growth",
                metric=(
                    f"{label}: time at {large:,} entries ({large // 2:,} conversations) / at "
                    f"{small:,} ({small // 2:,})"
                ),
                unit="x",
                ours=ratio,
                builtin=None,
                target="ours <= 1.5",
                met=ratio <= 1.5,
                note=f"{ops_small[op]:.2f} ms -> {ops_large[op]:.2f} ms",
            )
        )
    extra["read_large"] = {"ours": ops_large["read_first_turn"], "builtin": read_b}
    for name, label in (
        ("read_relevant_short", "a short task message"),
        ("read_relevant_long", f"a {LONG_TASK_CHARS:,}-character task message"),
    ):
        alone = ops_large["read_summary_only"]
        rows.append(
            Row(
                name=f"scale.{name}_20k",
                metric=(
                    f"first-turn read prompt with the relevant section, {label}, {large:,} "
                    f"entries ({large // 2:,} conversations); built-in: its summary read"
                ),
                unit="ms",
                ours=ops_large[name],
                builtin=read_b,
                target="ours <= 0.5x built-in",
                met=ops_large[name] <= 0.5 * read_b,
                note=(
                    f"ours without the section (the summary only): {alone:.2f} ms, so the "
                    f"section costs {ops_large[name] - alone:.2f} ms; at {small:,} entries: "
                    f"{ops_small['read_summary_only']:.2f} -> {ops_small[name]:.2f} ms"
                ),
            )
        )
    rows.append(
        Row(
            name="scale.read_first_turn_20k",
            metric=f"first-turn read prompt, {large:,} entries",
            unit="ms",
            ours=ops_large["read_first_turn"],
            builtin=read_b,
            target="ours <= 0.5x built-in",
            met=ops_large["read_first_turn"] <= 0.5 * read_b,
        )
    )

    counts = sizes["pending"]
    pend = await close_pending(counts, progress)
    lo, hi = min(counts), max(counts)
    per = {n: pend[n] / n for n in counts}
    extra["close_pending"] = pend
    rows.append(
        Row(
            name=f"scale.close_pending.n{hi}_vs_n{lo}",
            metric=f"close time per pending rollout at N={hi:,} / at N={lo:,}",
            unit="x",
            ours=per[hi] / per[lo],
            builtin=None,
            target="ours <= 1.5 (linear in N)",
            met=per[hi] / per[lo] <= 1.5,
            note=", ".join(f"N={n:,}: {pend[n]:.2f} s" for n in counts),
        )
    )

    batch, batches = sizes["pending_batches"]
    per_batch = await pending_batches(batch, batches, progress)
    extra["pending_batches_cpu"] = per_batch
    # The first batch starts from nothing known (no registry, no entries): the further ones
    # are what a store that keeps growing costs.
    flat = per_batch[-1] / per_batch[1]
    rows.append(
        Row(
            name=f"scale.pending_batches.b{batch}",
            metric=(
                f"CPU time of recording {batch:,} new conversations and closing, batch "
                f"{batches} / batch 2 (earlier batches' work stays stored)"
            ),
            unit="x",
            ours=flat,
            builtin=None,
            target="ours <= 1.5 (flat per batch)",
            met=flat <= 1.5,
            note=", ".join(f"{c:.2f} s" for c in per_batch),
        )
    )

    forget_n, keep = sizes["forget"]
    before, after = await state_when_forgotten(forget_n, keep)
    extra["state_bytes"] = {"before": before, "after": after}
    rows.append(
        Row(
            name="scale.state_when_forgotten",
            metric=(
                f"bytes under memories/ after phase 2 forgets {forget_n - keep:,} of {forget_n:,} "
                "conversations / before"
            ),
            unit="x",
            ours=after / before,
            builtin=None,
            target="ours < 1 (shrinks)",
            met=after < before,
            note=f"{before:,} B -> {after:,} B",
        )
    )

    execs, seconds = await pending_check_execs(sizes["session_pending"])
    extra["pending_check_session"] = {"execs": execs, "seconds": seconds}
    rows.append(
        Row(
            name="scale.pending_check.session_execs",
            metric=(
                f"sandbox execs of the pending-work check through the session API, "
                f"{sizes['session_pending']:,} conversations stored, 1 new run"
            ),
            unit="execs",
            ours=float(execs),
            builtin=None,
            target="ours <= 10 (not one per file)",
            met=execs <= 10,
            note=f"{seconds * 1e3:.0f} ms",
        )
    )
    return rows, extra


async def read_only(entries: int, samples: int) -> dict[str, float]:
    """The read rows alone (``python bench/scenario_scale.py read 20000 5``): a store of
    ``entries`` entries (half as many conversations) as the last close left it."""

    with temp_root("scale-read") as root:
        await prepared_store(root, conversations=entries // 2, entries=entries)
        out = {
            name: await read_first_turn("ours", root, samples, **options)
            for name, options in _reads().items()
        }
    with temp_root("scale-read-builtin"):
        out["builtin"] = await read_builtin(entries, samples)
    return out


def main(argv: list[str]) -> None:
    if argv[0] == "read":
        print(json.dumps(asyncio.run(read_only(int(argv[1]), int(argv[2]))), indent=1))
        return
    step, system, root, stored = argv[0], argv[1], Path(argv[2]), int(argv[3])
    assert step == "close"
    print(json.dumps(asyncio.run(_close_child(system, root, stored))))


if __name__ == "__main__":
    main(sys.argv[1:])
