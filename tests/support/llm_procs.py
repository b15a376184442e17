"""Start real pion-llm processes (real SmolLM2) and always stop them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from openai import OpenAI

from support.procs import free_port

MODEL = "smollm2-135m"
# One torch thread: the test machine's cores are shared, and two contended threads are far slower than one.
BASE_ARGS = ("--threads", "1", "--log-level", "info")


@dataclass
class LlmProcess:
    """A running ``pion-llm`` child process."""

    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    _clients: list[OpenAI] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def openai(self) -> OpenAI:
        """One openai SDK client per process (closed by ``stop``, so no socket outlives the test)."""
        if not self._clients:
            self._clients.append(OpenAI(base_url=f"{self.url}/v1", api_key="unused", max_retries=0))
        return self._clients[0]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout_s: float = 20.0) -> int | None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout_s)
        return self.proc.returncode


def start_llm(log_dir: Path, *args: str, wait_s: float = 180.0) -> LlmProcess:
    """Start ``python -m pion.llm`` on a free port and wait until /health says the model is ready."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"pion-llm-{port}.log"
    cmd = [sys.executable, "-m", "pion.llm", "--port", str(port), *BASE_ARGS, *args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    llm = LlmProcess(port, proc, log_path)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pion-llm exited with {proc.returncode}:\n{llm.log()}")
        try:
            if httpx.get(f"{llm.url}/health", timeout=2.0).status_code == 200:
                return llm
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    llm.stop()
    raise RuntimeError(f"pion-llm was not ready within {wait_s}s:\n{llm.log()}")
