"""AI.EMBED and AI.SEMANTIC_CACHE over the wire, redis-py as the client."""

from __future__ import annotations

import time

import numpy as np
import pytest
import redis

from support.procs import ServerProcess

pytestmark = pytest.mark.slow  # the server loads MiniLM for AI.EMBED


@pytest.fixture(scope="module")
def conn(shared_pion_server: ServerProcess) -> redis.Redis:
    return shared_pion_server.client()


def _cache(conn: redis.Redis, *args: object) -> object:
    return conn.execute_command("AI.SEMANTIC_CACHE", *args)


def _blob(vec: list[float]) -> bytes:
    return np.asarray(vec, dtype="<f4").tobytes()


def test_embed_returns_one_unit_384_dim_float32_blob_per_text(conn: redis.Redis) -> None:
    blobs = conn.execute_command("AI.EMBED", "How do I reset my password?", "How can I reset my password?", "Pizza")
    vecs = [np.frombuffer(b, dtype="<f4") for b in blobs]
    assert [len(b) for b in blobs] == [1536, 1536, 1536]
    assert [round(float(np.linalg.norm(v)), 4) for v in vecs] == [1.0, 1.0, 1.0]
    assert float(vecs[0] @ vecs[1]) > 0.95
    assert float(vecs[0] @ vecs[2]) < 0.3


def test_set_then_get_of_a_paraphrase_returns_response_similarity_id_meta(conn: redis.Redis) -> None:
    eid = _cache(conn, "SET", "t1", "scope", "How do I reset my password?", "Use 'Forgot password'.",
                 "META", '{"q": "How do I reset my password?"}')
    reply = _cache(conn, "GET", "t1", "scope", "How can I reset my password?")
    assert reply[0] == b"Use 'Forgot password'."
    assert float(reply[1]) > 0.95
    assert reply[2] == eid
    assert reply[3] == b'{"q": "How do I reset my password?"}'


def test_get_in_another_scope_or_below_threshold_is_nil(conn: redis.Redis) -> None:
    _cache(conn, "SET", "t2", "a", "What is the capital of France?", "Paris")
    assert _cache(conn, "GET", "t2", "b", "What is the capital of France?") is None
    assert _cache(conn, "GET", "t2", "a", "How do vaccines work?") is None
    assert _cache(conn, "GET", "t2", "a", "How do vaccines work?", "THRESHOLD", "-1")[0] == b"Paris"


def test_vector_option_stores_and_searches_client_vectors(conn: redis.Redis) -> None:
    _cache(conn, "SET", "t3", "s", "x", "east", "VECTOR", _blob([1, 0, 0]))
    _cache(conn, "SET", "t3", "s", "y", "north", "VECTOR", _blob([0, 2, 0]))
    reply = _cache(conn, "GET", "t3", "s", "q", "VECTOR", _blob([0.1, 1, 0]), "THRESHOLD", "0.9")
    assert (reply[0], reply[3]) == (b"north", None)
    with pytest.raises(redis.ResponseError) as info:
        _cache(conn, "GET", "t3", "s", "q", "VECTOR", _blob([1, 0]))
    assert str(info.value) == "vector has 2 dims but this scope holds 3-dim vectors"


def test_get_withvector_returns_the_query_vector_on_a_miss_and_on_a_hit(conn: redis.Redis) -> None:
    miss = _cache(conn, "GET", "wv", "s", "q", "VECTOR", _blob([3, 4]), "WITHVECTOR")
    assert miss[:4] == [None, None, None, None]
    assert np.frombuffer(miss[4], dtype="<f4").tolist() == [np.float32(0.6), np.float32(0.8)]
    eid = _cache(conn, "SET", "wv", "s", "q", "a", "VECTOR", miss[4])
    hit = _cache(conn, "GET", "wv", "s", "q", "WITHVECTOR", "VECTOR", _blob([3, 4]), "THRESHOLD", "0.99")
    assert (hit[0], hit[2], hit[4]) == (b"a", eid, miss[4])
    with pytest.raises(redis.ResponseError) as info:
        _cache(conn, "GET", "wv", "s", "q", "WITHVECTOR", "WITHVECTOR")
    assert str(info.value) == "option WITHVECTOR given twice"


def test_get_withbest_reports_the_best_similarity_on_a_miss(conn: redis.Redis) -> None:
    assert _cache(conn, "GET", "wb", "s", "q", "VECTOR", _blob([1, 0]), "WITHBEST") == [None, None, None, None]
    eid = _cache(conn, "SET", "wb", "s", "q", "a", "VECTOR", _blob([1, 0]))
    miss = _cache(conn, "GET", "wb", "s", "q", "VECTOR", _blob([3, 4]), "THRESHOLD", "0.9", "WITHBEST")
    assert miss == [None, b"0.6", None, None]
    hit = _cache(conn, "GET", "wb", "s", "q", "WITHBEST", "VECTOR", _blob([3, 4]), "THRESHOLD", "0.5")
    assert (hit[0], hit[1], hit[2]) == (b"a", b"0.6", eid)
    both = _cache(conn, "GET", "wb", "s", "q", "VECTOR", _blob([0, 1]), "WITHVECTOR", "WITHBEST")
    assert (both[:4], len(both[4])) == ([None, b"0.0", None, None], 8)
    with pytest.raises(redis.ResponseError) as info:
        _cache(conn, "GET", "wb", "s", "q", "WITHBEST", "WITHBEST")
    assert str(info.value) == "option WITHBEST given twice"


def test_ttl_expires_an_entry(conn: redis.Redis) -> None:
    vec = _blob([0, 0, 1])
    _cache(conn, "SET", "t4", "s", "Is parking free?", "Yes", "TTL", "0.5", "VECTOR", vec)
    assert _cache(conn, "GET", "t4", "s", "Is parking free?", "VECTOR", vec)[0] == b"Yes"
    time.sleep(0.6)
    assert _cache(conn, "GET", "t4", "s", "Is parking free?", "VECTOR", vec) is None


def test_del_flush_and_info(conn: redis.Redis) -> None:
    a = _cache(conn, "SET", "t5", "s", "first question", "1")
    _cache(conn, "SET", "t5", "s2", "second question", "2")
    info = conn.execute_command("AI.SEMANTIC_CACHE", "INFO", "t5")
    fields = dict(zip(info[::2], info[1::2], strict=True))
    assert (fields[b"entries"], fields[b"scopes"], fields[b"persisted"]) == (2, 2, 1)
    assert _cache(conn, "DEL", "t5", a, 12345) == 1
    assert _cache(conn, "FLUSH", "t5") == 1
    assert _cache(conn, "GET", "t5", "s2", "second question") is None


def test_get_outcomes_are_counted_in_pion_stats(conn: redis.Redis) -> None:
    def counts() -> tuple[int, int]:
        stats = conn.execute_command("PION.STATS")
        fields = dict(zip(stats[::2], stats[1::2], strict=True))
        return int(fields[b"semantic_hits"]), int(fields[b"semantic_misses"])

    _cache(conn, "SET", "t6", "s", "How long does shipping take?", "3 days")
    hits, misses = counts()
    _cache(conn, "GET", "t6", "s", "How long does shipping take?")
    _cache(conn, "GET", "t6", "s", "Who painted the Mona Lisa?")
    assert counts() == (hits + 1, misses + 1)


@pytest.mark.parametrize("args, message", [
    (["GET", "t7", "s", "q", "THRESHOLD", "high"], "value is not a valid float (THRESHOLD)"),
    (["GET", "t7", "s", "q", "THRESHOLD", "2"], "THRESHOLD must be between -1 and 1"),
    (["GET", "t7", "s", "q", "BOGUS", "1"], "unknown option 'BOGUS'"),
    (["GET", "t7", "s", "q", "THRESHOLD"], "option THRESHOLD needs a value"),
    (["SET", "t7", "s", "q", "r", "TTL", "0"], "TTL must be a positive number of seconds"),
    (["SET", "t7", "s", "q", "r", "TTL", "1", "TTL", "2"], "option TTL given twice"),
    (["SET", "t7", "s", "q", "r", "META", "{oops"], "META must be valid JSON"),
    (["SET", "t7", "s", "q", "r", "VECTOR", b"abc"], "VECTOR blob must be float32 little-endian (got 3 bytes)"),
    (["SET", "t7", "s", "q", "r", "VECTOR", np.zeros(4, "<f4").tobytes()], "VECTOR must not be all zeros"),
    (["SET", "t7", "s", "q", "r", "VECTOR", np.full(4, np.nan, "<f4").tobytes()], "VECTOR contains NaN or infinity"),
    (["SET", "t7", "s", "  ", "r"], "text must not be empty"),
    (["SET", "t7", "s", "q"], "wrong number of arguments for 'ai.semantic_cache|set' command"),
    (["DEL", "t7", "x1"], "value is not an integer or out of range (entry id)"),
    (["PUT", "t7"], "unknown AI.SEMANTIC_CACHE subcommand 'PUT' (try SET, GET, DEL, FLUSH, INFO)"),
])
def test_bad_input_is_refused_and_records_nothing(conn: redis.Redis, args: list, message: str) -> None:
    with pytest.raises(redis.ResponseError) as info:
        _cache(conn, *args)
    assert str(info.value) == message
    info_reply = _cache(conn, "INFO", "t7")
    assert dict(zip(info_reply[::2], info_reply[1::2], strict=True))[b"entries"] == 0


def test_embed_arity_is_checked(conn: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError) as info:
        conn.execute_command("AI.EMBED")
    assert str(info.value) == "wrong number of arguments for 'ai.embed' command"
