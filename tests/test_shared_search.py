"""One search index for every sandbox of a shared store, in PostgreSQL.

Real server (``pg_dsn``), real runtimes on workspace folders, the offline engine. The same
search cases run on both backends (a workspace's SQLite index, the store's PostgreSQL index);
then what only the store's index must do: a new sandbox searches it without building one,
Forget takes documents out of it at once, concurrent closes leave each document once, and a
close that lost its lease sends nothing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import layout_runtime
from sandbox_memory import Forget, MemoryClient, MemoryGenerateConfig, Remember
from sandbox_memory.errors import MemoryConfigError, MemoryLeaseLost
from sandbox_memory.runtime import LayoutRuntime
from sandbox_memory.search.index import INDEX_FILE, SearchIndex
from sandbox_memory.search.postgres import send_index, store_search
from sandbox_memory.stores import PostgresStore
from shared_flow import lesson, remember_ann_and_forget_bravo, unstamped_noted_run

OFFLINE = MemoryGenerateConfig(engine="offline")


def runtime(root: Path, store: PostgresStore | None) -> LayoutRuntime:
    return layout_runtime(root, store=store, read=None, mkdir=True)


def index_file(root: Path) -> Path:
    return root / "memories" / "store" / INDEX_FILE


async def history(rt: LayoutRuntime, client: MemoryClient) -> None:
    """Three conversations learn, one of them twice about the same deploy; Ann keeps a private
    preference and a private run; one lesson is forgotten."""

    await rt.record(unstamped_noted_run(lesson("alpha")), rollout_id="conv-a")
    await rt.record(unstamped_noted_run(lesson("bravo")), rollout_id="conv-b")
    await rt.record(unstamped_noted_run(lesson("charlie")), rollout_id="conv-c")
    await rt.record(
        unstamped_noted_run("My locker code is 4471, keep it between us."),
        rollout_id="ann-chat",
        person="ann",
    )
    await remember_ann_and_forget_bravo(client, rt)


@pytest.fixture(params=["workspace", "postgres"])
async def searcher(
    request: pytest.FixtureRequest, pg_dsn: str, tmp_path: Path
) -> AsyncIterator[MemoryClient]:
    """A client after :func:`history`: on the workspace (its SQLite index), or, with a shared
    store, a client on another machine with no workspace (the store's index)."""

    if request.param == "workspace":
        rt = runtime(tmp_path / "w", None)
        await history(rt, MemoryClient(tmp_path / "w", generate=OFFLINE))
        yield MemoryClient(tmp_path / "w", generate=OFFLINE)
        return
    store = PostgresStore(pg_dsn, namespace="acme")
    await history(runtime(tmp_path / "m", store), MemoryClient(store=store))
    remote = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    yield remote
    assert not index_file(remote.runtime.ws.root).exists()  # type: ignore[attr-defined]


async def test_search_finds_a_lesson_with_its_entry_first(searcher: MemoryClient) -> None:
    found = await searcher.search("alpha deploy")
    assert found[0].kind == "entry" and "alpha" in found[0].text
    assert {h.kind for h in found} >= {"entry", "rollout_summary"}


async def test_scores_never_rise_down_the_list(searcher: MemoryClient) -> None:
    for query in ("alpha deploy", "deploy", "noted", "charlie release"):
        scores = [h.score for h in await searcher.search(query, limit=20)]
        assert scores == sorted(scores, reverse=True), query


async def test_one_hit_per_fact(searcher: MemoryClient) -> None:
    found = await searcher.search("deploy", limit=50)
    facts = [(h.conversation, h.key) for h in found if h.kind == "entry"]
    assert len(facts) == len(set(facts))
    cited = {(s.conversation, s.item) for h in found if h.kind == "entry" for s in h.sources}
    items = {(h.conversation, h.sources[0].item) for h in found if h.kind == "item"}
    assert not cited & items  # an entry and the items it cites are one hit


async def test_a_forgotten_lesson_is_found_nowhere(searcher: MemoryClient) -> None:
    assert await searcher.search("bravo") == []


async def test_private_memory_only_for_its_person(searcher: MemoryClient) -> None:
    assert await searcher.search("vim keybindings") == []
    assert await searcher.search("locker code") == []
    assert [h.key for h in await searcher.search("vim keybindings", person="ann")] == ["ann-editor"]
    assert (await searcher.search("locker code", person="ann"))[0].conversation == "ann-chat"


async def test_one_conversation_only(searcher: MemoryClient) -> None:
    found = await searcher.search("deploy", conversation="conv-c")
    assert found and {h.conversation for h in found} == {"conv-c"}


async def test_an_entry_hit_carries_its_evidence(searcher: MemoryClient) -> None:
    entry = next(h for h in await searcher.search("charlie deploy") if h.kind == "entry")
    assert entry.sources and all(s.conversation == "conv-c" for s in entry.sources)


@pytest.mark.parametrize(
    ("query", "limit", "field"), [("", 10, "query"), ("the of", 0, "limit"), ("x", 101, "limit")]
)
async def test_bad_input_names_the_field(
    searcher: MemoryClient, query: str, limit: int, field: str
) -> None:
    with pytest.raises(MemoryConfigError) as err:
        await searcher.search(query, limit=limit)
    assert err.value.field == field


# ------------------------------------------------------------ the store's index only


async def rows(dsn: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        return await (await conn.execute(sql, args)).fetchall()


async def test_a_new_sandbox_searches_without_building_an_index(
    pg_dsn: str, tmp_path: Path
) -> None:
    a = runtime(tmp_path / "a", PostgresStore(pg_dsn, namespace="acme"))
    await a.record(unstamped_noted_run(lesson("zephyr")), rollout_id="conv-a")
    await a.close()
    b = tmp_path / "b"
    b.mkdir()
    client = MemoryClient(b, store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    found = await client.search("zephyr deploy")
    assert found[0].kind == "entry" and "zephyr" in found[0].text
    assert not index_file(b).exists()
    # Each document once, and the statistics BM25 reads are those of the documents held.
    ((docs, entries),) = await rows(
        pg_dsn,
        "SELECT count(*), count(*) FILTER (WHERE kind = 'entry') FROM sbm_search_docs "
        "WHERE namespace = 'acme'",
    )
    stats = dict(
        (g, n)
        for g, n in await rows(
            pg_dsn, "SELECT grp, docs FROM sbm_search_stats WHERE namespace = 'acme'"
        )
    )
    assert stats == {"all": docs, "entry": entries} and entries > 0


async def test_forget_takes_documents_out_of_the_store_index_at_once(
    pg_dsn: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_dsn, namespace="acme")
    rt = runtime(tmp_path / "a", store)
    await rt.record(unstamped_noted_run(lesson("quokka")), rollout_id="conv-q")
    await rt.close()
    reader = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    entry = next(h for h in await reader.search("quokka") if h.kind == "entry")
    admin = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    view = await admin.view("conv-q")
    await admin.apply(Forget(key=entry.key or ""), expected=view.version, conversation="conv-q")
    # No close in between: the command sent it.
    held = await rows(
        pg_dsn,
        "SELECT doc FROM sbm_search_docs WHERE namespace = 'acme' AND kind = 'entry' AND key = %s",
        entry.key,
    )
    assert held == []
    assert await reader.search("quokka") == []


async def test_layouts_are_isolated(pg_dsn: str, tmp_path: Path) -> None:
    a = runtime(tmp_path / "a", PostgresStore(pg_dsn, namespace="acme"))
    await a.record(unstamped_noted_run(lesson("walrus")), rollout_id="conv-a")
    await a.close()
    g = runtime(tmp_path / "g", PostgresStore(pg_dsn, namespace="globex"))
    await g.record(unstamped_noted_run(lesson("narwhal")), rollout_id="conv-g")
    await g.close()
    acme = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    globex = MemoryClient(store=PostgresStore(pg_dsn, namespace="globex"), generate=OFFLINE)
    assert await acme.search("narwhal") == []
    assert await globex.search("walrus") == []
    assert await globex.search("narwhal")


async def test_concurrent_closes_leave_each_document_once(pg_dsn: str, tmp_path: Path) -> None:
    sandboxes = [
        runtime(tmp_path / f"s{i}", PostgresStore(pg_dsn, namespace="acme")) for i in range(3)
    ]
    for i, rt in enumerate(sandboxes):
        await rt.record(unstamped_noted_run(lesson(f"topic{i}")), rollout_id=f"conv-{i}")
    await asyncio.gather(*(rt.close() for rt in sandboxes))
    await asyncio.gather(*(rt.close() for rt in sandboxes))  # each takes in the others' work
    reader = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    for i in range(3):
        assert any(f"topic{i}" in h.text for h in await reader.search(f"topic{i}"))
    ((docs,),) = await rows(pg_dsn, "SELECT count(*) FROM sbm_search_docs WHERE namespace = 'acme'")
    ((stat,),) = await rows(
        pg_dsn, "SELECT docs FROM sbm_search_stats WHERE namespace = 'acme' AND grp = 'all'"
    )
    assert stat == docs
    # Every sandbox's own index holds what the store's holds.
    assert [await rt.search_index.count() for rt in sandboxes] == [docs] * len(sandboxes)


async def test_a_close_that_lost_its_lease_sends_nothing(pg_dsn: str, tmp_path: Path) -> None:
    store = PostgresStore(pg_dsn, namespace="acme")
    rt = runtime(tmp_path / "a", store)
    await rt.record(unstamped_noted_run(lesson("ibex")), rollout_id="conv-a")
    await rt.close()
    await rt.record(unstamped_noted_run(lesson("okapi")), rollout_id="conv-b")
    await rt.sync_search()  # the new run's items are noted to send
    fence = await store.acquire(timeout=5)
    await store.release(fence)
    await PostgresStore(pg_dsn, namespace="acme").acquire(timeout=5)  # another holder
    with pytest.raises(MemoryLeaseLost):
        await send_index(rt.search_index, store, fence)
    held = await rows(
        pg_dsn,
        "SELECT doc FROM sbm_search_docs WHERE namespace = 'acme' AND conversation = 'conv-b'",
    )
    assert held == []


async def joined(root: Path) -> None:
    """A workspace with a history of its own, about to join a shared store: its search index
    is built again, wholly, by its first close on the store."""

    alone = runtime(root, None)
    for i in range(10):
        await alone.record(unstamped_noted_run(lesson(f"topic{i}")), rollout_id=f"conv-{i}")
    await alone.close()
    alone.search_index.close()
    index_file(root).unlink()


def in_thread(work: Callable[[], Awaitable[None]]) -> threading.Thread:
    """Another sandbox's process: ``work`` in an event loop of its own."""

    return threading.Thread(target=lambda: asyncio.run(work()))  # type: ignore[arg-type]


async def test_a_close_that_stalled_past_its_lease_still_sends_the_index(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The first close on the store holds its event loop longer than the lease in one piece
    (building the index of a long history on a busy machine), so the lease's renewal comes
    late; nobody took the lease over meanwhile, so it is still the close's, and the close
    sends the whole index without a warning."""

    await joined(tmp_path / "a")
    real = SearchIndex._sync_items
    stalls: list[float] = []

    async def stalled(self: SearchIndex, *args: Any, **kwargs: Any) -> None:
        if not stalls:
            stalls.append(1.5)
            time.sleep(1.5)  # longer than the lease, in one piece
        await real(self, *args, **kwargs)

    monkeypatch.setattr(SearchIndex, "_sync_items", stalled)
    store = PostgresStore(pg_dsn, namespace="acme", lease_seconds=1.0)
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await runtime(tmp_path / "a", store).close()
    assert stalls and [r.getMessage() for r in caplog.records] == []
    monkeypatch.undo()
    reader = MemoryClient(store=PostgresStore(pg_dsn, namespace="acme"), generate=OFFLINE)
    assert reader.runtime.shared is not None and reader.runtime.shared.store_search is not None
    assert await reader.runtime.shared.store_search.ready()
    for i in (0, 9):
        assert any(f"topic{i}" in h.text for h in await reader.search(f"topic{i} deploy"))


async def test_an_index_a_close_could_not_send_is_sent_by_the_next(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A close stalls past its lease and another sandbox takes the lease over (then dies):
    the close's sending of the index is refused and it says so once, and the next close
    sends the whole index."""

    await joined(tmp_path / "a")
    real = SearchIndex._sync_items

    async def take_over() -> None:
        await PostgresStore(pg_dsn, namespace="acme", lease_seconds=1.0).acquire(timeout=10)

    taker = in_thread(take_over)

    async def stalled(self: SearchIndex, *args: Any, **kwargs: Any) -> None:
        if taker.ident is None:
            time.sleep(1.5)  # longer than the lease, in one piece; meanwhile it is taken
            taker.start()
            taker.join()
        await real(self, *args, **kwargs)

    monkeypatch.setattr(SearchIndex, "_sync_items", stalled)
    store = PostgresStore(pg_dsn, namespace="acme", lease_seconds=1.0)
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        await runtime(tmp_path / "a", store).close()
    unsent = [r for r in caplog.records if "search index could not be sent" in r.getMessage()]
    assert len(unsent) == 1 and unsent[0].levelno == logging.WARNING
    search = store_search(PostgresStore(pg_dsn, namespace="acme"))
    assert search is not None and not await search.ready()
    monkeypatch.undo()
    await runtime(tmp_path / "a", PostgresStore(pg_dsn, namespace="acme")).close()
    assert await search.ready()
    hits = await search.search("topic3 deploy", conversation=None, limit=10, person=None)
    assert hits and "topic3" in hits[0].text


async def test_the_lookup_at_run_start_answers_as_the_copys_index(
    pg_dsn: str, tmp_path: Path
) -> None:
    from sandbox_memory.render.relevant import CANDIDATES, QUERY_TERMS, task_terms
    from sandbox_memory.search.postgres import PostgresSearch

    store = PostgresStore(pg_dsn, namespace="acme")
    rt = runtime(tmp_path / "m", store)
    await history(rt, MemoryClient(store=store))
    await rt.search_index.sync()
    for text in ("Deploy charlie with deploy-charlie please", "alpha ships how?", "vim"):
        phrases, words = task_terms(text)
        for person in (None, "ann"):
            kw: dict[str, Any] = {"person": person, "limit": CANDIDATES, "max_terms": QUERY_TERMS}
            rt.search_index.remote = None
            want = await rt.search_index.curated(phrases, words, **kw)
            got = await PostgresSearch(store).curated(phrases, words, **kw)
            assert [(h.kind, h.key, h.text, h.score, h.sources) for h in got] == [
                (h.kind, h.key, h.text, h.score, h.sources) for h in want
            ], (text, person)
            if text.startswith("Deploy charlie") and person is None:
                assert any("charlie" in h.text for h in got)


@pytest.mark.parametrize("backend", ["workspace", "postgres"])
async def test_a_fact_updated_in_a_later_conversation_is_one_hit_in_its_newest_words(
    backend: str, pg_dsn: str, tmp_path: Path
) -> None:
    store = PostgresStore(pg_dsn, namespace="newest") if backend == "postgres" else None
    rt = runtime(tmp_path / "w", store)
    client = MemoryClient(store=store) if store else MemoryClient(tmp_path / "w", generate=OFFLINE)
    for rid, command in (("fix", "tox -e py311"), ("fix2", "tox -e py312 --parallel")):
        view = await client.create(rid)
        await client.apply(
            Remember(
                key="test-command", content=f"Run the tests with {command}.", kind="procedure"
            ),
            expected=view.version,
            conversation=rid,
        )
    await rt.close()
    searcher = (
        MemoryClient(store=PostgresStore(pg_dsn, namespace="newest"), generate=OFFLINE)
        if store
        else client
    )

    hits = [h for h in await searcher.search("tox tests py311") if h.kind == "entry"]

    assert [h.key for h in hits] == ["test-command"]
    assert "py312 --parallel" in hits[0].text and "py311" not in hits[0].text
