"""Many processes sharing one layout: the PostgreSQL store against the workspace store.

    python bench/shared_store.py                      # 8 processes x 50 runs each, both stores
    python bench/shared_store.py --procs 4 --runs 10  # smaller
    python bench/shared_store.py --dsn postgresql://... # an existing server (else a throw-away
                                                      # one from tests/pgserver.py)
    python bench/shared_store.py --close-cost 1000,10000  # what one close sends and reads

Each process is one sandbox of its own machine doing ``--runs`` runs one after the other:
record the run (a user decision the offline engine learns), then close (phase 1 and 2). With
``postgres`` every process has its own workspace folder and all share one database namespace;
with ``workspace`` all processes share one workspace folder (the embedded store, its lease
lock in the folder). Printed: runs per second over the whole fleet, record and close latency
p50/p99, and lessons lost (runs whose decision is in no conversation memory at the end; must
be 0), and for PostgreSQL how long each close waited for the namespace's lease and held it.
A script, not a test: nothing here gates CI.

Measured at 8 x 50 on a 2-core machine loaded by other work (load 10 to 22): PostgreSQL 0.29
runs/s (1,366 s), close p50 15 s, lease held p50 2.9 s; the workspace store 1.62 runs/s
(247 s); 0 lessons lost in both. Runs/s on PostgreSQL is about one over the lease's hold time,
which grew with the namespace (the copy's records were read at each send and fetch); see
docs/sharing.md, "Limits worth knowing".

``--close-cost``: one close of a second sandbox's copy at a namespace of N entries (N / 2
conversations, built as bench/scenario_scale.py builds a store, exported to PostgreSQL),
counted: statements, rows read, bytes sent and received, reads and writes of the copy's
files. Before the copy fetched and sent per record (load 10-14, so seconds are noisy):

    entries  close   lease held  rows read  bytes received  copy reads  copy bytes read
    1,000    0.87 s  0.81 s      3,800      604 KB          5,740       5.6 MB
    3,000    2.42 s  2.36 s      11,294     1.39 MB         15,741      12.9 MB
    10,000   4.91 s  4.76 s      37,523     4.16 MB         50,745      38.3 MB

After (58-67 statements per close in both):

    1,000    0.67 s  0.64 s      52         200 KB          1,262       3.8 MB
    3,000    1.11 s  0.99 s      64         202 KB          1,263       7.4 MB

What still grows: the copy's bookkeeping (``shared.json``, a version and hash per entry and
rollout, read about 7 times and written twice per close) and, in a fresh process, the
rendering of ``MEMORY.md`` from every entry (``runtime/render.py``: about half the close at
3,000 entries in a profile).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # the test server and the shared-flow workload


async def worker(spec: dict[str, Any]) -> dict[str, Any]:
    from sandbox_memory import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
    from sandbox_memory.runtime import LayoutRuntime
    from sandbox_memory.workspace import LocalWorkspace
    from shared_flow import lesson, run_payload

    store = None
    waits: list[float] = []
    holds: list[float] = []
    if spec["kind"] == "postgres":
        from sandbox_memory.stores import PostgresStore

        class TimedStore(PostgresStore):
            """Notes how long each close waited for the lease and held it."""

            async def acquire(self, *, timeout: float, holder: str | None = None) -> Any:
                t = time.perf_counter()
                fence = await super().acquire(timeout=timeout, holder=holder)
                self._taken = time.perf_counter()
                waits.append(self._taken - t)
                return fence

            async def release(self, fence: Any) -> None:
                await super().release(fence)
                holds.append(time.perf_counter() - self._taken)

        store = TimedStore(spec["dsn"], namespace=spec["namespace"])
    root = Path(spec["root"])
    root.mkdir(parents=True, exist_ok=True)
    generate = MemoryGenerateConfig(engine="offline", lock_timeout_seconds=600)
    records: list[float] = []
    closes: list[float] = []
    for i in range(spec["runs"]):
        rt = LayoutRuntime(
            LocalWorkspace(root),
            layout=MemoryLayoutConfig(),
            generate=generate,
            read=MemoryReadConfig(),
            store=store,
        )
        await rt.start_run()
        tag = f"{spec['name']}x{i}"
        t0 = time.perf_counter()
        await rt.record(run_payload(lesson(tag)), rollout_id=f"conv-{tag}")
        t1 = time.perf_counter()
        await rt.close()
        t2 = time.perf_counter()
        records.append(t1 - t0)
        closes.append(t2 - t1)
    if store is not None:
        await store.aclose()
    return {"record": records, "close": closes, "wait": waits, "hold": holds}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def lessons_lost(kind: str, spec: dict[str, Any], tags: list[str]) -> int:
    texts: list[str] = []
    if kind == "postgres":
        from sandbox_memory.stores import PostgresStore

        store = PostgresStore(spec["dsn"], namespace=spec["namespace"])
        versions = await store.scope_versions()
        for scope in (await store.read_scopes(list(versions))).values():
            texts += [e.content for e in scope.entries.values()]
        await store.aclose()
    else:
        folder = Path(spec["root"]) / "memories" / "store" / "conversations"
        texts = [p.read_text() for p in folder.glob("*.json")]
    blob = "\n".join(texts)
    return sum(1 for tag in tags if f"deploy-{tag}" not in blob)


def scenario(kind: str, procs: int, runs: int, dsn: str | None, base: Path) -> dict[str, Any]:
    namespace = f"bench-{os.getpid()}-{time.time_ns()}"
    specs = [
        {
            "kind": kind,
            "dsn": dsn,
            "namespace": namespace,
            "root": str(base / kind / (f"m{i}" if kind == "postgres" else "shared")),
            "runs": runs,
            "name": f"p{i}",
        }
        for i in range(procs)
    ]
    env = {**os.environ, "OPENAI_API_KEY": "", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    start = time.perf_counter()
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", json.dumps(s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for s in specs
    ]
    results = []
    for child in children:
        out, err = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"a {kind} worker failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - start
    records = [x for r in results for x in r["record"]]
    closes = [x for r in results for x in r["close"]]
    waits = [x for r in results for x in r["wait"]]
    holds = [x for r in results for x in r["hold"]]
    tags = [f"p{i}x{j}" for i in range(procs) for j in range(runs)]
    lost = asyncio.run(lessons_lost(kind, specs[0], tags))
    return {
        "store": kind,
        "processes": procs,
        "runs": procs * runs,
        "wall_s": round(wall, 1),
        "runs_per_s": round(procs * runs / wall, 2),
        "record_p50_ms": round(statistics.median(records) * 1000, 1),
        "record_p99_ms": round(pct(records, 0.99) * 1000, 1),
        "close_p50_ms": round(statistics.median(closes) * 1000, 1),
        "close_p99_ms": round(pct(closes, 0.99) * 1000, 1),
        # Per close: waiting for the namespace's lease, then holding it (PostgreSQL only).
        "lease_wait_p50_ms": round(pct(waits, 0.5) * 1000, 1) if waits else None,
        "lease_hold_p50_ms": round(pct(holds, 0.5) * 1000, 1) if holds else None,
        "lease_hold_p99_ms": round(pct(holds, 0.99) * 1000, 1) if holds else None,
        "lessons_lost": lost,
    }


class Counter:
    """Counts what one close sends to PostgreSQL and does to its workspace copy: statements,
    rows read, bytes sent and received (values as text on the wire, about), copy reads and
    writes with their bytes."""

    def __init__(self) -> None:
        self.on = False
        self.c: dict[str, float] = {}

    def add(self, name: str, value: float = 1) -> None:
        if self.on:
            self.c[name] = self.c.get(name, 0) + value

    def install(self) -> None:
        from psycopg import AsyncCursor

        from sandbox_memory.workspace import LocalWorkspace
        from sandbox_memory.workspace import local as workspace_module

        count = self

        def size(value: Any) -> int:
            if isinstance(value, (bytes, bytearray, memoryview)):
                return len(value)
            if isinstance(value, (list, tuple)):
                return sum(size(v) for v in value)
            return len(str(value).encode("utf-8")) if value is not None else 0

        def received(cur: Any) -> None:
            res = cur.pgresult
            if res is None:
                return
            count.add("rows read", res.ntuples)
            count.add(
                "bytes received",
                sum(
                    len(res.get_value(r, c) or b"")
                    for r in range(res.ntuples)
                    for c in range(res.nfields)
                ),
            )

        real_execute, real_many = AsyncCursor.execute, AsyncCursor.executemany

        async def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            count.add("statements")
            count.add("bytes sent", len(str(query)) + size(params))
            out = await real_execute(self, query, params, **kw)
            received(self)
            return out

        async def executemany(self: Any, query: Any, params: Any, **kw: Any) -> Any:
            params = list(params)
            count.add("statements", len(params))
            count.add("bytes sent", len(str(query)) * len(params) + size(params))
            return await real_many(self, query, params, **kw)

        AsyncCursor.execute = execute  # type: ignore[method-assign]
        AsyncCursor.executemany = executemany  # type: ignore[method-assign]

        def wrap(name: str, reads: bool) -> None:
            real = getattr(LocalWorkspace, name)

            async def op(self: Any, path: str, *args: Any, **kw: Any) -> Any:
                out = await real(self, path, *args, **kw)
                if reads:
                    count.add("copy reads")
                    count.add("copy bytes read", len(out) if isinstance(out, bytes) else 0)
                else:
                    count.add("copy writes")
                    data = next((a for a in args if isinstance(a, bytes)), b"")
                    count.add("copy bytes written", len(data))
                return out

            setattr(LocalWorkspace, name, op)

        for name in ("read_bytes", "read_range"):
            wrap(name, True)
        for name in ("size", "listdir", "sizes"):
            real = getattr(LocalWorkspace, name)

            def looked(real: Any = real) -> Any:
                async def op(self: Any, path: str, *args: Any, **kw: Any) -> Any:
                    count.add("copy stats/listings")
                    return await real(self, path, *args, **kw)

                return op

            setattr(LocalWorkspace, name, looked())
        for name in ("write_atomic", "write_derived", "append_line", "remove", "rename"):
            wrap(name, False)
        for name in ("write_atomic_many", "append_lines"):
            real_many_op = getattr(LocalWorkspace, name)

            def counted(real: Any = real_many_op) -> Any:
                async def op(self: Any, items: Any) -> Any:
                    items = list(items)
                    count.add("copy writes", len(items))
                    count.add("copy bytes written", sum(len(data) for _, data in items))
                    return await real(self, items)

                return op

            setattr(LocalWorkspace, name, counted())
        # The batched writes take their fast path only for the workspace's own write_atomic
        # (a subclass changing it sees each file): the counting wrapper above stands for it.
        workspace_module._LOCAL_WRITE_ATOMIC = LocalWorkspace.write_atomic


async def close_cost(dsn: str, entries: int, base: Path) -> dict[str, Any]:
    """One shared close at a namespace of ``entries`` entries (``entries // 2`` conversations,
    built as the scale scenario builds a store, then exported to the store): what the close
    sends, reads and writes, and how long it holds the lease. A second sandbox's copy, brought
    up to date first, records one run and closes (the first close after its start is the
    warm-up; the second is counted)."""

    from scenario_scale import prepared_store

    from sandbox_memory import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
    from sandbox_memory.runtime import LayoutRuntime
    from sandbox_memory.stores import PostgresStore
    from sandbox_memory.workspace import LocalWorkspace
    from shared_flow import lesson, run_payload

    namespace = f"cost{entries}"
    seed_root, root = base / f"seed{entries}", base / f"copy{entries}"
    await prepared_store(seed_root, conversations=entries // 2, entries=entries)
    generate = MemoryGenerateConfig(engine="offline", lock_timeout_seconds=600)

    def rt_for(folder: Path, store: PostgresStore) -> LayoutRuntime:
        folder.mkdir(parents=True, exist_ok=True)
        return LayoutRuntime(
            LocalWorkspace(folder),
            layout=MemoryLayoutConfig(),
            generate=generate,
            read=MemoryReadConfig(),
            store=store,
        )

    seed = PostgresStore(dsn, namespace=namespace)
    t = time.perf_counter()
    async with rt_for(seed_root, seed).shared.session():  # type: ignore[union-attr]
        pass  # export: the copy's memory goes to the store
    export_s = time.perf_counter() - t
    await seed.aclose()
    holds: list[float] = []

    class Timed(PostgresStore):
        async def acquire(self, *, timeout: float, holder: str | None = None) -> Any:
            fence = await super().acquire(timeout=timeout, holder=holder)
            self._taken = time.perf_counter()
            return fence

        async def release(self, fence: Any) -> None:
            await super().release(fence)
            holds.append(time.perf_counter() - self._taken)

    store = Timed(dsn, namespace=namespace)
    counter = COUNTER
    t = time.perf_counter()
    await rt_for(root, store).start_run()
    first_sync_s = time.perf_counter() - t
    out: dict[str, Any] = {"entries": entries, "export_s": round(export_s, 1)}
    out["first_sync_s"] = round(first_sync_s, 1)
    for i in range(2):
        rt = rt_for(root, store)
        await rt.start_run()
        await rt.record(run_payload(lesson(f"cost{i}")), rollout_id=f"conv-cost{i}")
        counter.c, counter.on = {}, i == 1
        t = time.perf_counter()
        if i == 1 and os.environ.get("SBM_PROFILE"):
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
            await rt.close()
            prof.disable()
            prof.dump_stats(os.environ["SBM_PROFILE"])
        else:
            await rt.close()
        out["close_s"] = round(time.perf_counter() - t, 2)
        counter.on = False
    out["lease_hold_s"] = round(holds[-1], 2)
    out.update({k: int(v) for k, v in sorted(counter.c.items())})
    await store.aclose()
    return out


async def first_search(
    dsn: str, conversations: int, base: Path, samples: int
) -> list[dict[str, Any]]:
    """A new sandbox on a shared store of ``conversations`` conversations (twice as many
    entries, one recorded run each, built as bench/scenario_scale.py builds a store and
    exported to PostgreSQL): what it pays before its first search and what a search costs,
    with the store's search index (PostgreSQL) and with the copy's own (SQLite, built from
    the copy). Both sandboxes first bring their copy up to date (run start); then the first
    search (for SQLite: building the index from the copy), then the median of ``samples``
    searches. One row per backend."""

    from scenario_scale import prepared_store
    from workload import entry_text

    from sandbox_memory import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
    from sandbox_memory.runtime import LayoutRuntime
    from sandbox_memory.search.index import INDEX_FILE
    from sandbox_memory.stores import PostgresStore
    from sandbox_memory.workspace import LocalWorkspace

    namespace = f"search{conversations}"
    seed_root = base / f"search-seed{conversations}"
    await prepared_store(seed_root, conversations=conversations, entries=2 * conversations)
    generate = MemoryGenerateConfig(engine="offline", lock_timeout_seconds=600)

    def rt_for(folder: Path, store: PostgresStore) -> LayoutRuntime:
        folder.mkdir(parents=True, exist_ok=True)
        return LayoutRuntime(
            LocalWorkspace(folder),
            layout=MemoryLayoutConfig(),
            generate=generate,
            read=MemoryReadConfig(),
            store=store,
        )

    seed = PostgresStore(dsn, namespace=namespace)
    t = time.perf_counter()
    # The first close on the store: the copy's memory is exported, then its whole search
    # index is sent (once for the fleet).
    await rt_for(seed_root, seed).close()
    export_s = time.perf_counter() - t
    await seed.aclose()
    # Queries: a few words of entries old and new, and the words of every recorded run.
    queries = [
        " ".join(entry_text(k).split()[:3])
        for k in range(0, 2 * conversations, 2 * conversations // (samples - 1) or 1)
    ]
    queries = [*queries[: samples - 1], "parser task"]
    rows: list[dict[str, Any]] = []
    for backend in ("postgres", "sqlite"):
        store = PostgresStore(dsn, namespace=namespace)
        folder = base / f"search-{backend}{conversations}"
        rt = rt_for(folder, store)
        shared = rt.shared
        assert shared is not None
        COUNTER.c, COUNTER.on = {}, True
        t = time.perf_counter()
        await rt.start_run()
        fetch_s = time.perf_counter() - t
        fetched = COUNTER.c.get("bytes received", 0)
        COUNTER.c = {}

        async def search(
            query: str, backend: str = backend, shared: Any = shared, rt: Any = rt
        ) -> int:
            if backend == "postgres":
                found = await shared.search(query, conversation=None, limit=10, person=None)
                assert found is not None, "the store holds no search index"
            else:
                found = await rt.search_index.search(query)
            return len(found)

        t = time.perf_counter()
        await search(queries[0])
        first_s = time.perf_counter() - t
        index = folder / "memories" / "store" / INDEX_FILE
        latencies = []
        for query in queries:
            t = time.perf_counter()
            await search(query)
            latencies.append(time.perf_counter() - t)
        COUNTER.on = False
        rows.append(
            {
                "conversations": conversations,
                "search index": backend,
                "export + index sent s": round(export_s, 1),
                "copy fetch s": round(fetch_s, 1),
                "copy MB received": round(fetched / 1e6, 1),
                "first search s": round(first_s, 2),
                "before first hit s": round(fetch_s + first_s, 1),
                "local index MB": round(index.stat().st_size / 1e6, 1) if index.exists() else 0,
                "search p50 ms": round(statistics.median(latencies) * 1e3, 1),
                "search max ms": round(max(latencies) * 1e3, 1),
                "search KB received": round(
                    COUNTER.c.get("bytes received", 0) / 1e3 / (len(queries) + 1), 1
                ),
            }
        )
        await store.aclose()
    return rows


class HashEmbedder:
    """A stand-in embedder for the vector rows: 384 numbers made from a hash of the text
    (no model: what is measured is what reaches the embedder and what the store hands over,
    not a model's speed), counting the texts it is sent."""

    name = "bench-hash:384"
    dimension = 384

    def __init__(self) -> None:
        self.texts = 0

    async def embed(self, texts: Any) -> list[list[float]]:
        import hashlib

        self.texts += len(texts)
        out = []
        for text in texts:
            seed = hashlib.sha256(text.encode("utf-8")).digest()
            out.append([b - 127.5 for b in (seed * 12)[: self.dimension]])
        return out


def local_seconds_per_text(texts: list[str]) -> float | None:
    """Seconds the local model (``embedder="local"``) takes per text, on ``texts``; ``None``
    without the ``local`` extra."""

    try:
        from sandbox_memory.search.local_embedder import LocalEmbedder
    except ImportError:
        return None
    embedder = LocalEmbedder()
    try:
        asyncio.run(embedder.embed(texts[:8]))  # loads the model
    except Exception:  # noqa: BLE001 - the extra's model is missing: no figure
        return None
    t = time.perf_counter()
    asyncio.run(embedder.embed(texts))
    return (time.perf_counter() - t) / len(texts)


async def first_search_vectors(
    dsn: str, conversations: int, base: Path
) -> tuple[list[dict[str, Any]], list[str]]:
    """A new sandbox with an embedder on a shared store of ``conversations`` conversations
    (built as :func:`first_search` builds it): its first search when the store keeps the
    vectors the first sandbox's close made (fetched) and when it does not (every document
    embedded here). Returns one row per case and a sample of the documents' texts."""

    from scenario_scale import prepared_store

    from sandbox_memory import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
    from sandbox_memory.runtime import LayoutRuntime
    from sandbox_memory.search.index.schema import _unpack
    from sandbox_memory.stores import PostgresStore
    from sandbox_memory.workspace import LocalWorkspace

    namespace = f"vectors{conversations}"
    seed_root = base / f"vectors-seed{conversations}"
    await prepared_store(seed_root, conversations=conversations, entries=2 * conversations)
    generate = MemoryGenerateConfig(
        engine="offline", lock_timeout_seconds=600, max_seconds_per_close=3600
    )

    def rt_for(folder: Path, store: PostgresStore, shared: bool) -> tuple[LayoutRuntime, Any]:
        folder.mkdir(parents=True, exist_ok=True)
        rt = LayoutRuntime(
            LocalWorkspace(folder),
            layout=MemoryLayoutConfig(),
            generate=generate,
            read=MemoryReadConfig(),
            store=store,
        )
        embedder = HashEmbedder()
        rt.search_index.embedder = embedder
        assert rt.shared is not None
        rt.search_index.shared_vectors = rt.shared.store_search if shared else None
        return rt, embedder

    seed = PostgresStore(dsn, namespace=namespace)
    rt, embedder = rt_for(seed_root, seed, True)
    t = time.perf_counter()
    await rt.close()  # exports, embeds every document, sends the index and the vectors
    seed_s = time.perf_counter() - t
    db = await rt.search_index._open()  # noqa: SLF001 - a sample of what is embedded
    texts = [_unpack(t)[:2_000] for (t,) in db.execute("SELECT text FROM docs LIMIT 64")]
    documents = db.execute("SELECT count(*) FROM docs").fetchone()[0]
    seeded = embedder.texts
    await seed.aclose()
    rows: list[dict[str, Any]] = []
    for case, shared in (("vectors fetched from the store", True), ("embedded here", False)):
        store = PostgresStore(dsn, namespace=namespace)
        rt, embedder = rt_for(base / f"vectors-{int(shared)}-{conversations}", store, shared)
        index = rt.search_index
        fetching = [0.0]
        real_fetch = index._from_shared  # noqa: SLF001 - timed, not changed

        async def timed_fetch(*args: Any, real: Any = real_fetch, spent: Any = fetching) -> Any:
            t = time.perf_counter()
            try:
                return await real(*args)
            finally:
                spent[0] += time.perf_counter() - t

        index._from_shared = timed_fetch  # type: ignore[method-assign]  # noqa: SLF001
        COUNTER.c, COUNTER.on = {}, True
        t = time.perf_counter()
        await rt.start_run()
        await rt.search_index.search("parser task")
        took = time.perf_counter() - t
        COUNTER.on = False
        rows.append(
            {
                "conversations": conversations,
                "documents": documents,
                "first sandbox's close s (embeds all)": round(seed_s, 1),
                "texts it embedded": seeded,
                "new sandbox": case,
                "run start + first search s": round(took, 1),
                "of which vectors from the store s": round(fetching[0], 1),
                "texts sent to the embedder": embedder.texts,
                "vectors fetched": rt.search_index.vectors_fetched,
                "MB received": round(COUNTER.c.get("bytes received", 0) / 1e6, 1),
            }
        )
        await store.aclose()
    return rows, texts


COUNTER = Counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--runs", type=int, default=50, help="runs per process")
    parser.add_argument("--dsn", default=None, help="an existing PostgreSQL (else throw-away)")
    parser.add_argument("--only", choices=("postgres", "workspace"), default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--close-cost",
        default=None,
        metavar="N,N",
        help="instead: count what one close sends and reads at these entry counts",
    )
    parser.add_argument(
        "--first-search",
        default=None,
        metavar="N,N",
        help="instead: a new sandbox's first search at these conversation counts, the "
        "store's search index against the copy's own",
    )
    parser.add_argument("--samples", type=int, default=10, help="searches timed (--first-search)")
    parser.add_argument(
        "--first-search-vectors",
        default=None,
        metavar="N,N",
        help="instead: a new sandbox's first search with an embedder at these conversation "
        "counts, the vectors fetched from the store against embedded again",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.worker:
        print(json.dumps(asyncio.run(worker(json.loads(args.worker)))))
        return
    server = None
    dsn = args.dsn
    if dsn is None and args.only != "workspace":
        from pgserver import PostgresServer

        server = PostgresServer()
        server.init()
        server.start()
        dsn = server.create_database("bench")
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="sbm-bench-") as tmp:
            if args.close_cost:
                assert dsn is not None
                sys.path.insert(0, str(HERE))
                COUNTER.install()
                for n in (int(x) for x in args.close_cost.split(",")):
                    print(f"close cost at {n:,} entries ...", file=sys.stderr)
                    rows.append(asyncio.run(close_cost(dsn, n, Path(tmp))))
            if args.first_search:
                assert dsn is not None
                sys.path.insert(0, str(HERE))
                COUNTER.install()
                for n in (int(x) for x in args.first_search.split(",")):
                    print(f"first search at {n:,} conversations ...", file=sys.stderr)
                    rows += asyncio.run(first_search(dsn, n, Path(tmp), args.samples))
            if args.first_search_vectors:
                assert dsn is not None
                sys.path.insert(0, str(HERE))
                COUNTER.install()
                sample: list[str] = []
                for n in (int(x) for x in args.first_search_vectors.split(",")):
                    print(f"first search with vectors at {n:,} conversations ...", file=sys.stderr)
                    got, sample = asyncio.run(first_search_vectors(dsn, n, Path(tmp)))
                    rows += got
                rate = local_seconds_per_text(sample)
                for row in rows:
                    if rate is not None and "texts sent to the embedder" in row:
                        row["at the local model's rate here, s"] = round(
                            row["texts sent to the embedder"] * rate, 1
                        )
            only_one = args.close_cost or args.first_search or args.first_search_vectors
            for kind in ("postgres", "workspace") if not only_one else ():
                if args.only in (None, kind):
                    print(f"running {kind}: {args.procs} x {args.runs} ...", file=sys.stderr)
                    rows.append(scenario(kind, args.procs, args.runs, dsn, Path(tmp)))
    finally:
        if server is not None:
            server.cleanup()
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    cols = list(dict.fromkeys(c for row in rows for c in row))
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for row in rows:
        print(" | ".join(str(row.get(c, 0)) for c in cols))


if __name__ == "__main__":
    main()
