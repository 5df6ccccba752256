"""Which extraction engine runs for a layout: the model where credentials exist, else offline.

Not a step of its own: the extract step (and phase 1 under it) asks the layout's state for its
engine, which is chosen here on first use.
"""

from __future__ import annotations

import logging

from ..config import MemoryGenerateConfig, model_settings
from .base import ExtractionEngine

logger = logging.getLogger("sandbox_memory")

_ENGINE_ANNOUNCED: set[str] = set()


def resolve_engine(generate: MemoryGenerateConfig) -> ExtractionEngine:
    """The engine ``generate.engine`` asks for; ``auto`` picks the model where credentials exist
    (``OPENAI_API_KEY``, ``set_default_openai_key``, ``set_default_openai_client``, or a model
    object). The choice is logged once, naming the model."""

    from .model import ModelEngine, credentials_source

    choice = generate.engine
    model = generate.phase_one_model
    if choice == "auto":
        why = "a model object was configured" if not isinstance(model, str) else None
        why = why or credentials_source()
        choice = "model" if why is not None else "offline"
        why = why or (
            "no OpenAI credentials: no OPENAI_API_KEY, set_default_openai_key or "
            "set_default_openai_client"
        )
        name = model if isinstance(model, str) else type(model).__name__
        line = (
            f"sandbox-memory: using the model engine with {name} ({why})"
            if choice == "model"
            else f"sandbox-memory: using the offline engine ({why})"
        )
        if line not in _ENGINE_ANNOUNCED:
            _ENGINE_ANNOUNCED.add(line)
            logger.info("%s", line)
    if choice == "offline":
        # Imported only when used: its rules and word lists are about 2 MB the model engine's
        # close does not need.
        from .offline import OfflineEngine

        return OfflineEngine()
    settings = model_settings(
        "generate.phase_one_model_settings", generate.phase_one_model_settings
    )
    return ModelEngine(model, model_settings=settings)
