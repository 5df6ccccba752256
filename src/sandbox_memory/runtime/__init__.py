"""The runtime of one layout, one module per step of the flow.

- :mod:`.record`: step 1, append each run's segment to its conversation's rollout;
- :mod:`.extract`: step 2, phase 1, scheduled after runs and at the close, within budgets;
- :mod:`.consolidate`: step 3, phase 2, the layout memory made from its conversations;
- :mod:`.render`: step 4, the files rendered from the store;
- :mod:`.live_edits`: step 5, edits of ``MEMORY.md`` taken in as changes;
- :mod:`.state` (what every step shares), :mod:`.engine` (which engine extracts),
  :mod:`.index` (the search index kept in step), :mod:`.copies` (a layout entry's copies in
  conversations);
- :mod:`.facade`: :class:`LayoutRuntime`, the steps put together behind one object.

Importing a module of this package imports nothing else of it: the steps' modules and the
modules outside that take a type from one of them (``phase_one`` takes :class:`.state.
LayoutState`) would otherwise import the facade, and through it themselves. The package's own
code imports :class:`LayoutRuntime` from :mod:`.facade`; ``from sandbox_memory.runtime import
LayoutRuntime`` still works, loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"LayoutRuntime": "facade", "resolve_engine": "engine"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox_memory.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
