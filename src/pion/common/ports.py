"""Default addresses of the four programs: one place, so a port is never spelled twice.

1974 is pion-server (the Redis-protocol KV server), 8322 pion-llm (the local OpenAI-compatible
LLM server), 8321 pion-serve (the OpenAI proxy in front of a backend). Every program binds to
loopback unless told otherwise.
"""

from __future__ import annotations

DEFAULT_HOST = "127.0.0.1"
PION_SERVER_PORT = 1974
PION_LLM_PORT = 8322
PION_SERVE_PORT = 8321
