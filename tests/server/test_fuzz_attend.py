"""Random, nearly-valid arguments for the ATTEND.PREFIX.* commands (shapes close to a stored
layer's, blobs of plausible sizes, NaN/Inf values): the server stays up, every refusal is an
-ERR/-COLDMISS with nothing changed, and no handler crashes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.procs import ServerProcess, start_server

COMMANDS = ["ATTEND.PREFIX.STORE", "ATTEND.PREFIX.LOOKUP", "ATTEND.PREFIX.QUERY", "ATTEND.PREFIX.QUERY_FUSED",
            "ATTEND.PREFIX.QUERY_SPARSE", "ATTEND.PREFIX.QUERY_SPARSE_AUTO",
            "ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", "KV.PREFIX.WARM"]
FLOATS = st.lists(st.sampled_from([0.0, 1.0, -2.5, float("nan"), float("inf"), 1e30]), min_size=0, max_size=40)
ARG = st.one_of(
    st.sampled_from([b"fa", b"fa2", b"fans", b"0", b"1", b"2", b"4", b"8", b"DTYPE", b"f16", b"f32", b""]),
    st.integers(-2, 70).map(lambda i: str(i).encode()),
    st.sampled_from([b"4294967296", b"99999999999999999999", b"nan", b"1.5"]),
    FLOATS.map(lambda xs: np.asarray(xs, dtype="<f4").tobytes()),
    st.lists(st.integers(0, 5), max_size=8).map(lambda xs: np.asarray(xs, dtype="<u4").tobytes()),
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path_factory.mktemp("fuzz-attend"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def conn(server: ServerProcess) -> Iterator[redis.Redis]:
    with server.client(socket_timeout=60) as client:
        yield client


def seed(conn: redis.Redis) -> None:
    k = np.arange(2 * 8 * 4, dtype="<f4") / 64
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("FLUSHALL")
    pipe.execute_command("ATTEND.PREFIX.STORE", "fa", 0, 2, 8, 4, k.tobytes(), k.tobytes())
    pipe.execute_command("KV.PREFIX.REGISTER", "fans", 8, "fp16", "LAYERS", 1)
    pipe.execute_command("V.STOREBATCH", "fans_pk", 0, 0, k.tobytes())
    pipe.execute_command("V.STOREBATCH", "fans_pv", 0, 0, k.tobytes())
    pipe.execute()


def state(conn: redis.Redis) -> list[object]:
    pipe = conn.pipeline(transaction=False)
    pipe.execute_command("KV.PREFIX.INFO")
    for sid in ("fa", "fa2", "fans"):
        for layer in (0, 1):
            pipe.execute_command("ATTEND.PREFIX.LOOKUP", sid, layer)
    return pipe.execute()


@settings(max_examples=250, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_attend_arguments_never_break_the_server_and_errors_change_nothing(
        data: st.DataObject, conn: redis.Redis, server: ServerProcess) -> None:
    name = data.draw(st.sampled_from(COMMANDS), label="command")
    args = data.draw(st.lists(ARG, min_size=2, max_size=14), label="args")
    seed(conn)
    before = state(conn)
    try:
        conn.execute_command(name, *args)
        rejected = False
    except redis.ResponseError as exc:
        rejected = True
        assert str(exc).split(" ")[0] not in ("internal",), str(exc)
    assert server.proc.poll() is None
    assert conn.ping() is True
    if rejected:
        assert state(conn) == before, f"{name} {args!r} was refused but changed state"


def test_attend_fuzzing_left_no_internal_errors_in_the_log(server: ServerProcess) -> None:
    assert "Traceback" not in server.log()
