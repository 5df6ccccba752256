"""Shared pieces: the two memory systems, real local sandboxes, result rows, timing helpers."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.pop("OPENAI_API_KEY", None)  # never reach a real model

from agents.sandbox import Manifest  # noqa: E402
from agents.sandbox import MemoryGenerateConfig as SDKMemoryGenerateConfig  # noqa: E402
from agents.sandbox.capabilities import Memory as SDKMemory  # noqa: E402
from agents.sandbox.memory.manager import get_or_create_memory_generation_manager  # noqa: E402
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient  # noqa: E402
from models import BuiltinPhaseOneModel, BuiltinPhaseTwoModel, Meter, OursPhaseOneModel  # noqa: E402
from rows import Row  # noqa: E402, F401  (the scenarios import it from here)

import sandbox_memory  # noqa: E402

SYSTEMS = ("ours", "builtin")

# Both systems log a line per close at INFO/WARNING; a benchmark has no use for them.
for _name in ("sandbox_memory", "openai.agents"):
    logging.getLogger(_name).setLevel(logging.ERROR)


@dataclass
class Memories:
    """A memory capability for one system plus the meters its models write into."""

    system: str
    capability: Any
    phase_one: Meter
    phase_two: Meter

    @property
    def calls(self) -> int:
        return self.phase_one.calls + self.phase_two.calls

    @property
    def tokens(self) -> int:
        return self.phase_one.tokens + self.phase_two.tokens

    def reset(self) -> None:
        self.phase_one.reset()
        self.phase_two.reset()


def make_memory(
    system: str,
    *,
    latency: float = 0.0,
    block_chars: int | None = None,
    read: Any = None,
    **generate: Any,
) -> Memories:
    """``sandbox_memory.Memory`` (model engine) or the SDK's ``Memory`` with counting models."""

    one, two = Meter(), Meter()
    if system == "ours":
        config = sandbox_memory.MemoryGenerateConfig(
            engine="model", phase_one_model=OursPhaseOneModel(one, latency=latency), **generate
        )
        capability: Any = (
            sandbox_memory.Memory(generate=config)
            if read is None
            else sandbox_memory.Memory(generate=config, read=read)
        )
    elif system == "builtin":
        sdk_config = SDKMemoryGenerateConfig(
            phase_one_model=BuiltinPhaseOneModel(one, latency=latency),
            phase_two_model=(
                BuiltinPhaseTwoModel(two, latency=latency)
                if block_chars is None
                else BuiltinPhaseTwoModel(two, latency=latency, block_chars=block_chars)
            ),
            **generate,
        )
        capability = SDKMemory(generate=sdk_config)
    else:
        raise ValueError(system)
    return Memories(system, capability, one, two)


def manager_for(session: Any, memories: Memories) -> Any:
    """The manager the SDK runtime hands runs to, found the way the runtime finds it.

    Ours is installed by ``Memory.bind`` (what the runtime does when a run starts); the SDK's
    registry then returns it. The built-in is created by the same registry call.
    """

    memories.capability.bind(session)
    return get_or_create_memory_generation_manager(session=session, memory=memories.capability)


@contextlib.contextmanager
def temp_root(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"sbm-bench-{prefix}-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.asynccontextmanager
async def sandbox(root: Path) -> AsyncIterator[Any]:
    """A started ``UnixLocalSandboxClient`` session whose workspace is ``root``."""

    root.mkdir(parents=True, exist_ok=True)
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(root)))
    async with session:
        yield session


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}"


Progress = Callable[[str], None]
