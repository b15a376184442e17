"""Children that die with their parent: ``PR_SET_PDEATHSIG`` set in the child before exec.

Why: a supervisor that is SIGKILLed (or crashes) runs no cleanup, so whatever it started keeps
running — a pion-llm orphan at 77 % CPU. Linux can tell the kernel to signal a child when its
parent dies (``prctl(PR_SET_PDEATHSIG, sig)``); the setting survives ``execve``. It is set in
``subprocess.Popen``'s ``preexec_fn``, between fork and exec, through ctypes (libc is loaded
before the fork, so the child only makes two system calls and runs no import).

Caveats, from prctl(2): the signal fires when the *thread* that forked the child exits, so call
``Popen`` from the main thread of a long-lived process; if the parent died between the fork and
the prctl, the child has already been re-parented, so it checks ``getppid()`` and exits at once.
On systems without prctl (macOS), ``die_with_parent`` returns None and nothing is set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process dies.

    Call it in the parent just before ``Popen`` (it captures this process's pid). Returns None
    where prctl does not exist.
    """
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def preexec() -> None:
        if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            os._exit(127)  # cannot promise the child dies with us: refuse to start it
        if os.getppid() != parent:  # the parent is already gone
            os._exit(0)

    return preexec
