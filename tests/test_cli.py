"""The sandbox-memory command line over a workspace folder (seed 000's examples)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from helpers import sealed
from sandbox_memory.cli import EXIT_CONFLICT, main


def run(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--root", str(root), *args])
    return result.exit_code, result.stdout, result.stderr


def init(root: Path, conversation: str | None = None) -> None:
    code, _, err = run(root, "init", *(["-c", conversation] if conversation else []))
    assert code == 0, err


def test_show_prints_entries_settings_overrides_and_version(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, out, _ = run(tmp_path, "show", "-c", "trip")
    assert code == 0
    assert "version 0" in out and "use=on, generate=on" in out and "overrides: none" in out


def test_remember_then_show_json_round_trip(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, _, _ = run(
        tmp_path,
        "remember",
        "budget",
        "The trip budget is 1500 EUR.",
        "-c",
        "trip",
        "--expected",
        "0",
    )
    assert code == 0
    code, out, _ = run(tmp_path, "--json", "show", "-c", "trip")
    view = json.loads(out)
    assert view["version"] == 1
    assert view["entries"]["budget"]["content"] == "The trip budget is 1500 EUR."
    assert view["entries"]["budget"]["sources"][0]["item"] in view["processed"]


def test_stale_version_exits_non_zero_with_the_conflict_explained(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    run(tmp_path, "remember", "budget", "1500 EUR", "-c", "trip", "--expected", "0")
    code, _, err = run(tmp_path, "remember", "budget", "2000 EUR", "-c", "trip", "--expected", "0")
    assert code == EXIT_CONFLICT
    assert "version 1, not 0" in err and "re-read" in err


def test_forget_of_unknown_key_exits_with_conflict(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, _, err = run(tmp_path, "forget", "budget", "-c", "trip", "--expected", "0")
    assert code == EXIT_CONFLICT and "budget" in err


def test_configure_round_trips_generate_off_and_back_to_default(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, out, _ = run(tmp_path, "configure", "-c", "trip", "--generate", "off", "--expected", "0")
    assert code == 0 and "settings: use=on, generate=off   overrides: generate=off" in out
    code, out, _ = run(
        tmp_path, "configure", "-c", "trip", "--generate", "default", "--expected", "1"
    )
    assert code == 0 and "generate=on" in out and "overrides: none" in out


def test_log_lists_version_cause_and_keys(tmp_path: Path) -> None:
    init(tmp_path)
    run(
        tmp_path,
        "remember",
        "tests-first",
        "Run the tests first.",
        "--kind",
        "procedure",
        "--expected",
        "0",
    )
    run(tmp_path, "forget", "tests-first", "--expected", "1")
    code, out, _ = run(tmp_path, "--json", "log")
    records = json.loads(out)
    assert [(r["version"], r["cause"], r["keys"]) for r in records if r["scope"] == "layout"] == [
        (1, "person", ["tests-first"]),
        (2, "person", ["tests-first"]),
    ]


def test_refresh_learns_from_recorded_runs(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    seg = {
        "updated_at": "2026-01-01T00:00:00+00:00",
        "rollout_id": "trip",
        "segment_id": "s1",
        "input": [{"role": "user", "content": "I prefer aisle seats.", "memory_item_id": "s1:0"}],
        "generated_items": [],
        "terminal_metadata": {"terminal_state": "completed"},
    }
    (sessions / "trip.jsonl").write_bytes(sealed(json.dumps(seg), "trip"))
    code, out, _ = run(tmp_path, "refresh", "-c", "trip")
    assert code == 0 and "aisle" in out


def test_bad_layout_option_names_the_field(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["--root", str(tmp_path), "--memories-dir", "/etc", "show"])
    assert result.exit_code == 1 and "layout.memories_dir" in result.stderr


def test_global_options_work_after_the_subcommand_too(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    result = CliRunner().invoke(main, ["show", "-c", "trip", "--json", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["rollout_id"] == "trip"
    result = CliRunner().invoke(main, ["--root", str(tmp_path), "log", "--json"])
    assert result.exit_code == 0 and isinstance(json.loads(result.stdout), list)


def test_a_missing_workspace_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    for args in (["show"], ["log"], ["conversations"], ["forget", "k", "--expected", "0"]):
        code, out, err = run(missing, *args)
        assert code == 1 and str(missing) in err and out == "", args
    assert not missing.exists()


def test_remember_on_a_folder_without_memory_creates_nothing(tmp_path: Path) -> None:
    code, _, err = run(tmp_path, "remember", "budget", "1500 EUR", "--expected", "0")
    assert code == 1 and str(tmp_path) in err and "init" in err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_conversation_is_an_error_naming_it(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, out, err = run(tmp_path, "show", "-c", "nosuchconv")
    assert code == 1 and "'nosuchconv'" in err and "trip" in err and out == ""
    code, _, err = run(tmp_path, "remember", "k", "v", "-c", "tirp", "--expected", "0")
    assert code == 1 and "'tirp'" in err
    assert not (tmp_path / "memories" / "store" / "conversations" / "tirp.json").exists()


def test_a_recorded_conversation_is_known_before_any_memory_exists(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "trip.jsonl").write_text("")
    code, out, err = run(tmp_path, "show", "-c", "trip")
    assert code == 0, err
    assert "conversation trip" in out


def test_conversations_lists_entry_counts_and_last_update(tmp_path: Path) -> None:
    init(tmp_path)
    run(tmp_path, "init", "-c", "trip")
    run(tmp_path, "init", "-c", "work")
    run(tmp_path, "remember", "budget", "1500 EUR", "-c", "trip", "--expected", "0")
    run(tmp_path, "remember", "seat", "Aisle.", "-c", "trip", "--expected", "1")
    run(tmp_path, "forget", "seat", "-c", "trip", "--expected", "2")
    code, out, _ = run(tmp_path, "conversations", "--json")
    assert code == 0
    rows = {row["rollout_id"]: row for row in json.loads(out)}
    assert (rows["trip"]["active"], rows["trip"]["retracted"], rows["trip"]["version"]) == (1, 1, 3)
    assert (rows["work"]["active"], rows["work"]["retracted"]) == (0, 0)
    assert rows["trip"]["updated_at"] >= rows["work"]["updated_at"] > 0
    code, out, _ = run(tmp_path, "conversations")
    lines = out.splitlines()
    assert lines[0].startswith("trip  1 active, 1 retracted  version 3  updated 20")
    assert lines[1].startswith("work  0 active, 0 retracted")


def test_a_conflict_is_reported_once(tmp_path: Path) -> None:
    init(tmp_path)
    code, _, err = run(tmp_path, "remember", "a", "A.", "--kind", "decision", "--expected", "5")
    assert code == EXIT_CONFLICT
    assert err.count("version 0, not 5") == 1 and "WARNING" not in err


def test_the_text_log_says_what_each_change_did(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    run(tmp_path, "configure", "-c", "trip", "--generate", "off", "--expected", "0")
    run(
        tmp_path,
        "configure",
        "-c",
        "trip",
        "--generate",
        "default",
        "--use",
        "off",
        "--expected",
        "1",
    )
    run(tmp_path, "remember", "budget", "1500 EUR", "-c", "trip", "--expected", "2")
    run(tmp_path, "forget", "budget", "-c", "trip", "--expected", "3")
    code, out, _ = run(tmp_path, "log")
    lines = [line for line in out.splitlines() if "conversation:trip" in line]
    assert code == 0 and len(lines) == 4
    assert lines[0].endswith("(configure generate=off)")
    assert lines[1].endswith("(configure generate=default, use=off)")
    assert lines[2].endswith("budget  (remember)") and lines[3].endswith("budget  (forget)")


def test_settings_show_the_defaults_the_workspace_memory_was_configured_with(
    tmp_path: Path,
) -> None:
    import asyncio

    from sandbox_memory import MemoryClient

    # What a close of a sandbox with Memory(read=None) leaves: use is off by default.
    asyncio.run(MemoryClient(tmp_path, use_default=False).create("trip"))
    code, out, _ = run(tmp_path, "show", "-c", "trip")
    assert code == 0 and "settings: use=off, generate=on   overrides: none" in out
    code, out, _ = run(tmp_path, "configure", "-c", "trip", "--use", "on", "--expected", "0")
    assert "settings: use=on, generate=on   overrides: use=on" in out


def test_refresh_without_a_model_exits_with_conflict(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, _, err = run(tmp_path, "refresh", "-c", "trip", "--engine", "model")
    assert code == EXIT_CONFLICT and "OPENAI_API_KEY" in err and err.count("conflict:") == 1


def test_read_commands_do_not_import_the_agents_sdk(tmp_path: Path) -> None:
    import subprocess
    import sys

    init(tmp_path, "trip")
    script = (
        "import sys\n"
        "from sandbox_memory.cli import main\n"
        "for args in (['show'], ['show', '-c', 'trip'], ['log'], ['conversations'],\n"
        "             ['search', 'trip']):\n"
        "    try:\n"
        f"        main(['--root', {str(tmp_path)!r}, *args])\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code in (0, None), (args, exc.code)\n"
        "print(sorted(m for m in sys.modules if m == 'agents' or m.startswith('agents.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


async def test_settings_of_a_workspace_made_with_memory_read_none_show_use_off(
    client, manifest, workspace_root: Path
) -> None:
    import asyncio

    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import SandboxAgent, SandboxRunConfig
    from agents.sandbox.capabilities import Filesystem, Shell
    from agents.testing import ScriptedModel, assistant_message

    from sandbox_memory import Memory, MemoryGenerateConfig

    sandbox = await client.create(manifest=manifest)
    async with sandbox:
        await Runner.run(
            SandboxAgent(
                name="writer",
                instructions="Work.",
                model=ScriptedModel([[assistant_message("ok")]]),
                capabilities=[
                    Memory(read=None, generate=MemoryGenerateConfig(engine="offline")),
                    Filesystem(),
                    Shell(),
                ],
            ),
            "I prefer short answers.",
            run_config=RunConfig(sandbox=SandboxRunConfig(session=sandbox), group_id="quiet"),
        )
    code, out, err = await asyncio.to_thread(run, workspace_root, "show", "-c", "quiet")
    assert code == 0, err
    assert "settings: use=off, generate=on   overrides: none" in out


# ----------------------------------------------------------------- issue 22: the command line


def test_every_write_says_where_it_wrote(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, out, _ = run(tmp_path, "remember", "budget", "1500 EUR", "-c", "trip", "--expected", "0")
    assert code == 0
    assert out.splitlines()[0] == (
        f"remember budget: conversation trip in {tmp_path.resolve()}, now at version 1"
    )
    code, out, err = run(tmp_path, "--json", "forget", "budget", "-c", "trip", "--expected", "1")
    assert code == 0 and json.loads(out)["version"] == 2  # stdout stays the view
    assert f"forget budget: conversation trip in {tmp_path.resolve()}" in err


def test_a_program_must_pass_expected(tmp_path: Path) -> None:
    init(tmp_path)
    code, _, err = run(tmp_path, "remember", "budget", "1500 EUR")  # stdin is not a terminal
    assert code == 2 and "--expected is required" in err
    assert "budget" not in run(tmp_path, "show")[1]


def test_at_a_terminal_a_write_without_expected_applies_at_the_current_version(
    tmp_path: Path,
) -> None:
    import os
    import pty
    import subprocess
    import sys

    init(tmp_path, "trip")
    run(tmp_path, "remember", "budget", "1500 EUR", "-c", "trip", "--expected", "0")
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sandbox_memory.cli", "--root", str(tmp_path)]
            + ["remember", "budget", "2000 EUR", "-c", "trip"],
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(secondary)
        os.close(primary)
    assert done.returncode == 0, done.stderr
    assert "now at version 2" in done.stdout
    view = json.loads(run(tmp_path, "--json", "show", "-c", "trip")[1])
    assert view["version"] == 2 and view["entries"]["budget"]["content"] == "2000 EUR"


def test_at_a_terminal_a_change_between_the_read_and_the_write_is_a_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from sandbox_memory import MemoryClient, Remember
    from sandbox_memory import cli as cli_module

    init(tmp_path, "trip")
    read = MemoryClient.view

    async def read_then_someone_writes(self: MemoryClient, conversation: str | None = None) -> Any:
        view = await read(self, conversation)
        other = MemoryClient(tmp_path)
        await other.apply(
            Remember(key="budget", content="900 EUR"), expected=view.version, conversation="trip"
        )
        return view

    monkeypatch.setattr(cli_module, "at_terminal", lambda: True)
    monkeypatch.setattr(MemoryClient, "view", read_then_someone_writes)
    code, _, err = run(tmp_path, "remember", "budget", "2000 EUR", "-c", "trip")
    monkeypatch.undo()
    assert code == EXIT_CONFLICT and "version 1, not 0" in err
    entries = asyncio.run(MemoryClient(tmp_path).view("trip")).entries
    assert entries["budget"].content == "900 EUR"


def test_refresh_takes_no_version(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, _, err = run(tmp_path, "refresh", "-c", "trip", "--expected", "0")
    assert code == 2 and "--expected" in err
    code, out, err = run(tmp_path, "refresh", "-c", "trip", "--engine", "offline")
    assert code == 0, err
    assert out.startswith(f"refresh: conversation trip in {tmp_path.resolve()}")


def test_version_prints_the_package_version() -> None:
    from sandbox_memory import __version__

    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and __version__ in result.stdout


def test_get_shows_one_entry_with_its_sources_and_history(tmp_path: Path) -> None:
    init(tmp_path)
    run(tmp_path, "remember", "port", "The API is on 8080.", "--expected", "0")
    run(tmp_path, "remember", "other", "Unrelated.", "--expected", "1")
    run(tmp_path, "remember", "port", "The API is on 9090.", "--expected", "2")
    code, out, err = run(tmp_path, "get", "port")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "port (fact) in layout memory" and lines[1] == "  The API is on 9090."
    assert lines[lines.index("sources:") + 1].startswith("  person#edit-")
    history = lines[lines.index("history:") + 1 :]
    assert [line.split()[0] for line in history] == ["v1", "v3"]
    code, out, _ = run(tmp_path, "--json", "get", "port")
    data = json.loads(out)
    assert data["entry"]["content"] == "The API is on 9090." and data["version"] == 3
    assert [r["version"] for r in data["history"]] == [1, 3]


def test_get_of_an_unknown_key_names_it_and_the_known_ones(tmp_path: Path) -> None:
    init(tmp_path)
    run(tmp_path, "remember", "port", "The API is on 8080.", "--expected", "0")
    code, out, err = run(tmp_path, "get", "prot")
    assert code == 1 and out == "" and "'prot'" in err and "port" in err


def test_show_kind_keeps_entries_of_that_kind(tmp_path: Path) -> None:
    init(tmp_path)
    run(tmp_path, "remember", "port", "The API is on 8080.", "--expected", "0")
    run(tmp_path, "remember", "tests", "Run make test.", "--kind", "procedure", "--expected", "1")
    code, out, _ = run(tmp_path, "show", "--kind", "procedure")
    assert code == 0 and "- tests (procedure)" in out and "port" not in out
    code, out, _ = run(tmp_path, "--json", "show", "--kind", "fact", "--kind", "decision")
    assert sorted(json.loads(out)["entries"]) == ["port"]


def test_log_filters_by_conversation_key_cause_and_time(tmp_path: Path) -> None:
    init(tmp_path)
    init(tmp_path, "trip")
    run(tmp_path, "remember", "budget", "1500 EUR", "-c", "trip", "--expected", "0")
    run(tmp_path, "remember", "port", "8080", "--expected", "0")
    run(tmp_path, "configure", "-c", "trip", "--generate", "off", "--expected", "1")

    def versions(*args: str) -> list[tuple[str, int]]:
        code, out, err = run(tmp_path, "--json", "log", *args)
        assert code == 0, err
        return [(r["scope"], r["version"]) for r in json.loads(out)]

    assert versions("-c", "trip") == [("conversation:trip", 1), ("conversation:trip", 2)]
    assert versions("--key", "port") == [("layout", 1)]
    assert versions("-c", "trip", "--cause", "person", "--key", "budget") == [
        ("conversation:trip", 1)
    ]
    assert versions("--since", "1h", "--key", "budget") == [("conversation:trip", 1)]
    assert versions("--until", "2000-01-01") == []
    assert versions("--since", "2000-01-01T00:00+00:00", "--key", "port") == [("layout", 1)]
    code, _, err = run(tmp_path, "log", "--since", "yesterday")
    assert code == 2 and "'yesterday'" in err and "--since" in err


def test_log_shows_each_scope_in_version_order_not_interleaved(tmp_path: Path) -> None:
    init(tmp_path)
    init(tmp_path, "trip")
    run(tmp_path, "remember", "a", "A.", "--expected", "0")
    run(tmp_path, "remember", "b", "B.", "-c", "trip", "--expected", "0")
    run(tmp_path, "remember", "c", "C.", "--expected", "1")
    run(tmp_path, "remember", "d", "D.", "-c", "trip", "--expected", "1")
    code, out, _ = run(tmp_path, "log")
    rows = [(line.split()[4], line.split()[0]) for line in out.splitlines()]
    layout = [v for scope, v in rows if scope == "layout"]
    trip = [v for scope, v in rows if scope == "conversation:trip"]
    assert code == 0 and rows == [("layout", v) for v in layout] + [
        ("conversation:trip", v) for v in trip
    ]
    assert layout == sorted(layout, key=lambda v: int(v[1:])) and len(layout) >= 2
    assert trip == ["v1", "v2"]


def test_json_errors_are_json(tmp_path: Path) -> None:
    init(tmp_path)
    code, out, err = run(tmp_path, "--json", "forget", "nosuch", "--expected", "0")
    assert code == EXIT_CONFLICT and out == ""
    error = json.loads(err)["error"]
    assert error["kind"] == "conflict" and error["current_version"] == 0
    assert "nosuch" in error["message"]
    code, _, err = run(tmp_path, "show", "-c", "nosuch", "--json")
    assert code == 1 and json.loads(err)["error"]["kind"] == "bad_input"
    code, _, err = run(tmp_path, "remember", "k", "--json")  # CONTENT missing: a usage error
    assert code == 2 and json.loads(err)["error"]["kind"] == "usage"


def test_help_lists_global_options_once_and_an_example_per_command() -> None:
    top = CliRunner().invoke(main, ["--help"]).stdout
    assert top.count("--root DIRECTORY") == 1 and top.count("--namespace TEXT") == 1
    assert "--version" in top
    for name in main.list_commands(None):  # type: ignore[arg-type]
        text = CliRunner().invoke(main, [name, "--help"]).stdout
        assert "Example:" in text and "sandbox-memory" in text.split("Example:")[1], name
        assert "--root DIRECTORY" not in text and "--dsn TEXT" not in text, name


def test_configure_without_a_switch_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    init(tmp_path, "trip")
    code, _, err = run(tmp_path, "configure", "-c", "trip", "--expected", "0")
    assert code == 2 and "--use" in err and "--generate" in err
    code, out, _ = run(tmp_path, "--json", "show", "-c", "trip")
    assert json.loads(out)["version"] == 0
    code, out, _ = run(tmp_path, "--json", "log", "-c", "trip")
    assert json.loads(out) == []


def test_init_of_a_conversation_prints_no_head_before_it_has_one(tmp_path: Path) -> None:
    init(tmp_path)
    code, out, _ = run(tmp_path, "init", "-c", "trip")
    assert code == 0 and "head" not in out and "conversation trip  version 0" in out


def test_python_m_cli_help_lists_every_command() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "sandbox_memory.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    listed = done.stdout.split("Commands:")[1].split()
    for name in ("export", "import", "get", "show", "log", "remember"):
        assert name in listed, name


def test_log_and_get_find_a_conversation_by_the_id_it_was_given(tmp_path: Path) -> None:
    raw = "Trip 2026/ü"  # not file-safe: memory keeps it under a derived id
    init(tmp_path, raw)
    run(tmp_path, "remember", "budget", "1500 EUR", "-c", raw, "--expected", "0")
    code, out, err = run(tmp_path, "--json", "log", "-c", raw)
    assert code == 0, err
    assert [r["keys"] for r in json.loads(out)] == [["budget"]]
    code, out, err = run(tmp_path, "--json", "get", "budget", "-c", raw)
    assert code == 0, err
    assert [r["version"] for r in json.loads(out)["history"]] == [1]
