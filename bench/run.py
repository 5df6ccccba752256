"""Run the benchmarks: sandbox-memory against the SDK's built-in Memory, same workload.

    python bench/run.py --quick --json   # every scenario at small sizes (< 2 min on 2 cores)
    python bench/run.py                  # full sizes; writes docs/benchmarks.{json,md,png}
                                         # and the README's performance figures
    python bench/run.py --report-from docs/benchmarks.json   # the same, without running

Progress goes to stderr; ``--json`` prints one JSON object on stdout:
``{"scenarios": {"<name>": {"metric", "unit", "ours", "builtin", "ratio", "target", "met"}}}``.
These are scripts, not tests: nothing here gates CI.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, log  # noqa: E402
from report import (  # noqa: E402
    README,
    REPO,
    RESULTS,
    as_json,
    dump,
    load_results,
    machine_info,
    plot,
    readme_figures,
    report_markdown,
    text_table,
    with_readme_figures,
)

SCENARIOS = (
    "record",
    "redact",
    "consolidate",
    "close_latency",
    "read",
    "big_rollout",
    "scale",
)

SIZES: dict[str, dict[str, Any]] = {
    # A row name always means the same measurement: quick mode takes fewer samples, and where a
    # size is too slow for it, it leaves that row out (its name carries the size) rather than
    # measuring another size under the same name.
    "quick": {
        "record": {"sizes": [1, 100, 1_000], "samples": 21},
        "redact": 5,
        "consolidate": {"sizes": [10, 50], "small_block": False},
        "close_latency": 0.5,
        "read": 2_000,
        "big_rollout": [5, 20],
        "scale": {
            "stored": 10_000,
            "stored_few": 3_000,
            "pending": [100, 400],
            "pending_batches": [100, 4],
            "ops": [2_000, 20_000],
            "samples": 3,
            "forget": [1_000, 100],
            "session_pending": 1_000,
        },
    },
    "full": {
        "record": {"sizes": [1, 100, 1_000], "samples": 21},
        "redact": 25,
        "consolidate": {"sizes": [10, 50, 200], "small_block": True},
        "close_latency": 0.5,
        "read": 2_000,
        "big_rollout": [5, 20, 50, 100],
        "scale": {
            "stored": 10_000,
            "stored_few": 3_000,
            "pending": [100, 1_000],
            "pending_batches": [500, 4],
            "ops": [2_000, 20_000],
            "samples": 5,
            "forget": [1_000, 100],
            "session_pending": 1_000,
        },
    },
}


def compile_bytecode() -> None:
    """Write our package's bytecode as ``pip install`` does for every installed package (the
    SDK's included). An editable checkout run with ``PYTHONDONTWRITEBYTECODE=1`` would
    otherwise compile every module of ours from source in every benchmark process: about 3 MB
    of peak memory in a close, and import time, that an installed package never pays."""
    import compileall

    import sandbox_memory

    compileall.compile_dir(Path(sandbox_memory.__file__).parent, quiet=1)


async def run_scenarios(mode: str, only: list[str]) -> tuple[list[Row], dict[str, Any]]:
    import scenario_bigrollout
    import scenario_close
    import scenario_consolidate
    import scenario_read
    import scenario_record
    import scenario_redact
    import scenario_scale

    modules = {
        "record": scenario_record,
        "redact": scenario_redact,
        "consolidate": scenario_consolidate,
        "close_latency": scenario_close,
        "read": scenario_read,
        "big_rollout": scenario_bigrollout,
        "scale": scenario_scale,
    }
    rows: list[Row] = []
    extras: dict[str, Any] = {}
    for name in only:
        start = time.perf_counter()
        log(f"{name}: starting ({mode})")
        scenario_rows, extra = await modules[name].run(SIZES[mode][name], log)
        rows.extend(scenario_rows)
        extras[name] = extra
        log(f"{name}: done in {time.perf_counter() - start:.1f}s")
    return rows, extras


def _write_report(saved: dict[str, Any], args: argparse.Namespace) -> None:
    """``docs/benchmarks.md`` and its plot from ``saved`` results; for the default report, the
    README's performance figures too (both from the same results, so they cannot disagree)."""

    out = Path(args.out)
    image = out.with_suffix(".png")
    skipped = plot(saved["extras"], image)
    if skipped:
        log(skipped)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report_markdown(saved, plot_name=None if skipped else image.name))
    log(f"wrote {out}" + ("" if skipped else f" and {image}"))
    if out.resolve() == RESULTS.with_suffix(".md"):
        figures = readme_figures(saved["rows"], saved["info"])
        README.write_text(with_readme_figures(README.read_text(), figures))
        log(f"wrote the performance figures of {README}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (< 2 min on 2 cores)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--only",
        default=",".join(SCENARIOS),
        help=f"comma-separated scenarios to run (default: all of {', '.join(SCENARIOS)})",
    )
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="full mode: do not write docs/benchmarks.{json,md,png} and the README figures",
    )
    parser.add_argument(
        "--out",
        default=str(REPO / "docs" / "benchmarks.md"),
        help="where the full run writes its report, its results (.json) and plot (.png); the "
        "README's figures are written with the default one only (default: docs/benchmarks.md)",
    )
    parser.add_argument(
        "--save", default=None, help="also save the raw results (JSON) to this file"
    )
    parser.add_argument(
        "--report-from",
        default=None,
        help="write the report (and, for the default one, the README figures) from saved "
        "results (docs/benchmarks.json, or a --save file), without running anything",
    )
    args = parser.parse_args(argv)
    writes_docs = (args.report_from or not (args.quick or args.no_write)) and Path(
        args.out
    ).resolve() == RESULTS.with_suffix(".md")
    if writes_docs and importlib.util.find_spec("matplotlib") is None:
        # The project's report shows the plot (tests/test_bench_figures.py holds it to the
        # results): refused before a run of many minutes, not after.
        parser.error(
            "writing docs/benchmarks.md needs matplotlib for its plot: "
            "pip install -r bench/requirements.txt (or --no-write, or --out elsewhere)"
        )
    if args.report_from:
        saved = load_results(Path(args.report_from))
        _write_report(saved, args)
        print(text_table(saved["rows"]))
        return 0
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    mode = "quick" if args.quick else "full"
    compile_bytecode()
    info = machine_info()
    start = time.perf_counter()
    rows, extras = asyncio.run(run_scenarios(mode, only))
    seconds = time.perf_counter() - start
    log(f"all scenarios done in {seconds:.0f}s")
    info["load average at end"] = machine_info()["load average at start"]

    saved = {
        "rows": [dataclasses.asdict(r) for r in rows],
        "info": info,
        "mode": mode,
        "seconds": seconds,
        "extras": extras,
    }
    writes = mode == "full" and not args.no_write
    targets = [Path(args.save)] if args.save else []
    if writes:
        targets.append(Path(args.out).with_suffix(".json"))  # what the report is made of
    for target in targets:
        target.write_text(json.dumps(saved, default=str, indent=1) + "\n")
    if writes:
        _write_report(load_results(targets[-1]), args)

    if args.json:
        print(dump(as_json(rows)))
    else:
        print(text_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
