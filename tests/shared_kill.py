"""A close against a real PostgreSQL server, killed with SIGKILL at each of its write points.

    python tests/shared_kill.py <dsn> <work-folder> [all | k,k,...]

One namespace is prepared: a lesson an earlier close put in the store, a run another machine
recorded but nobody extracted yet, and on this machine one run extracted after it (changes the
store has not taken) and one run not extracted. Its rows and this machine's workspace copy are
cloned once per kill point. For each point k a forked child closes and sends itself SIGKILL
just before its k-th write: a statement that changes the store (``INSERT``, ``UPDATE``,
``DELETE``; killed mid-transaction when it is not the transaction's first) or a write to the
workspace copy (by default every store statement and every third copy write; ``all``: every
point). The dead holder's lease is let lapse, the same workspace is closed again by
a fresh process state, and the store and the copy are compared with a close that was never
interrupted: nothing lost, nothing twice. Prints one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from faultlib import WRITE_OPS, _timeless, close_state  # noqa: E402
from shared_flow import lesson, store_runtime, unstamped_noted_run  # noqa: E402

TABLES = (
    "sbm_scopes",
    "sbm_entries",
    "sbm_log",
    "sbm_rollouts",
    "sbm_segments",
    "sbm_leases",
    "sbm_threads",
    "sbm_files",
    "sbm_keys",  # a clone of the namespace holds its key, as every machine sharing it does
)
WRITE_SQL = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.I)


def store(dsn: str, namespace: str) -> Any:
    from sandbox_memory.stores import PostgresStore

    return PostgresStore(dsn, namespace=namespace)


async def prepare(dsn: str, work: Path) -> None:
    seed = store(dsn, "prep")
    rt = store_runtime(work / "seed", seed)
    await rt.record(unstamped_noted_run(lesson("old")), rollout_id="r0")
    await rt.close()
    await store_runtime(work / "other", seed).record(
        unstamped_noted_run(lesson("other")), rollout_id="r2"
    )
    await seed.aclose()
    mine = store(dsn, "prep")
    rt = store_runtime(work / "prep", mine)
    await rt.start_run()
    await rt.record(unstamped_noted_run(lesson("early")), rollout_id="r3")
    await rt.consolidate_conversation("r3")  # extracted after its run, on the copy only
    await rt.record(unstamped_noted_run(lesson("new")), rollout_id="r1")
    await mine.aclose()


def clone(dsn: str, work: Path, namespace: str) -> Path:
    """The prepared namespace's rows under ``namespace``, and the copy in its own folder."""

    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in TABLES:
            cols = [
                str(r[0])
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND column_name <> 'namespace' ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
            ]
            names = ", ".join(cols)
            conn.execute(
                f"INSERT INTO {table} (namespace, {names}) "  # type: ignore[arg-type]
                f"SELECT %s, {names} FROM {table} WHERE namespace = 'prep'",
                (namespace,),
            )
    root = work / namespace
    shutil.copytree(work / "prep", root, symlinks=True)
    state = root / "memories" / "store" / "shared.json"
    doc = json.loads(state.read_text())
    doc["namespace"] = namespace
    state.write_text(json.dumps(doc))
    return root


def kill_at(k: int) -> list[str]:
    """Count write points from here on; send this process SIGKILL just before the ``k``-th
    (``k=0``: never). Returns the list the points are named in."""

    from psycopg import AsyncCursor

    from sandbox_memory.workspace import LocalWorkspace

    points: list[str] = []

    def point(name: str) -> None:
        points.append(name)
        if len(points) == k:
            os.kill(os.getpid(), signal.SIGKILL)

    def sql(real: Any) -> Any:
        async def op(self: Any, query: Any, *args: Any, **kw: Any) -> Any:
            text = str(query)
            if WRITE_SQL.match(text):
                point(" ".join(text.split()[:3]))
            return await real(self, query, *args, **kw)

        return op

    def ws(name: str) -> Any:
        real = getattr(LocalWorkspace, name)

        async def op(self: Any, path: str, *args: Any, **kw: Any) -> Any:
            point(f"{name} {path}")
            return await real(self, path, *args, **kw)

        return op

    # ``AsyncConnection.execute`` goes through a cursor's: each statement is counted once.
    AsyncCursor.execute = sql(AsyncCursor.execute)  # type: ignore[method-assign]
    AsyncCursor.executemany = sql(AsyncCursor.executemany)  # type: ignore[method-assign]
    for name in WRITE_OPS:
        setattr(LocalWorkspace, name, ws(name))
    return points


async def close(dsn: str, root: Path, namespace: str) -> None:
    shared = store(dsn, namespace)
    await store_runtime(root, shared).close()
    await shared.aclose()


def store_state(dsn: str, namespace: str) -> dict[str, Any]:
    """What the namespace holds, without versions and times."""

    ns = (namespace,)
    with psycopg.connect(dsn) as conn:

        def rows(query: str) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in conn.execute(query, ns).fetchall()]  # type: ignore[arg-type]

        entries = rows(
            "SELECT scope, key, kind, content, status, person, sources FROM sbm_entries "
            "WHERE namespace = %s"
        )
        log = rows("SELECT cause, scope, keys FROM sbm_log WHERE namespace = %s")
        rollouts = rows(
            "SELECT rollout_id, segments, watermark, progress FROM sbm_rollouts "
            "WHERE namespace = %s"
        )
        segments = rows("SELECT rollout_id, n, segment_id FROM sbm_segments WHERE namespace = %s")
        files = rows("SELECT path, content FROM sbm_files WHERE namespace = %s")
        threads = rows("SELECT fingerprint, rollout_id FROM sbm_threads WHERE namespace = %s")
    return _timeless(
        {
            "entries": {f"{s} {k}": [kind, c, st, p, src] for s, k, kind, c, st, p, src in entries},
            # A change logged twice, or lost, shows here.
            "log": sorted(f"{n}x {rec}" for rec, n in Counter(json.dumps(r) for r in log).items()),
            "rollouts": {r: [s, w, p] for r, s, w, p in rollouts},
            "segments": sorted(f"{r}:{n}:{sid}" for r, n, sid in segments),
            "files": {p: None if c is None else bytes(c).decode() for p, c in files},
            "threads": sorted(f"{f}={r}" for f, r in threads),
        }
    )


def lapse(dsn: str, namespace: str) -> int:
    """Time passes: the dead holder's lease and claims run out. Whether it held the lease."""

    with psycopg.connect(dsn, autocommit=True) as conn:
        held = conn.execute(
            "SELECT count(*) FROM sbm_leases WHERE namespace = %s AND name = 'layout' "
            "AND holder IS NOT NULL",
            (namespace,),
        ).fetchone()
        conn.execute(
            "UPDATE sbm_leases SET expires_at = now() - interval '1 second' "
            "WHERE namespace = %s AND holder IS NOT NULL",
            (namespace,),
        )
    return int(held[0]) if held else 0


def sample(points: list[str]) -> list[int]:
    """The points a test run kills at: every statement that changes the store, and every
    third write to the copy (the file store's own kill test covers each of those)."""

    local = [k for k, p in enumerate(points, 1) if not WRITE_SQL.match(p)]
    return sorted({k for k, p in enumerate(points, 1) if WRITE_SQL.match(p)} | set(local[::3]))


def main(dsn: str, base: str, only: str = "") -> None:
    work = Path(base)
    asyncio.run(prepare(dsn, work))
    clean = clone(dsn, work, "clean")
    pid = os.fork()
    if pid == 0:  # a child that counts the points of an uninterrupted close
        points = kill_at(0)
        asyncio.run(close(dsn, clean, "clean"))
        (work / "points.json").write_text(json.dumps(points))
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    points = json.loads((work / "points.json").read_text())
    want_store = store_state(dsn, "clean")
    want_copy = _timeless(asyncio.run(close_state(clean)))
    if only == "all":
        wanted = list(range(1, len(points) + 1))
    else:
        wanted = [int(k) for k in only.split(",") if k] or sample(points)
    results: list[dict[str, Any]] = []
    for k in wanted:
        ns = f"kill{k}"
        root = clone(dsn, work, ns)
        pid = os.fork()
        if pid == 0:  # the child: a close that dies at write point k
            kill_at(k)
            try:
                asyncio.run(close(dsn, root, ns))
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        held = lapse(dsn, ns)
        asyncio.run(close(dsn, root, ns))  # the fresh close, on the dead machine's copy
        got_store = store_state(dsn, ns)
        got_copy = _timeless(asyncio.run(close_state(root)))
        differs = sorted(
            [f"store {x}" for x in want_store if want_store[x] != got_store[x]]
            + [
                f"copy {x}"
                for x in set(want_copy) | set(got_copy)
                if want_copy.get(x) != got_copy.get(x)
            ]
        )
        results.append(
            {
                "k": k,
                "point": points[k - 1],
                "killed": killed,
                "lease_held": held,
                "differs": differs,
                "detail": {
                    d: [
                        (want_store if d.startswith("store") else want_copy).get(
                            d.split(" ", 1)[1]
                        ),
                        (got_store if d.startswith("store") else got_copy).get(d.split(" ", 1)[1]),
                    ]
                    for d in differs[:2]
                },
            }
        )
        shutil.rmtree(root)
    print(json.dumps({"points": points, "results": results}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
