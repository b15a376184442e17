"""Server-side semantic cache: an embedder run in a worker thread and a per-scope vector index.

The command family ``pion.server.commands.semantic`` (AI.EMBED, AI.SEMANTIC_CACHE) is the
only caller; pion-serve's L1 cache lives here so every proxy shares it.
"""
