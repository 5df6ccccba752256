"""Learned memory as keyed facts (seed 000): views, commands, versions, switches, the log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from helpers import extraction_reply, layout_runtime, read_segments, run_payload
from sandbox_memory import (
    Configure,
    Forget,
    MemoryClient,
    MemoryConflict,
    MemoryGenerateConfig,
    Refresh,
    Remember,
)
from sandbox_memory.errors import MemoryConfigError


@pytest.fixture
async def mc(tmp_path: Path) -> MemoryClient:
    """A client on a workspace with memory for the conversation ``trip`` (commands change
    memory that exists; they never start it)."""

    client = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="offline"))
    await client.create("trip")
    return client


async def test_remember_adds_an_entry_with_key_content_kind_sources_time_and_status(mc) -> None:
    view = await mc.apply(
        Remember(key="budget", content="The trip budget is 1500 EUR.", kind="fact"),
        expected=0,
        conversation="trip",
    )
    entry = view.entries["budget"]
    assert (entry.key, entry.content, entry.kind, entry.status) == (
        "budget",
        "The trip budget is 1500 EUR.",
        "fact",
        "active",
    )
    assert entry.sources and entry.updated_at > 0


async def test_conversation_view_has_entries_processed_settings_overrides_and_version(mc) -> None:
    await mc.create("trip")
    view = await mc.view("trip")
    assert view.model_dump().keys() >= {
        "entries",
        "processed",
        "settings",
        "overrides",
        "version",
    }
    assert view.settings == {"use": True, "generate": True}
    assert view.overrides == {}


async def test_layout_view_has_entries_and_a_version_number(mc) -> None:
    view = await mc.create()
    assert view == await mc.view(None)
    assert view.version == 0 and view.entries == {}
    view = await mc.apply(
        Remember(key="tests-first", content="Run tests first.", kind="procedure"), expected=0
    )
    assert view.version == 1 and "tests-first" in view.entries


async def test_stale_version_raises_conflict_and_changes_nothing(mc) -> None:
    await mc.apply(
        Remember(key="budget", content="1500 EUR", kind="fact"), expected=0, conversation="trip"
    )
    with pytest.raises(MemoryConflict) as info:
        await mc.apply(
            Remember(key="budget", content="2000 EUR", kind="fact"), expected=0, conversation="trip"
        )
    assert info.value.current_version == 1
    view = await mc.view("trip")
    assert view.entries["budget"].content == "1500 EUR" and view.version == 1


async def test_stale_version_on_layout_memory_raises_conflict(mc) -> None:
    await mc.apply(Remember(key="a", content="A.", kind="decision"), expected=0)
    with pytest.raises(MemoryConflict):
        await mc.apply(Forget(key="a"), expected=0)
    assert (await mc.view(None)).entries["a"].status == "active"


async def test_forget_of_an_unknown_key_is_a_conflict(mc) -> None:
    with pytest.raises(MemoryConflict):
        await mc.apply(Forget(key="budget"), expected=0, conversation="trip")
    with pytest.raises(MemoryConflict):
        await mc.apply(Forget(key="budget"), expected=0)


async def test_forget_marks_the_entry_retracted(mc) -> None:
    await mc.apply(
        Remember(key="budget", content="1500 EUR", kind="fact"), expected=0, conversation="trip"
    )
    view = await mc.apply(Forget(key="budget"), expected=1, conversation="trip")
    assert view.entries["budget"].status == "retracted"


async def test_remember_and_forget_record_an_item_that_becomes_the_source(
    mc, tmp_path: Path
) -> None:
    view = await mc.apply(
        Remember(key="budget", content="1500 EUR", kind="fact"), expected=0, conversation="trip"
    )
    segments = read_segments(tmp_path / "sessions" / "trip.jsonl")
    item = segments[-1]["input"][0]
    assert item["type"] == "memory_edit" and item["command"]["_tag"] == "Remember"
    assert view.entries["budget"].sources[-1].item == item["memory_item_id"]
    assert view.head == item["memory_item_id"]
    assert item["memory_item_id"] in view.processed
    view = await mc.apply(Forget(key="budget"), expected=1, conversation="trip")
    forget_item = read_segments(tmp_path / "sessions" / "trip.jsonl")[-1]["input"][0]
    assert view.entries["budget"].sources[-1].item == forget_item["memory_item_id"]


async def test_configure_sets_removes_and_leaves_switches(mc) -> None:
    view = await mc.apply(Configure(generate=False), expected=0, conversation="trip")
    assert view.settings == {"use": True, "generate": False}
    assert view.overrides == {"generate": False}
    view = await mc.apply(Configure(use=False), expected=1, conversation="trip")
    assert view.overrides == {"generate": False, "use": False}  # absent generate unchanged
    view = await mc.apply(Configure(generate=None), expected=2, conversation="trip")
    assert view.overrides == {"use": False}
    assert view.settings == {"use": False, "generate": True}


async def test_configure_changes_no_history(mc, tmp_path: Path) -> None:
    await mc.apply(
        Remember(key="budget", content="1500 EUR", kind="fact"), expected=0, conversation="trip"
    )
    before = (tmp_path / "sessions" / "trip.jsonl").read_bytes()
    head = (await mc.view("trip")).head
    view = await mc.apply(Configure(generate=False), expected=1, conversation="trip")
    assert view.head == head
    assert (tmp_path / "sessions" / "trip.jsonl").read_bytes() == before


async def test_configure_defaults_come_from_the_memory_configuration(tmp_path: Path) -> None:
    mc = MemoryClient(tmp_path, generate_default=False)
    view = await mc.create("trip")
    assert view.settings == {"use": True, "generate": False}
    view = await mc.apply(Configure(generate=True), expected=0, conversation="trip")
    assert view.settings["generate"] is True


async def test_refresh_does_not_check_the_version(mc) -> None:
    await mc.create("trip")
    view = await mc.apply(Refresh(), expected=12345, conversation="trip")
    assert view.version == 0


async def test_refresh_with_generate_off_does_nothing(mc, tmp_path: Path) -> None:
    from sandbox_memory.runtime import LayoutRuntime

    await mc.apply(Configure(generate=False), expected=0, conversation="trip")
    rt: LayoutRuntime = mc.runtime
    await rt.record(
        run_payload("I prefer window seats.", reply=None, when=None),
        rollout_id="trip",
    )
    view = await mc.apply(Refresh(), expected=0, conversation="trip")
    assert view.entries == {}
    await mc.apply(Configure(generate=None), expected=1, conversation="trip")
    view = await mc.apply(Refresh(), expected=0, conversation="trip")
    assert view.entries["window-seats"].kind == "preference"


async def test_remember_revives_a_retracted_entry(mc) -> None:
    await mc.apply(
        Remember(key="budget", content="1500 EUR", kind="fact"), expected=0, conversation="trip"
    )
    await mc.apply(Forget(key="budget"), expected=1, conversation="trip")
    view = await mc.apply(
        Remember(key="budget", content="1800 EUR", kind="fact"), expected=2, conversation="trip"
    )
    assert (
        view.entries["budget"].status == "active" and view.entries["budget"].content == "1800 EUR"
    )


async def test_remember_refuses_a_secret_and_stores_nothing(mc) -> None:
    await mc.create()
    with pytest.raises(MemoryConflict):
        await mc.apply(
            Remember(key="db", content="password=hunter2hunter2 for prod", kind="fact"),
            expected=0,
        )
    assert (await mc.view(None)).entries == {}


async def test_remember_refuses_a_key_that_holds_a_secret_and_does_not_echo_it(mc, caplog) -> None:
    await mc.create()
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    for key in (f"token-{token}".lower(), "staging-pw-tr0ub4dor3xq9", "password-hunter2xyz"):
        with pytest.raises(MemoryConflict) as raised:
            await mc.apply(Remember(key=key, content="The staging login.", kind="fact"), expected=0)
        assert key not in str(raised.value)
    assert (await mc.view(None)).entries == {}
    assert token.lower() not in caplog.text


async def test_remember_refuses_a_link_that_grants_access(mc) -> None:
    with pytest.raises(MemoryConflict):
        await mc.apply(
            Remember(
                key="doc", content="See https://files.example.com/x?token=abc123def456", kind="fact"
            ),
            expected=0,
        )


async def test_bad_key_is_an_error_naming_the_field_and_value(mc) -> None:
    with pytest.raises(MemoryConfigError, match=r"key .*\.\./\.\./etc/passwd"):
        await mc.apply(Remember(key="../../etc/passwd", content="x", kind="fact"), expected=0)


async def test_every_layout_change_is_logged_with_version_time_cause_and_keys(mc) -> None:
    await mc.apply(
        Remember(key="tests-first", content="Run tests first.", kind="procedure"), expected=0
    )
    await mc.apply(Forget(key="tests-first"), expected=1)
    records = [r for r in await mc.log() if r.scope == "layout"]
    assert [(r.version, r.cause, r.keys) for r in records] == [
        (1, "person", ["tests-first"]),
        (2, "person", ["tests-first"]),
    ]
    assert all(r.at > 0 for r in records)


async def test_a_conflict_raised_to_the_caller_is_not_also_logged(
    mc, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sandbox_memory")
    await mc.apply(Remember(key="a", content="A.", kind="decision"), expected=0)
    with pytest.raises(MemoryConflict):
        await mc.apply(Forget(key="a"), expected=7)
    with pytest.raises(MemoryConflict):
        await mc.apply(Forget(key="a"), expected=0, conversation="trip")
    with pytest.raises(MemoryConflict):
        await mc.apply(
            Remember(key="db", content="password=hunter2hunter2", kind="fact"), expected=1
        )
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_rejection_inside_consolidation_is_logged_at_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from sandbox_memory.engines.base import Candidate, Extraction, ExtractionRequest

    class Relearn:
        """Proposes the retracted fact again, citing the new run."""

        name = "scripted"

        async def extract(self, request: ExtractionRequest) -> Extraction:
            item = request.segments[-1]["input"][0]["memory_item_id"]
            return Extraction(
                rollout_summary="s",
                rollout_slug="trip",
                raw_memory="- r",
                candidates=[
                    Candidate(key="budget", content="1600 EUR", kind="fact", sources=[item])
                ],
            )

    runtime = layout_runtime(tmp_path, engine=Relearn())
    mc = MemoryClient(tmp_path, runtime=runtime)
    await mc.create("trip")
    await mc.apply(
        Remember(key="budget", content="1500 EUR", kind="fact"), expected=0, conversation="trip"
    )
    await mc.apply(Forget(key="budget"), expected=1, conversation="trip")
    await mc.runtime.record(
        run_payload("I prefer window seats.", reply=None, when=None),
        rollout_id="trip",
    )
    caplog.set_level(logging.WARNING, logger="sandbox_memory")
    await mc.apply(Refresh(), expected=0, conversation="trip")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "budget" in warnings[0] and "retracted" in warnings[0]


async def test_refresh_with_generate_on_and_no_model_is_a_conflict(tmp_path: Path) -> None:
    mc = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="model"))
    await mc.runtime.record(
        run_payload("I prefer window seats.", reply=None, when=None),
        rollout_id="trip",
    )
    with pytest.raises(MemoryConflict, match="no.* model|none is available"):
        await mc.apply(Refresh(), expected=0, conversation="trip")
    with pytest.raises(MemoryConflict, match="none is available"):
        await mc.apply(Refresh(), expected=0)
    progress = await mc.store.get_progress("trip")
    assert progress is None or progress.attempts == 0


async def test_refresh_with_generate_off_and_no_model_is_a_no_op(tmp_path: Path) -> None:
    mc = MemoryClient(tmp_path, generate=MemoryGenerateConfig(engine="model"))
    await mc.create("trip")
    await mc.apply(Configure(generate=False), expected=0, conversation="trip")
    view = await mc.apply(Refresh(), expected=0, conversation="trip")
    assert view.version == 1 and view.entries == {}


async def test_layout_remember_renders_memory_files(mc, tmp_path: Path) -> None:
    steps = "Run `make generate`, then the tests with `make check`."
    await mc.apply(Remember(key="tests-first", content=steps, kind="procedure"), expected=0)
    assert "tests-first" in (tmp_path / "memories" / "MEMORY.md").read_text()
    assert (tmp_path / "memories" / "skills" / "tests-first" / "SKILL.md").exists()


async def test_a_one_command_procedure_is_a_line_of_memory_md_not_a_skill(
    mc, tmp_path: Path
) -> None:
    one = "Run the tests with `make check`."
    await mc.apply(Remember(key="test-command", content=one, kind="procedure"), expected=0)
    assert "test-command" in (tmp_path / "memories" / "MEMORY.md").read_text()
    assert not (tmp_path / "memories" / "skills" / "test-command").exists()


async def test_private_entry_is_not_written_to_shared_files(mc, tmp_path: Path) -> None:
    await mc.apply(
        Remember(
            key="ana-short", content="Ana likes short answers.", kind="preference", person="ana"
        ),
        expected=0,
    )
    assert "Ana likes" not in (tmp_path / "memories" / "MEMORY.md").read_text()
    assert "Ana likes" not in (tmp_path / "memories" / "memory_summary.md").read_text()


def test_extraction_reply_helper_is_valid_json() -> None:
    # Guards the helper the model-engine tests rely on.
    import json

    body = json.loads(extraction_reply()[0].content[0].text)
    assert body["rollout_slug"] == "task"
