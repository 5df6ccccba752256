"""The Hyperscan prefilter is compiled once and loaded from disk by the next process: a load
runs no compiler and redacts byte for byte as a compile does; a damaged, foreign or missing
file only means compiling again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox_memory.redact import Redactor, available_matchers, database_cache, matcher
from secret_corpus import BENIGN, CASES

pytestmark = pytest.mark.skipif(
    "hyperscan" not in available_matchers(), reason="hyperscan is not installed here"
)

TEXTS = [case.text for case in CASES[::7]] + BENIGN[:20]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SANDBOX_MEMORY_CACHE_DIR", str(folder))
    matcher._prefilter.cache_clear()  # as in a new process
    yield folder
    matcher._prefilter.cache_clear()


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Hyperscan compiles (every compile goes through ``hyperscan.Database``)."""
    import hyperscan

    calls: list[int] = []
    real = hyperscan.Database

    class Counting(real):  # type: ignore[misc, valid-type]
        def compile(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return super().compile(*args, **kwargs)

    monkeypatch.setattr(hyperscan, "Database", Counting)
    return calls


def _fresh(**kwargs: Any) -> Redactor:
    matcher._prefilter.cache_clear()
    return Redactor(matcher="hyperscan", **kwargs)


def _outputs(redactor: Redactor) -> list[str]:
    return [redactor.redact_text(text) for text in TEXTS]


def _files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.hsdb"))


def test_the_next_build_loads_the_database_and_redacts_the_same(
    cache: Path, compiles: list[int]
) -> None:
    first = _outputs(_fresh())
    assert compiles, "the first build compiles"
    assert len(_files(cache)) == 1
    compiles.clear()
    second = _outputs(_fresh())
    assert compiles == []  # loaded: Hyperscan's compiler never ran
    assert second == first == _outputs(Redactor(matcher="python"))


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_file_is_compiled_again_and_rewritten(
    cache: Path, compiles: list[int], damage: str
) -> None:
    expected = _outputs(_fresh())
    (path,) = _files(cache)
    raw = path.read_bytes()
    damaged = {
        "truncate": raw[: len(raw) // 2],
        "flip": raw[:-100] + bytes([raw[-100] ^ 0xFF]) + raw[-99:],
        "garbage": b"\x00" * len(raw),
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    compiles.clear()
    assert _outputs(_fresh()) == expected
    assert compiles, "a damaged file is never loaded"
    assert path.read_bytes() == raw  # rewritten whole
    compiles.clear()
    assert _outputs(_fresh()) == expected
    assert compiles == []


def test_other_rules_have_their_own_file_and_a_misnamed_file_is_not_used(
    cache: Path, compiles: list[int]
) -> None:
    plain = _outputs(_fresh())
    extra = _fresh(extra_patterns={"ticket": r"TKT-[0-9]{6}"})
    assert extra.redact_text("see TKT-123456 now") == "see [REDACTED:ticket] now"
    first, second = _files(cache)
    # a file renamed to another set of rules' name names its own key inside: not loaded
    second.write_bytes(first.read_bytes())
    first.unlink()
    compiles.clear()
    reloaded = _fresh(extra_patterns={"ticket": r"TKT-[0-9]{6}"})
    reloaded_plain = _fresh()
    assert reloaded.redact_text("see TKT-123456 now") == "see [REDACTED:ticket] now"
    assert _outputs(reloaded_plain) == plain
    assert len(compiles) >= 2  # both compiled again


def test_without_a_usable_folder_the_redactor_compiles_and_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiles: list[int]
) -> None:
    expected = _outputs(Redactor(matcher="python"))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for setting in (str(blocker / "cache"), "off"):
        monkeypatch.setenv("SANDBOX_MEMORY_CACHE_DIR", setting)
        compiles.clear()
        assert _outputs(_fresh()) == expected
        assert compiles
    assert database_cache.cache_dir() is None  # "off"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
    matcher._prefilter.cache_clear()


def test_the_folder_keeps_the_most_recent_databases_only(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database_cache, "KEEP", 2)
    for n in range(4):
        _fresh(extra_patterns={"ticket": rf"TKT{n}-[0-9]{{6}}"})
    assert len(_files(cache)) == 2
    assert not list(cache.glob("*.tmp"))


def test_a_hyperscan_that_cannot_build_falls_back_to_python_when_not_asked_for_by_name(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("no usable CPU features")

    monkeypatch.delenv("SANDBOX_MEMORY_REDACT_MATCHER", raising=False)
    monkeypatch.setitem(matcher._FACTORIES, "hyperscan", broken)
    with caplog.at_level("WARNING", logger="sandbox_memory.redact.matcher"):
        chosen = Redactor()
    assert chosen._matcher.name == "python"
    assert _outputs(chosen) == _outputs(Redactor(matcher="python"))
    assert [r.getMessage() for r in caplog.records if "no usable CPU" in r.getMessage()]
    with pytest.raises(RuntimeError, match="no usable CPU features"):
        Redactor(matcher="hyperscan")
