"""Runs of a sandbox agent on one "machine" (a workspace root) against a shared store.

Used in-process by the tests and as a separate process (``python tests/shared_flow.py``) for
the multi-machine tests: each process has its own workspace root, all share one database.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from agents import Runner
from agents.run import RunConfig
from agents.sandbox import Manifest, SandboxAgent, SandboxRunConfig
from agents.sandbox.capabilities import Filesystem, Shell
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.testing import ScriptedModel, assistant_message

import helpers
from helpers import layout_runtime
from sandbox_memory import Forget, Memory, MemoryGenerateConfig, Remember
from sandbox_memory.stores import PostgresStore


async def remember_ann_and_forget_bravo(client: Any, rt: Any) -> None:
    """The shared-search scenarios' last steps: a close, Ann's private preference remembered
    (``ann-editor``), the ``bravo`` lesson forgotten, another close."""

    await rt.close()
    view = await client.view()
    view = await client.apply(
        Remember(
            key="ann-editor",
            content="Ann prefers vim keybindings.",
            kind="preference",
            person="ann",
        ),
        expected=view.version,
    )
    bravo = next(k for k in view.entries if "bravo" in k)
    await client.apply(Forget(key=bravo), expected=view.version)
    await rt.close()


def store_runtime(root: Path, store: Any, engine: Any = None) -> Any:
    """A ``LayoutRuntime`` (offline engine unless ``engine`` is given) on a local folder at
    ``root`` whose working copy syncs with ``store``: one sandbox's memory, without an agent."""

    return layout_runtime(root, store=store, engine=engine, mkdir=True)


def agent(model: ScriptedModel, store: PostgresStore, **generate: Any) -> SandboxAgent:
    return SandboxAgent(
        name="reviewer",
        instructions="Fix bugs in the workspace.",
        model=model,
        capabilities=[
            Memory(
                generate=MemoryGenerateConfig(engine="offline", **generate),
                store=store,
            ),
            Filesystem(),
            Shell(),
        ],
    )


async def run_once(
    root: Path,
    store: PostgresStore,
    prompt: str,
    script: list[Any],
    *,
    conversation: str | None = None,
    **generate: Any,
) -> ScriptedModel:
    """One sandbox session on ``root``: one run, then close (phase 1 and 2)."""

    root.mkdir(parents=True, exist_ok=True)
    model = ScriptedModel(script)
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        await Runner.run(
            agent(model, store, **generate),
            prompt,
            run_config=RunConfig(
                sandbox=SandboxRunConfig(session=sandbox),
                group_id=conversation,
            ),
        )
    return model


def unstamped_noted_run(text: str) -> dict[str, Any]:
    """A recorded run's payload as the SDK hands it over: the user's text and the reply
    "Noted.", with no time stamp (recorded at the time it is recorded): unlike
    :func:`helpers.run_payload`'s defaults (the reply "ok", stamped 2026-01-01)."""

    return helpers.run_payload(text, reply="Noted.", when=None)


def lesson(tag: str) -> str:
    """A user decision the offline engine learns (and promotes to layout memory)."""

    return f"We decided that {tag} ships via deploy-{tag}."


async def _main(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs (each its own sandbox session: record, close) and versioned commands."""

    from sandbox_memory import MemoryClient, MemoryConflict, Remember

    store = PostgresStore(
        spec["dsn"],
        namespace=spec["namespace"],
        connect_timeout=2,
        lease_seconds=spec.get("lease_seconds", 30.0),
    )
    root = Path(spec["root"])
    out: dict[str, Any] = {"conflicts": 0, "applied": []}
    client = MemoryClient(root, store=store)
    for i in range(spec["runs"]):
        tag = f"{spec['name']}x{i}"
        await run_once(
            root,
            store,
            lesson(tag),
            [[assistant_message(f"Noted: {tag} deploys with make deploy-{tag}.")]],
            conversation=f"conv-{tag}",
        )
        for j in range(spec.get("commands", 0)):
            key = f"cmd-{tag}-{j}"
            while True:
                seen = await client.view()
                try:
                    after = await client.apply(
                        Remember(key=key, content=f"command {j} of {tag}"), expected=seen.version
                    )
                except MemoryConflict:
                    out["conflicts"] += 1
                    continue
                out["applied"].append([key, seen.version, after.version])
                break
    await store.aclose()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_main(json.loads(sys.argv[1])))))
