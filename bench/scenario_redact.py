"""redact: redaction throughput, nanoseconds of CPU per byte of segment JSON.

What ``LayoutRuntime.record`` spends on redaction: ``Redactor.redact_json`` of a run segment
(the shape ``rollouts.build_segment`` hands it), timed with ``time.process_time`` and divided by
the size of the segment serialised as JSON. Two sizes, as in issue 12's target: an ordinary
segment of about 9 KB (four tool calls) and a segment holding one 1 MB tool output. Both the
compiled matcher (when its library is installed) and the pure-Python fallback are measured; the
two give the same output (``tests/test_redact_matcher.py``).

Run on its own: ``python bench/scenario_redact.py [--quick]``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Progress, Row, median  # noqa: E402
from workload import segment_payload  # noqa: E402

from sandbox_memory.redact import Redactor  # noqa: E402

TARGETS = {"segment_9k": 30.0, "output_1m": 20.0}


def _matchers() -> list[str]:
    try:
        from sandbox_memory.redact import available_matchers
    except ImportError:  # the redactor before its matcher split
        return ["default"]
    found = list(available_matchers())
    return found if "python" in found else [*found, "python"]


def _redactor(matcher: str) -> Redactor:
    if matcher == "default":
        return Redactor()
    return Redactor(matcher=matcher)  # type: ignore[call-arg]


def _ns_per_byte(redactor: Redactor, segment: dict[str, Any], repeats: int) -> float:
    size = len(json.dumps(segment).encode())
    redactor.redact_json(segment)  # warm-up: lazy compilation, caches
    samples = []
    for _ in range(repeats):
        start = time.process_time_ns()
        redactor.redact_json(segment)
        samples.append((time.process_time_ns() - start) / size)
    return median(samples)


async def run(repeats: int, progress: Progress) -> tuple[list[Row], dict[str, Any]]:
    segments = {
        "segment_9k": [segment_payload(7, i) for i in range(5)],
        "output_1m": [segment_payload(8, 0, big_output_chars=1_000_000)],
    }
    rows: list[Row] = []
    extra: dict[str, Any] = {}
    for matcher in _matchers():
        redactor = _redactor(matcher)
        for name, payloads in segments.items():
            figures = [
                _ns_per_byte(redactor, p, repeats if name == "segment_9k" else max(1, repeats // 5))
                for p in payloads
            ]
            value = median(figures)
            size = len(json.dumps(payloads[0]).encode())
            extra[f"{matcher}.{name}"] = {"ns_per_byte": value, "bytes": size}
            progress(f"redact {matcher} {name}: {value:.1f} ns/B ({size:,} B)")
            target = TARGETS[name]
            rows.append(
                Row(
                    name=f"redact.{name}" + ("" if matcher != "python" else ".python"),
                    metric=f"redaction CPU per byte of segment JSON ({size:,} B), {matcher} matcher",
                    unit="ns/B",
                    ours=value,
                    builtin=None,
                    target=f"<= {target:g} ns/B",
                    met=value <= target if matcher != "python" else None,
                )
            )
    return rows, extra


def main() -> int:
    import asyncio

    quick = "--quick" in sys.argv
    rows, _ = asyncio.run(run(5 if quick else 25, lambda m: print(m, file=sys.stderr)))
    for row in rows:
        print(f"{row.name:32} {row.ours:8.1f} {row.unit}  target {row.target}  met={row.met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
