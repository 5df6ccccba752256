"""The runtime of one layout: the flow's steps put together.

The steps live in packages of their own, one per step: :mod:`sandbox_memory.record`,
:mod:`sandbox_memory.extract`, :mod:`sandbox_memory.consolidate`, :mod:`sandbox_memory.render`,
:mod:`sandbox_memory.edit` and :mod:`sandbox_memory.search`; what every step of one layout
shares (settings, store, workspace, locks) is :mod:`sandbox_memory.layout_state`, below them.
This package holds what joins them: :mod:`.facade`, :class:`LayoutRuntime`, the steps put
together behind one object. ``from sandbox_memory.runtime import LayoutRuntime`` works,
loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "LayoutRuntime": "sandbox_memory.runtime.facade",
    "resolve_engine": "sandbox_memory.engines.resolve",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox_memory.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
