"""The table of the "Hybrid search" section of ``docs/quality.md``, from the ``--json``
outputs of ``bench/quality.py`` and ``bench/quality_coding.py`` run once per search setting:

    .venv/bin/python bench/quality.py --no-write --json > out/l-none.json
    .venv/bin/python bench/quality.py --no-write --json --embedder local \\
        --fusion rerank > out/l-rerank.json
    .venv/bin/python bench/quality_coding.py --no-write --json ... > out/c-none.json
    .venv/bin/python bench/hybrid_section.py "BM25" out/l-none.json out/c-none.json \\
        "rerank" out/l-rerank.json out/c-rerank.json

Prints the Markdown table (columns in the order given); the prose around it is kept by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _f(value: float) -> str:
    return f"{value:.3f}"


def table(columns: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> str:
    head = "| data set | figure | " + " | ".join(name for name, _, _ in columns) + " |"
    rows = [head, "|---|---|" + "---|" * len(columns)]

    def row(first: str, figure: str, cells: list[str]) -> None:
        rows.append(f"| {first} | {figure} | " + " | ".join(cells) + " |")

    n = columns[0][1]["categories"]["overall"]["n"]
    samples = ", ".join(columns[0][1]["samples"])
    row(
        f"LoCoMo dev, conversations {samples} ({n} questions)",
        "answer in search top 10",
        [_f(lo["categories"]["overall"]["search_answer"]) for _, lo, _ in columns],
    )
    row(
        "",
        "evidence turn in search top 10",
        [_f(lo["categories"]["overall"]["search_evidence"]) for _, lo, _ in columns],
    )
    cats = ("multi-hop", "temporal", "open-domain", "single-hop")
    row(
        "",
        " / ".join(cats) + " evidence",
        [
            " / ".join(_f(lo["categories"][c]["search_evidence"]) for c in cats)
            for _, lo, _ in columns
        ],
    )
    repeat = columns[0][2]["overall"]["repeat_tasks"]
    row(
        f"SWE-Bench-CL dev ({repeat} tasks whose files an earlier task changed)",
        "file in search top 10",
        [_f(co["overall"]["search_file"]) for _, _, co in columns],
    )
    row(
        "",
        "earlier fix in search top 10",
        [_f(co["overall"]["search_fix"]) for _, _, co in columns],
    )
    if all("interleaved" in co for _, _, co in columns):
        row(
            "same tasks, every sequence interleaved in one memory",
            "file / earlier fix in search top 10",
            [
                f"{_f(co['interleaved']['overall']['search_file'])} / {_f(co['interleaved']['overall']['search_fix'])}"
                for _, _, co in columns
            ],
        )
    row(
        "the coding bench, all of it",
        "seconds",
        [f"{co['seconds']:.0f}" for _, _, co in columns],
    )
    return "\n".join(rows)


def main() -> None:
    args = sys.argv[1:]
    if not args or len(args) % 3:
        raise SystemExit(__doc__)
    columns = [
        (
            args[i],
            json.loads(Path(args[i + 1]).read_text()),
            json.loads(Path(args[i + 2]).read_text()),
        )
        for i in range(0, len(args), 3)
    ]
    print(table(columns))


if __name__ == "__main__":
    main()
