"""The sandbox-memory command line over a workspace folder (seed 000's examples)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sandbox_memory.cli import EXIT_CONFLICT, main


def run(root: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["--root", str(root), *args])
    return result.exit_code, result.stdout, result.stderr


def test_show_prints_entries_settings_overrides_and_version(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path, "show", "-c", "trip")
    assert code == 0
    assert "version 0" in out and "use=on, generate=on" in out and "overrides: none" in out


def test_remember_then_show_json_round_trip(tmp_path: Path) -> None:
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
    run(tmp_path, "remember", "budget", "1500 EUR", "-c", "trip", "--expected", "0")
    code, _, err = run(tmp_path, "remember", "budget", "2000 EUR", "-c", "trip", "--expected", "0")
    assert code == EXIT_CONFLICT
    assert "version 1, not 0" in err and "re-read" in err


def test_forget_of_unknown_key_exits_with_conflict(tmp_path: Path) -> None:
    code, _, err = run(tmp_path, "forget", "budget", "-c", "trip", "--expected", "0")
    assert code == EXIT_CONFLICT and "budget" in err


def test_configure_round_trips_generate_off_and_back_to_default(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path, "configure", "-c", "trip", "--generate", "off", "--expected", "0")
    assert code == 0 and "generate=off" in out and "generate=False" in out
    code, out, _ = run(
        tmp_path, "configure", "-c", "trip", "--generate", "default", "--expected", "1"
    )
    assert code == 0 and "generate=on" in out and "overrides: none" in out


def test_log_lists_version_cause_and_keys(tmp_path: Path) -> None:
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
