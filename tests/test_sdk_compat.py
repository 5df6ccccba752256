"""Drop-in check: the SDK's own memory tests, run against ``sandbox_memory.Memory``.

The sdist of the openai-agents version installed here (the one ``pyproject.toml`` pins) is
fetched from the package index with pip, once, into ``~/.cache/sandbox-memory/sdk/`` (never into
the repository). Its ``tests/`` are extracted into a temporary folder, ``Memory`` and the three
config classes are imported from ``sandbox_memory`` instead of ``agents.sandbox`` (one line added
after the SDK's own imports), and ``tests/sandbox/test_memory.py`` runs in a separate pytest
process with ``tests/sdk_compat/sdk_compat_plugin.py`` (the test sandbox may run commands).

``tests/sdk_compat/replaced.txt`` lists the tests of SDK internals we replace on purpose, one a
line with its reason. Every other test must pass; a listed test that is missing upstream or that
passes makes the list stale, and fails this test too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "sdk_compat"
REPLACED = HERE / "replaced.txt"
SDK_TEST_FILE = "tests/sandbox/test_memory.py"
ANCHOR = "from agents.sandbox.capabilities import Memory\n"
SWAP = (
    "from sandbox_memory import (  # the drop-in swap\n"
    "    Memory,\n"
    "    MemoryGenerateConfig,\n"
    "    MemoryLayoutConfig,\n"
    "    MemoryReadConfig,\n"
    ")\n"
)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sandbox-memory" / "sdk"


def sdk_sdist(sdk_version: str) -> Path:
    """The SDK's sdist, from the cache or downloaded from the package index into it."""

    folder = cache_dir()
    name = f"openai_agents-{sdk_version}.tar.gz"
    if (folder / name).is_file():
        return folder / name
    folder.mkdir(parents=True, exist_ok=True)
    download = folder / f".download-{os.getpid()}"
    shutil.rmtree(download, ignore_errors=True)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"openai-agents=={sdk_version}",
            "-d",
            str(download),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    got = download / name
    if done.returncode != 0 or not got.is_file():
        shutil.rmtree(download, ignore_errors=True)
        pytest.fail(
            f"could not download the sdist of openai-agents=={sdk_version} from the package "
            f"index (pip exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    got.replace(folder / name)  # atomic: a concurrent run sees the whole file or none
    shutil.rmtree(download, ignore_errors=True)
    return folder / name


def extract_tests(sdist: Path, target: Path, sdk_version: str) -> Path:
    """The sdist's ``tests/`` and ``pyproject.toml`` (its pytest settings) under ``target``."""

    prefix = f"openai_agents-{sdk_version}/"
    with tarfile.open(sdist) as archive:
        members = [
            m
            for m in archive.getmembers()
            if m.name.startswith(prefix + "tests/") or m.name == prefix + "pyproject.toml"
        ]
        archive.extractall(target, members=members, filter="data")
    return target / prefix


def swap_imports(root: Path) -> None:
    path = root / SDK_TEST_FILE
    text = path.read_text()
    assert text.count(ANCHOR) == 1, f"{SDK_TEST_FILE} no longer imports Memory as {ANCHOR!r}"
    path.write_text(text.replace(ANCHOR, ANCHOR + SWAP))


def replaced_tests() -> dict[str, str]:
    """Test id -> why it tests an SDK internal we replace, from ``replaced.txt``."""

    listed: dict[str, str] = {}
    for number, line in enumerate(REPLACED.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        test_id, sep, reason = line.partition("  # ")
        assert sep and reason.strip(), f"replaced.txt:{number}: needs '<test id>  # <reason>'"
        assert test_id not in listed, f"replaced.txt:{number}: {test_id} listed twice"
        listed[test_id.strip()] = reason.strip()
    return listed


@pytest.mark.slow
def test_the_sdks_memory_tests_pass_against_our_memory(tmp_path: Path) -> None:
    sdk_version = version("openai-agents")
    root = extract_tests(sdk_sdist(sdk_version), tmp_path, sdk_version)
    swap_imports(root)
    report = tmp_path / "report.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(root)]),
        "SDK_COMPAT_REPORT": str(report),
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "sdk_compat_plugin",
            "--tb=short",
            SDK_TEST_FILE,
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert report.is_file(), f"the SDK's tests did not run:\n{done.stdout[-4000:]}{done.stderr}"
    outcomes: dict[str, str] = json.loads(report.read_text())["tests"]
    listed = replaced_tests()

    failed = sorted(t for t, o in outcomes.items() if o != "passed" and t not in listed)
    missing = sorted(t for t in listed if t not in outcomes)
    stale = sorted(t for t in listed if outcomes.get(t) == "passed")
    passed = sum(1 for o in outcomes.values() if o == "passed")
    summary = (
        f"{passed} of {len(outcomes)} SDK memory tests pass; {len(listed)} listed as internals "
        f"we replace"
    )
    assert not failed, (
        f"{summary}; failing and not listed:\n"
        + "\n".join(failed)
        + ("\n\n" + done.stdout[-12000:])
    )
    assert not missing, f"{summary}; listed but no longer in the SDK's tests: {missing}"
    assert not stale, f"{summary}; listed but passing (remove from replaced.txt): {stale}"
    assert passed == len(outcomes) - len(listed), summary
