"""CI set-up: ``.ci/run`` installs the system tools the tests need when they are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "system-packages"


def install(tmp_path: Path, *, present: tuple[str, ...]) -> list[str]:
    """Run the script with only ``present`` (and ``id``) on PATH and an ``apt-get`` that logs
    its arguments; return the logged calls."""

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "apt.log"
    apt = bindir / "apt-get"
    apt.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n')
    apt.chmod(0o755)
    for name in ("id", *present):
        real = shutil.which(name)
        assert real is not None, name
        (bindir / name).symlink_to(real)
    env = {"PATH": str(bindir), "HOME": str(tmp_path)}
    bash = shutil.which("bash")
    assert bash is not None
    subprocess.run([bash, str(SCRIPT)], env=env, check=True, timeout=60)
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.skipif(os.geteuid() != 0, reason="without root the script installs through sudo")
def test_strace_is_installed_when_missing(tmp_path: Path) -> None:
    # Without strace the strace tests of tests/test_session_append.py are skipped.
    calls = install(tmp_path, present=())
    assert calls[0] == "update -qq"
    assert calls[1].startswith("install -y -qq ") and "strace" in calls[1].split(), calls


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to be there")
@pytest.mark.skipif(os.geteuid() != 0, reason="without root the script installs through sudo")
def test_nothing_is_installed_when_the_tools_are_there(tmp_path: Path) -> None:
    present = ("strace",) + (("initdb",) if shutil.which("initdb") else ())
    pg = list(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not pg and not shutil.which("initdb"):
        pytest.skip("no PostgreSQL here: the script would install it")
    assert install(tmp_path, present=present) == []
