"""redis-cli (Debian redis-tools) against pion-server: one-shot, stdin, RESP3 and interactive."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import time

import pytest

from support.procs import ServerProcess

REDIS_CLI = shutil.which("redis-cli")
pytestmark = pytest.mark.skipif(REDIS_CLI is None, reason="redis-cli not installed (redis-tools)")


def cli(server: ServerProcess, *args: str, stdin: str | None = None) -> str:
    assert REDIS_CLI is not None
    done = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(server.port), *args],
                          input=stdin, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_redis_cli_one_shot_commands_print_like_redis(shared_pion_server: ServerProcess) -> None:
    assert cli(shared_pion_server, "PING") == "PONG\n"
    assert cli(shared_pion_server, "SET", "cli:k", "hello world") == "OK\n"
    assert cli(shared_pion_server, "GET", "cli:k") == "hello world\n"
    assert cli(shared_pion_server, "EXISTS", "cli:k", "cli:none") == "1\n"
    assert cli(shared_pion_server, "--no-raw", "GET", "cli:none") == "(nil)\n"
    assert "redis_version:" in cli(shared_pion_server, "INFO", "server")
    assert cli(shared_pion_server, "NOSUCH", "x").startswith(
        "ERR unknown command 'NOSUCH', with args beginning with: 'x'")


def test_redis_cli_reads_commands_from_stdin_and_speaks_resp3(shared_pion_server: ServerProcess) -> None:
    out = cli(shared_pion_server, stdin="SET cli:a 1\nINCRBY cli:a 2\nGET cli:a\nDEL cli:a\n")
    assert [line for line in out.splitlines() if line] == ["OK", "3", "3", "1"]
    assert cli(shared_pion_server, "-3", "--no-raw", "GET", "cli:missing") == "(nil)\n"
    hello = cli(shared_pion_server, "-3", "HELLO", "3")
    assert "proto" in hello


def test_redis_cli_interactive_session_shows_command_hints(shared_pion_server: ServerProcess) -> None:
    assert REDIS_CLI is not None
    leader, follower = pty.openpty()
    proc = subprocess.Popen([REDIS_CLI, "-h", "127.0.0.1", "-p", str(shared_pion_server.port)],
                            stdin=follower, stdout=follower, stderr=follower, close_fds=True,
                            env={**os.environ, "TERM": "dumb"})  # no cursor-position queries
    os.close(follower)
    try:
        output = b""

        def read_until(marker: bytes, timeout_s: float = 10.0) -> bytes:
            nonlocal output
            deadline = time.monotonic() + timeout_s
            while marker not in output and time.monotonic() < deadline:
                ready, _, _ = select.select([leader], [], [], 0.2)
                if ready:
                    output += os.read(leader, 4096)
            return output

        read_until(b"> ")
        os.write(leader, b"SET cli:tty yes\r")
        assert b"OK" in read_until(b"OK")
        os.write(leader, b"GET cli:tty\r")
        assert b'"yes"' in read_until(b'"yes"')
        os.write(leader, b"quit\r")
        proc.wait(timeout=10)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
