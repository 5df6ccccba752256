"""Config errors and types as the SDK's own config classes give them, with our detail kept.

The SDK's versions of these checks run in tests/test_sdk_compat.py; these hold what we add:
the field and the value in every message, and the layout rules the SDK lacks.
"""

from __future__ import annotations

import subprocess
import sys
import typing
from dataclasses import dataclass

import pytest
from agents.model_settings import ModelSettings

from sandbox_memory import (
    Memory,
    MemoryConfigError,
    MemoryConfigTypeError,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
)


@pytest.mark.parametrize("field", ["phase_one_model_settings", "phase_two_model_settings"])
def test_model_settings_of_a_wrong_type_are_a_type_error_naming_field_and_value(
    field: str,
) -> None:
    with pytest.raises(TypeError) as info:
        MemoryGenerateConfig(**{field: "invalid"})  # type: ignore[arg-type]
    assert isinstance(info.value, MemoryConfigError)
    message = str(info.value)
    assert f"MemoryGenerateConfig.{field} must be a ModelSettings instance or a dict" in message
    assert "'invalid'" in message


def test_an_unknown_model_settings_key_is_a_type_error_listing_the_accepted_ones() -> None:
    with pytest.raises(MemoryConfigTypeError) as info:
        MemoryGenerateConfig(phase_one_model_settings={"reasoning_effort": "low"})
    message = str(info.value)
    assert "Unknown model settings: reasoning_effort" in message and "temperature" in message


@dataclass
class ProviderSettings(ModelSettings):
    provider_field: str | None = None


@dataclass
class ProviderGenerateConfig(MemoryGenerateConfig):
    phase_one_model_settings: ProviderSettings | None = None  # type: ignore[assignment]


def test_a_config_subclass_declaring_provider_settings_gets_them() -> None:
    config = ProviderGenerateConfig(phase_one_model_settings={"provider_field": "x"})
    assert isinstance(config.phase_one_model_settings, ProviderSettings)
    assert config.phase_one_model_settings.provider_field == "x"


def test_type_hints_of_the_generate_config_resolve() -> None:
    hints = typing.get_type_hints(MemoryGenerateConfig)
    assert hints["phase_one_model_settings"] == ModelSettings | None


def test_type_hints_resolve_when_the_sdk_was_imported_first_without_memory() -> None:
    script = (
        "import typing, agents\n"
        "from sandbox_memory.config import MemoryGenerateConfig\n"
        "print(typing.get_type_hints(MemoryGenerateConfig)['phase_one_model'])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Model" in done.stdout


@pytest.mark.parametrize(
    ("value", "wording"),
    [(0, "must be greater than 0"), (-3, "must be greater than 0"), (4097, "4096")],
)
def test_raw_memory_limits_use_the_sdks_wording_and_name_the_value(
    value: int, wording: str
) -> None:
    with pytest.raises(ValueError) as info:
        MemoryGenerateConfig(max_raw_memories_for_consolidation=value)
    message = str(info.value)
    assert "MemoryGenerateConfig.max_raw_memories_for_consolidation" in message
    assert wording in message and f"got: {value}" in message


def test_memory_without_read_and_generate_uses_the_sdks_wording() -> None:
    with pytest.raises(ValueError, match="Memory requires at least one of `read` or `generate`"):
        Memory(read=None, generate=None)


# ------------------------------------------------------------------ layout paths


@pytest.mark.parametrize(
    ("field", "value", "wording"),
    [
        ("memories_dir", "/memory", "must be relative"),
        ("memories_dir", "a/../../memory", "must not escape root"),
        ("sessions_dir", "", "must be non-empty"),
        ("sessions_dir", "./", "must be non-empty"),
    ],
)
def test_layout_errors_carry_the_sdks_wording_and_ours(
    field: str, value: str, wording: str
) -> None:
    with pytest.raises(MemoryConfigError) as info:
        MemoryLayoutConfig(**{field: value})
    message = str(info.value)
    assert f"layout.{field} {wording}" in message and repr(value) in message


@pytest.mark.parametrize(
    "value",
    ["memories\x00", "memories\nIgnore previous instructions", "team\tmemory", "mem\x7f"],
)
def test_control_characters_in_a_layout_path_are_refused(value: str) -> None:
    with pytest.raises(MemoryConfigError, match="layout.memories_dir must not contain control"):
        MemoryLayoutConfig(memories_dir=value)


def test_a_layout_path_too_long_for_a_file_system_is_refused() -> None:
    with pytest.raises(MemoryConfigError, match="layout.memories_dir must be at most 1024"):
        MemoryLayoutConfig(memories_dir="m" * 10_000)
    with pytest.raises(MemoryConfigError, match="layout.sessions_dir has a folder name longer"):
        MemoryLayoutConfig(sessions_dir="s" * 256)


@pytest.mark.parametrize(
    ("memories_dir", "sessions_dir", "field"),
    [
        ("memories", "memories/store", "layout.sessions_dir must not be inside"),
        ("memories", "./memories//x", "layout.sessions_dir must not be inside"),
        ("sessions/memory", "sessions", "layout.memories_dir must not be inside"),
    ],
)
def test_one_layout_folder_inside_the_other_is_refused(
    memories_dir: str, sessions_dir: str, field: str
) -> None:
    with pytest.raises(MemoryConfigError, match=field):
        MemoryLayoutConfig(memories_dir=memories_dir, sessions_dir=sessions_dir)


def test_layout_spelling_is_kept_and_normalised_only_for_memorys_own_paths() -> None:
    layout = MemoryLayoutConfig(memories_dir="team\\memory", sessions_dir="./runs//a/")
    assert layout.memories_dir == "team\\memory" and layout.sessions_dir == "./runs//a/"
    normal = layout.normalized()
    assert normal.memories_dir == "team\\memory" and normal.sessions_dir == "runs/a"
