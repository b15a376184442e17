"""Server-side state containers: V-store sessions, eviction, keyspace."""
