"""``pion up`` as a test runs it: the whole stack as one child process, its merged log read on a
thread, up when the ready line appears, and Ctrl-C (SIGINT) to stop it.

Two tests start the stack (``test_pion_up.py``, ``test_readme_examples.py``); the start, the wait
and the clean-up are the same for both and easy to get subtly wrong (a reader thread left
blocked, a stack left running after a failed assertion), so they live here once.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

READY_LINE = "Ctrl-C stops everything"


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)


@contextmanager
def running_pion_up(data_dir: Path, pion_port: int, llm_port: int, serve_port: int,
                    timeout_s: float = 300.0) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start ``pion up`` on the given ports (one pion-llm thread), wait for its ready line and
    yield the process with the log so far. On exit a stack still running gets SIGINT, then a
    kill if it has not stopped within a minute."""
    cmd = [sys.executable, "-m", "pion.cli", "up", "--dir", str(data_dir), "--pion-port", str(pion_port),
           "--llm-port", str(llm_port), "--port", str(serve_port), "--llm-arg=--threads=1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + timeout_s
        while not any(READY_LINE in line for line in seen):
            assert time.monotonic() < deadline, "".join(seen)
            assert proc.poll() is None, "".join(seen)
            try:
                seen.append(lines.get(timeout=1.0))
            except queue.Empty:
                continue
        yield proc, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        reader.join(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
