"""Start-up time of the ``sandbox-memory`` read commands (issue 9: well under 0.5 s each).

``show``, ``log``, ``conversations`` and ``search`` must not import the Agents SDK.

    python bench/cli_start.py            # 10 runs of each command on a small memory
    python bench/cli_start.py --runs 30

Each command runs as a fresh process (the way a user types it), on a workspace with a few
entries and conversations; the script prints min / median / max wall time per command and
whether the Agents SDK (``agents``) was imported. A script, not a test: nothing gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 0.5
"""Issue 9's ceiling for a read command; "well under" it is the goal."""

READ_COMMANDS = (
    ["show"],
    ["show", "-c", "conv-1"],
    ["log"],
    ["conversations"],
    ["search", "fact"],
)


async def seed(root: Path) -> None:
    from sandbox_memory import MemoryClient, Remember

    client = MemoryClient(root)
    await client.create()
    for n in range(5):
        rid = f"conv-{n}"
        await client.create(rid)
        for k in range(4):
            view = await client.view(rid)
            await client.apply(
                Remember(key=f"fact-{k}", content=f"Fact {k} of {rid}.", kind="fact"),
                expected=view.version,
                conversation=rid,
            )
    view = await client.view()
    await client.apply(
        Remember(key="tests-first", content="Run the tests first.", kind="procedure"),
        expected=view.version,
    )


def time_command(root: Path, args: list[str], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (user + system) seconds of each run; CPU time is what a busy machine
    does not inflate."""

    cmd = [sys.executable, "-m", "sandbox_memory.cli", "--root", str(root), *args]
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def imports_sdk(root: Path, args: list[str]) -> bool:
    probe = (
        "import sys\nfrom sandbox_memory.cli import main\n"
        f"try:\n    main(['--root', {str(root)!r}, *{args!r}])\nexcept SystemExit:\n    pass\n"
        "print('agents' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cli-start-") as tmp:
        root = Path(tmp)
        asyncio.run(seed(root))
        print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; seconds:")
        print(
            f"{'command':<22} {'wall min':>8} {'median':>7} {'cpu median':>10}  sdk imported  "
            "target (median wall)"
        )
        for command in [["--help"], *READ_COMMANDS]:
            wall, cpu = time_command(root, command, args.runs)
            med = statistics.median(wall)
            sdk = "-" if command == ["--help"] else ("yes" if imports_sdk(root, command) else "no")
            print(
                f"{' '.join(command):<22} {min(wall):8.3f} {med:7.3f} "
                f"{statistics.median(cpu):10.3f}  {sdk:<12}  "
                f"{'met' if med < TARGET_SECONDS else 'MISSED'} (< {TARGET_SECONDS})"
            )


if __name__ == "__main__":
    main()
