"""Edit: the specification's commands (Remember, Forget, Configure, Refresh) with versions.

A command is applied with the version the caller last saw; a stale version raises
:class:`~sandbox_memory.errors.MemoryConflict` and changes nothing. ``conversation=None``
addresses the layout memory (the specification's agent memory), a rollout id addresses that
conversation's memory (the specification's session memory).
"""

from __future__ import annotations

from ..errors import MemoryConflict as MemoryConflict
from .base import (
    VIEW_CHUNK_BYTES as VIEW_CHUNK_BYTES,
)
from .base import (
    processed_item_ids as processed_item_ids,
)
from .client import (
    MemoryClient as MemoryClient,
)
from .models import (
    Command as Command,
)
from .models import (
    Configure as Configure,
)
from .models import (
    Forget as Forget,
)
from .models import (
    Refresh as Refresh,
)
from .models import (
    Remember as Remember,
)
from .models import (
    parse_command as parse_command,
)
from .views import (
    ConversationSummary as ConversationSummary,
)
from .views import (
    ConversationView as ConversationView,
)
from .views import (
    LayoutView as LayoutView,
)
from .views import (
    visible_to as visible_to,
)
