"""After a Forget, nothing the fact came from is found or shown: not the user's message, not
the assistant's echo, not a line of the rollout summary or the raw notes, not the summary's
file name; on a workspace, and on the shared PostgreSQL store from a fresh machine.

An engine object at the model seam quotes the user (as a model would); real workspaces in
temp folders, the real PostgreSQL server of tests/pgserver.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers import run_payload
from sandbox_memory import Forget, MemoryClient, Remember
from sandbox_memory.engines.base import Candidate, Extraction, ExtractionRequest
from sandbox_memory.stores import PostgresStore
from shared_flow import store_runtime

SAID = "The trip budget is 1500 EUR for the whole week."
ECHO = "Noted: the trip budget is 1500 EUR for the whole week."
QUERY = "trip budget 1500 EUR"


class QuotingEngine:
    """Quotes the user in the summary, the notes and the slug, and learns one fact."""

    name = "quoting"

    async def extract(self, request: ExtractionRequest) -> Extraction:
        item = request.segments[-1]["input"][0]
        return Extraction(
            rollout_summary=f"## Task\nThe user said: {item['content']}\n## Outcome\nPlanned.",
            rollout_slug="trip-budget-1500-eur",
            raw_memory=f"- the user said: {item['content']}\n- planning went on",
            candidates=[
                Candidate(key="budget", content=SAID, kind="fact", sources=[item["memory_item_id"]])
            ],
        )


def run() -> dict[str, Any]:
    return run_payload(SAID, reply=ECHO, when=None)


def memory_files(root: Path) -> dict[str, str]:
    mem = root / "memories"
    return {
        str(p.relative_to(root)): p.read_text()
        for p in mem.rglob("*")
        if p.is_file() and "store" not in p.relative_to(mem).parts
    }


def assert_forgotten(root: Path, hits: list[Any]) -> None:
    for hit in hits:
        assert "1500" not in hit.text, (hit.kind, hit.text)
    for name, text in memory_files(root).items():
        assert "1500" not in text and "1500" not in name, name
    names = [p.name for p in (root / "memories" / "rollout_summaries").iterdir()]
    assert names == ["trip_rollout.md"], names  # the slug held only the fact's words


async def test_a_forgotten_fact_leaves_search_summaries_notes_and_file_names(
    tmp_path: Path,
) -> None:
    rt = store_runtime(tmp_path, None, QuotingEngine())
    await rt.record(run(), rollout_id="trip")
    await rt.close()
    client = MemoryClient(tmp_path)
    assert any("1500" in h.text for h in await client.search(QUERY))
    assert any("1500" in t for t in memory_files(tmp_path).values())
    view = await client.view("trip")
    view = await client.apply(Forget(key="budget"), expected=view.version, conversation="trip")
    for searcher in (client, MemoryClient(tmp_path)):  # this process, and another one
        assert_forgotten(tmp_path, await searcher.search(QUERY))
    assert "trip_rollout.md" in (tmp_path / "memories" / "MEMORY.md").read_text()
    # A direct Remember brings the fact back (not the lines the Forget took out).
    await client.apply(
        Remember(key="budget", content=SAID), expected=view.version, conversation="trip"
    )
    assert [h.key for h in await client.search(QUERY) if h.kind == "entry"] == ["budget"]


async def test_on_the_shared_store_a_fresh_machine_finds_nothing_of_a_forgotten_fact(
    pg_dsn: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_dsn, namespace="forget-derived")
    rt = store_runtime(tmp_path / "one", store, QuotingEngine())
    await rt.record(run(), rollout_id="trip")
    await rt.close()
    one = MemoryClient(tmp_path / "one", store=store)
    view = await one.view("trip")
    await one.apply(Forget(key="budget"), expected=view.version, conversation="trip")
    (tmp_path / "two").mkdir()
    fresh = MemoryClient(tmp_path / "two", store=PostgresStore(pg_dsn, namespace="forget-derived"))
    hits = await fresh.search(QUERY)
    for hit in hits:
        assert "1500" not in hit.text, (hit.kind, hit.text)
    for name, text in memory_files(tmp_path / "two").items():
        assert "1500" not in text and "1500" not in name, name
    await store.aclose()


class ProcedureEngine(QuotingEngine):
    """Learns a procedure (promoted to layout memory), quoting the user everywhere."""

    async def extract(self, request: ExtractionRequest) -> Extraction:
        out = await super().extract(request)
        item = request.segments[-1]["input"][0]
        out.candidates = [
            Candidate(
                key="deploy-steps",
                content=item["content"],
                kind="procedure",
                sources=[item["memory_item_id"]],
            )
        ]
        return out


async def test_a_layout_forget_takes_the_fact_out_of_the_conversation_it_was_learned_in(
    tmp_path: Path,
) -> None:
    said = "Always deploy with make release-1500 before the Friday freeze."
    rt = store_runtime(tmp_path, None, ProcedureEngine())
    payload = run()
    payload["input"][0]["content"] = said
    payload["generated_items"][0]["content"][0]["text"] = f"Noted: {said}"
    await rt.record(payload, rollout_id="ops")
    await rt.close()
    client = MemoryClient(tmp_path)
    view = await client.view(None)
    assert view.entries["deploy-steps"].status == "active"
    await client.apply(Forget(key="deploy-steps"), expected=view.version)
    for hit in await client.search("deploy release-1500 Friday freeze"):
        assert "1500" not in hit.text, (hit.kind, hit.text)
    for name, text in memory_files(tmp_path).items():
        assert "1500" not in text, name
