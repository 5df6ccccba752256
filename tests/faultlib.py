"""Shared by the robustness suites (faults, bad input, secrets).

- :class:`PhaseOneModel`: the model behind the model engine (the only seam these suites mock):
  it records every call, answers with a function of the transcript it was sent, can be slow,
  and tracks how many calls run at once.
- sandbox helpers: a ``SandboxAgent`` with ``Memory``, ``Filesystem`` and ``Shell``, run configs,
  and the SDK manager of a session (whose ``last_report`` a close fills in).
- checks: every state file parses, the text of ``sessions/`` and ``memories/``.
- subprocess scenarios (``python tests/faultlib.py <scenario> ...``) for the tests that need a
  process to die or two processes to race, and :func:`run_scenario` to start them.
- :func:`figure`: numbers for docs/robustness.md, written when ``SANDBOX_MEMORY_FIGURES`` names a
  file (``SANDBOX_MEMORY_FIGURES=figures.jsonl pytest tests/test_faults.py ...``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import Runner
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.run import RunConfig
from agents.sandbox import SandboxAgent, SandboxRunConfig
from agents.testing import assistant_message
from agents.usage import Usage

from helpers import (
    agent,
    exec_items,
    index_entry_rows,
    layout_runtime,
    rebuilt_index_rows,
    run_payload,
    sealed,
)

TESTS_DIR = Path(__file__).resolve().parent
SRC_DIR = TESTS_DIR.parent / "src"
TMP_SUFFIX = ".tmp-sbm"

# --------------------------------------------------------------------------- the model seam

ITEM_LINE_RE = re.compile(r"^\[(?P<id>[0-9A-Za-z_.-]+:\d+)\] (?P<label>[^:\n]*)", re.MULTILINE)
"""A transcript line as the model engine renders it: ``[<memory_item_id>] <label>: <text>``."""


@dataclass
class MemoryCall:
    """One call the model engine made: what the memory model was shown."""

    instructions: str
    input: str

    @property
    def text(self) -> str:
        return self.instructions + "\n" + self.input


Answer = Callable[[str], "str | dict[str, Any] | BaseException | Awaitable[Any]"]


def extraction(
    candidates: list[dict[str, Any]] | None = None,
    *,
    summary: str = "Worked on the task.",
    slug: str = "task",
    raw: str = "- did the task",
) -> dict[str, Any]:
    """A phase-1 reply in the model engine's structured-output shape."""

    return {
        "rollout_summary": summary,
        "rollout_slug": slug,
        "raw_memory": raw,
        "candidates": candidates or [],
    }


def transcript_items(text: str) -> list[tuple[str, str]]:
    """``(memory_item_id, label)`` of every item line in a transcript sent to the model."""

    return [(m.group("id"), m.group("label").strip()) for m in ITEM_LINE_RE.finditer(text)]


def item_id(text: str, label_prefix: str) -> str:
    """The id of the first transcript item whose label starts with ``label_prefix``."""

    for found, label in transcript_items(text):
        if label.startswith(label_prefix):
            return found
    raise AssertionError(f"no item labelled {label_prefix!r} in the transcript:\n{text[:2000]}")


def cite_user(text: str) -> dict[str, Any]:
    """Default answer: one fact citing the first user item, quoting its first words."""

    user = item_id(text, "user")
    line = next(line for line in text.splitlines() if line.startswith(f"[{user}] user"))
    words = line.split(":", 1)[1].split()[:8]
    return extraction(
        [
            {
                "key": "task",
                "content": "The task: " + " ".join(words),
                "kind": "fact",
                "sources": [user],
            }
        ]
    )


class PhaseOneModel(Model):
    """A model for the model engine that records what it is sent and answers from it."""

    def __init__(self, answer: Answer = cite_user, *, delay: float = 0.0) -> None:
        self.answer = answer
        self.delay = delay
        self.calls: list[MemoryCall] = []
        self.active = 0
        self.max_active = 0

    async def get_response(  # type: ignore[override]
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        text = _input_text(input)
        self.calls.append(MemoryCall(system_instructions or "", text))
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            out = self.answer(text)
            if asyncio.iscoroutine(out) or isinstance(out, Awaitable):
                out = await out
        finally:
            self.active -= 1
        if isinstance(out, BaseException):
            raise out
        body = out if isinstance(out, str) else json.dumps(out)
        return ModelResponse(output=[assistant_message(body)], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover
        raise NotImplementedError("the model engine does not stream")


def _input_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    parts: list[str] = []
    for item in value or []:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(c.get("text", "")) for c in content if isinstance(c, dict))
        else:
            parts.append(json.dumps(item, default=str))
    return "\n".join(parts)


# --------------------------------------------------------------------------- the sandbox side


def sandbox_agent(model: Any, memory: Any, *, tools: list[Any] | None = None) -> SandboxAgent:
    """The agent of the fault tests: :func:`helpers.agent` named ``worker``."""

    return agent(model, memory, name="worker", tools=tools)


def rc(sandbox: Any, group_id: str | None = None, **kw: Any) -> RunConfig:
    """The run config of a run in the sandbox session ``sandbox``: its ``group_id`` (the
    conversation memory files the run under) and ``kw``'s other settings."""

    return RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id=group_id, **kw)


def manager_of(sandbox: Any, memory: Any) -> Any:
    """The session's memory manager (bound by the first run); its close fills ``last_report``."""

    from sandbox_memory import _sdk

    manager = _sdk.find_manager(sandbox, memory)
    assert manager is not None, "no memory manager: has a run bound the capability?"
    return manager


def snapshot_tars(base: Path) -> list[Path]:
    return sorted(p for p in base.glob("*.tar") if p.stat().st_size > 0) if base.is_dir() else []


# --------------------------------------------------------------------------- checks


def files_under(root: Path, *dirs: str) -> Iterator[Path]:
    for d in dirs:
        base = root / d
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*") if p.is_file())


def memory_bytes(root: Path) -> dict[str, bytes]:
    """Every file of ``sessions/`` and ``memories/`` (relative path -> bytes)."""

    return {
        str(p.relative_to(root)): p.read_bytes() for p in files_under(root, "sessions", "memories")
    }


def is_leftover(path: Path) -> bool:
    """A temporary file a killed writer left behind (readers ignore them)."""

    return path.name.endswith(TMP_SUFFIX)


def unparsable_files(root: Path) -> list[str]:
    """State files that do not parse: ``*.json`` whole, ``*.jsonl`` line by line.

    A ``*.jsonl`` may end with one torn line (no final newline): an interrupted append that
    readers leave for later, so it is not counted.
    """

    bad: list[str] = []
    for path in files_under(root, "memories", "sessions"):
        if is_leftover(path) or ".broken-" in path.name:
            continue
        data = path.read_bytes()
        if path.suffix == ".json":
            try:
                json.loads(data)
            except ValueError:
                bad.append(str(path.relative_to(root)))
        elif path.suffix == ".jsonl":
            lines = data.split(b"\n")
            complete = lines[:-1]  # the part after the last newline is a torn tail, if any
            for n, line in enumerate(complete):
                if not line.strip():
                    continue
                try:
                    json.loads(line.decode("utf-8", "replace"))  # as the readers decode
                except ValueError:
                    bad.append(f"{path.relative_to(root)}:{n + 1}")
    return bad


def log_text(caplog: Any) -> str:
    """Every captured log line, formatted, with any traceback."""

    out: list[str] = []
    for record in caplog.records:
        out.append(f"{record.levelname} {record.name} {record.getMessage()}")
        if record.exc_info and record.exc_info[1] is not None:
            out.append(repr(record.exc_info[1]))
        if record.exc_text:
            out.append(record.exc_text)
    return "\n".join(out)


def warnings_from(caplog: Any, logger: str = "sandbox_memory") -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(logger) and r.levelno >= 30  # WARNING and above
    ]


def figure(name: str, value: Any) -> None:
    """Record a number for docs/robustness.md when ``SANDBOX_MEMORY_FIGURES`` names a file."""

    target = os.environ.get("SANDBOX_MEMORY_FIGURES")
    if not target:
        return
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"name": name, "value": value}) + "\n")


def runtime(root: Path, **generate: Any) -> Any:
    """The layout runtime the SDK bridge builds, over a sandbox workspace folder (the engine
    setting ``auto`` unless ``generate`` names one, as a user's default ``Memory()``)."""

    generate.setdefault("engine", "auto")
    return layout_runtime(root, **generate)


async def record_conversations(root: Path, names: list[str], *, size: int = 400) -> None:
    """Record one run in each conversation, as the bridge does, with nothing extracted yet.

    This is what a session leaves behind when it dies before its close: pending work.
    """

    rt = runtime(root, engine="offline")
    for name in names:
        await rt.record(
            run_payload(
                f"{name}: deploy the service. " * 4,
                reply=None,
                when=None,
                items=exec_items(
                    f"call-{name}",
                    "make deploy",
                    "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code"
                    " 0\nOutput:\n" + "deployed\n" * (size // 9),
                ),
                final_output=f"{name} deployed.",
            ),
            rollout_id=name,
        )


# --------------------------------------------------------------------------- bulk input


def segment_line(
    rollout_id: str,
    segment_id: str,
    user_text: str,
    *,
    tool_output: str = "ok",
    when: str = "2026-01-01T00:00:00+00:00",
) -> bytes:
    """One recorded segment line (user message, one exec call and its output, an answer),
    sealed as memory seals what it records."""

    seg = {
        "updated_at": when,
        "rollout_id": rollout_id,
        "segment_id": segment_id,
        "person": None,
        "input": [{"role": "user", "content": user_text, "memory_item_id": f"{segment_id}:0"}],
        "generated_items": [
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": f"call-{segment_id}",
                "arguments": json.dumps({"cmd": "python3 -m pytest -q"}),
                "memory_item_id": f"{segment_id}:1",
            },
            {
                "type": "function_call_output",
                "call_id": f"call-{segment_id}",
                "output": "Chunk ID: 1\nWall time: 0.1 seconds\nProcess exited with code 0\n"
                "Output:\n" + tool_output,
                "memory_item_id": f"{segment_id}:2",
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Done."}],
                "memory_item_id": f"{segment_id}:3",
            },
        ],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
        "final_output": "Done.",
    }
    return sealed(json.dumps(seg, separators=(",", ":")), rollout_id)


# --------------------------------------------------------------------------- subprocesses


def scenario_command(name: str, *args: str, unprivileged: bool = False) -> list[str]:
    """The command line of a scenario below; ``unprivileged`` drops root's file override."""

    cmd = [sys.executable, str(Path(__file__).resolve()), name, *args]
    if unprivileged and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise RuntimeError("running as root without setpriv: cannot drop CAP_DAC_OVERRIDE")
        # Root ignores file modes through CAP_DAC_OVERRIDE; without it a 0555 folder is
        # read-only for root too, as it is for everyone else.
        cmd = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--", *cmd]
    return cmd


def scenario_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), str(SRC_DIR), env.get("PYTHONPATH", "")])
    env.pop("OPENAI_API_KEY", None)
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    return env


def run_scenario(
    name: str, *args: str, unprivileged: bool = False, timeout: float = 60
) -> dict[str, Any]:
    """Run a scenario to its end; return the JSON it prints last (stderr on failure)."""

    done = subprocess.run(
        scenario_command(name, *args, unprivileged=unprivileged),
        env=scenario_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"scenario {name} exited {done.returncode}:\n{done.stderr[-4000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(lines[-1])
    result["stderr"] = done.stderr
    return result


def start_scenario(name: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        scenario_command(name, *args),
        env=scenario_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill_when_ready(proc: subprocess.Popen[str], *, after: float) -> None:
    """Wait for the scenario's ``ready`` line, let it work ``after`` seconds, SIGKILL it."""

    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"scenario did not start: {line!r}"
    time.sleep(after)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


# The scenarios run in a fresh interpreter: ``python tests/faultlib.py <name> <args>``.


async def _write_loop(root: str) -> None:
    """Record, extract and consolidate, and rewrite a 1.5 MB store file, forever."""

    from sandbox_memory.stores.records import Entry, LayoutMemory, Source

    rt = layout_runtime(root, engine="offline")
    big = LayoutMemory(
        entries={
            f"entry-{i}": Entry(
                key=f"entry-{i}",
                content=f"Fact number {i}: " + "x" * 200,
                kind="procedure",
                sources=[Source(conversation="c", item=f"s:{i}")],
            )
            for i in range(5_000)
        }
    )
    i = 0
    while True:
        await rt.record(
            {"input": [{"role": "user", "content": f"Run {i}: I prefer tabs. " + "y" * 50_000}]},
            rollout_id=f"conv-{i % 3}",
        )
        big.version = i
        await rt.store.ws.write_atomic(
            f"{rt.store.dir}/big.json", big.model_dump_json().encode("utf-8")
        )
        await rt.close()
        if i == 0:
            print("ready", flush=True)
        i += 1


async def _share_folder(root: str, conversation: str, barrier: str, runs: str) -> None:
    """One of two processes recording one conversation each into one workspace, then closing."""

    from agents import Runner
    from agents.sandbox import Manifest
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from agents.testing import ScriptedModel

    from sandbox_memory import Memory, MemoryGenerateConfig

    model = PhaseOneModel(delay=0.1)
    memory = Memory(
        generate=MemoryGenerateConfig(
            engine="model", phase_one_model=model, lock_timeout_seconds=30
        )
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(root=root))
    report: dict[str, Any] = {}
    async with sandbox:
        for n in range(int(runs)):
            agent_model = ScriptedModel([[assistant_message(f"{conversation} step {n} done")]])
            await Runner.run(
                sandbox_agent(agent_model, memory),
                f"{conversation} step {n}: remember the marker {conversation}-{n}.",
                run_config=rc(sandbox, group_id=conversation),
            )
        manager = manager_of(sandbox, memory)
        Path(barrier, conversation).touch()
        while len(list(Path(barrier).iterdir())) < 2:  # both processes close together
            await asyncio.sleep(0.01)
    report = manager.last_report or {}
    print(json.dumps({"report": report, "model_calls": len(model.calls)}), flush=True)


async def _one_conversation_race(base: str, who: str, workers: str, trials: str, runs: str) -> None:
    """One of ``workers`` processes that, in each of ``trials`` fresh workspaces under ``base``,
    all at once record ``runs`` runs of one conversation (each extracted after it, as the SDK
    bridge does) and close. Trials run one after the other: every worker waits for all of them
    at a gate before a trial and after it."""

    async def gate(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / who).touch()
        while len(list(folder.iterdir())) < int(workers):
            await asyncio.sleep(0.005)

    async def slow(text: str) -> dict[str, Any]:
        await asyncio.sleep(random.uniform(0, 0.05))  # a model call takes its time
        return each_run_learned(text)

    import logging

    logging.basicConfig(level=logging.WARNING, format="%(process)d %(message)s")
    logging.getLogger("sandbox_memory").setLevel(logging.INFO)
    model = PhaseOneModel(slow)
    failures: list[str] = []
    for t in range(int(trials)):
        root = Path(base, f"trial-{t}")
        root.mkdir(parents=True, exist_ok=True)
        await gate(Path(base, f"gate-{t}-start"))
        rt = layout_runtime(root, engine="model", phase_one_model=model, lock_timeout_seconds=60)
        background: list[asyncio.Task[bool]] = []
        try:
            for n in range(int(runs)):
                # Runs end at different moments: one process records while others close.
                await asyncio.sleep(random.uniform(0, 0.3))
                await rt.record(race_run(who, t, n), rollout_id="shared")
                # The bridge extracts after a run in the background, unless the session closes
                # before that work starts (the close clears its queue): half the time here.
                if random.random() < 0.5:
                    background.append(asyncio.create_task(rt.consolidate_conversation("shared")))
                await asyncio.sleep(random.uniform(0, 0.02))
            await asyncio.gather(*background)
            await rt.close()
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            failures.append(f"trial {t}: {type(exc).__name__}: {exc}")
        await gate(Path(base, f"gate-{t}-end"))
    print(json.dumps({"failures": failures}), flush=True)


RACE_MARKER_RE = re.compile(r"Run (w\d+t\d+r\d+):")


def each_run_learned(text: str) -> dict[str, Any]:
    """A phase-1 answer with one fact per user message of :func:`race_run`: each run leaves a
    lesson of its own (``run-<marker>``), so a lost one is seen."""

    lines = text.splitlines()
    candidates = []
    for item, label in transcript_items(text):
        line = next(x for x in lines if x.startswith(f"[{item}] {label}"))
        found = RACE_MARKER_RE.search(line) if label.startswith("user") else None
        if found:
            marker = found.group(1)
            candidates.append(
                {
                    "key": f"run-{marker}",
                    "content": f"Run {marker}: we decided to deploy {marker} with make ship.",
                    "kind": "fact",
                    "sources": [item],
                }
            )
    return extraction(candidates)


def run_markers(text: str) -> list[str]:
    """Markers of the :func:`race_run` runs whose user message is an item of a transcript (not
    the context around it)."""

    lines = text.splitlines()
    found: list[str] = []
    for item, label in transcript_items(text):
        line = next(x for x in lines if x.startswith(f"[{item}] {label}"))
        marker = RACE_MARKER_RE.search(line) if label.startswith("user") else None
        if marker:
            found.append(marker.group(1))
    return found


def race_run(who: str, trial: int, n: int) -> dict[str, Any]:
    """A run of the race above with a lesson of its own: a decision naming the run."""

    marker = f"w{who}t{trial}r{n}"
    return run_payload(
        f"Run {marker}: we decided to deploy {marker} with make ship.",
        reply=f"Noted for {marker}.",
        when=None,
        final_output=f"Noted for {marker}.",
    )


async def _crash_mid_extraction(root: str) -> None:
    """Run once, then die (SIGKILL) while the memory model is still working."""

    from agents import Runner
    from agents.sandbox import Manifest
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from agents.testing import ScriptedModel

    from sandbox_memory import Memory, MemoryGenerateConfig

    started = asyncio.Event()

    async def never(text: str) -> Any:
        started.set()
        await asyncio.sleep(3600)

    memory = Memory(
        generate=MemoryGenerateConfig(engine="model", phase_one_model=PhaseOneModel(never))
    )
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    await sandbox.start()
    await Runner.run(
        sandbox_agent(ScriptedModel([[assistant_message("Deployed with make deploy.")]]), memory),
        "Deploy the app. I prefer make targets over raw scripts.",
        run_config=rc(sandbox, group_id="crashed"),
    )
    await asyncio.wait_for(started.wait(), 10)
    os.kill(os.getpid(), signal.SIGKILL)


async def _read_only_close(root: str, snapshots: str) -> None:
    """Run once and close with a read-only memory folder; report what happened."""

    import logging

    from agents import Runner
    from agents.sandbox import LocalSnapshotSpec, Manifest
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from agents.testing import ScriptedModel

    from sandbox_memory import Memory, MemoryGenerateConfig

    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(message)s"
    )
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    sandbox = await UnixLocalSandboxClient().create(
        manifest=Manifest(root=root), snapshot=LocalSnapshotSpec(base_path=Path(snapshots))
    )
    raised: str | None = None
    try:
        async with sandbox:
            await Runner.run(
                sandbox_agent(ScriptedModel([[assistant_message("Tests pass.")]]), memory),
                "Run the tests. I prefer pytest over unittest.",
                run_config=rc(sandbox, group_id="read-only"),
            )
    except BaseException as exc:  # noqa: BLE001 - the point is to report it
        raised = repr(exc)
    print(json.dumps({"raised": raised}), flush=True)


async def _nearly_full_disk(root: str, path_kind: str, free: str) -> None:
    """Three runs through the SDK while the rollout file can grow by only ``free`` bytes.

    ``RLIMIT_FSIZE`` makes the kernel cut writes past the limit short, exactly as a full disk
    does (``SIGXFSZ`` ignored: the write returns what fit, then ``EFBIG``).
    """

    import logging
    import resource

    from agents.sandbox import Manifest
    from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
    from agents.testing import ScriptedModel

    from sandbox_memory import Memory, MemoryGenerateConfig, _sdk
    from sandbox_memory.workspace import SessionWorkspace

    if path_kind == "session":
        _sdk.workspace_for_session = SessionWorkspace  # type: ignore[assignment]
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                messages.append(record.getMessage())

    logging.getLogger("sandbox_memory").addHandler(Keep())
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    memory = Memory(generate=MemoryGenerateConfig(engine="offline"))
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=root))
    rollout = Path(root, "sessions", "full.jsonl")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    async with sandbox:
        for n, text in enumerate(
            # The first run makes the file bigger than the second's temporary copy (session
            # path), so the cut falls on the append itself.
            ["First run: " + "a" * 100_000, "Second run: " + "z" * 60_000, "Third."]
        ):
            if n == 1:
                resource.setrlimit(
                    resource.RLIMIT_FSIZE, (rollout.stat().st_size + int(free), hard)
                )
            if n == 2:
                resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
            await Runner.run(
                sandbox_agent(ScriptedModel([[assistant_message(f"run {n} done")]]), memory),
                text,
                run_config=rc(sandbox, group_id="full"),
            )
    data = rollout.read_bytes()
    lines = data.split(b"\n")
    whole = []
    for line in lines[:-1]:
        whole.append(json.loads(line)["input"][0]["content"][:12])
    print(
        json.dumps({"runs": whole, "tail": lines[-1].decode()[:40], "messages": messages}),
        flush=True,
    )


WRITE_OPS = ("write_atomic", "append_line", "remove", "rename", "create_exclusive", "swap")


def killing_workspace(root: str, kill_at: int) -> Any:
    """A real local workspace whose process dies (``os._exit``) at its ``kill_at``-th write.

    Every write primitive is a write point; the process dies just before the write, so
    "killed before write k" is also "killed right after write k-1". ``kill_at=0`` never
    kills and counts the writes (``points``).
    """

    from sandbox_memory.workspace import LocalWorkspace

    class KillingWorkspace(LocalWorkspace):
        points: list[str] = []

    def wrap(name: str) -> Any:
        real = getattr(LocalWorkspace, name)

        async def op(self: Any, path: str, *args: Any, **kw: Any) -> Any:
            self.points.append(f"{name} {path}")
            if len(self.points) == kill_at:
                os._exit(137)
            return await real(self, path, *args, **kw)

        return op

    for name in WRITE_OPS:
        setattr(KillingWorkspace, name, wrap(name))
    ws = KillingWorkspace(root)
    ws.points = []
    return ws


RENDERED_VIEWS = frozenset({"MEMORY.md", "memory_summary.md", "raw_memories.md"})


async def close_state(root: Path) -> dict[str, Any]:
    """What a close leaves, without times: compared between an interrupted and a clean close."""

    mem = root / "memories"
    store = mem / "store"
    state: dict[str, Any] = {}
    for p in sorted(mem.rglob("*")):
        rel = str(p.relative_to(mem))
        if not p.is_file() or is_leftover(p) or ".broken-" in p.name or rel.startswith("store/"):
            continue
        if p.name in ("phase_two_selection.json",) or p.suffix in (".sqlite", ".db"):
            continue
        text = p.read_text()
        # Rendered views list entries newest first: an entry learned by the fresh close is
        # newer than in the uninterrupted one, so their order is not compared, their lines are.
        # Which of several equal statements (same key, same text, stamped in the same
        # millisecond) a view cites is a tie: citations are not compared, the text is.
        text = re.sub(r"  <!-- sources: [^>]* -->|\nLearned from: .*", "", text)
        state[rel] = sorted(text.splitlines()) if rel in RENDERED_VIEWS else text

    def entries(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: (e["kind"], e["content"], e["status"]) for k, e in doc["entries"].items()}

    from helpers import read_layout

    state["store/layout"] = entries(read_layout(root))
    for p in sorted((store / "conversations").glob("*.json")):
        state[f"store/conversations/{p.stem}"] = entries(json.loads(p.read_text()))
    registry = json.loads((store / "registry.json").read_text())["conversations"]
    state["store/registry"] = {
        rid: sorted(e["key"] for e in group) for rid, group in registry.items()
    }
    for p in sorted((store / "progress").glob("*.json")):
        doc = json.loads(p.read_text())
        state[f"store/progress/{p.stem}"] = {
            k: doc.get(k) for k in ("offset", "consolidated", "status", "attempts", "slug")
        }
    from sandbox_memory.stores.files import Store
    from sandbox_memory.workspace import LocalWorkspace

    log = await Store(LocalWorkspace(root), "memories").read_log()
    state["store/log"] = sorted(json.dumps([r.cause, r.scope, sorted(r.keys)]) for r in log)
    return state


def _timeless(value: Any) -> Any:
    if isinstance(value, str):
        return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00|\d{13}", "<t>", value)
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


async def _prepare_close(root: str) -> None:
    """Two conversations learned once, then a second run of each: the close has work on both
    sides (new notes appended to old ones, a promotion, a new conversation)."""

    rt = runtime(Path(root), engine="offline")
    for name in ("alpha", "beta"):
        await rt.record(learning_run(name, 1), rollout_id=name)
    await rt.close()
    for name, n in (("alpha", 2), ("beta", 2), ("gamma", 1)):
        await rt.record(learning_run(name, n), rollout_id=name)


def learning_run(name: str, n: int) -> dict[str, Any]:
    """A run the offline engine learns from: a preference, a decision, a test command."""

    def run(cmd: str, call: str, code: int, out: str) -> list[dict[str, Any]]:
        return exec_items(
            call,
            cmd,
            "Chunk ID: 1\nWall time: 0.1 seconds\n"
            f"Process exited with code {code}\nOutput:\n{out}\n",
        )

    return run_payload(
        f"Run {n} of {name}: fix the failing test. I prefer pytest over "
        f"unittest. We decided to deploy {name} with make deploy-{name}.",
        reply=f"Fixed {name}; tests pass.",
        when=None,
        items=[
            *run("python3 -m pytest -q", f"a{n}", 1, f"FAILED test_{name}.py::test_{n}"),
            *run("python3 -m pytest -q", f"b{n}", 0, "3 passed"),
        ],
        final_output=f"Fixed {name}; tests pass.",
    )


async def _close_with(root: str, kill_at: int) -> list[str]:

    ws = killing_workspace(root, kill_at)
    rt = layout_runtime(ws, engine="offline", lock_timeout_seconds=5)
    await rt.close()
    return list(ws.points)


def _kill_points(base: str, only: str = "") -> None:
    """Kill a close at each of its write points (a forked child, ``os._exit``), then run a
    fresh close and compare what is left with an uninterrupted close of the same work."""

    work = Path(base)
    prepared = work / "prepared"
    prepared.mkdir()
    asyncio.run(_prepare_close(str(prepared)))
    clean = work / "clean"
    shutil.copytree(prepared, clean, symlinks=True)
    points = asyncio.run(_close_with(str(clean), 0))
    expected = _timeless(asyncio.run(close_state(clean)))
    wanted = [int(k) for k in only.split(",") if k] or list(range(1, len(points) + 1))
    results: list[dict[str, Any]] = []
    for k in wanted:
        target = work / f"kill-{k}"
        shutil.copytree(prepared, target, symlinks=True)
        pid = os.fork()
        if pid == 0:  # the child: a close that dies at write k
            try:
                asyncio.run(_close_with(str(target), k))
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 137
        asyncio.run(_close_with(str(target), 0))  # the fresh close
        got = _timeless(asyncio.run(close_state(target)))
        differs = sorted(
            key for key in set(expected) | set(got) if expected.get(key) != got.get(key)
        )
        results.append(
            {
                "k": k,
                "point": points[k - 1],
                "killed": killed,
                "differs": differs,
                "detail": {d: [expected.get(d), got.get(d)] for d in differs[:2]},
            }
        )
        shutil.rmtree(target)
    print(json.dumps({"points": points, "results": results}), flush=True)


async def _command_with(root: str, kill_at: int, command: str) -> list[str]:
    """A person's command on layout memory (``remember`` a procedure that replaces a learned
    one, or ``forget`` a learned procedure, whose copies in conversations go too), through
    ``MemoryClient`` (its phase 2 included), over a workspace that dies at write ``kill_at``."""

    from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, Remember

    ws = killing_workspace(root, kill_at)
    client = MemoryClient(ws, generate=MemoryGenerateConfig(engine="offline"))
    view = await client.view(None)
    key = next(k for k, e in sorted(view.entries.items()) if e.kind == "procedure")
    if command == "remember":
        await client.apply(
            Remember(key=key, content="Run the tests with `make check`.", kind="procedure"),
            expected=view.version,
        )
    else:
        await client.apply(Forget(key=key), expected=view.version)
    return list(ws.points)


def _kill_points_of_a_command(base: str, command: str, patched: str = "") -> None:
    """Kill a command at each of its write points, then close afresh: what is left equals a
    close after the whole command or a close without it, and the former for every kill after
    the change's commit point (``store/layout/commit.json`` written). ``patched``: the
    rendering saved however small memory is, so the command patches the rendered files
    (``render/patch.py``); how many commands did is in the output."""

    from sandbox_memory.render.step import Renderer

    made: list[int] = []
    if patched:
        import sandbox_memory.render.step as render_module

        render_module.SAVE_FROM_ENTRIES = 0  # type: ignore[misc]
        write = Renderer._write_patch

        async def counting(self: Renderer, patch: Any, *args: Any, **kw: Any) -> None:
            made.append(len(patch.keys))
            await write(self, patch, *args, **kw)

        Renderer._write_patch = counting  # type: ignore[method-assign]
    work = Path(base)
    prepared = work / "prepared"
    prepared.mkdir()

    async def prepare() -> None:
        rt = runtime(prepared, engine="offline")
        for name in ("alpha", "beta"):
            await rt.record(learning_run(name, 1), rollout_id=name)
        await rt.close()

    asyncio.run(prepare())
    states: dict[str, Any] = {}
    points: list[str] = []
    for name, with_command in (("with", True), ("without", False)):
        target = work / name
        shutil.copytree(prepared, target, symlinks=True)
        if with_command:
            points = asyncio.run(_command_with(str(target), 0, command))
            patches = len(made)
        asyncio.run(_close_with(str(target), 0))
        states[name] = _timeless(asyncio.run(close_state(target)))
    committed = next(i for i, p in enumerate(points, 1) if p.endswith("/layout/commit.json"))
    results: list[dict[str, Any]] = []
    for k in range(1, len(points) + 1):
        target = work / f"kill-{k}"
        shutil.copytree(prepared, target, symlinks=True)
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(_command_with(str(target), k, command))
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 137
        asyncio.run(_close_with(str(target), 0))
        got = _timeless(asyncio.run(close_state(target)))
        like = next((n for n, want in states.items() if got == want), None)
        # The search index, synced by entry keys, equals one built afresh from what is left.
        rebuilt = asyncio.run(rebuilt_index_rows(target, work / f"rebuilt-{k}"))
        results.append(
            {
                "k": k,
                "point": points[k - 1],
                "killed": killed,
                "like": like,
                "after": k > committed,
                "index_as_rebuilt": index_entry_rows(target) == rebuilt,
            }
        )
        shutil.rmtree(target)
        shutil.rmtree(work / f"rebuilt-{k}")
    out = {"points": points, "committed": committed, "results": results, "patched": patches}
    print(json.dumps(out), flush=True)


SCENARIOS: dict[str, Callable[..., Awaitable[None]]] = {
    "nearly-full-disk": _nearly_full_disk,
    "write-loop": _write_loop,
    "share-folder": _share_folder,
    "one-conversation-race": _one_conversation_race,
    "crash-mid-extraction": _crash_mid_extraction,
    "read-only-close": _read_only_close,
}

SYNC_SCENARIOS: dict[str, Callable[..., None]] = {
    "kill-points": _kill_points,
    "kill-points-command": _kill_points_of_a_command,
}
"""Scenarios that fork: they run their own event loops, one per close."""

if __name__ == "__main__":
    if sys.argv[1] in SYNC_SCENARIOS:
        SYNC_SCENARIOS[sys.argv[1]](*sys.argv[2:])
    else:
        asyncio.run(SCENARIOS[sys.argv[1]](*sys.argv[2:]))
