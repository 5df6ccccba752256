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
"""

from __future__ import annotations

from .engine import resolve_engine
from .facade import LayoutRuntime

__all__ = ["LayoutRuntime", "resolve_engine"]
