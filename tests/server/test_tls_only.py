"""A TLS-only pion-server: ``--port 0`` with ``--tls-port`` opens no plain listener (Redis's
meaning of ``port 0``), checked on the real process's listening sockets; TLS clients are served;
``--port 0`` without TLS still picks a free port; ``-w N`` refuses TLS-only with exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from support.procs import free_port
from support.tls_certs import Pki, make_test_pki, openssl_available

pytestmark = pytest.mark.skipif(not openssl_available(), reason="needs the openssl CLI to make a test CA")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


def tls_client(pki: Pki, port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(pki.ca_cert),
                       ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key), socket_timeout=10)


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on: its socket inodes matched in /proc/net/tcp{,6}."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.fixture(scope="module")
def tls_only_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    tls_port, lane_port = free_port(), free_port()
    data_dir = tmp_path_factory.mktemp("tls-only")
    log_path = data_dir / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", "0", "--dir", str(data_dir),
                                 *pki.server_args(tls_port), "--tls-binary-port", str(lane_port)],
                                stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    try:
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                with tls_client(pki, tls_port) as r:
                    if r.ping():
                        break
            except redis.RedisError:
                assert time.monotonic() < deadline, "the TLS-only server did not answer PING in 60 s"
                time.sleep(0.1)
        yield proc, tls_port, lane_port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_port_0_with_a_tls_port_listens_only_on_the_tls_ports(
        tls_only_server: tuple[subprocess.Popen[bytes], int, int]) -> None:
    proc, tls_port, lane_port = tls_only_server
    assert listening_ports(proc.pid) == {tls_port, lane_port}


def test_a_tls_only_server_serves_tls_clients_and_reports_no_plain_port(
        tls_only_server: tuple[subprocess.Popen[bytes], int, int], pki: Pki) -> None:
    _, tls_port, lane_port = tls_only_server
    with tls_client(pki, tls_port) as r:
        assert r.set("secret", b"over tls") is True
        assert r.get("secret") == b"over tls"
        info = r.info("server")
    assert (info["tcp_port"], info["binary_port"], info["tls_binary_port"]) == (0, 0, lane_port)


def test_a_plain_connection_to_the_tls_port_gets_no_reply(
        tls_only_server: tuple[subprocess.Popen[bytes], int, int]) -> None:
    _, tls_port, _ = tls_only_server
    with redis.Redis(host="127.0.0.1", port=tls_port, socket_timeout=5) as plain, \
            pytest.raises(redis.ConnectionError):
        plain.ping()


def test_port_0_without_tls_still_picks_a_free_port(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "pion.server", "--port", "0", "--binary-port", "0",
                             "--dir", str(tmp_path / "d")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        ports: set[int] = set()
        while not ports and time.monotonic() < deadline:
            time.sleep(0.1)
            ports = listening_ports(proc.pid)
        assert len(ports) == 1
        with redis.Redis(port=ports.pop(), socket_timeout=10) as r:
            assert r.ping() is True
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_workers_refuse_a_tls_only_server_with_exit_2(tmp_path: Path, pki: Pki) -> None:
    done = subprocess.run([sys.executable, "-m", "pion.server", "-w", "2", "--port", "0", "--dir", str(tmp_path),
                           *pki.server_args(free_port())], capture_output=True, text=True, timeout=60)
    assert (done.returncode, "-w N needs a plain --port" in done.stderr) == (2, True), done.stderr
