"""Start real Pion processes on free loopback ports and always stop them."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis


_STARTED: list[subprocess.Popen[bytes]] = []  # every child, so none outlives the test run


@atexit.register
def _kill_leftovers() -> None:
    """Last line of defence: a test that failed before its ``stop()`` leaves no server behind."""
    for proc in _STARTED:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """A running ``pion-server`` child process."""

    port: int
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    password: str | None = None
    extra_args: list[str] = field(default_factory=list)

    def client(self, protocol: int = 2, **kwargs: object) -> redis.Redis:
        """A redis-py client (hiredis parser when installed) for this server."""
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password,
                           protocol=protocol, **kwargs)  # type: ignore[arg-type]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int | None:
        """Send ``sig`` and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        return self.proc.returncode

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


def start_server(data_dir: Path, *args: str, port: int | None = None, password: str | None = None,
                 env: dict[str, str] | None = None, wait_s: float = 30.0,
                 preexec_fn: Callable[[], None] | None = None) -> ServerProcess:
    """Start ``python -m pion.server`` and wait until it answers PING."""
    port = port or free_port()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / f"server-{port}.log"
    cmd = [sys.executable, "-m", "pion.server", "--port", str(port), "--dir", str(data_dir), *args]
    if password is not None:
        cmd += ["--requirepass", password]
    full_env = {**os.environ, **(env or {})}
    log_file = open(log_path, "ab")  # handed to the child, closed by the OS
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=full_env,
                            preexec_fn=preexec_fn)  # e.g. a resource limit for disk-full tests
    _STARTED[:] = [p for p in _STARTED if p.poll() is None] + [proc]
    log_file.close()
    server = ServerProcess(port=port, data_dir=data_dir, proc=proc, log_path=log_path,
                           password=password, extra_args=list(args))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pion-server exited with {proc.returncode}:\n{server.log()}")
        try:
            with server.client(socket_timeout=1.0) as conn:
                if conn.ping():
                    return server
        except redis.exceptions.AuthenticationError:
            return server
        except redis.exceptions.RedisError:
            time.sleep(0.05)
    server.stop(signal.SIGKILL)
    raise RuntimeError(f"pion-server did not answer PING within {wait_s}s:\n{server.log()}")
