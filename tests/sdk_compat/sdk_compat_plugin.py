"""Pytest plugin for the SDK's own memory tests run against ``sandbox_memory.Memory``.

Loaded with ``-p sdk_compat_plugin`` by ``tests/test_sdk_compat.py`` in a pytest process whose
root is an extracted copy of the SDK's test suite. It does two things:

- lets the SDK's test sandbox (``FilesystemTestSandboxSession``) run commands in its workspace,
  as every real backend does (the double only answers ``test -d``/``test -f``, enough for the
  SDK's memory, which never runs a command; ours reads and writes through the shell);
- writes each test's outcome to the JSON file named by ``SDK_COMPAT_REPORT``.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    from agents.sandbox.types import ExecResult
    from tests.sandbox._filesystem_test_session import FilesystemTestSandboxSession

    async def exec_in_workspace(
        self: Any, *command: str | Path, timeout: float | None = None
    ) -> ExecResult:
        proc = await asyncio.create_subprocess_exec(
            *(str(part) for part in command),
            cwd=str(self.state.manifest.root),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout=timeout)
        return ExecResult(stdout=stdout, stderr=stderr, exit_code=proc.returncode or 0)

    FilesystemTestSandboxSession._exec_internal = exec_in_workspace  # type: ignore[method-assign]


_outcomes: dict[str, str] = {}
"""Test id (without the file part) -> passed, failed or skipped (failed in any phase wins)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    name = report.nodeid.split("::", 1)[-1]
    if report.failed:
        _outcomes[name] = "failed"
    elif report.skipped:
        _outcomes.setdefault(name, "skipped")
    elif report.when == "call":
        _outcomes.setdefault(name, "passed")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("SDK_COMPAT_REPORT")
    if target:
        Path(target).write_text(json.dumps({"exitstatus": int(exitstatus), "tests": _outcomes}))
