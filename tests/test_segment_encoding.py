"""A recorded segment is encoded once (``stores.segments.EncodedSegment``): its line must read
back as the segment, and its item digests must be the ones a reader of the file computes."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pytest

from sandbox_memory.engines.base import ITEM_ID_FIELD
from sandbox_memory.engines.transcript import REPLAYED_ITEM_TYPE
from sandbox_memory.redact import Redactor
from sandbox_memory.stores.segments import (
    EncodedSegment,
    build_segment,
    item_digest,
    new_item_digests,
    replay_plan,
    segment_line,
)

WHEN = datetime.datetime(2026, 12, 6, 4, 30, tzinfo=datetime.timezone.utc)


def _payload() -> dict[str, Any]:
    return {
        "updated_at": "2026-12-06T04:30:00+00:00",
        "input": [
            {"role": "user", "content": "Fix the invoice tax.", "id": "msg_1"},
            {
                "type": "function_call",
                "name": "exec_command",
                "arguments": '{"cmd": "ls"}',
                "call_id": "c1",
                "status": "completed",
                "id": "fc_1",
            },
            "a bare string the SDK would never send",
            {},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": 'Zürich, 東京 \u2028 "q"'}],
            },
        ],
        "generated_items": [
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": "x\n" * 500,
                "provider_data": {"when": WHEN, "n": 1.5},
            },
            {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Done."}],
            },
            {"type": REPLAYED_ITEM_TYPE, ITEM_ID_FIELD: "old:0"},
        ],
        "final_output": {"answer": 42, "at": WHEN},
    }


@pytest.mark.parametrize("replayed", [0, 1, 2])
def test_the_line_reads_back_as_the_segment_and_the_digests_match_a_reader(
    replayed: int,
) -> None:
    segment = build_segment(_payload(), rollout_id="conv", person=None, redactor=Redactor())
    reference = json.loads(json.dumps(segment, default=str))  # before any item is replaced
    encoded = EncodedSegment(segment)
    leading = encoded.leading_digests()
    assert leading == [item_digest(i) for i in reference["input"][:-1]]  # all but the last

    known = {digest: [f"earlier:{n}"] for n, digest in enumerate(leading[:replayed])}
    assert encoded.mark_replayed(replay_plan(leading, known)) == replayed

    line = encoded.line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    read = json.loads(line)
    assert read == json.loads(json.dumps(segment, default=str))  # the segment, references in
    assert line == segment_line(segment)  # one encoding, whoever writes the line
    for n in range(replayed):
        assert read["input"][n] == {"type": REPLAYED_ITEM_TYPE, ITEM_ID_FIELD: f"earlier:{n}"}
    assert read["input"][replayed:] == reference["input"][replayed:]
    assert read["generated_items"] == reference["generated_items"]
    assert list(read) == list(reference)  # the SDK's keys first, in its order

    # What a reader of the file computes from the line is what the recorder noted.
    assert encoded.new_item_digests() == new_item_digests(read)
    assert len(encoded.new_item_digests()) == 5 - replayed + 2  # not the references


def test_a_value_that_is_not_an_item_ends_what_a_replay_may_cover() -> None:
    segment: dict[str, Any] = {
        "rollout_id": "conv",
        "input": [
            {"role": "user", "content": "a"},
            "not an item",
            {"role": "user", "content": "b"},
        ],
        "generated_items": [{"type": "message", ITEM_ID_FIELD: "s:1", "content": "ok"}],
    }
    encoded = EncodedSegment(segment)
    assert encoded.leading_digests() == [item_digest(segment["input"][0])]
    assert json.loads(encoded.line()) == segment
    assert encoded.new_item_digests() == [(item_digest(segment["generated_items"][0]), "s:1")]
