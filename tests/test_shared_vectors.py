"""The vectors of a shared store's search index: a sandbox with an embedder fetches what
another sandbox of the namespace embedded, instead of embedding it again.

Real PostgreSQL server (``pg_dsn``), real runtimes on workspace folders, the offline engine,
``embedder="openai"`` against ``tests/http_provider.py`` (deterministic vectors; the requests
it receives are what a provider would be sent and billed for).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import layout_runtime
from http_provider import ProviderServer, embeddings
from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, MemoryReadConfig, Remember
from sandbox_memory.errors import MemoryStoreUnavailable
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.stores import PostgresStore
from test_search import payload

OFFLINE = MemoryGenerateConfig(engine="offline")
DIM = 64
SYNONYMS = {"automobile": "car", "vehicle": "car"}


def hybrid_read(dimension: int = DIM) -> MemoryReadConfig:
    return MemoryReadConfig(embedder="openai", embedding_dimension=dimension)


def sandbox(root: Path, pg_dsn: str, namespace: str = "acme") -> LayoutRuntime:
    """A sandbox of ``namespace`` with the ``openai`` embedder, its workspace at ``root``."""

    store = PostgresStore(pg_dsn, namespace=namespace)
    return layout_runtime(root, store=store, read=hybrid_read(), mkdir=True)


def searcher(root: Path, pg_dsn: str, namespace: str = "acme") -> MemoryClient:
    """A new sandbox's client: a fresh workspace attached to ``namespace``, same embedder."""

    root.mkdir()
    store = PostgresStore(pg_dsn, namespace=namespace)
    return MemoryClient(root, store=store, generate=OFFLINE, read=hybrid_read())


def sent_texts(server: ProviderServer, since: int = 0) -> list[str]:
    requests = [r for r in server.requests if r.path.endswith("/embeddings")]
    return [t for r in requests[since:] for t in r.body["input"]]


def requests_made(server: ProviderServer) -> int:
    return len([r for r in server.requests if r.path.endswith("/embeddings")])


async def rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        return list(await (await conn.execute(sql, args)).fetchall())


async def learn_fleet_and_lunch(rt: LayoutRuntime) -> None:
    await rt.record(
        payload(
            "We decided that the company car always parks in bay 4 of the north garage.", "Noted."
        ),
        rollout_id="fleet",
    )
    await rt.record(payload("Lunch is served at noon in the canteen.", "Ok."), rollout_id="lunch")
    await rt.close()


async def test_a_new_sandbox_fetches_the_vectors_another_embedded(
    openai_env: ProviderServer, pg_dsn: str, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    a = sandbox(tmp_path / "a", pg_dsn)
    await learn_fleet_and_lunch(a)
    embedded_by_a = sent_texts(openai_env)
    assert any("bay 4" in t for t in embedded_by_a)
    # Kept for documents the store's index holds, one per document and text.
    kept = await rows(
        pg_dsn,
        "SELECT v.doc, v.hash, length(v.vec) FROM sbm_search_vectors v WHERE v.namespace = 'acme'",
    )
    docs = {d for (d,) in await rows(pg_dsn, "SELECT doc FROM sbm_search_docs")}
    assert kept and {d for d, _, _ in kept} <= docs
    assert {n for _, _, n in kept} == {4 * DIM}

    b = searcher(tmp_path / "b", pg_dsn)
    before = requests_made(openai_env)
    hits = await b.search("automobile")
    assert hits and hits[0].conversation == "fleet"
    assert hits[0].ranking.startswith("bm25+openai")
    # The new sandbox sends the query alone: every document's vector came from the store.
    assert sent_texts(openai_env, before) == ["automobile"]
    assert b.runtime.search_index.vectors_fetched == len({h for _, h, _ in kept})


async def test_vectors_stay_in_their_namespace(
    openai_env: ProviderServer, pg_dsn: str, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    await learn_fleet_and_lunch(sandbox(tmp_path / "a", pg_dsn, "acme"))
    await learn_fleet_and_lunch(sandbox(tmp_path / "g", pg_dsn, "globex"))
    # The same texts in another namespace were embedded there, not taken from acme's.
    sent = sent_texts(openai_env)
    fleet = next(t for t in sent if "bay 4" in t)
    assert sent.count(fleet) == 2
    kept = await rows(
        pg_dsn, "SELECT namespace, count(*) FROM sbm_search_vectors GROUP BY 1 ORDER BY 1"
    )
    assert [ns for ns, n in kept if n] == ["acme", "globex"]


async def test_forget_takes_a_documents_vectors_out_of_the_store(
    openai_env: ProviderServer, pg_dsn: str, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    await learn_fleet_and_lunch(sandbox(tmp_path / "a", pg_dsn))
    entries = await rows(
        pg_dsn, "SELECT doc, key FROM sbm_search_docs WHERE namespace = 'acme' AND kind = 'entry'"
    )
    (key,) = {k for _, k in entries}  # the decision, in the conversation and the layout
    docs = [d for d, _ in entries]
    held = "SELECT doc FROM sbm_search_vectors WHERE doc = ANY(%s)"
    assert len(await rows(pg_dsn, held, docs)) == 2
    admin = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    view = await admin.view("fleet")
    await admin.apply(Forget(key=key), expected=view.version, conversation="fleet")
    assert await rows(pg_dsn, held, docs) == []
    orphans = await rows(
        pg_dsn,
        "SELECT v.doc FROM sbm_search_vectors v WHERE NOT EXISTS (SELECT 1 FROM "
        "sbm_search_docs d WHERE d.namespace = v.namespace AND d.doc = v.doc)",
    )
    assert orphans == []


async def test_a_vector_is_put_only_for_a_document_the_store_holds(
    openai_env: ProviderServer, pg_dsn: str, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM))
    await learn_fleet_and_lunch(sandbox(tmp_path / "a", pg_dsn))
    search = sandbox(tmp_path / "b", pg_dsn).search_index.shared_vectors
    assert search is not None
    ((doc,),) = await rows(
        pg_dsn, "SELECT doc FROM sbm_search_docs WHERE kind = 'entry' AND conversation = 'fleet'"
    )  # the decision's copy in its conversation
    kept = await search.put_vectors([(doc, "h-known", b"\0" * 16), ("no-such-doc", "h-x", b"")])
    assert kept == 1
    assert await search.fetch_vectors(["h-known", "h-x"]) == {"h-known": b"\0" * 16}


class Unreachable:
    async def fetch_vectors(self, hashes: list[str]) -> dict[str, bytes]:
        raise MemoryStoreUnavailable("postgres (test): connection refused")

    async def put_vectors(self, vectors: list[tuple[str, str, bytes]]) -> int:
        raise MemoryStoreUnavailable("postgres (test): connection refused")


async def test_a_store_out_of_reach_leaves_the_texts_to_the_embedder_with_one_warning(
    openai_env: ProviderServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    c = MemoryClient(tmp_path, generate=OFFLINE, read=hybrid_read())
    c.runtime.search_index.shared_vectors = Unreachable()
    await c.runtime.record(
        payload("The company car is parked in bay 4.", "Noted."), rollout_id="fleet"
    )
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await c.runtime.close()
        hits = await c.search("automobile")
        await c.search("vehicle")
    assert hits and hits[0].conversation == "fleet"
    assert hits[0].ranking.startswith("bm25+openai")
    warned = [r for r in caplog.records if "shared store's vectors" in r.getMessage()]
    assert len(warned) == 1


async def test_a_document_whose_text_changes_loses_the_old_texts_vector(
    openai_env: ProviderServer, pg_dsn: str, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM))
    await learn_fleet_and_lunch(sandbox(tmp_path / "a", pg_dsn))
    entries = await rows(
        pg_dsn, "SELECT doc, key FROM sbm_search_docs WHERE namespace = 'acme' AND kind = 'entry'"
    )
    (key,) = {k for _, k in entries}
    layout_doc = next(d for d, _ in entries if d.startswith("entry:layout:"))
    held = "SELECT hash FROM sbm_search_vectors WHERE doc = %s"
    (old,) = await rows(pg_dsn, held, layout_doc)
    admin = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    view = await admin.view()
    await admin.apply(
        Remember(key=key, content="The company car parks in bay 7 from now on.", kind="decision"),
        expected=view.version,
    )
    ((text,),) = await rows(pg_dsn, "SELECT text FROM sbm_search_docs WHERE doc = %s", layout_doc)
    assert "bay 7" in text
    assert old not in await rows(pg_dsn, held, layout_doc)
