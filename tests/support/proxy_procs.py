"""Start real pion-serve processes on free ports and always stop them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai

from support.procs import ServerProcess, free_port


@dataclass
class ProxyProcess:
    """A running ``pion-serve`` (python -m pion.proxy.main)."""

    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def openai(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="sk-test-client", max_retries=0, timeout=60)

    def stats(self) -> dict:
        return httpx.get(self.url + "/v1/stats", timeout=30).json()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def child_env(changes: dict[str, str | None] | None) -> dict[str, str]:
    """The test process's environment with ``changes`` applied (None removes a variable)."""
    out = dict(os.environ)
    for key, value in (changes or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def start_proxy(log_dir: Path, *args: str, env: dict[str, str | None] | None = None,
                wait_s: float = 30.0) -> ProxyProcess:
    """Start pion-serve with ``args`` and wait until /health answers. ``env`` adds to the
    test process's environment; a None value removes that variable."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"pion-serve-{port}.log"
    log_file = open(log_path, "ab")  # handed to the child
    proc = subprocess.Popen([sys.executable, "-m", "pion.proxy.main", "--port", str(port), *args],
                            stdout=log_file, stderr=subprocess.STDOUT, env=child_env(env))
    log_file.close()
    proxy = ProxyProcess(port, proc, log_path)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pion-serve exited with {proc.returncode}:\n{proxy.log()}")
        try:
            if httpx.get(proxy.url + "/health", timeout=1).status_code == 200:
                return proxy
        except httpx.HTTPError:
            time.sleep(0.05)
    proxy.stop()
    raise RuntimeError(f"pion-serve did not answer /health within {wait_s}s:\n{proxy.log()}")


def pion_args(server: ServerProcess) -> list[str]:
    return ["--pion-host", "127.0.0.1", "--pion-port", str(server.port)]


def wait_for_embedder(proxy: ProxyProcess, timeout_s: float = 60.0) -> None:
    """Block until the proxy settled its embed backend (the server's model is loaded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proxy.stats()["embedder"]["backend"] == "pion":
            return
        time.sleep(0.1)
    raise RuntimeError("pion-serve never settled its embedder")
