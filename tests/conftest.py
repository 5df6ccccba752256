"""Shared fixtures: a real UnixLocal sandbox in a temp folder with a small buggy package."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.sandbox import Manifest
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient

from helpers import BUGGY_INVOICE, INVOICE_TEST
from http_provider import ProviderServer, serve
from pgserver import PostgresServer
from sandbox_memory.workspace import LocalWorkspace, SessionWorkspace, Workspace

_CACHE_DIR: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The redactor's database cache and the segment key go to a folder of this test run, not
    the user's home (set before collection: some test modules build redactors at import)."""
    global _CACHE_DIR
    if "SANDBOX_MEMORY_CACHE_DIR" not in os.environ:
        _CACHE_DIR = tempfile.mkdtemp(prefix="sandbox-memory-test-cache-")
        os.environ["SANDBOX_MEMORY_CACHE_DIR"] = _CACHE_DIR
    # The key that seals recorded runs: one for the test run (child processes included), in
    # its folder, never the user's.
    if "SANDBOX_MEMORY_KEY_FILE" not in os.environ and _CACHE_DIR is not None:
        os.environ["SANDBOX_MEMORY_KEY_FILE"] = os.path.join(_CACHE_DIR, "segment.key")
    # The tests' agents are scripted: the local sandbox's warning that an agent can read the
    # key is given once by the test that checks it, not by every test's first session.
    os.environ.setdefault("SANDBOX_MEMORY_TRUST_LOCAL_AGENT", "1")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _CACHE_DIR is not None:
        os.environ.pop("SANDBOX_MEMORY_CACHE_DIR", None)
        os.environ.pop("SANDBOX_MEMORY_KEY_FILE", None)
        shutil.rmtree(_CACHE_DIR, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


@pytest.fixture(params=["local", "session"])
async def ws(request: Any, client: Any, tmp_path: Path) -> AsyncIterator[Workspace]:
    """Memory's workspace over the folder ``tmp_path / "ws"``: the folder itself, or a live
    UnixLocal sandbox session on it (the path every other backend takes)."""

    root = tmp_path / "ws"
    root.mkdir()
    if request.param == "local":
        yield LocalWorkspace(root)
        return
    sandbox = await client.create(manifest=Manifest(root=str(root)))
    async with sandbox:
        yield SessionWorkspace(sandbox)


@pytest.fixture
def workspace_root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "invoice.py").write_text(BUGGY_INVOICE)
    (root / "test_invoice.py").write_text(INVOICE_TEST)
    yield root


@pytest.fixture
def client() -> UnixLocalSandboxClient:
    return UnixLocalSandboxClient()


@pytest.fixture
def manifest(workspace_root: Path) -> Manifest:
    return Manifest(root=str(workspace_root))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the whole test session (fails loudly if it cannot start)."""

    server = PostgresServer()
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.cleanup()


_databases = iter(range(1, 1_000_000))


@pytest.fixture
def pg_dsn(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database on the test server; its DSN (superuser over the socket).
    Dropped after the test."""

    if not pg_server.running:
        pg_server.start()  # a test that stopped the server and failed before restarting it
    name = f"t{next(_databases)}"
    yield pg_server.create_database(name)
    if not pg_server.running:
        pg_server.start()  # a test that stopped the server and failed before restarting it
    pg_server.drop_database(name)


@pytest.fixture
def provider() -> Iterator[ProviderServer]:
    """A local OpenAI-compatible HTTP server (127.0.0.1, ephemeral port), stopped afterwards."""

    yield from serve()


@pytest.fixture
def openai_env(provider: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> ProviderServer:
    """The SDK's default OpenAI provider pointed at :func:`provider` (a test key)."""

    from agents.models import openai_provider

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-local")
    monkeypatch.setenv("OPENAI_BASE_URL", provider.base_url)
    # The SDK shares one httpx client per process, bound to the event loop that first used
    # it; each test has its own loop.
    monkeypatch.setattr(openai_provider, "_http_client", None)
    return provider
