"""What the local embedder costs a search: memory of one LoCoMo dev conversation built as
``bench/quality.py`` builds it, then searched with ``embedder="local"``: the first search
(model load and every document embedded), a second one (the query only), and a new process's
view of the cached vectors (another client, the model already loaded in this process).

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

from quality import DEFAULT_DATA, OFFLINE, feed, load_locomo

from sandbox_memory import MemoryClient, MemoryReadConfig


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sample", default="26")
    args = parser.parse_args()
    (conv,) = [c for c in load_locomo(args.data) if c.sample == args.sample]
    with tempfile.TemporaryDirectory() as tmp:
        state = await feed(conv, Path(tmp))
        figures: dict[str, float] = {}
        lexical = MemoryClient(state.root, generate=OFFLINE)
        started = time.perf_counter()
        await lexical.search("when did she go to the support group")
        figures["bm25_search_s"] = time.perf_counter() - started
        for name in ("first_search_s", "second_search_s", "other_client_s"):
            client = MemoryClient(
                state.root, generate=OFFLINE, read=MemoryReadConfig(embedder="local")
            )
            started = time.perf_counter()
            await client.search("when did she go to the support group")
            figures[name] = time.perf_counter() - started
            figures[name.removesuffix("_s") + "_texts"] = client.runtime.search_index.texts_embedded
        index = next(Path(tmp).rglob("search.sqlite"))
        with sqlite3.connect(index) as db:
            figures["documents"] = db.execute("SELECT count(*) FROM docs").fetchone()[0]
            figures["vectors"] = db.execute("SELECT count(*) FROM vectors").fetchone()[0]
        print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
