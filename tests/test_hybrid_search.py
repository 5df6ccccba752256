"""Hybrid search: BM25 fused with an embedder's cosine ranking, through the real HTTP path.

The embedder is :class:`~sandbox_memory.search.embedding.OpenAIEmbedder` on the SDK's OpenAI client,
pointed at ``tests/http_provider.py``'s ``/v1/embeddings`` (deterministic vectors: hashed
words with synonyms folded, not a semantic model). Failures (429, 500, no answer, a wrong
dimension) fall back to BM25 with one WARNING; Forget, private memory and layout isolation hold
through the fused ranking as through BM25's.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from http_provider import ProviderServer, embeddings, hang, status
from sandbox_memory import (
    Forget,
    MemoryClient,
    MemoryConfigError,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    Remember,
)
from sandbox_memory.search.embedding import OpenAIEmbedder
from sandbox_memory.search.step import embed_index
from test_search import payload

OFFLINE = MemoryGenerateConfig(engine="offline")
DIM = 64
SYNONYMS = {"automobile": "car", "vehicle": "car", "editor": "vim", "shortcuts": "keybindings"}


def hybrid(root: Path, *, timeout: float = 10.0, **kw: Any) -> MemoryClient:
    c = MemoryClient(
        root,
        generate=OFFLINE,
        read=MemoryReadConfig(embedder="openai", embedding_dimension=DIM),
        **kw,
    )
    embedder = c.runtime.search_index.embedder
    assert isinstance(embedder, OpenAIEmbedder)
    embedder.timeout = timeout
    return c


def lexical(root: Path, **kw: Any) -> MemoryClient:
    return MemoryClient(root, generate=OFFLINE, **kw)


def embedding_requests(server: ProviderServer) -> list[Any]:
    return [r for r in server.requests if r.path.endswith("/embeddings")]


FAILURES = [
    pytest.param(lambda: status(429, retry_after=0), id="429"),
    pytest.param(lambda: status(500), id="500"),
    pytest.param(hang, id="hang"),
    pytest.param(lambda: embeddings(DIM, size=DIM // 2), id="wrong-dimension"),
]
"""The embeddings endpoint failing: each a reply, or a responder."""


async def remember(c: MemoryClient, key: str, content: str, **kw: Any) -> None:
    view = await c.create()
    await c.apply(Remember(key=key, content=content, **kw), expected=view.version)


async def test_the_fused_ranking_finds_what_bm25_misses_and_says_so(
    openai_env: ProviderServer, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    c = hybrid(tmp_path)
    await remember(c, "fleet", "The company car is parked in bay 4.")
    await remember(c, "lunch", "Lunch is served at noon in the canteen.")
    # BM25 alone: no word of the query is in memory.
    assert await lexical(tmp_path).search("automobile") == []
    hits = await c.search("automobile")
    assert hits[0].key == "fleet"
    assert {h.ranking for h in hits} == {f"bm25+openai:text-embedding-3-small:{DIM}"}
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    # The documents were embedded once, in one batch with the query, on the configured model.
    first = embedding_requests(openai_env)
    assert len(first) == 1 and first[0].body["model"] == "text-embedding-3-small"
    assert len(first[0].body["input"]) == 3  # two entries and the query

    # A second search embeds the query only; a new process reads the cached vectors too.
    await c.search("vehicle parking")
    await hybrid(tmp_path).search("vehicle parking")
    later = embedding_requests(openai_env)[1:]
    assert [r.body["input"] for r in later] == [["vehicle parking"], ["vehicle parking"]]
    # A changed entry is embedded again (its text changed), the other is not.
    await remember(c, "lunch", "Lunch is served at one in the canteen.")
    await c.search("vehicle parking")
    assert embedding_requests(openai_env)[-1].body["input"] == [
        "lunch: Lunch is served at one in the canteen.",
        "vehicle parking",
    ]


@pytest.mark.parametrize("failure", FAILURES)
async def test_a_failing_embedder_falls_back_to_bm25_with_one_warning(
    openai_env: ProviderServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    failure: Any,
) -> None:
    reply = failure()
    openai_env.respond_with(reply if callable(reply) else (lambda _r: reply))
    c = hybrid(tmp_path, timeout=0.5)
    await remember(c, "fleet", "The company car is parked in bay 4.")
    await remember(c, "lunch", "Lunch is served at noon in the canteen.")
    want = await lexical(tmp_path).search("company car parked")
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        first = await c.search("company car parked")
        second = await c.search("company car parked")
    assert first == want and second == want
    assert {h.ranking for h in first} == {"bm25"}
    warned = [r for r in caplog.records if "embedder" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    # It works again: the fused ranking comes back.
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    assert (await c.search("company car parked"))[0].ranking.startswith("bm25+openai")


async def test_private_memory_stays_private_through_the_fused_ranking(
    openai_env: ProviderServer, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    c = hybrid(tmp_path)
    await remember(c, "ann-editor", "Ann prefers vim keybindings.", kind="preference", person="ann")
    await remember(c, "lunch", "Lunch is served at noon in the canteen.")
    query = "text editor shortcuts"  # no word in common: only the vectors find it
    assert [h.key for h in await c.search(query, person="ann")][:1] == ["ann-editor"]
    for person in (None, "bob"):
        assert "ann-editor" not in {h.key for h in await c.search(query, person=person)}


async def test_a_forgotten_entry_and_its_items_stay_out_of_the_fused_ranking(
    openai_env: ProviderServer, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    c = hybrid(tmp_path)
    await c.runtime.record(
        payload("We use the staging database on port 6543.", "Noted."), rollout_id="ops"
    )
    await c.runtime.close()
    view = await c.view(None)
    (learned,) = [e for e in view.entries.values() if "6543" in e.content and e.sources]
    rests_on = {(s.conversation, s.item) for s in learned.sources}
    query = "staging database port 6543"
    before = await c.search(query)
    assert before[0].ranking.startswith("bm25+openai")
    assert learned.key in {h.key for h in before}

    await c.apply(Forget(key=learned.key), expected=view.version)
    for searcher in (c, hybrid(tmp_path)):
        hits = await searcher.search(query)
        assert hits == [] or hits[0].ranking.startswith("bm25+openai")
        assert learned.key not in {h.key for h in hits}
        cited = {(s.conversation, s.item) for h in hits if h.kind == "item" for s in h.sources}
        assert not cited & rests_on


async def test_layouts_stay_isolated_through_the_fused_ranking(
    openai_env: ProviderServer, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    a = hybrid(tmp_path, layout=MemoryLayoutConfig(memories_dir="mem_a", sessions_dir="s_a"))
    b = hybrid(tmp_path, layout=MemoryLayoutConfig(memories_dir="mem_b", sessions_dir="s_b"))
    await remember(a, "fleet", "The company car is parked in bay 4.")
    await remember(b, "bike", "The vehicle for couriers is a cargo bike.")
    assert {h.key for h in await a.search("automobile")} == {"fleet"}
    assert {h.key for h in await b.search("automobile")} == {"bike"}


@pytest.mark.parametrize(
    ("field", "value"),
    [("embedder", "local-ish"), ("embedding_model", ""), ("embedding_dimension", 0)],
)
def test_bad_embedder_settings_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(MemoryConfigError, match=f"MemoryReadConfig.{field}"):
        MemoryReadConfig(**{field: value})


class _Fixed:
    """Vectors by a word of the text: the cosine order is B, C, then A, D and E; the
    query is at B."""

    name = "fixed"
    dimension = 3

    async def embed(self, texts: Any) -> list[list[float]]:
        def vec(t: str) -> list[float]:
            if "delta" in t:
                return [1.0, 0.0, 0.0]
            if "zeta" in t:
                return [0.9, 0.1, 0.0]
            if "gamma" in t:
                return [0.0, 1.0, 0.0]
            if "theta" in t:
                return [0.0, 0.0, 1.0]
            return [1.0, 0.0, 0.0]

        return [vec(t) for t in texts]


@pytest.mark.parametrize(("weight", "first"), [(None, "a"), (1.0, "b")])
async def test_bm25_leads_the_fusion_by_default(tmp_path: Path, weight: Any, first: str) -> None:
    """BM25 ranks a above b; the vectors rank b far above a. With equal weights b wins; with
    the default weight (0.25, measured in docs/quality.md) BM25's first stays first."""

    read = {} if weight is None else {"vector_weight": weight}
    c = MemoryClient(tmp_path, generate=OFFLINE, read=MemoryReadConfig(embedder=_Fixed(), **read))
    await remember(c, "a", "alpha beta gamma")
    await remember(c, "b", "alpha delta")
    await remember(c, "c", "zeta")
    await remember(c, "d", "theta")
    await remember(c, "e", "theta iota")
    lexical = MemoryClient(tmp_path, generate=OFFLINE)
    assert [h.key for h in await lexical.search("alpha beta")][:2] == ["a", "b"]
    assert [h.score > 0 for h in await lexical.search("alpha beta")][:2] == [True, True]
    assert (await c.search("alpha beta"))[0].key == first


async def test_the_cosine_ranking_adds_to_bm25s_score_not_to_its_place(tmp_path: Path) -> None:
    """Search ranks each kind by BM25 on its own and scores a hit by its rank in its kind, 0
    where BM25 gives it nothing (its one shared word is in most documents). The cosine
    ranking is fused with those scores: b, which BM25 lists second with nothing said for it,
    gains no lexical share for standing there, so even at equal weights a (BM25's first, last
    but one by cosine) stays ahead of b (first by cosine)."""

    read = MemoryReadConfig(embedder=_Fixed(), vector_weight=1.0)
    c = MemoryClient(tmp_path, generate=OFFLINE, read=read)
    await remember(c, "a", "alpha beta gamma")
    await remember(c, "b", "alpha delta")
    await remember(c, "c", "zeta")
    lexical = await MemoryClient(tmp_path, generate=OFFLINE).search("alpha beta")
    assert [(h.key, h.score > 0) for h in lexical][:2] == [("a", True), ("b", False)]
    fused = await c.search("alpha beta")
    assert [h.key for h in fused][:2] == ["a", "b"]
    assert [h.score for h in fused] == sorted((h.score for h in fused), reverse=True)


# ------------------------------------------------------------------ embedding at close

SECRET = "ghp_aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"


def sent_texts(server: ProviderServer) -> list[str]:
    return [t for r in embedding_requests(server) for t in r.body["input"]]


async def test_the_close_embeds_what_it_indexed_so_the_first_search_sends_only_the_query(
    openai_env: ProviderServer, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    c = hybrid(tmp_path)
    await c.runtime.record(
        payload(f"The company car is parked in bay 4; the garage token is {SECRET}.", "Noted."),
        rollout_id="fleet",
    )
    await c.runtime.record(
        payload("Lunch is served at noon in the canteen.", "Ok."), rollout_id="lunch"
    )
    await c.runtime.close()
    at_close = sent_texts(openai_env)
    assert any("bay 4" in t for t in at_close)
    assert not any(SECRET in t for t in at_close)  # redacted text only
    assert len(at_close) == len(set(at_close))

    # The first search (here, in a new process on the same workspace) embeds the query only.
    for client in (hybrid(tmp_path), c):
        before = len(embedding_requests(openai_env))
        hits = await client.search("automobile")
        assert hits and hits[0].conversation == "fleet"
        assert hits[0].ranking.startswith("bm25+openai")
        assert [r.body["input"] for r in embedding_requests(openai_env)[before:]] == [
            ["automobile"]
        ]

    # A close with nothing new sends nothing; one after a new run sends only the new texts.
    before = len(embedding_requests(openai_env))
    await c.runtime.close()
    assert len(embedding_requests(openai_env)) == before
    await c.runtime.record(
        payload("The ferry to Naxos leaves on Tuesday.", "Noted."), rollout_id="trip"
    )
    await c.runtime.close()
    new = [t for r in embedding_requests(openai_env)[before:] for t in r.body["input"]]
    assert new and any("Naxos" in t for t in new)
    assert not set(new) & set(at_close)


async def test_without_an_embedder_the_close_embeds_nothing(
    openai_env: ProviderServer, tmp_path: Path
) -> None:
    openai_env.respond_with(embeddings(DIM))
    c = lexical(tmp_path)
    await c.runtime.record(
        payload("The company car is parked in bay 4.", "Noted."), rollout_id="fleet"
    )
    report = await c.runtime.close()
    assert report["extracted"] == ["fleet"]
    assert embedding_requests(openai_env) == []
    assert {h.ranking for h in await c.search("company car")} == {"bm25"}


@pytest.mark.parametrize("failure", FAILURES)
async def test_an_embedder_failing_at_close_leaves_the_close_and_bm25_working(
    openai_env: ProviderServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    failure: Any,
) -> None:
    reply = failure()
    openai_env.respond_with(reply if callable(reply) else (lambda _r: reply))
    c = hybrid(tmp_path, timeout=0.5)
    await c.runtime.record(
        payload("The company car is parked in bay 4.", "Noted."), rollout_id="fleet"
    )
    await c.runtime.record(
        payload("Lunch is served at noon in the canteen.", "Ok."), rollout_id="lunch"
    )
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        report = await c.runtime.close()
        hits = await c.search("company car parked")
    assert sorted(report["extracted"]) == ["fleet", "lunch"] and report["deferred"] == []
    assert embedding_requests(openai_env)  # it was asked, at close
    assert hits == await lexical(tmp_path).search("company car parked")
    assert hits and {h.ranking for h in hits} == {"bm25"}
    warned = [r for r in caplog.records if "embedder" in r.getMessage()]
    assert len(warned) == 1 and warned[0].levelno == logging.WARNING
    # Once the embedder works again, search embeds what the close could not.
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    assert (await c.search("automobile"))[0].conversation == "fleet"


async def test_the_close_stops_embedding_at_its_deadline_and_the_first_search_does_the_rest(
    openai_env: ProviderServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    openai_env.respond_with(lambda _r: hang())
    first = lexical(tmp_path)  # recorded and closed without an embedder: nothing embedded
    await first.runtime.record(
        payload("The company car is parked in bay 4.", "Noted."), rollout_id="fleet"
    )
    await first.runtime.close()
    c = hybrid(tmp_path, timeout=30.0)
    index = c.runtime.search_index
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        assert await embed_index(index, deadline=started + 0.3) == 0
        assert await embed_index(index, deadline=started) == 0
    assert time.monotonic() - started < 5  # not the embedder's 30 s
    assert not [r for r in caplog.records if "embedder" in r.getMessage()]  # time, not a fault
    openai_env.respond_with(embeddings(DIM, synonyms=SYNONYMS))
    before = len(embedding_requests(openai_env))
    assert (await c.search("automobile"))[0].conversation == "fleet"
    (first,) = embedding_requests(openai_env)[before:]
    assert len(first.body["input"]) > 1 and first.body["input"][-1] == "automobile"
