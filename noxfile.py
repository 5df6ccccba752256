"""Sessions: tests, lint (ruff), types (mypy), examples. Run `nox -s tests` etc."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint", "types"]
nox.options.default_venv_backend = "venv"


@nox.session
def tests(session: nox.Session) -> None:
    session.install("-e", ".[test]")
    session.run("pytest", "-q", *session.posargs, env={"OPENAI_API_KEY": ""})


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff>=0.8")
    session.run("ruff", "check", "src", "tests", "examples", "bench")
    session.run("ruff", "format", "--check", "src", "tests", "examples", "bench")


@nox.session
def types(session: nox.Session) -> None:
    session.install("-e", ".[dev]")
    session.run("mypy")


@nox.session
def examples(session: nox.Session) -> None:
    session.install("-e", ".")
    session.run("python", "examples/memory.py", env={"OPENAI_API_KEY": ""})
    session.run("python", "examples/memory_multi_agent_multiturn.py", env={"OPENAI_API_KEY": ""})
