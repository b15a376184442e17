"""One logging setup for every Pion program: stderr, one line format, loggers named ``pion.*``.

stdout stays free for what a program is asked to print (``--help``, ``pion up``'s URLs); logs go
to stderr like uvicorn's and Redis's. Level names accept Redis's (``verbose``, ``notice``) as well
as Python's.
"""

from __future__ import annotations

import logging
import os
import sys

LOG_FORMAT = "%(asctime)s.%(msecs)03d {pid} %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
LOG_LEVELS = ("debug", "verbose", "info", "notice", "warning", "error")

_PYTHON_LEVELS = {"debug": logging.DEBUG, "verbose": logging.DEBUG, "info": logging.INFO,
                  "notice": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def python_log_level(level: str) -> int:
    """A Redis-style or Python level name as a ``logging`` level (ValueError when unknown)."""
    try:
        return _PYTHON_LEVELS[level.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r} (one of {', '.join(LOG_LEVELS)})") from None


def setup_logging(level: str = "info", tag: str = "") -> None:
    """Route every ``pion.*`` logger (and the root) to stderr in the one format. Called once by ``main``
    (and once more in each ``pion-server -w N`` worker, whose ``tag`` — ``w0``, ``w1`` — prefixes its lines)."""
    pid = f"{os.getpid()} [{tag}]" if tag else str(os.getpid())
    logging.basicConfig(level=python_log_level(level), stream=sys.stderr,
                        format=LOG_FORMAT.format(pid=pid), datefmt=DATE_FORMAT, force=True)
