"""The command line with a shared store: --dsn/--namespace (or env vars), export and import."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox_memory.cli import EXIT_BAD_INPUT, EXIT_CONFLICT, EXIT_UNAVAILABLE, main


def cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_a_workspace_memory_goes_to_the_store_and_back_into_another_folder(
    pg_dsn: str, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    assert cli("--root", str(ws), "init")[0] == 0
    code, _, err = cli(
        "--root", str(ws), "remember", "deploy", "Deploys go through make ship.", "--expected", "0"
    )
    assert code == 0, err
    code, out, err = cli("export", "--root", str(ws), "--dsn", pg_dsn, "--namespace", "acme")
    assert code == 0, err
    assert "exported" in out and "1 layout entries" in out
    # No workspace at all: the store answers.
    code, out, err = cli("show", "--json", "--dsn", pg_dsn, "--namespace", "acme")
    assert code == 0, err
    view = json.loads(out)
    assert view["entries"]["deploy"]["content"] == "Deploys go through make ship."
    copy = tmp_path / "copy"
    code, out, err = cli("import", "--root", str(copy), "--dsn", pg_dsn, "--namespace", "acme")
    assert code == 0, err
    assert "make ship" in (copy / "memories" / "MEMORY.md").read_text()
    # Another namespace holds none of it.
    code, _, err = cli("show", "--dsn", pg_dsn, "--namespace", "globex")
    assert code == EXIT_BAD_INPUT and "no memory in namespace globex" in err


def test_commands_through_env_vars_are_versioned_against_the_store(pg_dsn: str) -> None:
    env = {"SANDBOX_MEMORY_DSN": pg_dsn, "SANDBOX_MEMORY_NAMESPACE": "acme"}
    code, _, err = cli("init", env=env)  # memory started in the store itself
    assert code == 0, err
    code, out, err = cli("remember", "port", "The API is on 8080.", "--expected", "0", env=env)
    assert code == 0, err
    code, _, err = cli("remember", "port", "It is on 9090.", "--expected", "0", env=env)
    assert code == EXIT_CONFLICT and "current version: 1" in err
    code, out, _ = cli("show", "--json", env=env)
    assert json.loads(out)["entries"]["port"]["content"] == "The API is on 8080."


def test_an_unreachable_store_is_its_own_exit_code_and_shows_no_password(tmp_path: Path) -> None:
    dsn = f"postgresql://bob:pa55-w0rd@/x?host={tmp_path}/nowhere&connect_timeout=1"
    code, _, err = cli("show", "--dsn", dsn, "--namespace", "acme")
    assert code == EXIT_UNAVAILABLE
    assert "pa55-w0rd" not in err and "bob:***@" in err


def test_dsn_and_namespace_go_together(pg_dsn: str) -> None:
    code, _, err = cli("show", "--dsn", pg_dsn)
    assert code == EXIT_BAD_INPUT and "--dsn needs --namespace" in err
    code, _, err = cli("show", "--namespace", "acme")
    assert code == EXIT_BAD_INPUT and "--namespace needs --dsn" in err


def test_an_explicit_namespace_beats_the_environment_before_or_after_the_subcommand(
    pg_dsn: str,
) -> None:
    env = {"SANDBOX_MEMORY_DSN": pg_dsn, "SANDBOX_MEMORY_NAMESPACE": "invoice"}
    assert cli("init", env=env)[0] == 0
    assert cli("--namespace", "acme-eng", "init", env=env)[0] == 0
    code, out, err = cli(
        "--namespace",
        "acme-eng",
        "remember",
        "here",
        "Before the subcommand.",
        "--expected",
        "0",
        env=env,
    )
    assert code == 0, err
    assert "layout memory in namespace acme-eng of " in out.splitlines()[0]
    code, out, err = cli(
        "remember", "there", "After it.", "--expected", "1", "--namespace", "acme-eng", env=env
    )
    assert code == 0, err
    assert "namespace acme-eng" in out.splitlines()[0]
    acme = json.loads(cli("show", "--json", "--namespace", "acme-eng", env=env)[1])
    assert sorted(acme["entries"]) == ["here", "there"]
    assert json.loads(cli("show", "--json", env=env)[1])["entries"] == {}  # invoice: untouched


def test_an_explicit_dsn_beats_the_environment(pg_dsn: str, tmp_path: Path) -> None:
    env = {"SANDBOX_MEMORY_DSN": pg_dsn, "SANDBOX_MEMORY_NAMESPACE": "acme"}
    assert cli("init", env=env)[0] == 0
    wrong = f"postgresql://bob@/x?host={tmp_path}/nowhere&connect_timeout=1"
    for args in (["--dsn", wrong, "show"], ["show", "--dsn", wrong]):
        code, _, err = cli(*args, env=env)
        assert code == EXIT_UNAVAILABLE and "nowhere" in err, args


def test_a_namespace_without_memory_is_reported_as_a_namespace(pg_dsn: str) -> None:
    code, _, err = cli("show", "--dsn", pg_dsn, "--namespace", "globex")
    assert code == EXIT_BAD_INPUT and "no memory in namespace globex" in err
    assert "the namespace holds no memory" in err and "memories/" not in err
