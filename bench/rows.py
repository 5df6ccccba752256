"""A result row: plain data, importable without the Agents SDK (the README check reads it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Row:
    """One measured point: the same figure for both systems, their ratio and the target."""

    name: str
    metric: str
    unit: str
    ours: float | None
    builtin: float | None
    target: str
    met: bool | None
    ratio: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.ratio is None and self.ours is not None and self.builtin:
            self.ratio = self.ours / self.builtin

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("name")
        for key in ("ours", "builtin", "ratio"):
            if isinstance(data[key], float):
                data[key] = round(data[key], 6 if abs(data[key]) < 1 else 3)
        return data
