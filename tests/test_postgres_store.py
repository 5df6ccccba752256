"""The PostgreSQL store on a real server: schema, conditional writes, leases, progress, tenants."""

from __future__ import annotations

import asyncio
import logging
import traceback

import psycopg
import pytest

from pgserver import PostgresServer
from sandbox_memory.errors import (
    MemoryConfigError,
    MemoryConflict,
    MemoryLeaseLost,
    MemoryLockTimeout,
    MemoryStoreUnavailable,
)
from sandbox_memory.stores import PostgresStore, redact_dsn
from sandbox_memory.stores.postgres import SCHEMA_VERSION
from sandbox_memory.stores.records import Entry, LogRecord, Source


def entry(key: str, content: str = "x") -> Entry:
    return Entry(
        key=key, content=content, kind="fact", sources=[Source(conversation="c", item="i")]
    )


async def test_schema_is_created_on_first_use_and_recorded_by_version(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, namespace="a")
    await store.ping()
    again = PostgresStore(pg_dsn, namespace="b")
    await again.ping()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT version FROM sbm_schema ORDER BY version").fetchall()
    assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    await store.aclose()
    await again.aclose()


async def test_a_database_at_an_older_schema_is_migrated_on_first_use_keeping_its_data(
    pg_dsn: str,
) -> None:
    from sandbox_memory.stores.postgres import MIGRATIONS

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # what version 1 left behind
        conn.execute(
            "CREATE TABLE sbm_schema (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(MIGRATIONS[0])
        conn.execute("INSERT INTO sbm_schema (version) VALUES (1)")
        conn.execute(
            "INSERT INTO sbm_files (namespace, path, content) VALUES ('a', 'raw_memories/r.md', 'notes')"
        )
    store = PostgresStore(pg_dsn, namespace="a")
    notes, newest = await store.files()
    assert notes == {"raw_memories/r.md": b"notes"} and newest >= 1
    await store.put_files({"raw_memories/r.md": None})
    tomb, later = await store.files(after=newest)
    assert tomb == {"raw_memories/r.md": None} and later > newest  # a deletion is seen
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT version FROM sbm_schema ORDER BY version").fetchall()
    assert [v for (v,) in rows] == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION >= 2
    await store.aclose()


async def test_a_schema_newer_than_the_code_is_refused_clearly(pg_dsn: str) -> None:
    await (store := PostgresStore(pg_dsn, namespace="a")).ping()
    await store.aclose()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO sbm_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(MemoryStoreUnavailable, match="newer than this sandbox-memory knows"):
        await PostgresStore(pg_dsn, namespace="a").ping()


async def test_a_stale_scope_write_is_a_conflict_and_changes_nothing(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, namespace="n")
    assert await store.write_scope("layout", entries={"a": entry("a")}, expected_version=0) == 1
    with pytest.raises(MemoryConflict, match="at version 1, not 0") as info:
        await store.write_scope("layout", entries={"a": entry("a", "other")}, expected_version=0)
    assert info.value.current_version == 1
    state = await store.read_scope("layout")
    assert state.version == 1 and state.entries["a"].content == "x"
    await store.aclose()


async def test_a_stale_entry_write_is_a_conflict_even_if_the_scope_moved_elsewhere(
    pg_dsn: str,
) -> None:
    store = PostgresStore(pg_dsn, namespace="n")
    await store.write_scope("layout", entries={"a": entry("a"), "b": entry("b")})
    await store.write_scope("layout", entries={"b": entry("b", "b2")})  # b now at version 2
    # 'a' unchanged since version 1: a write expecting it there goes through.
    v = await store.write_scope(
        "layout", entries={"a": entry("a", "a2")}, expected_entries={"a": 1}
    )
    assert v == 3
    with pytest.raises(MemoryConflict, match="'b' changed since read"):
        await store.write_scope(
            "layout",
            entries={"b": entry("b", "mine"), "c": entry("c")},
            expected_entries={"b": 1, "c": None},
        )
    state = await store.read_scope("layout")
    assert state.entries["b"].content == "b2" and "c" not in state.entries
    assert state.entry_versions == {"a": 3, "b": 2}
    await store.aclose()


async def test_concurrent_writers_from_one_version_one_wins_the_rest_conflict(
    pg_dsn: str,
) -> None:
    stores = [PostgresStore(pg_dsn, namespace="n") for _ in range(6)]
    await stores[0].write_scope("layout", entries={"k": entry("k")})

    async def write(i: int) -> str:
        try:
            await stores[i].write_scope(
                "layout", entries={"k": entry("k", f"w{i}")}, expected_version=1
            )
        except MemoryConflict:
            return "conflict"
        return "ok"

    results = await asyncio.gather(*(write(i) for i in range(6)))
    assert sorted(results) == ["conflict"] * 5 + ["ok"]
    state = await stores[0].read_scope("layout")
    assert state.version == 2
    for s in stores:
        await s.aclose()


async def test_log_records_carry_the_version_they_produced(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, namespace="n")
    rec = LogRecord(version=0, at=1, cause="person", scope="ignored", keys=["a"])
    await store.write_scope("layout", entries={"a": entry("a")}, log=[rec])
    await store.write_scope("conversation:c1", entries={"a": entry("a")}, log=[rec, rec])
    log = await store.read_log()
    assert [(r.version, r.scope) for _, r in log] == [
        (1, "layout"),
        (1, "conversation:c1"),
        (1, "conversation:c1"),
    ]
    seqs = [s for s, _ in log]
    assert await store.read_log(after=seqs[0]) == log[1:]
    await store.aclose()


async def test_a_lease_past_its_time_that_nobody_took_is_still_its_holders(
    pg_dsn: str,
) -> None:
    """A holder that stalled past its lease (its event loop held) while no one wanted the
    lease keeps it: the renewal and the fenced writes go through, and the lease holds others
    off again."""

    first = PostgresStore(pg_dsn, namespace="n", lease_seconds=0.3)
    fence = await first.acquire(timeout=1)
    await asyncio.sleep(0.4)  # no renewal: the lease's time is past
    await first.renew(fence)
    assert await first.write_scope("layout", entries={"a": entry("a")}, fence=fence) == 1
    second = PostgresStore(pg_dsn, namespace="n", lease_seconds=30)
    with pytest.raises(MemoryLockTimeout):
        await second.acquire(timeout=0.1)
    await first.release(fence)
    await second.release(await second.acquire(timeout=1))
    await first.aclose()
    await second.aclose()


async def test_a_lapsed_lease_is_taken_over_and_its_old_holder_cannot_write(
    pg_dsn: str,
) -> None:
    first = PostgresStore(pg_dsn, namespace="n", lease_seconds=0.3)
    second = PostgresStore(pg_dsn, namespace="n", lease_seconds=30)
    old = await first.acquire(timeout=1)
    with pytest.raises(MemoryLockTimeout):
        await second.acquire(timeout=0.1)
    await asyncio.sleep(0.4)  # the first holder stopped renewing: its lease lapses
    new = await second.acquire(timeout=2)
    assert new.token > old.token
    with pytest.raises(MemoryLeaseLost):
        await first.write_scope("layout", entries={"a": entry("a")}, fence=old)
    with pytest.raises(MemoryLeaseLost):
        await first.advance("r", watermark=3, progress={}, fence=old)
    with pytest.raises(MemoryLeaseLost):
        await first.put_files({"raw_memories/r.md": b"x"}, fence=old)
    with pytest.raises(MemoryLeaseLost):
        await first.renew(old)
    assert (await second.read_scope("layout")).version == 0
    await second.write_scope("layout", entries={"a": entry("a")}, fence=new)
    await second.release(new)
    again = await first.acquire(timeout=1)  # a released lease is free at once
    assert again.token > new.token
    await first.aclose()
    await second.aclose()


async def test_progress_is_a_watermark_that_never_moves_backwards(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(pg_dsn, namespace="n")
    assert await store.advance("r", watermark=5, progress={"slug": "five"}) == 5
    with caplog.at_level(logging.WARNING, logger="sandbox_memory"):
        assert await store.advance("r", watermark=3, progress={"slug": "three"}) == 5
    assert "not moved back" in caplog.text
    state = (await store.rollouts())["r"]
    assert (state.watermark, state.progress) == (5, {"slug": "five"})
    await store.aclose()


async def test_segments_are_numbered_densely_and_stored_once_under_concurrency(
    pg_dsn: str,
) -> None:
    stores = [PostgresStore(pg_dsn, namespace="n") for _ in range(4)]

    async def record(i: int) -> None:
        for j in range(10):
            await stores[i].append_segment("r", f"s{i}-{j}", f'{{"i": {i}}}')
        # A retry of a segment already stored (a lost reply) stores nothing new.
        await stores[i].append_segment("r", f"s{i}-0", '{"dup": true}')

    await asyncio.gather(*(record(i) for i in range(4)))
    segs = await stores[0].read_segments("r")
    assert [n for n, _, _ in segs] == list(range(1, 41))
    assert len({sid for _, sid, _ in segs}) == 40
    assert (await stores[0].rollouts())["r"].segments == 40
    assert [s for _, s, _ in await stores[0].read_segments("r", after=38)] == (
        await stores[0].segment_ids("r")
    )[38:]
    for s in stores:
        await s.aclose()


async def test_a_namespace_never_sees_another_namespaces_data(pg_dsn: str) -> None:
    acme = PostgresStore(pg_dsn, namespace="acme")
    other = PostgresStore(pg_dsn, namespace="globex")
    await acme.write_scope("layout", entries={"secret-plan": entry("secret-plan")})
    await acme.append_segment("r1", "seg-1", "{}")
    await acme.advance("r1", watermark=1, progress={})
    await acme.map_threads({"fp": "r1"})
    await acme.put_files({"raw_memories/r1.md": b"notes"})
    fence = await acme.acquire(timeout=1)
    assert (await other.read_scope("layout")).entries == {}
    assert await other.scope_versions() == {}
    assert await other.read_log() == []
    assert await other.rollouts() == {}
    assert await other.read_segments("r1") == []
    assert await other.threads() == {}
    assert await other.files() == ({}, 0)
    # acme's lease does not hold globex, and acme's fence does not open globex's writes.
    theirs = await other.acquire(timeout=1)
    with pytest.raises(MemoryLeaseLost):
        await other.write_scope("layout", entries={}, fence=fence)
    await other.release(theirs)
    await acme.release(fence)
    await acme.aclose()
    await other.aclose()


def test_bad_namespace_and_dsn_are_refused_naming_the_field() -> None:
    with pytest.raises(MemoryConfigError, match="namespace"):
        PostgresStore("postgresql:///x", namespace="a/b")
    with pytest.raises(MemoryConfigError, match="namespace"):
        PostgresStore("postgresql:///x", namespace="")
    with pytest.raises(MemoryConfigError, match="^dsn"):
        PostgresStore("  ", namespace="a")


def test_dsn_passwords_are_redacted_in_both_forms() -> None:
    assert redact_dsn("postgresql://bob:hunter2@db:5432/x") == "postgresql://bob:***@db:5432/x"
    assert redact_dsn("host=db user=bob password=hunter2 dbname=x") == (
        "host=db user=bob password=*** dbname=x"
    )
    assert redact_dsn("postgresql://bob@/x?host=/s&password=hunter2") == (
        "postgresql://bob@/x?host=/s&password=***"
    )
    store = PostgresStore("postgresql://bob:hunter2@db/x", namespace="a")
    assert "hunter2" not in repr(store) and "hunter2" not in store.describe()


async def test_a_refused_password_never_appears_in_the_error_or_the_log(
    pg_server: PostgresServer, pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    pg_server.sql("CREATE ROLE tenant_pw LOGIN PASSWORD 'the-right-one'")
    dbname = pg_dsn.split("@/")[1].split("?")[0]
    bad = pg_server.dsn(dbname, user="tenant_pw", password="s3cr3t-Pa55word")
    store = PostgresStore(bad, namespace="a", connect_timeout=2)
    with caplog.at_level(logging.DEBUG), pytest.raises(MemoryStoreUnavailable) as info:
        await store.ping()
    message = str(info.value)
    assert "password authentication failed" in message
    assert "s3cr3t-Pa55word" not in message and "***" in message
    assert "s3cr3t-Pa55word" not in caplog.text
    # raised ``from None``: a printed traceback shows neither the driver's error nor the DSN
    assert info.value.__cause__ is None and info.value.__suppress_context__
    printed = "".join(traceback.format_exception(info.value))
    assert "s3cr3t-Pa55word" not in printed and "password authentication failed" in printed


async def test_a_tenant_role_with_its_own_schema_cannot_read_another_tenants_tables(
    pg_server: PostgresServer, pg_dsn: str
) -> None:
    """The set-up docs/sharing.md gives: one role and one schema per tenant."""

    dbname = pg_dsn.split("@/")[1].split("?")[0]
    for tenant in ("acme", "globex"):
        pg_server.sql(
            f"CREATE ROLE {tenant}_{dbname} LOGIN PASSWORD 'pw-{tenant}'; "
            f"CREATE SCHEMA {tenant} AUTHORIZATION {tenant}_{dbname}; "
            f"ALTER ROLE {tenant}_{dbname} SET search_path = {tenant}",
            dbname,
        )
    acme = PostgresStore(
        pg_server.dsn(dbname, user=f"acme_{dbname}", password="pw-acme"), namespace="eng"
    )
    globex = PostgresStore(
        pg_server.dsn(dbname, user=f"globex_{dbname}", password="pw-globex"), namespace="eng"
    )
    await acme.write_scope("layout", entries={"plan": entry("plan", "acme's plan")})
    # Same namespace name, other tenant: its own tables, created on its first use.
    assert (await globex.read_scope("layout")).entries == {}
    with (
        psycopg.connect(
            pg_server.dsn(dbname, user=f"globex_{dbname}", password="pw-globex")
        ) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SELECT content FROM acme.sbm_entries")
    await acme.aclose()
    await globex.aclose()


async def test_an_entrys_subjects_are_stored_and_read_back(pg_dsn: str) -> None:
    from sandbox_memory.engines.base import Subjects

    store = PostgresStore(pg_dsn, namespace="s")
    about = Subjects(files=["acme/invoice.py"], commands=["make check"], people=["Ana"])
    fix = entry("fix-invoice-tax").model_copy(update={"subjects": about})
    await store.write_scope("layout", entries={"fix-invoice-tax": fix, "plain": entry("plain")})
    state = await store.read_scope("layout")
    assert state.entries["fix-invoice-tax"].subjects == about
    assert state.entries["plain"].subjects is None
    await store.aclose()


def test_memory_takes_any_shared_store_and_names_an_object_that_is_not_one() -> None:
    """The capability asks what a shared store does, not which class it is: a store of another
    make (here one that hands every call to a PostgresStore) is taken; anything else is refused
    naming the field."""

    from typing import Any

    from sandbox_memory import Memory

    class Forwarding:
        def __init__(self, inner: PostgresStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    store = Forwarding(PostgresStore("postgresql:///x", namespace="acme"))
    assert Memory(store=store).store is store
    with pytest.raises(ValueError, match="store must be a shared store"):
        Memory(store=object())
