"""The sandbox-memory command line over a workspace folder (seed 000's examples)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

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
    (sessions / "trip.jsonl").write_text(json.dumps(seg) + "\n")
    code, out, _ = run(tmp_path, "refresh", "-c", "trip", "--expected", "99")
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
    code, _, err = run(tmp_path, "refresh", "-c", "trip", "--engine", "model", "--expected", "0")
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
