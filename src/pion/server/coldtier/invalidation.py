"""Hearing other fronts' drops and re-registrations: one pub/sub subscription per front.

Why pub/sub and not a generation check on every warm LOOKUP: a check costs a cluster round trip
on every hit, and a hot prefix's index lives on one shard, so every request of every front would
meet on one machine. An invalidation costs one PUBLISH per DROP or registration instead, and a
warm hit stays free of the cluster. Pub/sub is at-most-once, so the subscriber reports every
(re)subscription and every lost connection: while it is not subscribed, or for a namespace held
since before the last resubscription, the bridge checks the generation on LOOKUP instead
(``Freshness``; docs/scale-out.md, "Consistency").

The listener is a daemon thread with its own connection (a subscribed connection can do nothing
else); it hands every event to the event loop with ``call_soon_threadsafe`` and touches no state.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pion.server.coldtier.layout import CHANNEL, parse_invalidation
from pion.server.coldtier.tier import make_client
from pion.server.coldtier.url import ColdTierUrl

log = logging.getLogger("pion.server.coldtier")

POLL_S = 0.5  # how long one get_message waits (bounds how long stop() waits for the thread)
RETRY_S = 0.5  # after a lost subscription


def subscriber_connection(client: Any, url: ColdTierUrl) -> Any:
    """A plain redis-py client on one node: classic PUBLISH reaches every node of a cluster."""
    if not url.cluster:
        return client
    return client.get_redis_connection(client.get_random_node())


class Subscriber:
    """The listener thread.

    Args:
        url: the cold tier.
        loop: the front's event loop; the callbacks run there.
        on_message: ``(front, gen or None, ns)`` for each invalidation heard.
        on_subscribed: ``(True)`` after each (re)subscription, ``(False)`` when it was lost.
    """

    def __init__(self, url: ColdTierUrl, loop: asyncio.AbstractEventLoop,
                 on_message: Callable[[str, str | None, str], None],
                 on_subscribed: Callable[[bool], None]) -> None:
        self.url = url
        self.loop = loop
        self.on_message = on_message
        self.on_subscribed = on_subscribed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pion-cold-subscribe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * POLL_S)

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop closed under us: the front is shutting down
            self._stop.set()

    def _run(self) -> None:
        last_log = 0.0
        while not self._stop.is_set():
            client: Any = None
            pubsub = None
            try:
                client = make_client(self.url)
                pubsub = subscriber_connection(client, self.url).pubsub()
                pubsub.subscribe(CHANNEL)
                self._listen(pubsub)
            except Exception as exc:  # a dead node or cluster: report, wait, subscribe again
                self._post(self.on_subscribed, False)
                now = time.monotonic()
                if now - last_log >= 5.0:
                    last_log = now
                    log.warning("cold tier %s: invalidation subscription lost: %s: %s "
                                "(warm hits check the cold index until it is back)",
                                self.url.text(), type(exc).__name__, exc)
                self._stop.wait(RETRY_S)
            finally:
                for closable in (pubsub, client):
                    if closable is not None:
                        try:
                            closable.close()
                        except Exception:  # closing a dead connection may fail; nothing to save
                            pass

    def _listen(self, pubsub: Any) -> None:
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=POLL_S)
            if message is None:
                continue
            kind = message.get("type")
            if kind == "subscribe":  # also after a silent reconnect inside redis-py
                self._post(self.on_subscribed, True)
            elif kind == "message":
                parsed = parse_invalidation(message["data"])
                if parsed is not None:
                    self._post(self.on_message, *parsed)
