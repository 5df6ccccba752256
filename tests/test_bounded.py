"""Bounded parsing: a document's nesting is read from its text, and the bound holds exactly."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from sandbox_memory import bounded


def depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def nested(n: int, *, in_dicts: bool = False) -> str:
    inner = "1"
    for _ in range(n):
        inner = f'{{"k": {inner}}}' if in_dicts else f"[{inner}]"
    return inner


@pytest.mark.parametrize("in_dicts", [False, True])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_the_deepest_nesting_accepted_is_the_bound(in_dicts: bool, as_bytes: bool) -> None:
    most = bounded.MAX_DEPTH
    for n, ok in ((most, True), (most + 1, False)):
        text = nested(n, in_dicts=in_dicts)
        data: str | bytes = text.encode() if as_bytes else text
        if ok:
            assert depth(bounded.loads(data, limit=1 << 20)) == most
        else:
            with pytest.raises(bounded.UnsafeJSON, match="nested deeper than 64"):
                bounded.loads(data, limit=1 << 20)


def test_brackets_quotes_and_backslashes_inside_strings_are_text_not_nesting() -> None:
    tricky = ["[[[{{{", '\\"[[[', "\\\\", '\\\\"', "é[{ 中[", "]]]}}}"]
    value = {"a": [tricky * 20], "b": {"c": "[" * 200}}
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        assert bounded.loads(text, limit=1 << 20) == value
        assert bounded.loads(text.encode(), limit=1 << 20) == value


def test_the_nesting_read_from_the_text_is_the_value_s_on_random_documents() -> None:
    rnd = random.Random(7)
    leaves = [1, None, True, 2.5, 'a[b]{c}"\\', "\\\\", 'x\\"[', "é[{"]

    def make(level: int) -> Any:
        roll = rnd.random()
        if level > 12 or roll < 0.3:
            return rnd.choice(leaves)
        if roll < 0.65:
            return [make(level + 1) for _ in range(rnd.randint(0, 4))]
        return {f"k{i}[{{": make(level + 1) for i in range(rnd.randint(0, 4))}

    for _ in range(500):
        value = make(0)
        for text in (json.dumps(value), json.dumps(value, indent=1, ensure_ascii=False)):
            assert bounded._nesting(text, 100) == depth(value)
            assert bounded._nesting(text.encode(), 100) == depth(value)
