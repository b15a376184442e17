"""pion-serve: an OpenAI-compatible proxy with a semantic (L1) cache kept in pion-server."""
