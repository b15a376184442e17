"""Linux /proc helpers for tests that check a process leaves no child behind."""

from __future__ import annotations

from pathlib import Path


def _stat_fields(pid: int | str) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` now."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(_stat_fields(entry.name)[1])
            except OSError:
                continue
            if parent == pid:
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    """A zombie (dead, not yet reaped by whoever adopted it) counts as dead."""
    try:
        return _stat_fields(pid)[0] != "Z"
    except OSError:
        return False
