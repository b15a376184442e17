"""TLS on the RESP port and the binary lane against a real pion-server, with a CA made in the test
(openssl CLI): redis-py ``ssl=True`` / ``rediss://`` with a client certificate, each
``--tls-auth-clients`` mode, a stranger CA, a plain-text client on the TLS port, and bad options."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pion.common.binary_frames import CMD_AUTH, CMD_PING, STATUS_NOAUTH, STATUS_OK, encode_request, parse_reply_header
from support.procs import ServerProcess, free_port, start_server
from support.tls_certs import Pki, make_test_pki, openssl_available

pytestmark = pytest.mark.skipif(not openssl_available(), reason="needs the openssl CLI to make a test CA")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


def start_tls_server(data_dir: Path, pki: Pki, auth_clients: str = "yes", *args: str,
                     password: str | None = None) -> tuple[ServerProcess, int]:
    tls_port = free_port()
    server = start_server(data_dir, *pki.server_args(tls_port, auth_clients), "--binary-port", "0",
                          "--tls-binary-port", str(free_port()), *args, password=password)
    return server, tls_port


def tls_client(pki: Pki, port: int, with_cert: bool = True, stranger: bool = False,
               password: str | None = None) -> redis.Redis:
    cert, key = ((pki.stranger_cert, pki.stranger_key) if stranger else
                 (pki.client_cert, pki.client_key) if with_cert else (None, None))
    return redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=str(pki.ca_cert),
                       ssl_certfile=str(cert) if cert else None, ssl_keyfile=str(key) if key else None,
                       password=password, socket_timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[tuple[ServerProcess, int]]:
    proc, tls_port = start_tls_server(tmp_path_factory.mktemp("tls"), pki)
    try:
        yield proc, tls_port
    finally:
        proc.stop()


def test_redis_py_with_a_client_certificate_reads_what_the_plain_port_wrote(
        server: tuple[ServerProcess, int], pki: Pki) -> None:
    proc, tls_port = server
    payload = bytes(range(256)) * 4096  # 1 MiB: many TLS records
    with proc.client() as plain, tls_client(pki, tls_port) as secure:
        plain.set("written-plain", payload)
        assert secure.get("written-plain") == payload
        assert secure.set("written-tls", b"\x00\r\n") is True
        assert plain.get("written-tls") == b"\x00\r\n"


def test_a_rediss_url_connects_like_ssl_true(server: tuple[ServerProcess, int], pki: Pki) -> None:
    _, tls_port = server
    with redis.Redis.from_url(f"rediss://127.0.0.1:{tls_port}/0", ssl_ca_certs=str(pki.ca_cert),
                              ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key)) as r:
        assert r.ping() is True
        assert r.execute_command("ECHO", "over tls") == b"over tls"


def test_pipelined_commands_over_tls_answer_in_order(server: tuple[ServerProcess, int], pki: Pki) -> None:
    _, tls_port = server
    with tls_client(pki, tls_port) as r:
        pipe = r.pipeline(transaction=False)
        for i in range(500):
            pipe.set(f"p{i}", i)
            pipe.get(f"p{i}")
        replies = pipe.execute()
    assert replies[1::2] == [str(i).encode() for i in range(500)]


def test_a_client_without_a_certificate_fails_the_handshake_and_others_stay_served(
        server: tuple[ServerProcess, int], pki: Pki) -> None:
    proc, tls_port = server
    with tls_client(pki, tls_port, with_cert=False) as r, pytest.raises(redis.exceptions.ConnectionError):
        r.ping()
    with tls_client(pki, tls_port) as r:
        assert r.ping() is True
    with proc.client() as r:
        assert r.ping() is True


def test_a_certificate_from_another_ca_is_refused(server: tuple[ServerProcess, int], pki: Pki) -> None:
    _, tls_port = server
    with tls_client(pki, tls_port, stranger=True) as r, pytest.raises(redis.exceptions.ConnectionError):
        r.ping()


def test_plain_resp_bytes_on_the_tls_port_are_dropped_without_harm(
        server: tuple[ServerProcess, int], pki: Pki) -> None:
    proc, tls_port = server
    with socket.create_connection(("127.0.0.1", tls_port), timeout=10) as sock:
        sock.sendall(b"*1\r\n$4\r\nPING\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        assert b"PONG" not in data
    with tls_client(pki, tls_port) as r:
        assert r.ping() is True


def test_the_tls_binary_lane_answers_ping_with_a_client_certificate(
        server: tuple[ServerProcess, int], pki: Pki) -> None:
    proc, _ = server
    with proc.client() as r:
        lane_port = r.info("server")["tls_binary_port"]
    with socket.create_connection(("127.0.0.1", lane_port), timeout=10) as raw, \
            pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        assert _binary_call(sock, CMD_PING, []) == (STATUS_OK, b"PONG")


def test_the_tls_binary_lane_refuses_a_client_without_a_certificate(
        server: tuple[ServerProcess, int], pki: Pki) -> None:
    proc, _ = server
    with proc.client() as r:
        lane_port = r.info("server")["tls_binary_port"]
    with socket.create_connection(("127.0.0.1", lane_port), timeout=10) as raw:
        context = pki.client_context(with_cert=False)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                _binary_call(sock, CMD_PING, [])  # TLS 1.3: the refusal arrives with the first read


def test_config_get_reports_the_tls_options(server: tuple[ServerProcess, int], pki: Pki) -> None:
    proc, tls_port = server
    with proc.client() as r:
        assert r.config_get("tls-*") == {
            "tls-port": str(tls_port), "tls-auth-clients": "yes", "tls-cert-file": str(pki.server_cert),
            "tls-key-file": str(pki.server_key), "tls-ca-cert-file": str(pki.ca_cert)}


def test_optional_client_auth_takes_no_certificate_but_refuses_a_strange_one(tmp_path: Path, pki: Pki) -> None:
    proc, tls_port = start_tls_server(tmp_path / "d", pki, "optional")
    try:
        with tls_client(pki, tls_port, with_cert=False) as r:
            assert r.ping() is True
        with tls_client(pki, tls_port) as r:
            assert r.ping() is True
        with tls_client(pki, tls_port, stranger=True) as r, pytest.raises(redis.exceptions.ConnectionError):
            r.ping()
    finally:
        proc.stop()


def test_auth_clients_no_needs_no_ca_and_requirepass_still_applies(tmp_path: Path, pki: Pki) -> None:
    tls_port = free_port()
    args = ["--tls-port", str(tls_port), "--tls-cert-file", str(pki.server_cert), "--tls-key-file",
            str(pki.server_key), "--tls-auth-clients", "no", "--tls-binary-port", str(free_port())]
    proc = start_server(tmp_path / "d", *args, password="sesame")
    try:
        with tls_client(pki, tls_port, with_cert=False) as r, pytest.raises(redis.exceptions.AuthenticationError):
            r.ping()
        with tls_client(pki, tls_port, with_cert=False, password="sesame") as r:
            assert r.ping() is True
        with proc.client() as r:
            lane_port = r.info("server")["tls_binary_port"]
        with socket.create_connection(("127.0.0.1", lane_port), timeout=10) as raw, \
                pki.client_context(with_cert=False).wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            assert _binary_call(sock, CMD_PING, [])[0] == STATUS_NOAUTH
            assert _binary_call(sock, CMD_AUTH, [b"sesame"]) == (STATUS_OK, b"OK")
            assert _binary_call(sock, CMD_PING, []) == (STATUS_OK, b"PONG")
    finally:
        proc.stop()


@pytest.mark.parametrize(("extra", "message"), [
    (["--tls-port", "{port}"], "--tls-cert-file: required with --tls-port"),
    (["--tls-port", "{port}", "--tls-cert-file", "{cert}", "--tls-key-file", "{key}"],
     "--tls-ca-cert-file: required when --tls-auth-clients is yes"),
    (["--tls-port", "{port}", "--tls-cert-file", "{cert}", "--tls-key-file", "/nonexistent/k.pem"],
     "--tls-key-file: no such file '/nonexistent/k.pem'"),
    (["--tls-port", "{port}", "--tls-cert-file", "{cert}", "--tls-key-file", "{ca}", "--tls-auth-clients", "no"],
     "--tls-cert-file/--tls-key-file: cannot load"),
    (["--tls-auth-clients", "sometimes"], "--tls-auth-clients: must be one of yes, no, optional, got 'sometimes'"),
])
def test_bad_tls_options_exit_2_naming_the_option(tmp_path: Path, pki: Pki, extra: list[str], message: str) -> None:
    fields = {"port": str(free_port()), "cert": str(pki.server_cert), "key": str(pki.server_key),
              "ca": str(pki.ca_cert)}
    argv = [a.format(**fields) for a in extra]
    done = subprocess.run([sys.executable, "-m", "pion.server", "--port", str(free_port()), "--dir",
                           str(tmp_path), *argv], capture_output=True, text=True, timeout=60)
    assert (done.returncode, message in done.stderr) == (2, True), done.stderr


def _binary_call(sock: ssl.SSLSocket, command: int, fields: list[bytes]) -> tuple[int, bytes]:
    sock.sendall(b"".join(bytes(p) for p in encode_request(command, 1, fields)))
    status, _, n = parse_reply_header(_read(sock, 12))
    return status, _read(sock, n)


def _read(sock: ssl.SSLSocket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data
