"""Persistence: write-ahead log, snapshots and crash recovery — the only code that touches data files.

Primitives by role (``manager.Persistence`` ties them together for one worker):

* records.py  — the framed, checksummed record shared by the WAL and snapshots
* files.py    — file names under ``--dir`` and checked writes/fsyncs
* wal.py      — ``WalWriter``: append before reply, appendfsync policies, batched group commit, MISCONF
* binding.py  — where the stores meet persistence: their journal, the recovery sink, the snapshot walk
* snapshot.py — streaming snapshot writer/reader (temp -> fsync -> rename -> fsync dir)
* reader.py   — sequential record reader that tells a torn tail from corruption
* recovery.py — start-up: snapshot, then WAL replay; cut a torn tail, refuse other damage
"""

from pion.server.persist.manager import PersistOptions, Persistence
from pion.server.persist.records import RecordType
from pion.server.persist.recovery import RecoveryError, RecoveryReport

__all__ = ["PersistOptions", "Persistence", "RecordType", "RecoveryError", "RecoveryReport"]
