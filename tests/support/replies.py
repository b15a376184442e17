"""Small redis-py helpers the wire tests share."""

from __future__ import annotations

import pytest
import redis


def err(r: redis.Redis, *args: object) -> str:
    """Run a command that must be refused; return the server's error text."""
    with pytest.raises(redis.ResponseError) as exc:
        r.execute_command(*args)
    return str(exc.value)


def stats(r: redis.Redis) -> dict[str, object]:
    """PION.STATS as a str-keyed dict, whether the connection speaks RESP2 or RESP3."""
    reply = r.execute_command("PION.STATS")
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
