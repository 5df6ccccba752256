"""Search hits and what they stand for: one hit per fact (its scope and key), nothing a Forget
hid, and text found whatever its Unicode form.

Real workspaces in a temp folder, the offline engine or an engine object at the model seam.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

from helpers import run_payload
from sandbox_memory import MemoryClient, MemoryGenerateConfig, Remember

OFFLINE = MemoryGenerateConfig(engine="offline")


def payload(user: str, reply: str) -> dict[str, Any]:
    return run_payload(user, reply=reply, when=None, completed=True)


BUDGETS = {
    "trip": "The trip budget is 1500 EUR.",
    "office": "The office budget is 90000 USD for the year.",
    "marketing": "The marketing budget is 3000 GBP per quarter.",
}


async def remembered_budgets(root: Path) -> MemoryClient:
    client = MemoryClient(root, generate=OFFLINE)
    for rid, content in BUDGETS.items():
        view = await client.create(rid)
        await client.apply(
            Remember(key="budget", content=content), expected=view.version, conversation=rid
        )
    return client


async def test_the_same_key_in_three_conversations_is_three_hits(tmp_path: Path) -> None:
    client = await remembered_budgets(tmp_path)
    hits = [h for h in await client.search("budget") if h.kind == "entry"]
    assert sorted(h.conversation or "" for h in hits) == sorted(BUDGETS)
    for hit in hits:
        assert hit.text.endswith(BUDGETS[str(hit.conversation)])
        # Each cites its own conversation's item, not the other budgets'.
        assert {s.conversation for s in hit.sources} == {hit.conversation}


async def test_a_promoted_copy_and_its_origin_are_one_hit(tmp_path: Path) -> None:
    client = MemoryClient(tmp_path, generate=OFFLINE)
    view = await client.create("fix")
    await client.apply(
        Remember(key="test-command", content="Run the tests with tox -e py311.", kind="procedure"),
        expected=view.version,
        conversation="fix",
    )
    assert "test-command" in (await client.view(None)).entries  # promoted to layout memory
    hits = [h for h in await client.search("tox") if h.kind == "entry"]
    assert [h.key for h in hits] == ["test-command"]


async def test_a_fact_updated_in_a_later_conversation_is_one_hit_in_its_newest_words(
    tmp_path: Path,
) -> None:
    client = MemoryClient(tmp_path, generate=OFFLINE)
    for rid, command in (("fix", "tox -e py311"), ("fix2", "tox -e py312 --parallel")):
        view = await client.create(rid)
        await client.apply(
            Remember(
                key="test-command", content=f"Run the tests with {command}.", kind="procedure"
            ),
            expected=view.version,
            conversation=rid,
        )
    layout = (await client.view(None)).entries["test-command"]
    assert "py312" in layout.content  # the layout entry was updated from the newer conversation

    hits = [h for h in await client.search("tox tests py311") if h.kind == "entry"]

    assert [h.key for h in hits] == ["test-command"]
    assert "py312 --parallel" in hits[0].text and "py311" not in hits[0].text
    assert {s.conversation for s in hits[0].sources} == {"fix", "fix2"}


async def test_text_is_found_whatever_its_unicode_form(tmp_path: Path) -> None:
    client = MemoryClient(tmp_path, generate=OFFLINE)
    composed = "Send the résumé of Zoë to the café."
    decomposed = unicodedata.normalize("NFD", "Send the résumé of Zoë to the café.")
    await client.runtime.record(payload(composed, "Sent."), rollout_id="cv")
    await client.runtime.record(
        payload("Upload the ﬁnal naïve draft.", "Uploaded."), rollout_id="doc"
    )
    await client.runtime.record(
        payload(decomposed.replace("Send", "Print"), "Printed."), rollout_id="cv2"
    )
    await client.runtime.close()
    for query in (unicodedata.normalize("NFD", "résumé"), "résumé", "resume"):
        # A run's summary stands in the place of the item it holds (docs/search.md).
        hits = await client.search(query)
        found = {h.conversation for h in hits if h.kind in ("item", "rollout_summary")}
        assert found == {"cv", "cv2"}, query
    # Compatibility forms too: the "ﬁ" ligature is "fi", a full-width word its ASCII.
    assert {h.conversation for h in await client.search("final")} == {"doc"}
    assert {h.conversation for h in await client.search("ｆｉｎａｌ")} == {"doc"}
