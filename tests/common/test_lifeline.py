"""PR_SET_PDEATHSIG through ``die_with_parent``: a SIGKILLed parent takes its child with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PARENT = """
import subprocess, sys, time
from pion.common.lifeline import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         preexec_fn=die_with_parent() if sys.argv[1] == "lifeline" else None)
print(child.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, not yet reaped by whoever adopted it) is dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def orphan_after_parent_sigkill(mode: str, wait_s: float) -> tuple[int, bool]:
    """Start a parent that starts a child, SIGKILL the parent; (child pid, child alive ``wait_s`` later)."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True,
                              env={**os.environ})
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
    finally:
        parent.kill()
        parent.wait(timeout=10)
        parent.stdout.close()  # type: ignore[union-attr]
    deadline = time.monotonic() + wait_s
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return child, alive(child)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_child_started_with_the_lifeline_dies_when_its_parent_is_sigkilled() -> None:
    _, survived = orphan_after_parent_sigkill("lifeline", wait_s=10.0)
    assert survived is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_without_the_lifeline_the_same_child_is_orphaned() -> None:
    child, survived = orphan_after_parent_sigkill("none", wait_s=2.0)
    try:
        assert survived is True  # the control: this test setup does detect an orphan
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
