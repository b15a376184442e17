"""``pion-server -w N``: the supervisor, the shared directory and per-command routing (docs/workers.md)."""
