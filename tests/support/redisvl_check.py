"""RedisVL driving an FT index end to end; run by tests/server/test_search_redisvl.py with the
throw-away venv's python (RedisVL is not a project dependency). Prints one line per step."""

import sys, numpy as np
from redisvl.index import SearchIndex
from redisvl.query import VectorQuery, FilterQuery
from redisvl.query.filter import Tag, Num
port = int(sys.argv[1])
schema = {
    "index": {"name": "rvl", "prefix": "rvl:", "storage_type": "hash"},
    "fields": [
        {"name": "content", "type": "text"},
        {"name": "genre", "type": "tag"},
        {"name": "year", "type": "numeric"},
        {"name": "embedding", "type": "vector",
         "attrs": {"dims": 4, "distance_metric": "cosine", "algorithm": "hnsw", "datatype": "float32"}},
    ],
}
index = SearchIndex.from_dict(schema, redis_url=f"redis://127.0.0.1:{port}")
index.create(overwrite=True)
data = [{"content": "red apple", "genre": "fruit", "year": 2001, "embedding": np.array([1, 0, 0, 0], dtype=np.float32).tobytes()},
        {"content": "green pear", "genre": "fruit", "year": 2010, "embedding": np.array([0, 1, 0, 0], dtype=np.float32).tobytes()},
        {"content": "oak tree", "genre": "plant", "year": 2020, "embedding": np.array([0, 0, 1, 0], dtype=np.float32).tobytes()}]
keys = index.load(data)
print("loaded", len(keys), "exists", index.exists())
q = VectorQuery(vector=[0.9, 0.1, 0, 0], vector_field_name="embedding", return_fields=["content", "year"], num_results=2)
print([(r["content"], round(float(r["vector_distance"]), 4)) for r in index.query(q)])
q = VectorQuery(vector=[0.9, 0.1, 0, 0], vector_field_name="embedding", return_fields=["content"], num_results=3,
                filter_expression=(Tag("genre") == "plant") | (Num("year") > 2005))
print([r["content"] for r in index.query(q)])
print([r["content"] for r in index.query(FilterQuery(filter_expression=Tag("genre") == "fruit", return_fields=["content"]))])
print(index.info()["num_docs"])
index.delete(drop=True)
print("listed after delete:", index.listall() if hasattr(index, "listall") else "n/a")
