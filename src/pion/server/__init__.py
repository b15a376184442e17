"""pion-server: a Redis-protocol server holding LLM K/V caches and proxy state."""
