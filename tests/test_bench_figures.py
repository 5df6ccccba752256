"""The README's performance figures and docs/benchmarks.md are the committed bench results.

Both are rendered by ``bench/report.py`` from ``docs/benchmarks.json`` (the raw results of the
last full ``python bench/run.py``); these checks read that file and never run a benchmark.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def report(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import report as module  # bench/report.py (plain data: no Agents SDK, no matplotlib)

    return module


@pytest.fixture
def saved(report: ModuleType) -> dict[str, Any]:
    results: dict[str, Any] = report.load_results(REPO / "docs" / "benchmarks.json")
    return results


def readme_section() -> str:
    text = (REPO / "README.md").read_text()
    begin = "<!-- bench figures:"
    assert begin in text, "README.md has no generated performance figures"
    return text.split(begin, 1)[1].split("\n", 1)[1].split("<!-- end of bench figures -->")[0]


def test_every_readme_performance_figure_is_the_bench_results(
    report: ModuleType, saved: dict[str, Any]
) -> None:
    expected = report.readme_figures(saved["rows"], saved["info"])
    assert readme_section().strip() == expected, (
        "README.md's performance figures differ from docs/benchmarks.json: run "
        "`python bench/run.py --report-from docs/benchmarks.json`"
    )


def test_the_readme_ratios_are_the_rows_ratios(report: ModuleType, saved: dict[str, Any]) -> None:
    # The same check from the other side: each bold ratio is one row's, as the report rounds it.
    ratios = {report._num(r.ratio) for r in saved["rows"] if r.ratio is not None}
    bold = re.findall(r"\*\*([0-9.]+)x\*\*", readme_section())
    assert len(bold) >= 5 and set(bold) <= ratios


def test_docs_benchmarks_md_is_the_bench_results(report: ModuleType, saved: dict[str, Any]) -> None:
    expected = report.report_markdown(saved, plot_name="benchmarks.png")
    assert (REPO / "docs" / "benchmarks.md").read_text() == expected, (
        "docs/benchmarks.md differs from docs/benchmarks.json: run "
        "`python bench/run.py --report-from docs/benchmarks.json`"
    )


def test_the_targets_count_leaves_out_rows_without_a_verdict(report: ModuleType) -> None:
    from rows import Row

    rows = [
        Row(name="a", metric="m", unit="x", ours=1.0, builtin=None, target="<= 2", met=True),
        Row(name="b", metric="m", unit="x", ours=3.0, builtin=None, target="<= 2", met=False),
        Row(name="c", metric="m", unit="x", ours=3.0, builtin=None, target="<= 2", met=None),
    ]
    assert report.targets_met(rows) == "1 of 2 targets met; 1 row shown for information"
