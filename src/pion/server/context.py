"""State a command handler sees: the server's shared state and the calling client's.

No process-global singletons: one ``ServerState`` per worker process, passed down.
Family-specific state lives in attributes of ``ServerState`` owned by that family
(``store`` for the V-store, ``keyspace``, ``stats``, ``persist``, ``semantic``...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pion.server.config import ServerConfig


@dataclass
class ClientState:
    """Per-connection state."""

    client_id: int
    addr: str = ""
    name: str = ""
    protocol: int = 2
    authenticated: bool = False
    lib_name: str = ""
    lib_ver: str = ""
    db: int = 0
    created_at: float = 0.0
    last_command: str = ""
    close_after_reply: bool = False  # set by QUIT: the connection closes once the reply is sent
    # (start, end) slices of the connection's unsent reply list holding write commands'
    # replies: turned into -MISCONF if the WAL batch they depend on cannot be written.
    write_marks: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class ServerState:
    """Everything shared by all connections of one worker.

    Families attach their own components in ``components`` (by name) or in typed
    attributes added here as they land; keep each component's code in its own module.
    """

    config: ServerConfig
    started_at: float
    components: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommandContext:
    """What a handler gets: the shared server state and the calling client's state."""

    server: ServerState
    client: ClientState
