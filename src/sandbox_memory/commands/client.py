"""The client a user, a CLI verb, an MCP tool or the agent's own tools go through (:class:`MemoryClient`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from .applying import ClientCommands
from .reading import ClientReads


class MemoryClient(ClientReads, ClientCommands):
    """Read and change memory in a workspace folder or a live sandbox session.

    >>> client = MemoryClient("/path/to/workspace")
    >>> view = await client.view()                       # layout memory (create() starts it)
    >>> await client.apply(Remember(key="budget", content="...", kind="fact"),
    ...                    expected=view.version)

    With ``store=`` (a :class:`~sandbox_memory.stores.PostgresStore`) the client works on the
    shared store: views are read from it and commands are written to it, conditional on the
    version given; ``workspace`` is then only a local working copy (a temporary folder when
    omitted), so no sandbox is needed.

    With ``person=`` the client acts for that person: another person's private entries do not
    exist for it (views leave them out, a ``Forget`` of one finds no entry, a ``Remember`` of
    its key is refused, search and the log show nothing of them). The agent's own tools act
    for the run's person (:meth:`for_session`). Without it the client is the host's: it sees
    and changes every entry.
    """
