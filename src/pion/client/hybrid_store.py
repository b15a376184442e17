"""What the transformers and MLX hybrid-prefix transports share, with no runtime imported.

``LayerKind`` names what one cache layer holds (its letter goes into the namespace's layout
string) and ``finish_store`` sends a hybrid prefix's queued writes (states, register, K/V rows) and
accounts for them: one outcome rule for both runtimes (``pion.client.hybrid_prefix``,
``pion.client.runtimes.mlx_hybrid``).
"""

from __future__ import annotations

import enum
import logging
import time
from typing import TYPE_CHECKING, Any

import redis

from pion.common.ids import Namespace

if TYPE_CHECKING:
    from pion.client.connection import PionPipeline
    from pion.client.prefix_transport import PrefixTransport
    from pion.client.prompt_cache import PionPromptCache

logger = logging.getLogger("pion.client.hybrid_prefix")


class LayerKind(enum.Enum):
    """What one cache layer holds; the value is its letter in the namespace's layout string."""

    ATTENTION = "A"
    RECURRENT = "R"
    BOTH = "B"
    NONE = "-"


def finish_store(pc: PionPromptCache, ns: Namespace | str, pipe: PionPipeline, t0: float, nbytes: int,
                 register_at: int) -> bool:
    """Send the queued writes; count them, or warn and count a failure (the prefix stays local).
    ``register_at`` is the index of the register's reply: False there is +DEFERRED."""
    try:
        replies = pipe.execute(raise_on_error=False)
    except redis.RedisError as exc:
        replies = [exc]
    if len(replies) > register_at and replies[register_at] is False:
        try:  # deferred: the state stored ahead of the register is of no use on its own
            if pc.client is not None:
                pc.client.ssm_prefix_drop(ns)
        except redis.RedisError as exc:
            logger.warning("dropping the state of deferred prefix %s failed: %s", ns, exc)
        pc._stats.deferred += 1
        return False
    errors = [r for r in replies if isinstance(r, Exception)]
    return account_store(pc, ns, errors, nbytes, t0, what="hybrid prefix")


def account_store(pc: PionPromptCache, ns: Namespace | str, errors: list[Exception], nbytes: int,
                  t0: float, what: str = "prefix") -> bool:
    """The one outcome rule of a prefix store (plain or hybrid, either runtime): count the bytes and
    time, or warn and count a failure — the prefix then stays local."""
    if errors:
        pc._stats.store_failures += 1
        logger.warning("storing %s %s on pion-server failed (%d errors, first: %s); it stays local",
                       what, ns, len(errors), errors[0])
        return False
    pc._stats.store_ms_total += (time.perf_counter() - t0) * 1e3
    pc._stats.bytes_stored += nbytes
    return True


def fetch_hybrid(transport: PrefixTransport, ns: Namespace | str, n_tokens: int, n_attention: int,
                 n_layers: int) -> list[Any]:
    """One pipelined round trip for a hybrid prefix: the attention layers' K/V rows (when there
    are any) and every layer's state blob, following a ``-w N`` redirect once."""
    for attempt in (0, 1):
        pipe = transport.client.pipeline()
        if n_attention:
            transport.queue_fetch(pipe, ns, n_tokens)
        pipe.ssm_prefix_mfetch(ns, 0, n_layers)
        try:
            replies: list[Any] = pipe.execute()
            return replies
        except redis.ResponseError as exc:  # -w N: the prefix lives on another worker, once more there
            if attempt or not transport.client.follow_redirect(exc):
                raise
    raise AssertionError("unreachable: the second attempt returns or raises")
