"""The tenant enforcement matrix, generated from the command table: every command x {no auth,
wrong password, tenant A on A's data, tenant A on B's data, admin} -> the expected outcome, and
nothing changed where the call was refused.

It runs twice: against the single-process server, and against ``-w 2`` through worker 1's own
address, where the keyspace commands are forwarded to worker 0 and the listings fanned out — as
the caller's user (workers/runtime.py ``link_auth``), so every outcome must be the same.

Every command of the table must have a sample call in ``SAMPLES`` (the test fails otherwise), so
a new command cannot skip the matrix; the expected outcome comes from the command's declared
``Access`` (commands/access.py) and its flags.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import hiredis
import pytest
import redis

from pion.server.commands.access import ACCESS, Access
from pion.server.commands.table import build_table
from pion.server.resp.framing import MAX_UNAUTH_MULTIBULK_LEN
from support.procs import ServerProcess, start_server
from support.workers import start_workers

ADMIN_PASSWORD = "adm1n"
TENANTS = {"alice": ("pa", "a|"), "bob": ("pb", "b|")}
ROW = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)  # one kv_dim=4 f32 row
VEC = struct.pack("<4f", 1.0, 0.0, 0.0, 0.0)
HASH = struct.pack("<Q", 42)
Q = struct.pack("<4f", 0.5, 0.5, 0.5, 0.5)  # H=1, M=1, D=4
TABLE = build_table()
SPECS = TABLE.specs

Sample = Callable[[str], tuple[Any, ...]]
# One call per command, on the data of the tenant whose prefix is ``p``.
SAMPLES: dict[str, Sample] = {
    "PING": lambda p: (), "ECHO": lambda p: ("x",), "HELLO": lambda p: ("2",),
    "AUTH": lambda p: ("nobody", "nopass"), "SELECT": lambda p: ("0",), "QUIT": lambda p: (),
    "CLIENT": lambda p: ("ID",), "COMMAND": lambda p: ("COUNT",), "INFO": lambda p: ("server",),
    "CONFIG": lambda p: ("GET", "maxmemory"), "FLUSHALL": lambda p: (), "ACL": lambda p: ("WHOAMI",),
    "GET": lambda p: (p + "str",), "SET": lambda p: (p + "str", "v2"),
    "MGET": lambda p: (p + "str", p + "h"), "MSET": lambda p: (p + "str", "x", p + "new", "y"),
    "EXISTS": lambda p: (p + "str",), "DEL": lambda p: (p + "str", p + "h"), "UNLINK": lambda p: (p + "str",),
    "EXPIRE": lambda p: (p + "str", "100"), "PEXPIRE": lambda p: (p + "str", "100000"),
    "TTL": lambda p: (p + "str",), "PTTL": lambda p: (p + "str",), "KEYS": lambda p: ("*",),
    "SCAN": lambda p: ("0", "COUNT", "100"), "DBSIZE": lambda p: (),
    "HSET": lambda p: (p + "h", "f2", "v"), "HMSET": lambda p: (p + "h", "f2", "v"),
    "HSETNX": lambda p: (p + "h", "f3", "v"), "HGET": lambda p: (p + "h", "f"),
    "HMGET": lambda p: (p + "h", "f"), "HGETALL": lambda p: (p + "h",), "HDEL": lambda p: (p + "h", "f"),
    "HLEN": lambda p: (p + "h",), "HEXISTS": lambda p: (p + "h", "f"), "HKEYS": lambda p: (p + "h",),
    "HVALS": lambda p: (p + "h",), "HSTRLEN": lambda p: (p + "h", "f"),
    "HINCRBY": lambda p: (p + "h", "n", "1"), "TYPE": lambda p: (p + "h",),
    "PION.STATS": lambda p: (), "PION.METRICS": lambda p: (),
    "V.CREATE": lambda p: (p + "sess2", "4"), "V.STOREBATCH": lambda p: (p + "sess", "0", "1", ROW),
    "V.FETCH": lambda p: (p + "sess", "0", "RANGE", "0", "1"),
    "V.MFETCH": lambda p: (p + "sess", "0", "0", "RANGE", "0", "1"), "V.INFO": lambda p: (p + "sess",),
    "V.DROP": lambda p: (p + "sess",), "V.LIST": lambda p: (),
    "KV.PREFIX.REGISTER": lambda p: (p + "ns2", "4", "fp16"),
    "KV.PREFIX.REGISTER.SCHEMA": lambda p: (p + "ns3", "4", "1", "fp16", "fp16"),
    "KV.PREFIX.LOOKUP": lambda p: (p + "ns",), "KV.PREFIX.DROP": lambda p: (p + "ns",),
    "KV.PREFIX.BLOCKS": lambda p: (p + "ns",), "KV.PREFIX.MEMBERSHIP": lambda p: (p + "ns", "1", HASH),
    "KV.PREFIX.INFO": lambda p: (),
    "AI.EMBED": lambda p: (" ",),  # refused by the handler before any model loads
    "AI.SEMANTIC_CACHE": lambda p: ("GET", p + "cache", "s", "q", "VECTOR", VEC),
    "SLOWLOG": lambda p: ("LEN",), "KV.PREFIX.SAVE": lambda p: (), "SAVE": lambda p: (),
    "BGSAVE": lambda p: (), "LASTSAVE": lambda p: (),
    "FT.CREATE": lambda p: (p + "idx", "ON", "HASH", "PREFIX", "1", p, "SCHEMA", "f", "TEXT"),
    "FT.DROPINDEX": lambda p: (p + "idx",), "FT.INFO": lambda p: (p + "idx",), "FT._LIST": lambda p: (),
    "FT.SEARCH": lambda p: (p + "idx", "*"), "FT.HYBRID": lambda p: (p + "idx", "SEARCH", "*", "VSIM"),
    "MODULE": lambda p: ("LIST",),
    "SSM.PREFIX.STORE": lambda p: (p + "ns", "1", b"state"), "SSM.PREFIX.FETCH": lambda p: (p + "ns", "0"),
    "SSM.PREFIX.MFETCH": lambda p: (p + "ns", "0", "1"), "SSM.PREFIX.DROP": lambda p: (p + "ns",),
    # ATTEND: a missing slot is refused by the handler; what matters here is who gets that far.
    "ATTEND.PREFIX.STORE": lambda p: (p + "att", "0", "1", "1", "4", ROW, ROW),
    "ATTEND.PREFIX.LOOKUP": lambda p: (p + "att", "0"),
    "ATTEND.PREFIX.QUERY": lambda p: (p + "att", "0", "1", "4", "0", Q),
    "ATTEND.PREFIX.QUERY_FUSED": lambda p: (p + "att", "0", "1", "4", "1", "1", Q, ROW, ROW, "x"),
    "ATTEND.PREFIX.QUERY_SPARSE": lambda p: (p + "att", "0", "1", "4", "1", Q, "x", "x"),
    "ATTEND.PREFIX.QUERY_SPARSE_AUTO": lambda p: (p + "att", "0", "1", "4", "1", "1", "1", Q, "x"),
    "ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED": lambda p: (p + "att", "0", "1", "4", "1", "1", "1", "1", Q,
                                                        ROW, ROW, "x"),
    "KV.PREFIX.WARM": lambda p: (p + "ns", "1", "4", p + "att2"),
    "PION.WORKER": lambda p: (),
    # strings.py and databases.py (issue 21)
    "GETDEL": lambda p: (p + "str",), "GETEX": lambda p: (p + "str", "EX", "100"),
    "SETEX": lambda p: (p + "str", "100", "v"), "PSETEX": lambda p: (p + "str", "100000", "v"),
    "SETNX": lambda p: (p + "new", "v"), "MSETNX": lambda p: (p + "n1", "x", p + "n2", "y"),
    "RENAME": lambda p: (p + "str", p + "moved"), "RENAMENX": lambda p: (p + "str", p + "moved"),
    "GETRANGE": lambda p: (p + "str", "0", "-1"), "SUBSTR": lambda p: (p + "str", "0", "-1"),
    "SETRANGE": lambda p: (p + "str", "1", "x"), "APPEND": lambda p: (p + "str", "x"),
    "STRLEN": lambda p: (p + "str",), "INCR": lambda p: (p + "n",), "DECR": lambda p: (p + "n",),
    "INCRBY": lambda p: (p + "n", "2"), "DECRBY": lambda p: (p + "n", "2"),
    "INCRBYFLOAT": lambda p: (p + "n", "1.5"), "SETBIT": lambda p: (p + "bits", "7", "1"),
    "GETBIT": lambda p: (p + "str", "1"), "BITCOUNT": lambda p: (p + "str",),
    "LCS": lambda p: (p + "str", p + "new"), "FLUSHDB": lambda p: (), "SWAPDB": lambda p: ("0", "1"),
    "MOVE": lambda p: (p + "str", "1"), "COPY": lambda p: (p + "str", p + "copy"),
}


def seed(p: str) -> list[tuple[Any, ...]]:
    """The data a tenant with prefix ``p`` owns before every matrix row."""
    return [("SET", p + "str", "v"), ("HSET", p + "h", "f", "v"), ("V.CREATE", p + "sess", "4"),
            ("V.STOREBATCH", p + "sess", "0", "0", ROW),
            ("KV.PREFIX.REGISTER", p + "ns", "4", "fp16", "BLOCKS", "4", "1", HASH),
            ("V.STOREBATCH", p + "ns_pk", "0", "0", ROW), ("V.STOREBATCH", p + "ns_pv", "0", "0", ROW),
            ("SSM.PREFIX.STORE", p + "ns", "0", b"state0"),
            ("AI.SEMANTIC_CACHE", "SET", p + "cache", "s", "q", "answer", "VECTOR", VEC)]


class Raw:
    """One RESP connection that returns every reply, errors included, as the server wrote it."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.reader = hiredis.Reader()

    def call(self, *args: Any) -> Any:
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self.sock.sendall(b"".join(parts))
        while (reply := self.reader.gets()) is False:
            chunk = self.sock.recv(65536)
            if not chunk:
                return ConnectionError("closed")
            self.reader.feed(chunk)
        return reply

    def close(self) -> None:
        self.sock.close()


def outcome(reply: Any) -> str:
    """NOAUTH / NOPERM / WRONGPASS for a refusal; PROTOCOL for a request too long to read before
    AUTH (Redis's ``unauthenticated multibulk length``); ``ran`` for any other reply."""
    if isinstance(reply, hiredis.ReplyError):
        text = str(reply)
        code = text.split(" ", 1)[0]
        if code in ("NOAUTH", "NOPERM", "WRONGPASS"):
            return code
        if text == "ERR Protocol error: unauthenticated multibulk length":
            return "PROTOCOL"
    return "ran"


def expected(name: str, caller: str) -> str:
    """What the declared access spec and flags promise ``caller`` for ``name``'s sample."""
    spec = SPECS[name]
    access = spec.access
    assert access is not None
    if caller in ("no auth", "wrong password"):
        if 1 + len(SAMPLES[name]("a|")) > MAX_UNAUTH_MULTIBULK_LEN:
            return "PROTOCOL"
        if "noauth" not in spec.flags:
            return "NOAUTH"
        return {"AUTH": "WRONGPASS", "HELLO": "NOAUTH"}.get(name, "ran")
    if caller == "admin" or access.kind in ("none", "listing"):
        if name == "AUTH":
            return "WRONGPASS"
        return "ran"
    if access.kind == "admin":
        return "NOPERM"
    return "ran" if caller == "A on A" else "NOPERM"


@dataclass
class Deployment:
    """A running server and the port every caller of the matrix (the admin too) connects to."""

    proc: ServerProcess
    port: int


# The -w 2 run starts worker processes: a long workload (make test, not make test-fast).
@pytest.fixture(scope="module", params=["w1", pytest.param("w2 via worker 1", marks=pytest.mark.slow)])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tenant_args = [arg for name, (pw, prefix) in TENANTS.items() for arg in ("--tenant", f"{name}:{pw}:{prefix}")]
    data_dir = tmp_path_factory.mktemp("tenants")
    if request.param == "w1":
        proc = start_server(data_dir, *tenant_args, password=ADMIN_PASSWORD)
        port = proc.port
    else:
        group = start_workers(data_dir, 2, *tenant_args, password=ADMIN_PASSWORD)
        proc, port = group.server, group.ports[1]
    try:
        yield Deployment(proc, port)
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def admin(server: Deployment) -> Iterator[redis.Redis]:
    conn = redis.Redis(host="127.0.0.1", port=server.port, password=ADMIN_PASSWORD)
    try:
        yield conn
    finally:
        conn.close()


def reset(admin: redis.Redis) -> None:
    wait_for_bgsave(admin)
    pipe = admin.pipeline(transaction=False)
    pipe.execute_command("FLUSHALL")
    pipe.execute_command("FT.CREATE", "b|idx", "ON", "HASH", "PREFIX", "1", "b|", "SCHEMA", "f", "TEXT")
    for _, prefix in TENANTS.values():
        for command in seed(prefix):
            pipe.execute_command(*command)
    assert [str(r) for r in pipe.execute(raise_on_error=False) if isinstance(r, Exception)] == []


def wait_for_bgsave(admin: redis.Redis) -> None:
    deadline = time.monotonic() + 30
    while admin.info("persistence").get("bgsave_in_progress") and time.monotonic() < deadline:
        time.sleep(0.01)


def state_digest(admin: redis.Redis) -> list[Any]:
    """Everything a refused call must leave alone, read by the admin (fetch counters excluded)."""
    wait_for_bgsave(admin)
    keys = sorted(admin.keys("*"))
    pipe = admin.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
        pipe.pttl(key)
    pipe.execute_command("V.LIST")
    pipe.execute_command("FT._LIST")
    for _, prefix in TENANTS.values():
        pipe.execute_command("V.INFO", prefix + "sess")
        pipe.execute_command("KV.PREFIX.BLOCKS", prefix + "ns")
        pipe.execute_command("SSM.PREFIX.MFETCH", prefix + "ns", "0", "2")
        pipe.execute_command("AI.SEMANTIC_CACHE", "INFO", prefix + "cache")
    replies = pipe.execute(raise_on_error=False)
    values = [admin.get(k) if admin.type(k) == b"string" else admin.hgetall(k) for k in keys]
    return [keys, values, [r if not isinstance(r, Exception) else str(r) for r in replies]]


def open_as(port: int, caller: str) -> Raw:
    conn = Raw(port)
    if caller == "wrong password":
        assert outcome(conn.call("AUTH", "alice", "not-her-password")) == "WRONGPASS"
    elif caller in ("A on A", "A on B"):
        assert conn.call("AUTH", "alice", TENANTS["alice"][0]) == b"OK"
    elif caller == "admin":
        assert conn.call("AUTH", ADMIN_PASSWORD) == b"OK"
    return conn


CALLERS = ("no auth", "wrong password", "A on A", "A on B", "admin")


def test_every_command_has_a_sample_call_and_an_access_spec() -> None:
    assert sorted(set(SPECS) - set(SAMPLES)) == []
    assert sorted(set(SAMPLES) - set(SPECS)) == []
    assert sorted(name for name, spec in SPECS.items() if not isinstance(spec.access, Access)) == []
    assert sorted(set(ACCESS) - set(SPECS)) == []  # no row left behind by a removed command


@pytest.mark.parametrize("name", sorted(SPECS))
def test_command_answers_each_caller_as_its_access_spec_says(
        name: str, server: Deployment, admin: redis.Redis) -> None:
    got: dict[str, str] = {}
    for caller in CALLERS:
        reset(admin)
        before = state_digest(admin)
        conn = open_as(server.port, caller)
        try:
            prefix = TENANTS["bob"][1] if caller == "A on B" else TENANTS["alice"][1]
            got[caller] = outcome(conn.call(name, *SAMPLES[name](prefix)))
        finally:
            conn.close()
        if got[caller] in ("NOAUTH", "NOPERM", "PROTOCOL"):
            assert state_digest(admin) == before, f"{name} refused for {caller} but changed the data"
    assert got == {caller: expected(name, caller) for caller in CALLERS}


def test_commands_declared_open_to_tenants_name_no_data_in_their_sample() -> None:
    """A check independent of the declarations: a command declared ``none``/``listing`` must be
    callable without naming any tenant's data, so declaring GET (say) open would fail here."""
    named = sorted(name for name, spec in SPECS.items()
                   if spec.access is not None and spec.access.kind in ("none", "listing")
                   and SAMPLES[name]("a|") != SAMPLES[name]("b|"))
    assert named == []


def test_command_info_reports_the_declared_key_positions(server: Deployment, admin: redis.Redis) -> None:
    info = admin.execute_command("COMMAND", "INFO", "get", "mset", "ping", "kv.prefix.drop", "ai.semantic_cache")
    assert {name: (i["first_key_pos"], i["last_key_pos"], i["step_count"]) for name, i in info.items()} == {
        "get": (1, 1, 1), "mset": (1, -1, 2), "ping": (0, 0, 0), "kv.prefix.drop": (1, -1, 1),
        "ai.semantic_cache": (2, 2, 1)}
