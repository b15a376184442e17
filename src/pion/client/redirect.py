"""Following ``-ERR <command> session lives on worker N <host:port>`` (``pion-server -w N``).

A V-store session stays in the worker that created it; a command that reaches another worker
is answered with the owner's address, like Redis Cluster's ``-MOVED``. Every Pion client
follows it the same way — ``PionClient.follow_redirect`` reconnects the client to that worker
(its connection pool is replaced, every other setting kept) — and retries the command once:
``PionStore`` (``pion.lmcache``) per command, ``PrefixTransport`` (so ``PionPromptCache`` and
pion-llm) per store or restore round trip. A second redirect in a row is returned as the error.

Example: ``parse_redirect("V.FETCH session lives on worker 1 127.0.0.1:2075")`` is
``Redirect(worker=1, host="127.0.0.1", port=2075)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_REDIRECT = re.compile(r"session lives on worker (\d+) (\S+):(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class Redirect:
    """Where the worker that owns a session listens."""

    worker: int
    host: str
    port: int


def parse_redirect(error: BaseException | str) -> Redirect | None:
    """The redirect in a server error (a ``redis.ResponseError`` or its text); None for other errors."""
    match = _REDIRECT.search(str(error))
    if match is None:
        return None
    host = match.group(2)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Redirect(int(match.group(1)), host, int(match.group(3)))
