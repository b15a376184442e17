"""FT.* search: index definitions, the query language, text (BM25) and vector (FLAT/HNSW)
indexes over the keyspace's hashes. Commands are in ``pion.server.commands.search``."""
