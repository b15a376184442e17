"""No child outlives `pion up`, however it ends: SIGINT, SIGTERM, SIGHUP, SIGKILL, a closed stdout.

Each case stops `pion up` while pion-llm is still loading its model (pion-server ready, pion-llm
running), the moment a user is most likely to give up on it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support.proc_tree import alive, children_of
from support.procs import free_port

# Not `slow`: pion-llm is stopped while it is still importing, so each case takes a few seconds.
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and PR_SET_PDEATHSIG")

WAIT_S = 120.0


class Output:
    """Reads `pion up`'s stdout from a raw pipe, so the test can close its end like a dead `tee`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    return
                self.text += chunk.decode(errors="replace")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        os.close(self.fd)


def start_up(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Output, list[int]]:
    """`pion up --no-serve`, returned once pion-server is ready and pion-llm is running."""
    read_fd, write_fd = os.pipe()
    cmd = [sys.executable, "-m", "pion.cli", "up", "--no-serve", "--dir", str(tmp_path / "data"),
           "--pion-port", str(free_port()), "--llm-port", str(free_port()), "--llm-arg=--threads=1"]
    proc = subprocess.Popen(cmd, stdout=write_fd, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    os.close(write_fd)
    out = Output(read_fd)
    deadline = time.monotonic() + WAIT_S
    children: list[int] = []
    while "pion-server ready" not in out.text or len(children) < 2:
        assert time.monotonic() < deadline, out.text
        assert proc.poll() is None, out.text
        time.sleep(0.1)
        children = children_of(proc.pid)
    return proc, out, children


def survivors(children: list[int], wait_s: float = WAIT_S) -> list[int]:
    deadline = time.monotonic() + wait_s
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in children if alive(pid)]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_pion_up_stops_every_child_and_exits_0(tmp_path: Path, sig: signal.Signals) -> None:
    proc, out, children = start_up(tmp_path)
    try:
        proc.send_signal(sig)
        assert proc.wait(timeout=WAIT_S) == 0
        assert survivors(children) == []
        assert "pion up     | stopped" in out.text
    finally:
        proc.kill()
        proc.wait(timeout=30)
        out.close()
        kill_all(children)


def test_sigkill_of_pion_up_takes_the_children_down_through_the_kernel(tmp_path: Path) -> None:
    proc, out, children = start_up(tmp_path)
    try:
        proc.kill()  # no cleanup code runs: only PR_SET_PDEATHSIG can stop the children
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert survivors(children) == []
    finally:
        out.close()
        kill_all(children)


def test_a_closed_stdout_stops_pion_up_and_every_child(tmp_path: Path) -> None:
    proc, out, children = start_up(tmp_path)
    try:
        out.close()  # the reader of `pion up | tee log` went away
        assert proc.wait(timeout=WAIT_S) == 0
        assert survivors(children) == []
    finally:
        proc.kill()
        proc.wait(timeout=30)
        kill_all(children)
