"""What the local embedder costs: memory of one LoCoMo dev conversation built as
``bench/quality.py`` builds it (every session one run, the sandbox closed after each), twice:

- ``no_embedder``: the runs without an embedder; then searched with ``embedder="local"``:
  the first search loads the model and embeds every document;
- ``embed_at_close``: the runs with ``embedder="local"``, so each close embeds what it
  indexed (``SearchIndex.embed_new``); the first search then embeds the query only.

For each: the seconds all sessions took (feeding and closing), and the first search, a second
one (the query only) and a new process's view of the cached vectors (another client, the
model already loaded in this process), with the texts each embedded.

    .venv/bin/python bench/embed_cost.py            # conversation 26
    .venv/bin/python bench/embed_cost.py --sample 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from quality import DEFAULT_DATA, OFFLINE, Conversation, feed, load_locomo

from sandbox_memory import MemoryClient, MemoryReadConfig

QUERY = "when did she go to the support group"


async def measure(conv: Conversation, read: MemoryReadConfig | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        state = await feed(conv, Path(tmp), read)
        figures: dict[str, Any] = {"sessions_s": round(state.seconds, 2)}
        lexical = MemoryClient(state.root, generate=OFFLINE)
        started = time.perf_counter()
        await lexical.search(QUERY)
        figures["bm25_search_s"] = round(time.perf_counter() - started, 3)
        for name in ("first_search_s", "second_search_s", "other_client_s"):
            client = MemoryClient(
                state.root, generate=OFFLINE, read=MemoryReadConfig(embedder="local")
            )
            started = time.perf_counter()
            await client.search(QUERY)
            figures[name] = round(time.perf_counter() - started, 3)
            figures[name.removesuffix("_s") + "_texts"] = client.runtime.search_index.texts_embedded
        index = next(Path(tmp).rglob("search.sqlite"))
        with sqlite3.connect(index) as db:
            figures["documents"] = db.execute("SELECT count(*) FROM docs").fetchone()[0]
            figures["vectors"] = db.execute("SELECT count(*) FROM vectors").fetchone()[0]
        return figures


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sample", default="26")
    args = parser.parse_args()
    (conv,) = [c for c in load_locomo(args.data) if c.sample == args.sample]
    out = {
        "no_embedder": await measure(conv, None),
        "embed_at_close": await measure(conv, MemoryReadConfig(embedder="local")),
    }
    print(json.dumps({"sample": args.sample, "sessions": len(conv.sessions), **out}, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
